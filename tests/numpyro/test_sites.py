"""The data plate of :mod:`ppl_sparsegp.numpyro.sites` under plain NumPyro: minibatched models sample with
numpy data, and evaluate (no PRNG key: ``log_likelihood``, ``az.from_numpyro``) on every point."""

from __future__ import annotations

import arviz as az
import jax
import numpy as np
import pytest
from numpyro.infer import MCMC
from numpyro.infer.util import log_likelihood

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.sghmc import SGLD
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.numpyro import sites

RNG = np.random.default_rng(0)
X = RNG.uniform(-2.0, 2.0, (40, 1))
Y = np.sin(X[:, 0]) + 0.1 * RNG.normal(size=40)


def _sgpmc(batch_size: int | None) -> SGPMC:
    kernel, likelihood = RBF(1.0, 1.0), Gaussian(0.1)
    return SGPMC(kernel, likelihood, Z=X[:5], priors=default_priors(kernel, likelihood), batch_size=batch_size)


@pytest.mark.slow
def test_a_minibatched_model_runs_under_numpyro_mcmc_and_from_numpyro_scores_every_point():
    minibatched = _sgpmc(batch_size=10)
    mcmc = MCMC(SGLD(minibatched.model, step_size=1e-3), num_warmup=10, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, Y)  # numpy X, y: the batch is indexed as jax arrays
    idata = az.from_numpyro(mcmc)  # no log_likelihood=False needed
    assert idata.log_likelihood["y"].shape == (1, 10, 40)
    draws = mcmc.get_samples()
    full = log_likelihood(_sgpmc(batch_size=None).model, draws, X, Y)["y"]
    np.testing.assert_allclose(idata.log_likelihood["y"].values[0], full)
    np.testing.assert_allclose(log_likelihood(minibatched.model, draws, X, Y)["y"], full)


def test_distinct_indices_are_distinct_and_every_subset_equally_likely():
    """n = 5, size 2: the 10 subsets over 40,000 draws (expected 4,000 each, sd 60; bounds ±5 sd), and distinct
    indices at the size of an SAS-GP batch."""
    draw = jax.jit(jax.vmap(lambda key: sites.distinct_indices(key, 5, 2)))
    pairs = np.sort(np.asarray(draw(jax.random.split(jax.random.PRNGKey(0), 40_000))), axis=1)
    assert np.all(pairs[:, 0] != pairs[:, 1])
    _, counts = np.unique(pairs[:, 0] * 5 + pairs[:, 1], return_counts=True)
    assert counts.size == 10 and np.all(np.abs(counts - 4000) < 300)
    batch = np.asarray(jax.jit(lambda key: sites.distinct_indices(key, 60_000, 1024))(jax.random.PRNGKey(1)))
    assert batch.shape == (1024,) and np.unique(batch).size == 1024 and batch.min() >= 0 and batch.max() < 60_000


def test_a_tie_at_the_boundary_takes_the_permutation(monkeypatch):
    """float32 uniforms that all tie: the top-k branch would give indices 0..size-1; the permutation's do not."""
    monkeypatch.setattr(jax.random, "uniform", lambda key, shape, dtype: jax.numpy.zeros(shape, dtype))
    key = jax.random.PRNGKey(2)
    drawn = np.asarray(sites.distinct_indices(key, 50, 10))
    expected = np.asarray(jax.random.permutation(jax.random.split(key)[1], 50)[:10])
    np.testing.assert_array_equal(drawn, expected)
    assert np.unique(drawn).size == 10
