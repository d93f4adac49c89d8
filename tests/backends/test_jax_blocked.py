"""The blocked Cholesky and triangular solves (``ppl_sparsegp.backends.jax_blocked``) against LAPACK's.

float64: to 1e-10 relative (values and gradients). float32: the blocked result's error against the float64
answer is within 4x LAPACK float32's own error plus 1e-6 (both are round-off of the same algorithm in another
order). The SVGP ELBO and its gradient are the same with the blocked path on and off (1e-10 in float64).
"""

import collections
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.scipy.linalg import solve_triangular as lapack_solve
from numpyro.infer import SVI, TraceMeanField_ELBO

from ppl_sparsegp.backends import jax_blocked
from ppl_sparsegp.core import kernels, likelihoods, ops
from ppl_sparsegp.models.numpyro.svgp import SVGP


@pytest.fixture(autouse=True)
def blocked_on(monkeypatch):
    """The blocked path is on by default on CPU only (see the module docstring): these tests switch it on
    wherever they run."""
    monkeypatch.setenv(jax_blocked.ENV_SWITCH, "1")


def _kernel_matrix(rng, n, jitter=1e-6):
    """An RBF kernel matrix of n points in 4-D plus a relative jitter: SPD, condition number ~ 1 / jitter."""
    Z = rng.standard_normal((n, 4))
    K = np.exp(-0.5 * np.sum((Z[:, None] - Z[None]) ** 2, axis=-1))
    return K + jitter * np.eye(n)


def _relative(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))) / np.max(np.abs(b)))


def _lapack_calls(fun, *args):
    text = jax.jit(fun).lower(*args).compile().as_text()
    return collections.Counter(re.findall(r'custom_call_target="lapack_\w(\w+?)_ffi"', text))


@pytest.mark.parametrize(("n", "block"), [(700, None), (300, 64), (257, 128)])
def test_blocked_cholesky_equals_lapack_in_float64(rng, monkeypatch, n, block):
    monkeypatch.setattr(jax_blocked, "MIN_ORDER", 200)
    A = jnp.asarray(_kernel_matrix(rng, n))
    L = jax.jit(lambda A: jax_blocked.cholesky(A, block=block))(A)
    reference = jnp.linalg.cholesky(A)
    assert _relative(L, reference) < 1e-10
    assert np.all(np.triu(np.asarray(L), 1) == 0)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize(("n", "k", "block"), [(700, 256, None), (300, 300, 64), (257, 1, 128)])
def test_blocked_solve_and_its_gradients_equal_lapack_in_float64(rng, monkeypatch, transpose, n, k, block):
    monkeypatch.setattr(jax_blocked, "MIN_ORDER", 200)
    L = jnp.linalg.cholesky(jnp.asarray(_kernel_matrix(rng, n)))
    B = jnp.asarray(rng.standard_normal((n, k)))

    def blocked(L, B):
        return jax_blocked.solve_triangular(L, B, transpose=transpose, block=block)

    def reference(L, B):
        return lapack_solve(L, B, lower=True, trans=1 if transpose else 0)

    assert _relative(jax.jit(blocked)(L, B), reference(L, B)) < 1e-10

    def loss(solve):
        return lambda L, B: jnp.sum(jnp.sin(solve(L, B)))

    grads = jax.jit(jax.grad(loss(blocked), argnums=(0, 1)))(L, B)
    expected = jax.grad(loss(reference), argnums=(0, 1))(L, B)
    for got, want in zip(grads, expected, strict=True):
        assert _relative(got, want) < 1e-10
    # forward mode (the custom JVP) agrees with LAPACK's JVP too
    dL, dB = jnp.tril(jnp.asarray(rng.standard_normal((n, n)))), jnp.asarray(rng.standard_normal((n, k)))
    tangent = jax.jvp(blocked, (L, B), (dL, dB))[1]
    assert _relative(tangent, jax.jvp(reference, (L, B), (dL, dB))[1]) < 1e-9


@pytest.mark.parametrize("transpose", [False, True])
def test_blocked_path_in_float32_is_as_accurate_as_lapack(rng, transpose):
    n = 1024
    A64 = _kernel_matrix(rng, n, jitter=1e-3)
    B64 = rng.standard_normal((n, 256))
    L64 = np.linalg.cholesky(A64)
    X64 = lapack_solve(jnp.asarray(L64), jnp.asarray(B64), lower=True, trans=1 if transpose else 0)
    A32, B32 = jnp.asarray(A64, jnp.float32), jnp.asarray(B64, jnp.float32)
    L_blocked, L_lapack = jax.jit(jax_blocked.cholesky)(A32), jnp.linalg.cholesky(A32)
    assert L_blocked.dtype == jnp.float32
    assert _relative(L_blocked, L64) <= 4 * _relative(L_lapack, L64) + 1e-6
    L32 = jnp.asarray(L64, jnp.float32)  # the same factor for both solves
    X_blocked = jax.jit(lambda L, B: jax_blocked.solve_triangular(L, B, transpose=transpose))(L32, B32)
    X_lapack = lapack_solve(L32, B32, lower=True, trans=1 if transpose else 0)
    assert _relative(X_blocked, X64) <= 4 * _relative(X_lapack, X64) + 1e-6


def test_the_block_grows_with_the_order_beyond_max_blocks(rng, monkeypatch):
    assert [jax_blocked.block_size(n) for n in (512, 1024, 1025, 2048, 3000, 4096)] == [128, 128, 129, 256, 375, 512]
    monkeypatch.setattr(jax_blocked, "MAX_BLOCKS", 3)  # 700 / 3: blocks of 234, 234 and 232
    A = jnp.asarray(_kernel_matrix(rng, 700))
    B = jnp.asarray(rng.standard_normal((700, 5)))
    assert _lapack_calls(jax_blocked.cholesky, A)["potrf"] == 3
    L = jax.jit(jax_blocked.cholesky)(A)
    assert _relative(L, jnp.linalg.cholesky(A)) < 1e-10
    for transpose in (False, True):
        X = jax.jit(lambda L, B, t=transpose: jax_blocked.solve_triangular(L, B, transpose=t))(L, B)
        assert _relative(X, lapack_solve(L, B, lower=True, trans=int(transpose))) < 1e-10


def test_small_matrices_and_the_switch_keep_lapack(rng, monkeypatch):
    A = jnp.asarray(_kernel_matrix(rng, 600))
    B = jnp.ones((600, 8))
    assert _lapack_calls(lambda A: jax_blocked.cholesky(A[:100, :100]), A) == {"potrf": 1}
    assert _lapack_calls(lambda L, B: jax_blocked.solve_triangular(L[:100, :100], B[:100]), A, B) == {"trsm": 1}
    assert _lapack_calls(jax_blocked.cholesky, A)["potrf"] == 5  # 600 = 4 x 128 + 88: five diagonal blocks
    for off in ("0", "off", " False "):
        monkeypatch.setenv(jax_blocked.ENV_SWITCH, off)
        assert _lapack_calls(lambda A: jax_blocked.cholesky(A), A) == {"potrf": 1}
        assert _lapack_calls(lambda L, B: jax_blocked.solve_triangular(L, B), A, B) == {"trsm": 1}


def test_the_default_is_blocked_on_cpu_only(monkeypatch):
    monkeypatch.delenv(jax_blocked.ENV_SWITCH)
    assert jax_blocked.enabled() == (jax.default_backend() == "cpu")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert not jax_blocked.enabled()
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert jax_blocked.enabled()
    monkeypatch.setenv(jax_blocked.ENV_SWITCH, "")  # empty is unset
    assert jax_blocked.enabled()
    monkeypatch.setenv(jax_blocked.ENV_SWITCH, "0")
    assert not jax_blocked.enabled()


def test_an_unknown_switch_value_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(jax_blocked.ENV_SWITCH, "blocked")
    with pytest.raises(ValueError, match=r"PPL_SPARSEGP_BLOCKED_LINALG='blocked': expected one of 1, true"):
        jax_blocked.enabled()
    with pytest.raises(ValueError, match="PPL_SPARSEGP_BLOCKED_LINALG"):
        jax.jit(lambda A: jax_blocked.cholesky(A))(jnp.eye(600))  # a new function: traced afresh


def test_a_failed_blocked_factorisation_is_not_finite_and_ops_escalates(rng):
    A = _kernel_matrix(rng, 600, jitter=0.0)
    A[:, 300] = A[300, :] = A[:, 301] = A[301, :] = 0.5 * (A[300] + A[301])  # indefinite from block 3 on
    L = jax.jit(jax_blocked.cholesky)(jnp.asarray(A - 1e-4 * np.eye(600)))
    assert not np.all(np.isfinite(np.asarray(L)))
    with pytest.warns(ops.JitterWarning, match="relative jitter"):
        L = ops.cholesky(jnp.asarray(A - 1e-7 * np.eye(600)))
    assert np.all(np.isfinite(np.asarray(L)))


def _svgp_update(rng, dtype, M=600, N=300, B=64):
    # spread out (sd 3 in 3-D, lengthscale 1) so that Kmm is well conditioned and round-off stays round-off
    X = 3.0 * rng.standard_normal((N, 3)).astype(dtype)
    y = np.sin(X.sum(axis=1)).astype(dtype)
    Z = 3.0 * rng.standard_normal((M, 3)).astype(dtype)
    gp = SVGP(
        kernel=kernels.RBF(variance=1.0, lengthscale=np.ones(3, dtype)),
        likelihood=likelihoods.Gaussian(variance=0.1),
        Z=Z,
        batch_size=B,
        whiten=True,
    )
    svi = SVI(gp.model, gp.guide, optax.adam(0.01), TraceMeanField_ELBO())
    state = svi.init(jax.random.PRNGKey(0), X, y)
    return svi, state, X, y


@pytest.mark.slow
def test_svgp_elbo_and_gradient_are_the_same_with_the_blocked_path(rng, monkeypatch):
    svi, state, X, y = _svgp_update(rng, np.float64)
    params = dict(svi.get_params(state))
    # away from q(u) = p(u), where the whitened ELBO depends on neither Z nor the lengthscales
    M = params["u_loc"].shape[-1]
    params["u_loc"] = jnp.asarray(rng.standard_normal(params["u_loc"].shape))
    params["u_scale_tril"] = jnp.asarray(0.5 * np.eye(M) + 0.01 * np.tril(rng.standard_normal((M, M)), -1))[None]

    def loss_and_grad():
        fun = jax.jit(lambda p: jax.value_and_grad(lambda p: svi.loss.loss(jax.random.PRNGKey(1), p, svi.model,
                                                                          svi.guide, X, y))(p))  # fmt: skip
        calls = _lapack_calls(lambda p: fun(p), params)
        return fun(params), calls

    (blocked_loss, blocked_grad), blocked_calls = loss_and_grad()
    monkeypatch.setenv(jax_blocked.ENV_SWITCH, "0")
    (lapack_loss, lapack_grad), lapack_calls = loss_and_grad()
    assert blocked_calls["potrf"] > lapack_calls["potrf"]  # the two programs differ: one factorises by blocks
    assert abs(float(blocked_loss) - float(lapack_loss)) <= 1e-10 * abs(float(lapack_loss))
    assert set(blocked_grad) == set(lapack_grad) >= {"Z", "kernel.lengthscale", "u_loc", "u_scale_tril"}
    for name, want in lapack_grad.items():
        assert _relative(blocked_grad[name], want) < 1e-8, name
