"""The deep GP's propagation (core.deep) against dense Gaussian algebra with the same noise, on numpy, jax and
torch; the data term and the predictive mixture against their closed forms."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from ppl_sparsegp.core import deep, kernels, likelihoods, mixtures

N, D, M, S = 6, 2, 4, 3


def _dense_marginals(kernel, Z, H, q_mu, q_sqrt):
    """q(f) at the rows of H [N, D] of the unwhitened q(u) = N(q_mu, q_sqrt q_sqrtᵀ) per output: [P, N] each."""
    Kmm, Kmn = kernel(Z) + 1e-12 * np.eye(len(Z)), kernel(Z, H)
    A = np.linalg.solve(Kmm, Kmn)
    means, variances = [], []
    for m, R in zip(q_mu, q_sqrt, strict=True):
        means.append(A.T @ m)
        variances.append(np.diag(kernel(H) - Kmn.T @ A + A.T @ R @ R.T @ A))
    return np.array(means), np.array(variances)


@pytest.mark.parametrize("backend", [np.asarray, jnp.asarray, torch.as_tensor])
def test_two_layer_propagation_is_the_dense_composition_with_the_same_noise(rng, backend):
    X = rng.uniform(-2, 2, (N, D))
    k0, k1 = (
        kernels.RBF(variance=0.8, lengthscale=np.array([0.9, 1.3])),
        kernels.Matern32(variance=1.2, lengthscale=1.1),
    )
    Z0, Z1 = rng.uniform(-2, 2, (M, D)), rng.uniform(-2, 2, (M, D))
    q0 = (rng.standard_normal((D, M)), np.tril(0.3 * rng.standard_normal((D, M, M))) + 0.5 * np.eye(M))
    q1 = (rng.standard_normal((1, M)), np.tril(0.3 * rng.standard_normal((1, M, M))) + 0.5 * np.eye(M))
    W = rng.standard_normal((D, D))
    eps = rng.standard_normal((D, S * N))

    def as_layer(kernel, Z, q):
        return deep.Layer.at(kernel, backend(Z), (backend(q[0]), backend(q[1])))

    layers = [as_layer(k0, Z0, q0), as_layer(k1, Z1, q1)]
    mean, var = deep.propagate(
        layers, backend(X), lambda i, shape, dtype: backend(eps), S, whiten=False, mean_weights=[W], add_input=True
    )
    assert tuple(mean.shape) == tuple(var.shape) == (S, 1, N)
    X_rep = np.concatenate([X] * S)
    mean0, var0 = _dense_marginals(k0, Z0, X_rep, *q0)
    H1 = (mean0 + np.sqrt(var0) * eps).T + X_rep @ W + X_rep
    mean1, var1 = _dense_marginals(k1, Z1, H1, *q1)
    for s in range(S):
        np.testing.assert_allclose(np.asarray(mean)[s], mean1[:, s * N : (s + 1) * N], atol=1e-8)
        np.testing.assert_allclose(np.asarray(var)[s], var1[:, s * N : (s + 1) * N], atol=1e-8)


def test_one_layer_draws_no_noise_and_repeats_the_conditional(rng):
    X, Z = rng.uniform(-2, 2, (N, D)), rng.uniform(-2, 2, (M, D))
    kernel = kernels.RBF(variance=1.1, lengthscale=np.array([0.7, 1.0]))
    q = (rng.standard_normal((2, M)), np.tril(0.3 * rng.standard_normal((2, M, M))) + 0.5 * np.eye(M))

    def no_noise(i, shape, dtype):
        raise AssertionError("a single layer draws nothing")

    mean, var = deep.propagate(
        [deep.Layer.at(kernel, Z, q)], X, no_noise, S, whiten=False, mean_weights=[], add_input=False
    )
    expected = _dense_marginals(kernel, Z, X, *q)
    for s in range(S):
        np.testing.assert_allclose(mean[s], expected[0], atol=1e-8)
        np.testing.assert_allclose(var[s], expected[1], atol=1e-8)


def test_data_term_and_predictive_mixture_are_their_closed_forms(rng):
    mean, var = rng.standard_normal((S, 2, N)), rng.uniform(0.1, 1.0, (S, 2, N))
    y, noise = rng.standard_normal((N, 2)), 0.3
    got = deep.expected_log_likelihood(likelihoods.Gaussian(variance=noise), y, mean, var)
    terms = -0.5 * np.log(2 * np.pi * noise) - 0.5 * ((y.T[None] - mean) ** 2 + var) / noise  # [S, P, N]
    np.testing.assert_allclose(got, terms.sum(axis=1).mean(axis=0), rtol=1e-12)

    m, v = mixtures.mixture_moments(mean, var)
    draws = rng.choice(S, 400_000)  # the mixture's moments by sampling it, a loose but independent check
    samples = mean[draws, 0, 0] + np.sqrt(var[draws, 0, 0]) * rng.standard_normal(400_000)
    np.testing.assert_allclose([m[0, 0], v[0, 0]], [samples.mean(), samples.var()], atol=1e-2)
    logp = rng.standard_normal((S, N))
    np.testing.assert_allclose(mixtures.mixture_log_density(logp), np.log(np.mean(np.exp(logp), axis=0)), rtol=1e-12)
