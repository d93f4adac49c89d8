"""jax implementations of the few operations :mod:`ppl_sparsegp.core.ops` cannot write with the array API.

:mod:`ppl_sparsegp.core.ops` imports this module (by name, lazily) only when it is handed a jax array, so the core
itself never imports jax. What lives here, and why it is jax-specific:

* the jittered Cholesky as one primitive whose primal escalates the jitter inside the compiled program
  (``lax.while_loop`` + a host callback for the warning) and whose tangent is the closed-form Cholesky rule;
* the fused projection ``A = chol(K)⁻¹ B`` with a single custom derivative for the pair;
* triangular solves, ``stop_gradient`` and the special functions, each compiled as one unit.

Importing it installs :mod:`ppl_sparsegp.backends.jax_lapack`'s guard against jaxlib 0.10's batched-LAPACK hang.

The jitter policy itself (levels, messages, escalation count) is :mod:`ppl_sparsegp.core.ops`'s.
"""

from __future__ import annotations

from functools import lru_cache, partial
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np
from jax import lax
from jax.scipy.linalg import solve_triangular as _jax_solve_triangular

from ppl_sparsegp.backends import jax_blocked
from ppl_sparsegp.backends.jax_lapack import inline_batched_lapack
from ppl_sparsegp.core import ops

inline_batched_lapack()

Array = Any


def cholesky(A: Array, j0: float) -> Array:
    """Lower factor of ``A + level * mean(diag A) * I`` [..., n, n], the level escalated from ``j0`` (see ops)."""
    L = _cholesky_primitive()(A, j0)
    if not isinstance(L, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(L))):
        raise ops.CholeskyError(ops.failure_message(ops.jitter_level(j0, A, ops.MAX_ESCALATIONS)))
    return L


@lru_cache(maxsize=1)
def _cholesky_primitive():
    """A jax Cholesky whose primal escalates the jitter (``while_loop``) and whose tangent is the standard
    Cholesky rule dL = L Φ(L⁻¹ dA L⁻ᵀ) (Φ: lower triangle, halved diagonal; Murray 2016), with the jitter held
    constant. Differentiating through the control flow instead costs ~25x a plain Cholesky."""

    def primal(A, j0):
        # A while_loop rather than lax.cond: under vmap (vectorised MCMC chains) a cond with a batched predicate
        # runs both branches on every call, escalation and host callback included; a batched while_loop runs
        # its body only while some matrix in the batch still needs more jitter.
        eye, scale = ops.eye_like(A), ops.diagonal_scale(A)

        def not_done(state):
            k, L = state
            return jnp.logical_and(jnp.logical_not(jnp.all(jnp.isfinite(L))), k < ops.MAX_ESCALATIONS)

        def try_next(state):
            k, _ = state
            level = ops.jitter_level(j0, A, k + 1)
            L = jax_blocked.cholesky(A + level.astype(A.dtype) * scale * eye)
            ok = jnp.all(jnp.isfinite(L))
            # pure_callback with vmap_method="broadcast_all" calls the host once per batch; jax.debug.callback
            # would emit one call per batch element, so the program (and its compile time) grew with the batch.
            # The returned zero is added to the counter to keep the call alive.
            flags = (level, ok, jnp.logical_or(ok, k + 1 == ops.MAX_ESCALATIONS), not_done(state))
            token = jax.pure_callback(
                _warn_from_device, jax.ShapeDtypeStruct((), jnp.int32), *flags, vmap_method="broadcast_all"
            )
            return k + 1 + token, L

        L0 = jax_blocked.cholesky(A + j0 * scale * eye)
        return lax.while_loop(not_done, try_next, (jnp.asarray(0, dtype=jnp.int32), L0))[1]

    @partial(jax.custom_jvp, nondiff_argnums=(1,))
    def chol(A, j0):
        return primal(A, j0)

    @chol.defjvp
    def chol_jvp(j0, primals, tangents):
        (A,), (dA,) = primals, tangents
        L = chol(A, j0)  # through this rule again, so higher derivatives avoid the control flow too
        return L, L @ _cholesky_tangent_phi(L, dA)

    return chol


def _cholesky_tangent_phi(L: Array, dA: Array) -> Array:
    """Φ(L⁻¹ dA L⁻ᵀ) [..., n, n] for a factor L of A, so that the Cholesky tangent is dL = L Φ(...) (Murray
    2016; Φ: lower triangle with the diagonal halved). dA is symmetrised first: the factorisation reads A as
    symmetric."""
    dA = 0.5 * (dA + jnp.swapaxes(dA, -1, -2))
    inner = solve_triangular(L, jnp.swapaxes(solve_triangular(L, dA), -1, -2))  # L⁻¹ dA L⁻ᵀ
    return jnp.tril(inner) / (1.0 + jnp.eye(L.shape[-1], dtype=L.dtype))


def _warn_from_device(level, ok, final, active) -> np.ndarray:
    """Host side of the Cholesky's escalation: warn once a matrix succeeded at a raised jitter, or failed at
    the last one. Under vmap the arguments are batched and matrices that needed no (more) jitter are inactive.
    Returns zeros of the batch shape (the token that keeps the call in the program)."""
    mask = np.asarray(active, bool)
    levels, oks, finals = (np.ravel(np.broadcast_to(np.asarray(a), mask.shape)[mask]) for a in (level, ok, final))
    for level_i, ok_i, final_i in zip(levels, oks, finals, strict=True):
        if final_i:
            ops.warn_jitter(float(level_i), bool(ok_i))
    return np.zeros(mask.shape, dtype=np.int32)


def cholesky_project(K: Array, B: Array, j0: float) -> Array:
    """A = L⁻¹ B with L = chol(K) [n, n], B [n, k], differentiated by one closed-form rule (see ops)."""
    return _cholesky_project()(K, B, j0)


@lru_cache(maxsize=1)
def _cholesky_project():
    @partial(jax.custom_jvp, nondiff_argnums=(2,))
    def project(K, B, j0):
        return ops.lower_solve(cholesky(K, j0), B)

    @project.defjvp
    def project_jvp(j0, primals, tangents):
        # dA = L⁻¹ dB - Φ(L⁻¹ dK L⁻ᵀ) A; transposed by jax for reverse mode, it is the rule in ops' docstring.
        (K, B), (dK, dB) = primals, tangents
        L = cholesky(K, j0)
        A = ops.lower_solve(L, B)
        return A, ops.lower_solve(L, dB) - _cholesky_tangent_phi(L, dK) @ A

    return project


def solve_triangular(L: Array, B: Array, lower: bool = True, transpose: bool = False) -> Array:
    """``L X = B`` (``Lᵀ X = B`` when ``transpose``): L [..., n, n], B [..., n, k] -> [..., n, k]."""
    if lower:  # blocked for large L (jax_blocked.use_blocked), else LAPACK's trsm
        return jax_blocked.solve_triangular(L, B, transpose=transpose)
    return _jax_solve_triangular(L, B, lower=lower, trans=1 if transpose else 0)


def stop_gradient(x: Array) -> Array:
    return lax.stop_gradient(x)


@lru_cache(maxsize=1)
def special() -> SimpleNamespace:
    """jax.scipy.special's functions used by ops, each compiled as one unit: called eagerly, a composite such as
    ``log_ndtr`` would otherwise dispatch (and compile) dozens of primitive operations one by one."""
    jitted = {n: jax.jit(getattr(jss, n)) for n in ("ndtr", "log_ndtr", "gammaln")}
    jitted["logsumexp"] = jax.jit(jss.logsumexp, static_argnames="axis")
    return SimpleNamespace(**jitted)
