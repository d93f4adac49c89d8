"""Closed-form Gaussian-likelihood results: Titsias' collapsed bound and its optimal q(u), and exact GP regression.

Backend-neutral (jax, torch, numpy) through the array API and :mod:`ppl_sparsegp.core.ops`.
"""

from __future__ import annotations

import math
from typing import Any

from . import ops
from .conditionals import project

Array = Any


def _as_columns(y: Array) -> Array:
    """y [N] -> [N, 1]; y [N, P] unchanged."""
    return y[:, None] if y.ndim == 1 else y


def _collapsed_terms(Kmn: Array, Kmm: Array, y: Array, noise_variance: Array, Lmm: Array | None = None):
    """Shared factorisations of the Titsias bound: Lmm, A = Lmm^{-1} Kmn / σ, L_B, c = L_B^{-1} A y / σ."""
    xp = ops.namespace(Kmn, Kmm)
    sigma = xp.sqrt(xp.asarray(noise_variance, dtype=Kmn.dtype))
    Lmm = ops.cholesky(Kmm) if Lmm is None else Lmm
    A = project(Lmm, Kmn) / sigma
    M = Kmm.shape[-1]
    B = xp.eye(M, dtype=Kmn.dtype) + A @ ops.matrix_transpose(A)
    LB = ops.cholesky(B, jitter=0.0)  # eigenvalues >= 1: no jitter needed (escalation still guards round-off)
    c = ops.solve_triangular(LB, A @ _as_columns(y), lower=True) / sigma  # [M, P]
    return Lmm, A, LB, c, sigma


def sgpr_elbo(
    Kmn: Array, Kmm: Array, Knn_diag: Array, y: Array, noise_variance: Array, *, Lmm: Array | None = None
) -> Array:
    """Titsias' collapsed bound (thesis eq 4.12, trace term over K_DD), summed over output columns.

    ``L = log N(y | 0, σ² I + Q_nn) - Tr(K_nn - Q_nn) / (2σ²)``, Q_nn = Kmn^T Kmm^{-1} Kmn,
    computed through B = I + A A^T (A = Lmm^{-1} Kmn / σ) in O(N M² + M³).

    Args:
        Kmn: [M, N]; Kmm: [M, M]; Knn_diag: [N]; y: [N] or [N, P]; noise_variance: scalar σ².
        Lmm: a Cholesky factor of Kmm computed by the caller (e.g. :func:`ppl_sparsegp.core.masking.
            masked_cholesky`); None: ``ops.cholesky(Kmm)``.

    Returns:
        scalar bound (sum over the P output columns, which share the kernel and the noise).
    """
    xp = ops.namespace(Kmn, Kmm)
    Y = _as_columns(y)
    N, P = Y.shape
    _, A, LB, c, sigma = _collapsed_terms(Kmn, Kmm, y, noise_variance, Lmm)
    sigma2 = sigma * sigma
    log_det = P * (0.5 * ops.logdet_from_cholesky(LB) + 0.5 * N * xp.log(sigma2))
    quad = 0.5 * xp.sum(Y * Y) / sigma2 - 0.5 * xp.sum(c * c)
    trace = P * (0.5 * xp.sum(Knn_diag) / sigma2 - 0.5 * xp.sum(A * A))
    return -0.5 * N * P * math.log(2.0 * math.pi) - log_det - quad - trace


def sgpr_optimal_qu(
    Kmn: Array, Kmm: Array, y: Array, noise_variance: Array, *, whiten: bool = True
) -> tuple[Array, Array]:
    """The optimal q*(u) = N(m, Σ) of the collapsed bound (thesis eqs 5.10-5.13).

    Unwhitened: Δ = (Kmm + σ⁻² Kmn Knm)⁻¹, ``m = σ⁻² Kmm Δ Kmn y``, ``Σ = Kmm Δ Kmm``.
    Whitened (v = Lmm⁻¹ u): ``m_v = L_B^{-T} c`` and ``Σ_v = B⁻¹`` with B = I + A A^T.

    Args:
        Kmn: [M, N]; Kmm: [M, M]; y: [N] or [N, P]; noise_variance: scalar.

    Returns:
        (q_mu [P, M], q_sqrt [P, M, M]): the mean and a lower-triangular square root of the covariance
        (the same for every output column), in whitened or unwhitened coordinates.
    """
    xp = ops.namespace(Kmn, Kmm)
    Lmm, _, LB, c, _ = _collapsed_terms(Kmn, Kmm, y, noise_variance)
    M = Kmm.shape[-1]
    eye = xp.eye(M, dtype=Kmn.dtype)
    mean_v = ops.solve_triangular(LB, c, lower=True, transpose=True)  # [M, P]
    LB_inv_T = ops.solve_triangular(LB, eye, lower=True, transpose=True)  # L_B^{-T}
    cov_v = LB_inv_T @ ops.matrix_transpose(LB_inv_T)
    if whiten:
        mean, cov = mean_v, cov_v
    else:
        mean, cov = Lmm @ mean_v, Lmm @ cov_v @ ops.matrix_transpose(Lmm)
    P = mean.shape[1]
    sqrt = ops.cholesky(cov)
    return ops.matrix_transpose(mean), xp.broadcast_to(sqrt, (P, M, M))


def gaussian_log_marginal(K: Array, y: Array, noise_variance: Array) -> Array:
    """Exact GP regression log marginal likelihood (thesis eqs 6.1-6.8), summed over output columns.

    ``log N(y | 0, K + σ² I) = -½ αᵀα - Σ log diag L - (N/2) log 2π`` with L = chol(K + σ² I), α = L⁻¹ y.

    Args:
        K: [N, N]; y: [N] or [N, P]; noise_variance: scalar.
    """
    xp = ops.namespace(K)
    Y = _as_columns(y)
    N, P = Y.shape
    L = ops.cholesky(K + noise_variance * xp.eye(N, dtype=K.dtype))
    alpha = ops.solve_triangular(L, Y, lower=True)
    return -0.5 * xp.sum(alpha * alpha) - 0.5 * P * ops.logdet_from_cholesky(L) - 0.5 * N * P * math.log(2.0 * math.pi)


def gaussian_posterior_factor(K: Array, y: Array, noise_variance: Array) -> tuple[Array, Array]:
    """What exact GP prediction keeps from the training data (thesis eq 1.24): the lower Cholesky factor L of
    K + σ²I [N, N] and L⁻¹ y [N, P] (y [N] or [N, P]); O(N³) once, for any number of test points."""
    xp = ops.namespace(K)
    L = ops.cholesky(K + noise_variance * xp.eye(K.shape[-1], dtype=K.dtype))
    return L, ops.solve_triangular(L, _as_columns(y), lower=True)


def gaussian_posterior(
    K: Array,
    Ksn: Array,
    Kss: Array,
    y: Array,
    noise_variance: Array,
    *,
    full_cov: bool = False,
    factor: tuple[Array, Array] | None = None,
) -> tuple[Array, Array]:
    """Exact GP regression posterior of f at new inputs (thesis eq 1.24).

    ``mean = K_sn (K + σ²I)⁻¹ y``, ``cov = K_ss - K_sn (K + σ²I)⁻¹ K_ns``.

    Args:
        K: K(X, X) [N, N]; Ksn: K(X*, X) [S, N]; Kss: diag [S] or full [S, S]; y: [N] or [N, P].
        factor: :func:`gaussian_posterior_factor` of (K, y, noise_variance) when already formed (then K, y and the
            noise are not read); None: formed here.

    Returns:
        mean [P, S] and variance [S] (or covariance [S, S]), shared by the P output columns.
    """
    xp = ops.namespace(Ksn)
    L, alpha = gaussian_posterior_factor(K, y, noise_variance) if factor is None else factor
    V = ops.solve_triangular(L, ops.matrix_transpose(Ksn), lower=True)  # [N, S]
    mean = ops.matrix_transpose(V) @ alpha
    cov = Kss - ops.matrix_transpose(V) @ V if full_cov else Kss - xp.sum(V * V, axis=0)
    return ops.matrix_transpose(mean), cov
