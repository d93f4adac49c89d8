"""SAS-GP's Table 2 baselines (issue 22): the VAE with Bayesian SAS's encoder, and the Bayesian GP-LVM whose
q(x | y) is amortised by that encoder. Both train, encode and reconstruct held-out rows; the amortised guide's
latents are the encoder's at the batch's rows."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from numpyro import handlers
from numpyro.infer import Predictive

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.gplvm import BayesianGPLVM
from ppl_sparsegp.models.numpyro.vae import VAE
from ppl_sparsegp.numpyro import nn

RNG = np.random.default_rng(3)
Y = np.tanh(RNG.standard_normal((300, 2)) @ RNG.standard_normal((2, 8))) + 0.05 * RNG.standard_normal((300, 8))


def _rmse(mean) -> float:
    return float(np.sqrt(np.mean((np.asarray(mean) - Y[250:]) ** 2)))


@pytest.mark.slow  # about 15 s of training; `make test-slow` runs it
def test_the_vae_trains_encodes_and_reconstructs_held_out_rows():
    vae = VAE(data_dim=8, hidden=(32, 16), batch_size=100, noise_variance=0.1)
    before = _rmse(vae.reconstruct({}, Y[250:])[0])
    fit = fit_svi(vae.model, vae.guide, Y[:250], optimizer=optax.adam(0.005), num_steps=1500, progress=False,
                  validate=vae.check_data)  # fmt: skip
    mean, var = vae.reconstruct(fit.params, Y[250:])
    assert _rmse(mean) < 0.5 * before and _rmse(mean) < 0.2, (before, _rmse(mean))
    assert var.shape == (50, 8) and float(var[0, 0]) == pytest.approx(float(fit.params["likelihood.variance"]))
    assert vae.encode(fit.params, Y[:3]).shape == (3, 2)
    drawn = Predictive(VAE(data_dim=8, hidden=(4,), num_data=5).model, num_samples=2)(jax.random.PRNGKey(0))
    assert drawn["X"].shape == (2, 5, 2) and drawn["y"].shape == (2, 5, 8)
    with pytest.raises(ValueError, match=r"Y: expected \[N, 8\]"):
        vae.check_data(Y[:, :3])


def _amortised(**options) -> BayesianGPLVM:
    encoder = nn.gaussian_encoder(8, 2, (32, 16), "relu", jax.random.PRNGKey(0), np.float64)
    return BayesianGPLVM(RBF(1.0, np.ones(2)), Gaussian(0.1), Z=RNG.standard_normal((10, 2)), num_latent=8,
                         X_init=np.zeros((250, 2)), encoder=encoder, **options)  # fmt: skip


def test_the_amortised_guide_draws_each_rows_latent_from_the_encoder_at_that_row():
    gp = _amortised(batch_size=40)
    guide = handlers.trace(handlers.seed(gp.guide, jax.random.PRNGKey(1))).get_trace(Y[:250])
    idx = guide["data"]["value"]
    mean, var = jax.vmap(gp.encoder)(jnp.asarray(Y[:250])[idx])
    np.testing.assert_allclose(guide["X"]["fn"].base_dist.loc, mean)
    np.testing.assert_allclose(guide["X"]["fn"].base_dist.scale ** 2, var, rtol=1e-12)
    assert "encoder$params" in gp.parameter_names() and "X_loc" not in guide


@pytest.mark.slow  # about 15 s of training; `make test-slow` runs it
def test_the_amortised_gplvm_trains_and_reconstructs_held_out_rows():
    gp = _amortised(batch_size=100)
    fit = fit_svi(gp.model, gp.guide, Y[:250], optimizer=optax.adam(0.01), num_steps=1500, progress=False,
                  validate=gp.check_data)  # fmt: skip
    assert np.mean(fit.losses[-100:]) < np.mean(fit.losses[:100])
    mean, var = gp.reconstruct(fit.params, Y[250:])
    assert _rmse(mean) < 0.25 and np.all(np.asarray(var) > 0), _rmse(mean)


def test_a_gplvm_with_free_latents_has_nothing_to_encode_with():
    gp = BayesianGPLVM(RBF(1.0, np.ones(2)), Gaussian(0.1), Z=RNG.standard_normal((4, 2)), num_latent=8,
                       X_init=np.zeros((250, 2)))  # fmt: skip
    with pytest.raises(ValueError, match="encoder: this GP-LVM has free latent means"):
        gp.encode({}, Y[:3])
