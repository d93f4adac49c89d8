"""KL divergences between Gaussians over inducing outputs (thesis eq 4.26).

Backend-neutral (jax, torch, numpy) through the array API and :mod:`ppl_sparsegp.core.ops`. The point-process KL
of the selection method is in :mod:`ppl_sparsegp.core.point_processes`.
"""

from __future__ import annotations

from typing import Any

from . import ops

Array = Any


def _trace_logdet_of_q(q_sqrt: Array) -> tuple[Array, Array]:
    """(Σ_p tr S_p, Σ_p log det S_p) for q_sqrt [P, M, M] (lower) or [P, M] (diagonal)."""
    xp = ops.namespace(q_sqrt)
    if q_sqrt.ndim == 2:
        return xp.sum(q_sqrt * q_sqrt), 2.0 * xp.sum(xp.log(xp.abs(q_sqrt)))
    diag = xp.linalg.diagonal(q_sqrt)
    return xp.sum(q_sqrt * q_sqrt), 2.0 * xp.sum(xp.log(xp.abs(diag)))


def kl_qu_pu(q_mu: Array, q_sqrt: Array, Lmm: Array | None = None) -> Array:
    """KL[q(u) || p(u)] summed over the P latent functions (thesis eq 4.26).

    Whitened (``Lmm=None``), p(v) = N(0, I):
    ``KL = ½ Σ_p [tr S_p + m_p^T m_p - M - log det S_p]``.
    Unwhitened, p(u) = N(0, Kmm) with Kmm = Lmm Lmm^T:
    ``KL = ½ Σ_p [tr(Kmm^{-1} S_p) + m_p^T Kmm^{-1} m_p - M + log det Kmm - log det S_p]``.

    Args:
        q_mu: [P, M]; q_sqrt: [P, M, M] lower triangular or [P, M] diagonal; Lmm: [M, M] or None.

    Returns:
        scalar.
    """
    xp = ops.namespace(q_mu, q_sqrt)
    P, M = q_mu.shape
    trace_S, logdet_S = _trace_logdet_of_q(q_sqrt)
    if Lmm is None:
        trace = trace_S
        maha = xp.sum(q_mu * q_mu)
        logdet_K = 0.0
    else:
        alpha = ops.solve_triangular(Lmm, ops.matrix_transpose(q_mu), lower=True)  # [M, P]
        maha = xp.sum(alpha * alpha)
        if q_sqrt.ndim == 2:
            Linv = ops.solve_triangular(Lmm, xp.eye(M, dtype=Lmm.dtype), lower=True)
            trace = xp.sum((Linv * Linv) @ ops.matrix_transpose(q_sqrt * q_sqrt))
        else:
            LinvR = ops.solve_triangular(Lmm, q_sqrt, lower=True)  # [P, M, M]
            trace = xp.sum(LinvR * LinvR)
        logdet_K = P * ops.logdet_from_cholesky(Lmm)
    return 0.5 * (trace + maha - P * M + logdet_K - logdet_S)
