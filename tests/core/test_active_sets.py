"""Stochastic active sets (spec 004 §6.2 (a)-(f)) against dense Gaussian algebra, by enumeration on tiny N."""

from itertools import combinations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from ppl_sparsegp.core import active_sets, bounds, kernels, ops

NOISE = 0.3


@pytest.fixture(autouse=True)
def no_jitter():
    """K_AA + σ² I is well conditioned: compare the algebra itself to 1e-10, without the default jitter."""
    with ops.relative_jitter(0.0):
        yield


def _toy(seed: int = 0, N: int = 7, D: int = 3, Q: int = 2):
    """Latents Z [N, Q], a kernel, and X [N, D] drawn from the GP-LVM decoder itself (D GPs, noise σ²)."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((N, Q))
    kernel = kernels.RBF(variance=1.2, lengthscale=np.array([0.9, 1.4]))
    C = kernel(Z) + NOISE * np.eye(N)
    X = np.linalg.cholesky(C) @ rng.standard_normal((N, D))
    return Z, kernel, X, C


def _dense_conditional(C: np.ndarray, X: np.ndarray, held: list[int], active: list[int]):
    """Mean [R, D] and covariance [R, R] of X_R given X_A under N(0, C) per column, by dense inverses."""
    if not active:
        return np.zeros((len(held), X.shape[1])), C[np.ix_(held, held)]
    inverse = np.linalg.inv(C[np.ix_(active, active)])
    cross = C[np.ix_(held, active)]
    return cross @ inverse @ X[active], C[np.ix_(held, held)] - cross @ inverse @ cross.T


def _log_normal_rows(X: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> float:
    """Σ_d log N(X[:, d] | mean[:, d], cov)."""
    L = np.linalg.cholesky(cov)
    W = np.linalg.solve(L, X - mean)
    n, D = X.shape
    return -0.5 * n * D * np.log(2 * np.pi) - D * np.sum(np.log(np.diag(L))) - 0.5 * np.sum(W**2)


def _split(kernel, Z, X, active):
    held = [n for n in range(len(Z)) if n not in active]
    A, R = Z[list(active)], Z[held]
    return kernel(A), kernel(A, R), kernel.diag(R), X[list(active)], X[held]


def _full_data_sas(kernel, Z, X, num_active):
    """E_{|A| = A}[log p(X_A) + Σ_{n ∉ A} log p(x_n | X_A)], the average over every active set of the data."""
    values = [
        active_sets.sas_objective(*_split(kernel, Z, X, active), NOISE)
        for active in combinations(range(len(Z)), num_active)
    ]
    return float(np.mean(values))


def test_fong_holmes_identity_by_enumeration():
    """(a) log p(X|Z) = Σ_{r=1}^{N} S_CV(X|r), S_CV the leave-r-out score averaged over every hold-out set."""
    Z, kernel, X, C = _toy()
    N = len(Z)
    exact = bounds.gaussian_log_marginal(kernel(Z), X, NOISE)
    total = 0.0
    for r in range(1, N + 1):
        scores = []
        for held in combinations(range(N), r):
            active = [n for n in range(N) if n not in held]
            mean, cov = _dense_conditional(C, X, list(held), active)
            scores.append(np.mean([_log_normal_rows(X[[n]], mean[[i]], cov[i : i + 1, i : i + 1])
                                   for i, n in enumerate(held)]))  # fmt: skip
        total += np.mean(scores)
    np.testing.assert_allclose(total, exact, rtol=0, atol=1e-10)


@pytest.mark.parametrize("num_held_out", [0, 1])
def test_sas_with_at_most_one_held_out_point_is_exact(num_held_out):
    """(b) A = N (no held-out point) and A = N − 1 (one): the estimate with w = 1 is log p(X|Z), for every split."""
    Z, kernel, X, _ = _toy()
    N = len(Z)
    exact = bounds.gaussian_log_marginal(kernel(Z), X, NOISE)
    for active in combinations(range(N), N - num_held_out):
        estimate = active_sets.sas_objective(*_split(kernel, Z, X, active), NOISE)
        np.testing.assert_allclose(estimate, exact, rtol=0, atol=1e-10)


def test_chain_rule_joint_held_out_plus_active_marginal_is_exact():
    """(c) log p(X_R | X_A) (joint over R, not factorised) + log p(X_A | Z_A) = log p(X|Z) for any split."""
    Z, kernel, X, C = _toy(seed=1)
    exact = bounds.gaussian_log_marginal(kernel(Z), X, NOISE)
    for active in ([0, 3], [1, 2, 5], [6]):
        held = [n for n in range(len(Z)) if n not in active]
        mean, cov = _dense_conditional(C, X, held, active)
        K_AA, _, _, X_A, _ = _split(kernel, Z, X, active)
        marginal = active_sets.active_set_log_marginal(np.linalg.cholesky(K_AA + NOISE * np.eye(len(active))), X_A)
        np.testing.assert_allclose(_log_normal_rows(X[held], mean, cov) + marginal, exact, rtol=0, atol=1e-10)


def test_held_out_predictive_equals_dense_inverse():
    """(d) m_{n|A}, c_{n|A} and the held-out log densities against dense-inverse formulas."""
    Z, kernel, X, C = _toy(seed=2)
    active, held = [0, 2, 4], [1, 3, 5, 6]
    K_AA, K_AR, k_RR, X_A, X_R = _split(kernel, Z, X, active)
    L = np.linalg.cholesky(K_AA + NOISE * np.eye(3))
    mean, var = active_sets.held_out_predictive(L, K_AR, k_RR, X_A, NOISE)
    dense_mean, dense_cov = _dense_conditional(C, X, held, active)
    np.testing.assert_allclose(mean, dense_mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(var, np.diag(dense_cov), rtol=0, atol=1e-12)
    logp = active_sets.held_out_log_density(X_R, mean, var)
    dense = [_log_normal_rows(X[[n]], dense_mean[[i]], dense_cov[i : i + 1, i : i + 1]) for i, n in enumerate(held)]
    np.testing.assert_allclose(logp, dense, rtol=0, atol=1e-12)


def test_unbiased_weight_makes_the_minibatch_estimate_the_full_data_objective_in_expectation():
    """(e) Every batch of B (without replacement) and every split into A active and B − A held-out points, equally
    likely: the mean of the estimate with w = (N − A)/(B − A) is the full-data SAS objective."""
    Z, kernel, X, _ = _toy(seed=3, N=6)
    N, B, A = 6, 4, 2
    weight = active_sets.conditional_weight("unbiased", N, B, A)
    estimates = []
    for batch in combinations(range(N), B):
        for active in combinations(batch, A):
            held = [n for n in batch if n not in active]
            a, h = list(active), held
            estimates.append(active_sets.sas_objective(kernel(Z[a]), kernel(Z[a], Z[h]), kernel.diag(Z[h]), X[a],
                                                       X[h], NOISE, weight))  # fmt: skip
    np.testing.assert_allclose(np.mean(estimates), _full_data_sas(kernel, Z, X, A), rtol=0, atol=1e-10)


def test_split_averaged_estimate_is_below_exact_in_expectation_over_data_and_rises_with_the_active_set():
    """(f) For data drawn from the GP, the estimate averaged over every split is below log p(X|Z) in expectation and
    rises with A, reaching it at A = N − 1 (by Hadamard's inequality: Σ log c_{n|A} >= log det of the held-out
    points' joint conditional covariance).

    The expectation is exact without sampling: both sides are a constant per output column minus a quadratic form
    in that column, and x ~ N(0, C), so their mean over D columns drawn from the GP, divided by D, is their value at
    the N columns of X* = √N chol(C), divided by N. (For one dataset the average can exceed log p(X|Z): the
    bound holds on average over data, not for each.)"""
    for seed in range(3):
        Z, kernel, _, C = _toy(seed=seed)
        N = len(Z)
        expected_data = np.sqrt(N) * np.linalg.cholesky(C)
        exact = float(bounds.gaussian_log_marginal(kernel(Z), expected_data, NOISE))
        averages = [_full_data_sas(kernel, Z, expected_data, a) for a in range(1, N)]
        assert all(value <= exact + 1e-10 for value in averages), (averages, exact)
        assert all(np.diff(averages) > 0), averages
        np.testing.assert_allclose(averages[-1], exact, rtol=0, atol=1e-10)


def test_for_one_dataset_the_split_average_can_exceed_the_exact_value():
    """Why (f) is stated in expectation: on this draw the average over the 21 active sets of size 2 is above
    log p(X|Z), and it falls as A grows; the estimate is no bound for each dataset."""
    Z, kernel, X, _ = _toy(seed=2)
    exact = float(bounds.gaussian_log_marginal(kernel(Z), X, NOISE))
    averages = [_full_data_sas(kernel, Z, X, a) for a in (2, 3, 4)]
    assert averages[0] > averages[1] > averages[2] > exact


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_sas_terms_agree_on_every_backend(backend):
    Z, kernel, X, _ = _toy(seed=4)
    parts = _split(kernel, Z, X, [0, 1, 5])
    expected = active_sets.sas_terms(*parts, NOISE)
    convert = jnp.asarray if backend == "jax" else torch.as_tensor
    got = active_sets.sas_terms(*(convert(np.asarray(p)) for p in parts), NOISE)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.asarray(g), e, rtol=1e-12)


def _by_solves(K_AA, K_AR, k_RR, X_A, X_R, noise, weight):
    """Eq 6 with a triangular solve per right-hand side (the route before :func:`active_sets.inverse_factor`)."""
    L = jnp.linalg.cholesky(K_AA + noise * jnp.eye(K_AA.shape[0]))
    mean, var = active_sets.held_out_predictive(L, K_AR, k_RR, X_A, noise)
    held_out = active_sets.held_out_log_density(X_R, mean, var)
    return active_sets.active_set_log_marginal(L, X_A) + weight * jnp.sum(held_out)


@pytest.mark.slow
def test_the_objective_by_the_inverse_factor_equals_it_by_solves_with_its_gradient():
    """sas_objective (L⁻¹ formed once, applied by products) against the solve-per-right-hand-side route, value and
    gradient in the latents, the kernel and the noise, float64 to 1e-10."""
    Z, _, X, _ = _toy(seed=6, N=9, D=4)
    active, held = [0, 2, 3, 7], [1, 4, 5, 6, 8]

    def objective(route, params):
        kernel = kernels.RBF(variance=params["variance"], lengthscale=params["lengthscale"])
        Za, Zr = params["Z"][jnp.asarray(active)], params["Z"][jnp.asarray(held)]
        parts = (kernel(Za), kernel(Za, Zr), kernel.diag(Zr), jnp.asarray(X[active]), jnp.asarray(X[held]))
        return route(*parts, params["noise"], 2.5)

    params = {"Z": jnp.asarray(Z), "variance": 1.2, "lengthscale": jnp.asarray([0.9, 1.4]), "noise": NOISE}
    (value, grad), (ref, ref_grad) = (jax.value_and_grad(lambda p, r=r: objective(r, p))(params)
                                      for r in (active_sets.sas_objective, _by_solves))  # fmt: skip
    np.testing.assert_allclose(value, ref, rtol=1e-10)
    for name in params:
        np.testing.assert_allclose(grad[name], ref_grad[name], rtol=1e-10, atol=1e-12)


def test_held_out_variance_never_falls_below_the_noise():
    """Round-off cannot take c_{n|A} below σ²: a held-out point equal to an active one has c = σ² + O(σ⁴)."""
    Z, kernel, X, _ = _toy(seed=5)
    Zr = np.concatenate([Z, Z[:1]])
    L = np.linalg.cholesky(kernel(Z) + 1e-12 * np.eye(len(Z)))
    _, var = active_sets.held_out_predictive(L, kernel(Z, Zr), kernel.diag(Zr), X, 1e-12)
    assert np.all(var >= 1e-12)


def test_conditional_weights_and_their_refusals():
    assert active_sets.conditional_weight("unbiased", 100, 10, 4) == pytest.approx(96 / 6)
    assert active_sets.conditional_weight("batch", 100, 10, 4) == 1.0
    assert active_sets.conditional_weight("repo", 100, 10, 4) == pytest.approx(6 / 100)
    with pytest.raises(ValueError, match="weight: expected one of unbiased, batch, repo, got 'mean'"):
        active_sets.conditional_weight("mean", 100, 10, 4)
    for N, B, A in ((100, 10, 10), (100, 10, 0), (5, 10, 4)):
        with pytest.raises(ValueError, match="0 < num_active < batch_size <= N"):
            active_sets.conditional_weight("unbiased", N, B, A)
