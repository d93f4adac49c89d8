"""p(u) and q(u)'s densities and draws (core.inducing_gaussians) against scipy's multivariate normal, on numpy, jax
and torch: the one formula both PPLs' inducing distributions use."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from ppl_sparsegp.core import inducing_gaussians

BACKENDS = {"numpy": np.asarray, "jax": jnp.asarray, "torch": torch.as_tensor}


def _gaussians(rng, P=2, M=4):
    A = rng.standard_normal((M, M))
    Lmm = np.linalg.cholesky(A @ A.T + M * np.eye(M))
    loc = rng.standard_normal((P, M))
    R = np.tril(rng.standard_normal((P, M, M))) * 0.3 + np.eye(M)
    return Lmm, loc, R, rng.standard_normal((3, P, M))


def _scipy(value, loc, cov):
    """Σ_p log N(value[..., p, :] | loc[p], cov[p]) -> [...]."""
    return sum(multivariate_normal(loc[p], cov[p]).logpdf(value[:, p]) for p in range(loc.shape[0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_log_densities_equal_scipy(rng, backend):
    Lmm, loc, R, value = _gaussians(rng)
    P, M = loc.shape
    b = BACKENDS[backend]
    zeros, K = np.zeros((P, M)), np.broadcast_to(Lmm @ Lmm.T, (P, M, M))
    np.testing.assert_allclose(inducing_gaussians.prior_log_prob(b(value), b(Lmm)), _scipy(value, zeros, K))
    np.testing.assert_allclose(
        inducing_gaussians.prior_log_prob(b(value), None), _scipy(value, zeros, np.broadcast_to(np.eye(M), K.shape))
    )
    S = R @ np.swapaxes(R, -1, -2)
    np.testing.assert_allclose(inducing_gaussians.posterior_log_prob(b(value), b(loc), b(R)), _scipy(value, loc, S))
    d = np.abs(np.diagonal(R, axis1=-2, axis2=-1))
    np.testing.assert_allclose(
        inducing_gaussians.posterior_log_prob(b(value), b(loc), b(d)),
        _scipy(value, loc, np.stack([np.diag(x**2) for x in d])),
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_draws_are_the_affine_maps_of_the_noise(rng, backend):
    Lmm, loc, R, eps = _gaussians(rng)
    b = BACKENDS[backend]
    np.testing.assert_allclose(inducing_gaussians.prior_draw(b(eps), b(Lmm)), np.einsum("ij,spj->spi", Lmm, eps))
    np.testing.assert_allclose(
        inducing_gaussians.posterior_draw(b(eps), b(loc), b(R)), loc + np.einsum("pij,spj->spi", R, eps)
    )
    d = np.diagonal(R, axis1=-2, axis2=-1)
    np.testing.assert_allclose(inducing_gaussians.posterior_draw(b(eps), b(loc), b(d)), loc + d * eps)
