"""Pyro's SVI on the Pyro twins of the Bayesian GP-LVMs: minibatches of the ``"data"`` plate (the model replays the
guide's indices and latents) raise the full-batch bound, with free latents or with q(x_n | y_n) from an encoder
(whose weights train through the param store), and the collapsed model's bound rises too."""

import numpy as np
import pyro
import pyro.infer
import pyro.optim
import torch

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.pyro import gplvm as pyro_gplvm
from ppl_sparsegp.pyro import nn, sites

N, D, Q, M = 20, 3, 2, 5


def _data() -> np.ndarray:
    rng = np.random.default_rng(0)
    t = rng.uniform(-2, 2, (N, Q))
    return np.stack([np.sin(t[:, 0]), np.cos(t[:, 1]), t[:, 0] * t[:, 1]], axis=1) + 0.1 * rng.normal(size=(N, D))


def _fit(gp, Y: np.ndarray, steps: int) -> tuple[float, float]:
    """The bound (mean of 20 draws of X, the same seed) before and after ``steps`` SVI steps from the model's
    ``initial_params``."""
    pyro.clear_param_store()
    for name, value in gp.initial_params().items():
        pyro.param(name, value)
    pyro.set_rng_seed(0)
    svi = pyro.infer.SVI(gp.model, gp.guide, pyro.optim.Adam({"lr": 0.03}), pyro.infer.TraceMeanField_ELBO())
    Y = torch.as_tensor(Y)
    svi.evaluate_loss(Y)  # registers every param at its initial value
    bounds = []
    for k in (0, steps):
        for _ in range(k):
            assert np.isfinite(svi.step(Y))
        pyro.set_rng_seed(1)
        bounds.append(float(gp.elbo(sites.param_store_values(), Y, num_samples=20)))
    return bounds[0], bounds[1]


def test_pyro_svi_with_minibatches_raises_the_bayesian_gplvm_bound():
    Y = _data()
    X_init = pyro_gplvm.pca_latents(Y, Q)
    gp = pyro_gplvm.BayesianGPLVM(
        kernels.RBF(lengthscale=np.ones(Q)), likelihoods.Gaussian(variance=0.1), Z=X_init[:M], num_latent=D,
        batch_size=8, X_init=X_init,
    )  # fmt: skip
    before, after = _fit(gp, Y, 150)
    assert after > before + 100.0
    assert pyro.get_param_store()["X_loc"].shape == (N, Q)


def test_pyro_svi_raises_the_collapsed_gplvm_bound():
    Y = _data()
    X_init = pyro_gplvm.pca_latents(Y, Q)
    gp = pyro_gplvm.CollapsedGPLVM(
        kernels.RBF(lengthscale=np.ones(Q)), likelihoods.Gaussian(variance=0.1), Z=X_init[:M], X_init=X_init
    )
    before, after = _fit(gp, Y, 60)
    assert after > before + 100.0


def test_pyro_svi_with_minibatches_trains_the_amortised_bayesian_gplvm():
    Y = torch.as_tensor(_data())
    encoder = nn.gaussian_encoder(D, Q, (16,), "tanh", seed=0)
    kernel, likelihood = kernels.RBF(lengthscale=np.ones(Q)), likelihoods.Gaussian(variance=0.1)
    options = dict(Z=pyro_gplvm.pca_latents(Y.numpy(), Q)[:M], num_latent=D, X_init=np.zeros((N, Q)), encoder=encoder)
    gp = pyro_gplvm.BayesianGPLVM(kernel, likelihood, batch_size=8, **options)
    full = pyro_gplvm.BayesianGPLVM(kernel, likelihood, **options)  # the same sites, scoring every row
    pyro.clear_param_store()
    for name, value in gp.initial_params().items():
        pyro.param(name, value)

    def bound() -> float:
        """The full-batch ELBO at the param store's values: minus the mean TraceMeanField loss of 20 draws of X."""
        pyro.set_rng_seed(1)
        return -pyro.infer.TraceMeanField_ELBO(num_particles=20).loss(full.model, full.guide, Y)

    pyro.set_rng_seed(0)
    svi = pyro.infer.SVI(gp.model, gp.guide, pyro.optim.Adam({"lr": 0.03}), pyro.infer.TraceMeanField_ELBO())
    svi.evaluate_loss(Y)  # registers every param at its initial value, the encoder's at the module's weights
    start, before = sites.param_store_values(), bound()
    for _ in range(150):
        assert np.isfinite(svi.step(Y))
    after = bound()

    assert after > before + 100.0, (before, after)
    params = sites.param_store_values()
    assert "X_loc" not in params
    initial = nn.param_values(pyro_gplvm.ENCODER, gp.encoder)
    assert all(torch.equal(start[k], initial[k]) for k in initial)
    assert all(not torch.equal(params[k], initial[k]) for k in initial)  # trained, while the module keeps its init
    rmse = [float(torch.sqrt(torch.mean((gp.reconstruct(p, Y)[0] - Y) ** 2))) for p in (start, params)]
    assert rmse[1] < 0.7 * rmse[0], rmse  # the encoded latents reconstruct Y better than q(u) = p(u) does
