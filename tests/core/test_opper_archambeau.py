"""The Opper-Archambeau q(f) in whitened coordinates, against dense Gaussian algebra on numpy, jax and torch."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from ppl_sparsegp.core import kernels, kl
from ppl_sparsegp.core.opper_archambeau import marginals, whitened_q


@pytest.mark.parametrize("backend", [np.asarray, jnp.asarray, torch.as_tensor])
def test_whitened_q_is_the_opper_archambeau_gaussian(rng, backend):
    N, P = 9, 2
    X = rng.uniform(-2, 2, (N, 2))
    K = kernels.RBF(variance=1.3, lengthscale=np.array([0.7, 1.2]))(X) + 1e-8 * np.eye(N)
    L = np.linalg.cholesky(K)
    alpha, lam = rng.standard_normal((P, N)), rng.uniform(0.2, 3.0, (P, N))
    q_mu, q_sqrt = (np.asarray(a) for a in whitened_q(backend(L), backend(alpha), backend(lam)))
    for p in range(P):
        C = np.eye(N) + L.T @ np.diag(lam[p] ** 2) @ L
        np.testing.assert_allclose(q_sqrt[p] @ q_sqrt[p].T, np.linalg.inv(C), atol=1e-10)
        np.testing.assert_array_equal(np.triu(q_sqrt[p], 1), 0.0)
        # f = L v: mean K α, covariance (K⁻¹ + diag λ²)⁻¹
        np.testing.assert_allclose(L @ q_mu[p], K @ alpha[p], atol=1e-10)
        cov = L @ q_sqrt[p] @ q_sqrt[p].T @ L.T
        np.testing.assert_allclose(cov, np.linalg.inv(np.linalg.inv(K) + np.diag(lam[p] ** 2)), atol=1e-7)


def test_kl_of_whitened_q_is_the_closed_form_in_alpha_and_lambda(rng):
    """KL[q(v) || N(0, I)] = ½ Σ_p [tr C_p⁻¹ + α_pᵀ K α_p - N + log det C_p] (module docstring)."""
    N, P = 7, 2
    X = rng.uniform(-2, 2, (N, 1))
    K = kernels.Matern32(variance=0.8, lengthscale=0.9)(X) + 1e-8 * np.eye(N)
    L = np.linalg.cholesky(K)
    alpha, lam = rng.standard_normal((P, N)), rng.uniform(0.2, 3.0, (P, N))
    expected = 0.0
    for p in range(P):
        C = np.eye(N) + L.T @ np.diag(lam[p] ** 2) @ L
        expected += 0.5 * (np.trace(np.linalg.inv(C)) + alpha[p] @ K @ alpha[p] - N + np.linalg.slogdet(C)[1])
    np.testing.assert_allclose(kl.kl_qu_pu(*whitened_q(L, alpha, lam)), expected, rtol=1e-10)


@pytest.mark.parametrize("backend", [np.asarray, jnp.asarray, torch.as_tensor])
def test_marginals_are_the_diagonal_of_the_dense_covariance_of_f(rng, backend):
    N, P = 8, 2
    X = rng.uniform(-2, 2, (N, 2))
    L = np.linalg.cholesky(kernels.RBF(variance=1.1, lengthscale=np.array([0.9, 0.6]))(X) + 1e-8 * np.eye(N))
    q_mu, q_sqrt = rng.standard_normal((P, N)), np.tril(rng.standard_normal((P, N, N)))
    mean, var = (np.asarray(a) for a in marginals(backend(L), backend(q_mu), backend(q_sqrt)))
    point_mean, point_var = (np.asarray(a) for a in marginals(backend(L), backend(q_mu), None))
    for p in range(P):
        np.testing.assert_allclose(mean[p], L @ q_mu[p], atol=1e-12)
        np.testing.assert_allclose(var[p], np.diag(L @ q_sqrt[p] @ q_sqrt[p].T @ L.T), atol=1e-12)
    np.testing.assert_allclose(point_mean, mean, atol=1e-12)
    np.testing.assert_array_equal(point_var, 0.0)
