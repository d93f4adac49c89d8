"""Multi-class SVGP and SGPMC (thesis §3.4, §4.7): J latent GPs sharing Z and the kernel, a robust-max or softmax
label; fitted on three classes drawn from known latent functions, with the models' checks."""

import jax
import numpy as np
import optax
import pytest
from numpyro.infer import Predictive, TraceMeanField_ELBO

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian, RobustMax, Softmax
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.bsgp import BSGP
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.posterior.predict import log_predictive_density, posterior_predictive
from ppl_sparsegp.recipes.sgpmc import fit_sgpmc

jax.config.update("jax_enable_x64", True)

J = 3


def three_classes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs on [-3, 3]^2 labelled by the largest of three smooth functions."""
    X = np.random.default_rng(seed).uniform(-3, 3, (n, 2))
    f = np.stack([np.sin(X[:, 0]), np.cos(X[:, 1]), 0.4 * X[:, 0] * X[:, 1] / 3], axis=1)
    return X, np.argmax(f, axis=1)


X, Y = three_classes(200, seed=0)
X_TEST, Y_TEST = three_classes(300, seed=1)
Z = X[:: 200 // 16]


@pytest.mark.parametrize(
    ("likelihood", "whiten", "q_diag"),
    [(RobustMax(J), True, False), (RobustMax(J), False, False), (Softmax(J), True, False), (Softmax(J), True, True)],
    ids=["robustmax", "robustmax-unwhitened", "softmax", "softmax-q_diag"],
)
@pytest.mark.slow
def test_multiclass_svgp_learns_the_labels(likelihood, whiten, q_diag):
    gp = SVGP(RBF(lengthscale=1.0), likelihood, Z=Z, num_latent=J, whiten=whiten, q_diag=q_diag)
    fit = fit_svi(gp.model, gp.guide, X, Y, optimizer=optax.adam(0.03), num_steps=800, progress=False)
    p, v = gp.predict_y(fit.params, X_TEST)
    assert p.shape == v.shape == (300, J)
    np.testing.assert_allclose(np.sum(p, axis=1), 1.0, rtol=1e-9)
    assert np.mean(np.argmax(p, axis=1) == Y_TEST) > 0.9
    nll = -np.mean(gp.predict_log_density(fit.params, X_TEST, Y_TEST))
    assert nll < 0.5 * np.log(J)  # far better than guessing
    # the closed-form ELBO at the fitted parameters is the fit's objective there (losses[-1] is taken before the
    # last update, and Adam at 0.03 still moves the loss by a few nats per step)
    objective = -TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), fit.params, gp.model, gp.guide, X, Y)
    np.testing.assert_allclose(float(gp.elbo(fit.params, X, Y)), float(objective), rtol=1e-10)
    np.testing.assert_allclose(float(objective), -fit.losses[-1], rtol=0.1)


def test_predictive_draws_labels_with_the_predicted_class_probabilities():
    gp = SVGP(RBF(lengthscale=1.0), Softmax(J), Z=Z, num_latent=J)
    fit = fit_svi(gp.model, gp.guide, X, Y, optimizer=optax.adam(0.03), num_steps=300, progress=False)
    draws = 4000
    drawn = Predictive(gp.model, guide=gp.guide, params=fit.params, num_samples=draws)(jax.random.PRNGKey(1), X[:5])
    assert drawn["f"].shape == (draws, 5, J) and drawn["y"].shape == (draws, 5)
    frequencies = np.stack([np.mean(drawn["y"] == k, axis=0) for k in range(J)], axis=1)
    p = np.asarray(gp.predict_y(fit.params, X[:5])[0])
    np.testing.assert_array_less(np.abs(frequencies - p), 5 * np.sqrt(0.25 / draws) + 0.02)


@pytest.mark.slow  # about 40 s (SVI, then NUTS over 3 x 16 whitened inducing outputs); `make test-slow` runs it
def test_multiclass_sgpmc_samples_and_predicts_class_probabilities():
    fit = fit_sgpmc(X, Y, kernel=RBF(lengthscale=1.0), likelihood=RobustMax(J), Z=Z, num_latent=J,
                    key=jax.random.PRNGKey(0), svi_steps=300, fixed_z_steps=0, learning_rate=0.03,
                    num_warmup=150, num_samples=100, num_chains=1)  # fmt: skip
    assert fit.mcmc.samples["u"].shape == (1, 100, J, len(Z))
    samples = fit.mcmc.flat_samples()
    pred = posterior_predictive(fit.model, samples, X_TEST)
    np.testing.assert_allclose(pred.y_mean.sum(axis=1), 1.0, rtol=1e-9)
    assert np.mean(np.argmax(pred.y_mean, axis=1) == Y_TEST) > 0.9
    assert -np.mean(log_predictive_density(fit.model, samples, X_TEST, Y_TEST)) < 0.5 * np.log(J)


def test_labels_and_latent_functions_are_checked_before_compiling():
    gp = SVGP(RBF(), RobustMax(J), Z=Z, num_latent=J)
    bad_labels = [(np.where(Y == 2, 3, Y), "0..2"), (Y + 0.5, "whole numbers"), (np.stack([Y, Y], 1), "[N]")]
    for bad, shown in bad_labels:
        with pytest.raises(ValueError, match="y: expected") as err:
            fit_svi(gp.model, gp.guide, X, bad, optimizer=optax.adam(0.01), num_steps=1, progress=False,
                    validate=gp.check_data)  # fmt: skip
        assert shown in str(err.value)
    with pytest.raises(ValueError, match="num_latent: the RobustMax likelihood of 3 classes needs num_latent = 3"):
        SVGP(RBF(), RobustMax(J), Z=Z)
    with pytest.raises(ValueError, match="num_latent"):
        SGPMC(RBF(), Softmax(J), Z=Z, num_latent=2, fixed=["kernel.lengthscale", "kernel.variance"])
    with pytest.raises(ValueError, match="likelihood: BSGP takes an elementwise likelihood; the multi-class Softmax"):
        BSGP(RBF(), Softmax(J), Z=Z, num_latent=J)
    with pytest.raises(ValueError, match="likelihood: GPR needs likelihoods.Gaussian, got Softmax"):
        GPR(RBF(), Softmax(J))
    SVGP(RBF(), Gaussian(), Z=Z, num_latent=J)  # an elementwise likelihood: J independent outputs, as before
