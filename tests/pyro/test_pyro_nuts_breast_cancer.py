"""Pyro's NUTS on the Pyro SGPMC against NumPyro's NUTS on the NumPyro SGPMC (the recipe fit_sgpmc), the same
target on breast_cancer (N = 455, D = 30, M = 16, Z, the priors and the chains' start of the recipe): the Pyro
chains mix (R-hat of every sampled site < 1.05 over 4 chains, by ArviZ on pyro.diagnostics.from_mcmc) and their
test log predictive density equals the NumPyro run's within Monte Carlo error (3 standard errors of the
difference, each run's from the spread of its chains' estimates)."""

from __future__ import annotations

import jax
import numpy as np
import pyro
import pytest
import torch

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.data import load_embedded, standardize
from ppl_sparsegp.inducing.initialise import kmeans
from ppl_sparsegp.infer.mcmc import init_from_svi
from ppl_sparsegp.models.pyro import sgpmc as pyro_sgpmc
from ppl_sparsegp.models.pyro._base import twin_of
from ppl_sparsegp.posterior import predict as np_predict
from ppl_sparsegp.pyro import diagnostics as pyro_diagnostics
from ppl_sparsegp.pyro import predict as pyro_predict
from ppl_sparsegp.recipes.sgpmc import fit_sgpmc

CHAINS, WARMUP, SAMPLES, M = 4, 200, 200, 16


def _per_chain_lpd(lpd, draws: dict[str, np.ndarray]) -> np.ndarray:
    """Mean test log predictive density of each chain's own mixture: [C]."""
    return np.array([np.mean(lpd({k: v[c] for k, v in draws.items()})) for c in range(CHAINS)])


@pytest.mark.slow
def test_pyro_nuts_on_sgpmc_mixes_and_predicts_as_numpyros():
    ds, _ = standardize(load_embedded("breast_cancer"))
    D = ds.X_train.shape[1]
    kernel, likelihood = kernels.RBF(lengthscale=np.full(D, np.sqrt(D))), likelihoods.Bernoulli()
    fit = fit_sgpmc(
        ds.X_train, ds.y_train, kernel=kernel, likelihood=likelihood, Z=kmeans(ds.X_train, M),
        key=jax.random.PRNGKey(0), svi_steps=500, num_warmup=WARMUP, num_samples=SAMPLES, num_chains=CHAINS,
        progress=False,
    )  # fmt: skip
    numpyro_draws = {k: np.asarray(v) for k, v in fit.mcmc.samples.items()}

    pym = twin_of(fit.model, priors=pyro_sgpmc.default_priors(kernel, likelihood))
    # started as the recipe starts its chains (thesis §5.5): θ at the SVI point estimates, v at a draw of q(v) per
    # chain; from Pyro's default (uniform on [-2, 2] unconstrained) short lengthscales cut every point off from Z
    # and the chains sat where the likelihood is flat (test density log 1/2)
    start = init_from_svi(
        fit.model.model, fit.svgp.guide, fit.svi.params, ds.X_train, ds.y_train, key=jax.random.PRNGKey(1),
        num_chains=CHAINS,
    )  # fmt: skip
    start = {k: torch.as_tensor(np.asarray(v)) for k, v in start.items()}
    pyro.set_rng_seed(0)
    mcmc = pyro.infer.MCMC(
        pyro.infer.NUTS(pym.model, max_tree_depth=8), num_samples=SAMPLES, warmup_steps=WARMUP,
        num_chains=CHAINS, disable_progbar=True, initial_params=start,
    )  # fmt: skip
    mcmc.run(torch.as_tensor(ds.X_train), torch.as_tensor(ds.y_train))
    idata = pyro_diagnostics.from_mcmc(mcmc, pym, ds.X_train, ds.y_train, posterior_predictive=False)
    pyro_draws = {k: v.numpy() for k, v in mcmc.get_samples(group_by_chain=True).items()}
    assert set(pyro_draws) == set(numpyro_draws)

    import arviz as az

    rhat = az.rhat(idata["posterior"] if hasattr(idata, "children") else idata)
    worst = max(float(np.max(rhat[name].values)) for name in pyro_draws)
    print(f"Pyro NUTS: worst R-hat {worst:.3f}")
    assert worst < 1.05

    X_test, y_test = ds.X_test, ds.y_test
    numpyro_chains = _per_chain_lpd(
        lambda d: np_predict.log_predictive_density(fit.model, d, X_test, y_test), numpyro_draws
    )
    pyro_chains = _per_chain_lpd(lambda d: pyro_predict.log_predictive_density(pym, d, X_test, y_test), pyro_draws)
    flat = lambda draws: {k: v.reshape((-1, *v.shape[2:])) for k, v in draws.items()}  # noqa: E731
    numpyro_lpd = np.mean(np_predict.log_predictive_density(fit.model, flat(numpyro_draws), X_test, y_test))
    pyro_lpd = np.mean(pyro_predict.log_predictive_density(pym, flat(pyro_draws), X_test, y_test))
    se = np.sqrt((np.var(numpyro_chains, ddof=1) + np.var(pyro_chains, ddof=1)) / CHAINS)
    print(f"test log predictive density per point: NumPyro {numpyro_lpd:.4f}, Pyro {pyro_lpd:.4f} (se {se:.4f})")
    assert abs(pyro_lpd - numpyro_lpd) < 3 * se
