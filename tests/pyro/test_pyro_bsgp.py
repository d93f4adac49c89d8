"""The Pyro BSGP under ``pyro.infer.MCMC`` with the scale-adapted SGHMC (ppl_sparsegp/pyro/sgmcmc.py): a few dozen
minibatch steps on a tiny problem, the noise optimised as a point estimate, from the released code's start."""

import numpy as np
import pyro
import torch
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_value

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.pyro.bsgp import BSGP, bsgp_kernel
from ppl_sparsegp.models.pyro.deep_bsgp import deep_bsgp
from ppl_sparsegp.pyro.sgmcmc import AdaptiveSGHMC, PointEstimates


def test_adaptive_sghmc_runs_on_bsgp_and_its_draws_move():
    pyro.clear_param_store()
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(40)
    model = BSGP(bsgp_kernel(2), likelihoods.Gaussian(variance=1.0), Z=X[:6], batch_size=10, z_prior="strauss")
    assert isinstance(model.kernel, kernels.RBF) and model.point_estimate_sites() == ("likelihood.variance",)
    kernel = AdaptiveSGHMC(
        model.model,
        step_size=0.05,
        num_data=40,
        init_strategy=init_to_value(values=model.initial_values()),
        point_estimates=PointEstimates(model.point_estimate_sites(), every=4, window=4),
    )
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, num_samples=24, warmup_steps=24, disable_progbar=True)
    mcmc.run(torch.as_tensor(X), torch.as_tensor(y))
    draws = mcmc.get_samples()
    assert set(draws) == {"kernel.lengthscale", "kernel.variance", "Z", "u", "likelihood.variance"}
    assert draws["Z"].shape == (24, 6, 2) and draws["u"].shape == (24, 1, 6)
    assert all(torch.all(torch.isfinite(v)) for v in draws.values()) and not kernel.nonfinite
    for site in ("Z", "u", "kernel.lengthscale", "kernel.variance"):  # the chain moves every sampled site
        assert torch.all(draws[site][1:] != draws[site][:-1])
    assert not torch.allclose(draws["Z"][0], torch.as_tensor(X[:6]), atol=1e-3)
    assert torch.all(draws["kernel.variance"] > 0) and torch.all(draws["kernel.lengthscale"] > 0)
    noise = draws["likelihood.variance"]
    assert torch.all(noise == noise[0]) and float(noise[0]) != 1.0  # optimised during warmup, fixed afterwards
    one = {k: v[-1] for k, v in draws.items()}
    mean, var = model.predict_y(one, X[:5])
    assert mean.shape == (5,) and torch.all(torch.isfinite(mean)) and torch.all(var > float(noise[0]) * 0.999)


def test_adaptive_sghmc_runs_on_deep_bsgp():
    """Two layers, a stochastic potential (inner-layer noise and minibatches): draws finite, every layer moves."""
    pyro.clear_param_store()
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (30, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(30)
    model = deep_bsgp(X, 1, likelihoods.Gaussian(variance=1.0), num_layers=2, Z=X[:5], batch_size=10)
    kernel = AdaptiveSGHMC(
        model.model,
        step_size=0.05,
        num_data=30,
        init_strategy=init_to_value(values=model.initial_values()),
        point_estimates=PointEstimates(model.point_estimate_sites(), every=4, window=4),
    )
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, num_samples=16, warmup_steps=16, disable_progbar=True)
    mcmc.run(torch.as_tensor(X), torch.as_tensor(y))
    draws = mcmc.get_samples()
    assert draws["layer0.u"].shape == (16, 2, 5) and draws["layer1.Z"].shape == (16, 5, 2)
    assert all(torch.all(torch.isfinite(v)) for v in draws.values()) and not kernel.nonfinite
    for site in ("layer0.Z", "layer0.u", "layer1.Z", "layer1.u"):
        assert torch.all(draws[site][1:] != draws[site][:-1])
    mean, var = model.predict_y({k: v[-1] for k, v in draws.items()}, X[:4])
    assert mean.shape == (4,) and torch.all(torch.isfinite(mean)) and torch.all(var > 0)


def test_predictive_rhat_reads_a_pyro_run_of_two_chains():
    """The Pyro runner (chains one after another) returns the NumPyro engine's MCMCResult with the twins' site names,
    so the NumPyro BSGP computes each draw's predictive mean from it: the same as the Pyro model's, draw by draw."""
    from ppl_sparsegp.models.numpyro import bsgp as numpyro_bsgp
    from ppl_sparsegp.posterior import diagnostics
    from ppl_sparsegp.pyro.mcmc import run_mcmc

    pyro.clear_param_store()
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (30, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(30)
    model = BSGP(bsgp_kernel(2), likelihoods.Gaussian(variance=1.0), Z=X[:5], batch_size=10)
    kernel = AdaptiveSGHMC(
        model.model,
        step_size=0.05,
        num_data=30,
        init_strategy=init_to_value(values=model.initial_values()),
        point_estimates=PointEstimates(model.point_estimate_sites(), every=4, window=4),
    )
    result = run_mcmc(kernel, X, y, num_warmup=8, num_samples=8, num_chains=2, seed=1, progress=False)
    twin = numpyro_bsgp.BSGP(
        kernel=numpyro_bsgp.bsgp_kernel(2), likelihood=likelihoods.Gaussian(variance=1.0), Z=X[:5], batch_size=10
    )
    means = diagnostics.predictive_means(twin, result, X[:4])
    assert means.shape == (2, 8, 4)
    for c, s in ((0, 0), (1, 7)):
        mean, _ = model.predict_y({k: v[c, s] for k, v in result.samples.items()}, X[:4])
        np.testing.assert_allclose(means[c, s], mean.numpy(), rtol=1e-4, atol=1e-5)
    rhat = diagnostics.predictive_rhat(means)
    assert rhat.rhat.shape == (4,) and np.all(np.isfinite(rhat.rhat)) and rhat.summary()["chains"] == 2
