"""jax implementations of the few operations :mod:`ppl_sparsegp.core.ops` cannot write with the array API.

:mod:`ppl_sparsegp.core.ops` imports this module (by name, lazily) only when it is handed a jax array, so the core
itself never imports jax. What lives here, and why it is jax-specific:

* the Cholesky of a traced matrix: one factorisation at the jitter of the current escalation step (no loop, no host
  callback: see :mod:`ppl_sparsegp.core.ops` for where the escalation happens instead), differentiated by the
  closed-form Cholesky rule;
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
from jax import lax
from jax.scipy.linalg import solve_triangular as _jax_solve_triangular

from ppl_sparsegp.backends import jax_blocked
from ppl_sparsegp.backends.jax_lapack import inline_batched_lapack
from ppl_sparsegp.core import ops

inline_batched_lapack()

Array = Any


def cholesky(A: Array, j0: float) -> Array:
    """Lower factor of ``A + level * mean(diag A) * I`` [..., n, n], with ``level`` the jitter of the current
    :func:`ppl_sparsegp.core.ops.escalated_jitter` step from ``j0``; NaN where it fails (the caller escalates)."""
    return _cholesky_rule()(A, ops.jitter_level(j0, A, ops.escalation()))


def raw_cholesky(A: Array) -> Array | None:
    """Cholesky of a concrete jax array, or None when it fails (for :func:`ppl_sparsegp.core.ops.cholesky`'s
    eager escalation)."""
    L = _plain_cholesky(A)
    return L if bool(jnp.all(jnp.isfinite(L))) else None


_plain_cholesky = jax.jit(jnp.linalg.cholesky)


@lru_cache(maxsize=1)
def _cholesky_rule():
    """The jittered Cholesky whose tangent is the standard rule dL = L Φ(L⁻¹ dA L⁻ᵀ) (Φ: lower triangle, halved
    diagonal; Murray 2016), with the jitter a constant."""

    @partial(jax.custom_jvp, nondiff_argnums=(1,))
    def chol(A, level):
        return jax_blocked.cholesky(A + level * ops.diagonal_scale(A) * ops.eye_like(A))

    @chol.defjvp
    def chol_jvp(level, primals, tangents):
        (A,), (dA,) = primals, tangents
        L = chol(A, level)  # through this rule again, so higher derivatives avoid differentiating LAPACK's
        return L, L @ _cholesky_tangent_phi(L, dA)

    return chol


def _cholesky_tangent_phi(L: Array, dA: Array) -> Array:
    """Φ(L⁻¹ dA L⁻ᵀ) [..., n, n] for a factor L of A, so that the Cholesky tangent is dL = L Φ(...) (Murray
    2016; Φ: lower triangle with the diagonal halved). dA is symmetrised first: the factorisation reads A as
    symmetric."""
    dA = 0.5 * (dA + jnp.swapaxes(dA, -1, -2))
    inner = solve_triangular(L, jnp.swapaxes(solve_triangular(L, dA), -1, -2))  # L⁻¹ dA L⁻ᵀ
    return jnp.tril(inner) / (1.0 + jnp.eye(L.shape[-1], dtype=L.dtype))


def cholesky_project(K: Array, B: Array, j0: float) -> Array:
    """A = L⁻¹ B with L = chol(K) [n, n], B [n, k], differentiated by one closed-form rule (see ops); a concrete
    K goes through the eager escalation of :func:`ppl_sparsegp.core.ops.cholesky`."""
    if not ops.is_traced(K):
        return ops.lower_solve(ops.cholesky(K, j0), B)
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
