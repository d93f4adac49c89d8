"""The sparse GP algebra against oracles: exact GP regression, Monte Carlo, and both backends."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from ppl_sparsegp.core import bounds, conditionals, kernels, kl, ops


def _problem(rng, N=30, M=7, D=2, P=2):
    X = rng.uniform(-2, 2, (N, D))
    Z = rng.uniform(-2, 2, (M, D))
    y = np.sin(X @ np.array([1.0, -0.5])[:D])[:, None] + 0.1 * rng.standard_normal((N, P))
    k = kernels.RBF(variance=1.3, lengthscale=np.array([0.8, 1.4])[:D])
    q_mu = rng.standard_normal((P, M))
    q_sqrt = np.tril(rng.standard_normal((P, M, M))) * 0.3 + np.eye(M) * 0.5
    return X, Z, y, k, q_mu, q_sqrt


def test_sgpr_with_z_equal_x_is_exact(rng):
    X, _, y, k, _, _ = _problem(rng)
    for Y in (y[:, 0], y):
        exact = bounds.gaussian_log_marginal(k(X), Y, 0.05)
        bound = bounds.sgpr_elbo(k(X, X), k(X), k.diag(X), Y, 0.05)
        np.testing.assert_allclose(bound, exact, rtol=1e-6)


def test_sgpr_bound_is_below_exact_and_gap_shrinks_with_m(rng):
    X, _, y, k, _, _ = _problem(rng, N=40)
    exact = bounds.gaussian_log_marginal(k(X), y[:, 0], 0.05)
    gaps = [exact - bounds.sgpr_elbo(k(X[:m], X), k(X[:m]), k.diag(X), y[:, 0], 0.05) for m in (3, 10, 25)]
    assert all(g > 0 for g in gaps) and gaps[0] > gaps[1] > gaps[2]


def test_optimal_qu_predicts_like_exact_gp_when_z_is_x(rng):
    X, _, y, k, _, _ = _problem(rng)
    Xs = rng.uniform(-2, 2, (9, 2))
    q_mu, q_sqrt = bounds.sgpr_optimal_qu(k(X, X), k(X), y, 0.05, whiten=True)
    mean, var = conditionals.conditional(k(X, Xs), ops.cholesky(k(X)), k.diag(Xs), q_mu, q_sqrt)
    mean_e, var_e = bounds.gaussian_posterior(k(X), k(Xs, X), k.diag(Xs), y, 0.05)
    # Z = X makes Kmm as ill-conditioned as K_XX: the relative jitter 1e-8 of ops.JITTER shows at ~1e-6.
    np.testing.assert_allclose(mean, mean_e, atol=1e-5)
    np.testing.assert_allclose(var, np.broadcast_to(var_e, var.shape), atol=1e-5)


@pytest.mark.parametrize("whiten", [True, False])
def test_conditional_matches_dense_gaussian_algebra(rng, whiten):
    X, Z, _, k, q_mu, q_sqrt = _problem(rng)
    Lmm = np.linalg.cholesky(k(Z) + 1e-10 * np.eye(len(Z)))
    mean, cov = conditionals.conditional(k(Z, X), Lmm, k(X), q_mu, q_sqrt, whiten=whiten, full_cov=True)
    _, var = conditionals.conditional(k(Z, X), Lmm, k.diag(X), q_mu, q_sqrt, whiten=whiten)
    S = q_sqrt @ np.swapaxes(q_sqrt, -1, -2)
    if whiten:  # u = Lmm v: E[u] = Lmm m, Cov[u] = Lmm S Lmm^T
        m_u, S_u = q_mu @ Lmm.T, Lmm @ S @ Lmm.T
    else:
        m_u, S_u = q_mu, S
    Kinv = np.linalg.inv(Lmm @ Lmm.T)
    B = Kinv @ k(Z, X)
    np.testing.assert_allclose(mean, m_u @ B, atol=1e-8)
    dense = k(X) - k(X, Z) @ Kinv @ k(Z, X) + np.swapaxes(B, -1, -2) @ S_u @ B
    np.testing.assert_allclose(cov, dense, atol=1e-8)
    np.testing.assert_allclose(var, np.diagonal(dense, axis1=-2, axis2=-1), atol=1e-8)


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.slow
def test_projection_by_inverse_equals_triangular_solve(rng, monkeypatch, backend):
    """Both ways of forming A = Lmm^{-1} Kmn (wide Kmn: by Lmm^{-1}; otherwise: a solve) give the same bound,
    conditional and gradients."""
    X, Z, y, k, q_mu, q_sqrt = _problem(rng, N=40, M=6)
    assert X.shape[0] >= ops.INVERSE_PROJECTION_RATIO * Z.shape[0]

    def evaluate(ratio):
        monkeypatch.setattr(ops, "INVERSE_PROJECTION_RATIO", ratio)
        if backend == "jax":
            import jax

            def objective(Z, q_mu):
                bound = bounds.sgpr_elbo(k(Z, X), k(Z), k.diag(X), y, 0.05)
                mean, var = conditionals.conditional(k(Z, X), ops.cholesky(k(Z)), k.diag(X), q_mu, q_sqrt)
                return bound + jnp.sum(mean**2) + jnp.sum(var), (bound, mean, var)

            grads, values = jax.grad(objective, argnums=(0, 1), has_aux=True)(jnp.asarray(Z), jnp.asarray(q_mu))
            return [np.asarray(v) for v in (*values, *grads)]
        Zt, mt = (torch.tensor(a, requires_grad=True) for a in (Z, q_mu))
        Xt, yt, St = (torch.as_tensor(a) for a in (X, y, q_sqrt))
        bound = bounds.sgpr_elbo(k(Zt, Xt), k(Zt), k.diag(Xt), yt, 0.05)
        mean, var = conditionals.conditional(k(Zt, Xt), ops.cholesky(k(Zt)), k.diag(Xt), mt, St)
        (bound + torch.sum(mean**2) + torch.sum(var)).backward()
        return [t.detach().numpy() for t in (bound, mean, var, Zt.grad, mt.grad)]

    by_inverse, by_solve = evaluate(1), evaluate(10**9)
    for a, b in zip(by_inverse, by_solve, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


def test_diagonal_q_equals_full_q_with_diagonal_root(rng):
    X, Z, _, k, q_mu, _ = _problem(rng)
    s = rng.uniform(0.2, 1.0, q_mu.shape)
    Lmm = ops.cholesky(k(Z))
    full = conditionals.conditional(k(Z, X), Lmm, k.diag(X), q_mu, np.stack([np.diag(r) for r in s]))
    diag = conditionals.conditional(k(Z, X), Lmm, k.diag(X), q_mu, s)
    np.testing.assert_allclose(diag, full, atol=1e-12)
    kl_full = kl.kl_qu_pu(q_mu, np.stack([np.diag(r) for r in s]), Lmm)
    np.testing.assert_allclose(kl.kl_qu_pu(q_mu, s, Lmm), kl_full, rtol=1e-12)


@pytest.mark.parametrize("whiten", [True, False])
def test_kl_against_monte_carlo(rng, whiten):
    _, Z, _, k, q_mu, q_sqrt = _problem(rng, M=4, P=1)
    Kmm = k(Z) + 1e-6 * np.eye(4)
    Lmm = np.linalg.cholesky(Kmm)
    divergence = kl.kl_qu_pu(q_mu, q_sqrt, None if whiten else Lmm)
    S = q_sqrt[0] @ q_sqrt[0].T
    from scipy.stats import multivariate_normal as mvn

    draws = rng.multivariate_normal(q_mu[0], S, size=400_000)
    prior_cov = np.eye(4) if whiten else Kmm
    log_ratio = mvn(q_mu[0], S).logpdf(draws) - mvn(np.zeros(4), prior_cov).logpdf(draws)
    se = log_ratio.std() / np.sqrt(len(draws))
    assert abs(float(divergence) - log_ratio.mean()) < 4 * se


def test_whitened_and_unwhitened_kl_agree_for_equivalent_q(rng):
    _, Z, _, k, q_mu, q_sqrt = _problem(rng)
    Lmm = ops.cholesky(k(Z))
    kl_white = kl.kl_qu_pu(q_mu, q_sqrt, None)
    kl_u = kl.kl_qu_pu(q_mu @ Lmm.T, Lmm @ q_sqrt, Lmm)
    np.testing.assert_allclose(kl_u, kl_white, rtol=1e-8)


@pytest.mark.slow
def test_same_numbers_on_jax_torch_numpy(rng):
    X, Z, y, k, q_mu, q_sqrt = _problem(rng)
    arrays = dict(X=X, Z=Z, y=y, q_mu=q_mu, q_sqrt=q_sqrt)

    def run(conv):
        a = {n: conv(v) for n, v in arrays.items()}
        kern = k.with_parameters({n: conv(np.asarray(v)) for n, v in k.parameters().items()})
        Lmm = ops.cholesky(kern(a["Z"]))
        Kmn = kern(a["Z"], a["X"])
        return [
            *conditionals.conditional(Kmn, Lmm, kern.diag(a["X"]), a["q_mu"], a["q_sqrt"]),
            *conditionals.conditional(Kmn, Lmm, kern(a["X"]), a["q_mu"], a["q_sqrt"], whiten=False, full_cov=True),
            kl.kl_qu_pu(a["q_mu"], a["q_sqrt"], Lmm),
            kl.kl_qu_pu(a["q_mu"], a["q_sqrt"]),
            bounds.sgpr_elbo(Kmn, kern(a["Z"]), kern.diag(a["X"]), a["y"], conv(np.asarray(0.1))),
            *bounds.sgpr_optimal_qu(Kmn, kern(a["Z"]), a["y"], conv(np.asarray(0.1)), whiten=False),
            bounds.gaussian_log_marginal(kern(a["X"]), a["y"], conv(np.asarray(0.1))),
            *bounds.gaussian_posterior(
                kern(a["X"]), kern(a["Z"], a["X"]), kern.diag(a["Z"]), a["y"], conv(np.asarray(0.1))
            ),
        ]

    ref = run(np.asarray)
    for conv, back in ((jnp.asarray, np.asarray), (torch.as_tensor, lambda t: t.numpy())):
        for r, o in zip(ref, run(conv), strict=True):
            np.testing.assert_allclose(back(o), r, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("diagonal", [True, False])
def test_per_input_conditional_equals_the_shared_conditional_input_by_input(rng, whiten, diagonal):
    """Each input with its own Z_n and q(u_n): the batched per-input conditional against :func:`conditional` run
    once per input with that input's Z_n (the oracle), on numpy, jax and torch."""
    N, M, D = 5, 4, 2
    k = kernels.RBF(variance=1.3, lengthscale=np.array([0.8, 1.4]))
    X, Z = rng.uniform(-2, 2, (N, D)), rng.uniform(-2, 2, (N, M, D))
    q_mu = rng.standard_normal((N, M))
    q_sqrt = rng.uniform(0.2, 1.0, (N, M)) if diagonal else np.tril(rng.standard_normal((N, M, M))) * 0.3 + np.eye(M)
    expected = [
        conditionals.conditional(
            k(Z[n], X[n : n + 1]),
            ops.cholesky(k(Z[n])),
            k.diag(X[n : n + 1]),
            q_mu[n : n + 1],
            q_sqrt[n : n + 1],
            whiten=whiten,
        )
        for n in range(N)
    ]
    mean_ref = np.array([m[0, 0] for m, _ in expected])
    var_ref = np.array([v[0, 0] for _, v in expected])
    Lmm = np.stack([ops.cholesky(k(Z[n])) for n in range(N)])
    kmn = np.stack([k(Z[n], X[n : n + 1])[:, 0] for n in range(N)])
    for conv, back in ((np.asarray, np.asarray), (jnp.asarray, np.asarray), (torch.as_tensor, lambda t: t.numpy())):
        mean, var = conditionals.per_input_conditional(
            conv(Lmm), conv(kmn), conv(k.diag(X)), conv(q_mu), conv(q_sqrt), whiten=whiten
        )
        np.testing.assert_allclose(back(mean), mean_ref, rtol=1e-9)
        np.testing.assert_allclose(back(var), var_ref, rtol=1e-9)


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.parametrize("backend", ["numpy", "jax", "torch"])
def test_a_diagonal_q_sqrt_gives_what_its_full_matrix_gives(rng, whiten, backend):
    """The mean-field variance Σ_m s_pm² B_mn² (one matrix product) equals the full R^T B route with R = diag(s)."""
    X, Z, _, k, q_mu, _ = _problem(rng)
    s = rng.uniform(0.2, 1.5, q_mu.shape)
    convert = {"numpy": np.asarray, "jax": jnp.asarray, "torch": torch.as_tensor}[backend]
    Kmn, Lmm, Knn = (
        convert(np.asarray(a)) for a in (k(Z, X), np.linalg.cholesky(k(Z) + 1e-8 * np.eye(len(Z))), k.diag(X))
    )
    diagonal = conditionals.conditional(Kmn, Lmm, Knn, convert(q_mu), convert(s), whiten=whiten)
    full = conditionals.conditional(
        Kmn, Lmm, Knn, convert(q_mu), convert(np.stack([np.diag(r) for r in s])), whiten=whiten
    )
    for got, expected in zip(diagonal, full, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-10, atol=1e-12)
