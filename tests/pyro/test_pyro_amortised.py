"""Pyro's SVI (``Trace_ELBO``, sampled KL, a subsampled data plate) on the Pyro twins of the amortised models: the
loss falls and the networks' params are trained through the param store (IDSGP: the full-batch objective rises; the
VAE: σ² falls and the reconstructions beat the column means; Bayesian SAS-GP: log p(Y | encoded X) rises, and the
guide's batch of distinct rows is the model's)."""

import numpy as np
import pyro
import pyro.infer
import pyro.optim
import torch

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.pyro import idsgp as pyro_idsgp
from ppl_sparsegp.models.pyro import sas_gplvm as pyro_sas
from ppl_sparsegp.models.pyro import vae as pyro_vae
from ppl_sparsegp.pyro import nn, sites


def _svi_losses(model, guide, num_steps: int, *args) -> list[float]:
    svi = pyro.infer.SVI(model, guide, pyro.optim.Adam({"lr": 0.02}), pyro.infer.Trace_ELBO())
    return [svi.step(*args) for _ in range(num_steps)]


def test_pyro_svi_trains_idsgp_and_its_network():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(40)
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    gp = pyro_idsgp.IDSGP(
        kernels.RBF(lengthscale=1.0), likelihoods.Gaussian(variance=0.5), input_dim=1, num_inducing=3, hidden=(10,),
        batch_size=20,
    )  # fmt: skip
    before = gp.elbo({}, X, y).item()
    losses = _svi_losses(gp.model, gp.guide, 150, torch.as_tensor(X), torch.as_tensor(y))

    assert np.isfinite(losses).all()
    assert np.mean(losses[-15:]) < 0.7 * np.mean(losses[:15]), (np.mean(losses[:15]), np.mean(losses[-15:]))
    params = sites.param_store_values()
    names = set(nn.param_values(pyro_idsgp.NETWORK, gp.network))
    assert names <= set(params)
    initial = nn.param_values(pyro_idsgp.NETWORK, gp.network)
    assert all(not torch.equal(params[k], initial[k]) for k in names)  # trained, while the module keeps its init
    assert gp.elbo(params, X, y).item() > before + 50.0  # the full-batch objective (deterministic) rose
    mean, var = gp.predict_f(params, X)
    assert torch.isfinite(mean).all() and (var > 0).all()


def test_pyro_svi_trains_the_vae():
    rng = np.random.default_rng(1)
    latent = rng.standard_normal((60, 1))
    Y = np.tanh(latent @ rng.standard_normal((1, 4))) + 0.05 * rng.standard_normal((60, 4))
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    vae = pyro_vae.VAE(data_dim=4, latent_dim=1, hidden=(8,), activation="tanh", batch_size=30)
    losses = _svi_losses(vae.model, vae.guide, 200, torch.as_tensor(Y))

    assert np.isfinite(losses).all()
    assert np.mean(losses[-20:]) < 0.7 * np.mean(losses[:20]), (np.mean(losses[:20]), np.mean(losses[-20:]))
    params = sites.param_store_values()
    assert params[pyro_vae.NOISE] < vae.noise_variance  # σ² learned down from its initial 0.5
    mean, _ = vae.reconstruct(params, Y)
    assert np.mean((mean.numpy() - Y) ** 2) < np.mean((Y - Y.mean(0)) ** 2)  # better than the column means


def test_pyro_svi_trains_bayesian_sas_on_batches_of_distinct_rows():
    rng = np.random.default_rng(2)
    latent = rng.uniform(-2, 2, (50, 1))
    Y = np.hstack([np.sin(2 * latent), np.cos(2 * latent), latent]) + 0.05 * rng.standard_normal((50, 3))
    Yt = torch.as_tensor(Y)
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    gp = pyro_sas.SASGPLVM(
        kernels.RBF(lengthscale=1.0), likelihoods.Gaussian(variance=0.5), data_dim=3, latent_dim=1, num_active=10,
        batch_size=25, bayesian=True, hidden=(8,), activation="tanh",
    )  # fmt: skip
    before = gp.exact_log_marginal({}, Y).item()
    svi = pyro.infer.SVI(gp.model, gp.guide, pyro.optim.Adam({"lr": 0.02}), pyro.infer.TraceMeanField_ELBO())
    losses = [svi.step(Yt) for _ in range(200)]

    assert np.isfinite(losses).all()
    assert np.mean(losses[-20:]) < np.mean(losses[:20]) - 20.0, (np.mean(losses[:20]), np.mean(losses[-20:]))
    params = sites.param_store_values()
    assert gp.exact_log_marginal(params, Y).item() > before + 20.0  # log p(Y | encoded X) rose
    guide = pyro.poutine.trace(gp.guide).get_trace(Yt)
    batch = guide.nodes["data"]["value"]
    assert batch.shape == (25,) and torch.unique(batch).numel() == 25  # distinct rows
    model = pyro.poutine.trace(pyro.poutine.replay(gp.model, trace=guide)).get_trace(Yt)
    assert torch.equal(model.nodes["data"]["value"], batch)  # the guide's batch is the model's


def test_the_amortised_twins_compute_in_float32():
    torch.set_default_dtype(torch.float32)  # the fixture restores float64 afterwards
    rng = np.random.default_rng(3)
    X, y = rng.uniform(-2, 2, (12, 2)), rng.standard_normal(12)
    gp = pyro_idsgp.IDSGP(kernels.RBF(), likelihoods.Gaussian(), input_dim=2, num_inducing=3, hidden=(5,))
    pyro.clear_param_store()
    trace = pyro.poutine.trace(gp.model).get_trace(X, y)
    assert trace.nodes["network.0.weight"]["value"].dtype == torch.float32
    assert trace.nodes["u"]["value"].dtype == torch.float32 and torch.isfinite(trace.log_prob_sum())
    mean, var = gp.predict_f({"network.0.bias": np.zeros(5)}, X)  # a float64 array read as the module's dtype
    assert mean.dtype == var.dtype == torch.float32 and (var > 0).all()
    vae = pyro_vae.VAE(data_dim=2, latent_dim=1, hidden=(4,), batch_size=None)
    assert vae.reconstruct({}, X)[0].dtype == torch.float32
