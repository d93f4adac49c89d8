"""The backend shim: the jitter policy, the Cholesky derivatives, triangular solves and quadrature nodes."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from ppl_sparsegp.core import ops


def _spd(rng, n=6):
    A = rng.standard_normal((n, n))
    return A @ A.T + np.eye(n)


@pytest.mark.parametrize("conv", [np.asarray, jnp.asarray, torch.as_tensor])
def test_cholesky_reconstructs_with_the_relative_jitter(rng, conv):
    A = _spd(rng)
    L = np.asarray(ops.cholesky(conv(A)))
    expected = A + ops.JITTER["float64"] * np.mean(np.diag(A)) * np.eye(6)
    np.testing.assert_allclose(L @ L.T, expected, rtol=1e-12, atol=1e-12)
    assert np.allclose(L, np.tril(L))


@pytest.mark.parametrize("conv", [np.asarray, jnp.asarray, torch.as_tensor])
def test_singular_matrix_escalates_jitter_with_a_warning(conv):
    A = np.ones((4, 4)) - 1e-4 * np.eye(4)  # indefinite by far less than the escalated jitter
    with pytest.warns(ops.JitterWarning, match="relative jitter"):
        L = np.asarray(ops.cholesky(conv(A)))
    assert np.all(np.isfinite(L))


@pytest.mark.parametrize("conv", [np.asarray, jnp.asarray, torch.as_tensor])
def test_hopeless_matrix_raises_cholesky_error(conv):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.JitterWarning)
        with pytest.raises(ops.CholeskyError, match="not positive definite"):
            ops.cholesky(conv(-np.eye(3)))


def test_compiled_factorisation_is_one_call_without_a_loop_or_callback_and_nan_on_failure():
    """issue 26 §1: traced, the Cholesky is one factorisation at a static jitter (the engines escalate by re-running
    a chunk, see tests/infer/test_hot_path.py); a failure is NaN, with nothing sent to the host."""
    primitives = {e.primitive.name for e in jax.make_jaxpr(ops.cholesky)(jnp.eye(3)).jaxpr.eqns}
    assert "while" not in primitives and not any("callback" in p for p in primitives)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L = jax.jit(ops.cholesky)(-jnp.eye(3))
    assert np.all(np.isnan(np.asarray(L)[np.tril_indices(3)]))


def test_traced_cholesky_takes_the_jitter_of_its_escalation_step():
    """Under ``escalated_jitter(k)`` a traced factorisation adds max(j0, base) * 10**k; eagerly the scope is unused
    (the eager path escalates by itself); a step outside [0, MAX_ESCALATIONS] is refused. The scope is read when a
    function is traced, so each jit here is a new function (jax caches traces by function and arguments only)."""

    def factor(A):
        return jax.jit(lambda a: ops.cholesky(a))(A)

    A = jnp.asarray([[2.0, 0.5], [0.5, 1.0]])
    for step in (0, 2):
        with ops.escalated_jitter(step):
            L = factor(A)
        level = ops.JITTER["float64"] * 10.0**step
        np.testing.assert_allclose(L @ L.T, A + level * 1.5 * np.eye(2), rtol=1e-13)
    singular = jnp.ones((2, 2)) - 5e-8 * jnp.eye(2)  # fails at 1e-8, works at 1e-7
    assert np.all(np.isnan(np.asarray(factor(singular))[np.tril_indices(2)]))
    with ops.escalated_jitter(1):
        assert np.all(np.isfinite(np.asarray(factor(singular))))
    with pytest.raises(ValueError, match="step"):
        with ops.escalated_jitter(ops.MAX_ESCALATIONS + 1):
            pass


def test_cholesky_derivatives_equal_jax_cholesky_to_second_order(rng):
    A = jnp.asarray(_spd(rng))

    def ours(A):
        return jnp.sum(ops.cholesky(A, jitter=0.0) ** 3)

    def reference(A):
        return jnp.sum(jnp.linalg.cholesky(A) ** 3)

    # compiled: under grad and hessian A is a tracer, so ops.cholesky takes its traced path either way
    np.testing.assert_allclose(jax.jit(jax.grad(ours))(A), jax.jit(jax.grad(reference))(A), atol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.hessian(ours))(A), jax.jit(jax.hessian(reference))(A), atol=1e-10)


def test_gradient_through_escalated_jitter_is_finite():
    def f(a):
        return jnp.sum(ops.cholesky(a * jnp.ones((4, 4))))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.JitterWarning)
        g = jax.jit(jax.grad(f))(2.0)
    assert np.isfinite(float(g))


@pytest.mark.parametrize("transpose", [False, True])
def test_solve_triangular_on_all_backends(rng, transpose):
    L = np.linalg.cholesky(_spd(rng))
    B = rng.standard_normal((2, 6, 3))
    expected = np.linalg.solve(L.T if transpose else L, B)
    for conv in (np.asarray, jnp.asarray, torch.as_tensor):
        X = ops.solve_triangular(conv(L), conv(B), lower=True, transpose=transpose)
        np.testing.assert_allclose(np.asarray(X), expected, rtol=1e-10)
    np.testing.assert_allclose(
        np.asarray(ops.cho_solve(jnp.asarray(L), jnp.asarray(B[0]))), np.linalg.solve(L @ L.T, B[0])
    )


def test_gauss_hermite_integrates_normal_moments_exactly():
    t, w = ops.gauss_hermite(10, jnp.zeros(1))
    for power, moment in ((0, 1.0), (2, 1.0), (4, 3.0), (6, 15.0), (3, 0.0)):
        np.testing.assert_allclose(float(jnp.sum(w * t**power)), moment, atol=1e-12)
    with pytest.raises(ValueError, match="order"):
        ops.gauss_hermite(0, jnp.zeros(1))


def test_namespace_prefers_the_non_numpy_backend():
    assert ops.namespace(np.ones(2), jnp.ones(2)).__name__ == "jax.numpy"
    assert "torch" in ops.namespace(np.ones(2), torch.ones(2)).__name__


def test_eager_jax_cholesky_escalates_like_numpy():
    """A concrete jax matrix takes the eager path: escalated with a warning, the same factor as numpy's."""
    singular = np.ones((2, 2)) - 1e-4 * np.eye(2)  # indefinite by less than the escalated jitter
    with pytest.warns(ops.JitterWarning, match="relative jitter") as record:
        L = ops.cholesky(jnp.asarray(singular))
    assert len(record) == 1
    with pytest.warns(ops.JitterWarning):
        expected = ops.cholesky(singular)
    np.testing.assert_allclose(np.asarray(L), expected, rtol=1e-12)


@pytest.mark.parametrize("columns", [5, 40])  # narrow (solve) and wide (inverse) right-hand sides
def test_cholesky_project_gradient_equals_the_chained_gradient(rng, columns):
    """The fused rule of cholesky_project against differentiating cholesky and the solve separately, and
    against central finite differences of a scalar function of A."""
    n = 8
    S = rng.standard_normal((n, n))
    K = jnp.asarray(S @ S.T / n + 0.5 * np.eye(n))
    B = jnp.asarray(rng.standard_normal((n, columns)))
    W = jnp.asarray(rng.standard_normal((n, columns)))

    def fused(K, B):
        A = ops.cholesky_project(K, B)
        return jnp.sum(W * A) + jnp.sum(A**2) ** 1.5

    def chained(K, B):
        A = ops.solve_triangular(ops.cholesky(K), B, lower=True)
        return jnp.sum(W * A) + jnp.sum(A**2) ** 1.5

    np.testing.assert_allclose(fused(K, B), chained(K, B), rtol=1e-12)
    for got, want in zip(jax.grad(fused, (0, 1))(K, B), jax.grad(chained, (0, 1))(K, B), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    grad_K = jax.grad(fused)(K, B)
    E = jnp.asarray(np.tril(rng.standard_normal((n, n))))
    E = E + E.T  # a symmetric direction: K stays a covariance
    h = 1e-6
    numeric = (fused(K + h * E, B) - fused(K - h * E, B)) / (2 * h)
    np.testing.assert_allclose(jnp.sum(grad_K * E), numeric, rtol=1e-6)


def test_cholesky_project_matches_on_every_backend(rng):
    S = rng.standard_normal((6, 6))
    K, B = S @ S.T + np.eye(6), rng.standard_normal((6, 30))
    want = np.linalg.solve(np.linalg.cholesky(K + ops.JITTER["float64"] * np.mean(np.diag(K)) * np.eye(6)), B)
    for convert in (np.asarray, jnp.asarray, torch.as_tensor):
        np.testing.assert_allclose(np.asarray(ops.cholesky_project(convert(K), convert(B))), want, rtol=1e-10)


@pytest.mark.slow
def test_cholesky_project_forward_mode_and_hessian_equal_the_chained_ones(rng):
    n = 5
    S = rng.standard_normal((n, n))
    K, B = jnp.asarray(S @ S.T / n + 0.5 * np.eye(n)), jnp.asarray(rng.standard_normal((n, 3)))
    dK = jnp.asarray(rng.standard_normal((n, n)))
    dK = dK + dK.T

    def chained(K, B):
        return ops.solve_triangular(ops.cholesky(K), B, lower=True)

    _, fused_tangent = jax.jvp(ops.cholesky_project, (K, B), (dK, B))
    _, chained_tangent = jax.jvp(chained, (K, B), (dK, B))
    np.testing.assert_allclose(fused_tangent, chained_tangent, rtol=1e-9, atol=1e-12)
    fused_hessian = jax.hessian(lambda K: jnp.sum(ops.cholesky_project(K, B) ** 3))(K)
    chained_hessian = jax.hessian(lambda K: jnp.sum(chained(K, B) ** 3))(K)
    np.testing.assert_allclose(fused_hessian, chained_hessian, rtol=1e-8, atol=1e-10)
