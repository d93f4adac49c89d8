"""Sparse GP algebra: conditionals q(f(X)) from q(u), KL(q(u) || p(u)), and the Titsias collapsed bound.

Backend-neutral (jax, torch, numpy) through the array API and :mod:`ppl_sparsegp.ops`.

Notation (Matthews 2016, thesis ch. 3-5): ``Kmm = K(Z, Z)`` [M, M] with lower Cholesky factor ``Lmm``,
``Kmn = K(Z, X)`` [M, N], ``Knn`` the prior (co)variance at X. q(u) = N(m, S), S = R R^T, one Gaussian per
latent function p = 1..P (``q_mu`` [P, M], ``q_sqrt`` [P, M, M] lower triangular, or [P, M] for a diagonal S).
Whitened: u = Lmm v and the Gaussian is over v, with prior N(0, I).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from . import ops

Array = Any


def _project(Lmm: Array, Kmn: Array) -> Array:
    """A = Lmm^{-1} Kmn, shape [M, N] (see :func:`ppl_sparsegp.ops.lower_solve`)."""
    return ops.lower_solve(Lmm, Kmn)


def conditional(
    Kmn: Array,
    Lmm: Array,
    Knn: Array,
    q_mu: Array,
    q_sqrt: Array | None = None,
    *,
    whiten: bool = True,
    full_cov: bool = False,
    projection: Array | None = None,
) -> tuple[Array, Array]:
    """Marginals of q(f(X)) = ∫ p(f(X) | u) q(u) du (thesis eq 4.24, whitened form eq 5.26).

    With A = Lmm^{-1} Kmn and, whitened, B = A, or, unwhitened, B = Kmm^{-1} Kmn:
    ``mean = B^T m`` and ``cov = Knn - A^T A + B^T S B``.
    ``q_sqrt=None`` gives the conditional p(f(X) | u = m) of a fixed u (S = 0), which is the
    "variational potential" conditional used by SGPMC.

    Args:
        Kmn: K(Z, X), [M, N].
        Lmm: lower Cholesky factor of K(Z, Z), [M, M]; may be None when ``projection`` is given and ``whiten``.
        Knn: prior variances diag K(X, X) [N] (``full_cov=False``) or the full K(X, X) [N, N].
        q_mu: mean of q(u) (or of q(v) when ``whiten``), [P, M].
        q_sqrt: lower-triangular square root of S [P, M, M], its diagonal [P, M], or None.
        whiten: whether ``q_mu``, ``q_sqrt`` describe v = Lmm^{-1} u.
        full_cov: return the full covariance over X instead of the marginal variances.
        projection: A = Lmm^{-1} Kmn [M, N] when already formed (e.g. by :func:`ppl_sparsegp.ops.cholesky_project`,
            whose gradient is cheaper); None: computed here.

    Returns:
        (mean [P, N], var [P, N]) or (mean [P, N], cov [P, N, N]).
    """
    xp = ops.namespace(Kmn, Lmm, q_mu)
    A = _project(Lmm, Kmn) if projection is None else projection
    B = A if whiten else ops.solve_triangular(Lmm, A, lower=True, transpose=True)
    mean = q_mu @ B
    if full_cov:
        cov = Knn - ops.matrix_transpose(A) @ A
        cov = xp.broadcast_to(cov, (q_mu.shape[0], *cov.shape))
        if q_sqrt is not None:
            RB = _sqrt_times(q_sqrt, B)
            cov = cov + ops.matrix_transpose(RB) @ RB
        return mean, cov
    var = Knn - xp.sum(A * A, axis=-2)
    var = xp.broadcast_to(var, mean.shape)
    if q_sqrt is not None:
        RB = _sqrt_times(q_sqrt, B)
        var = var + xp.sum(RB * RB, axis=-2)
    return mean, var


def inducing_conditional(
    kernel: Callable[..., Array],
    Z: Array,
    X: Array,
    q_mu: Array,
    q_sqrt: Array | None = None,
    *,
    whiten: bool = True,
    full_cov: bool = False,
) -> tuple[Array, Array]:
    """q(f(X)) from a kernel and inducing inputs Z [M, D] at X [N, D]: :func:`conditional` with Kmn = k(Z, X),
    Lmm = chol k(Z, Z) (the jitter policy of :func:`ppl_sparsegp.ops.cholesky`) and Knn = diag k(X, X) (k(X, X)
    with ``full_cov``). ``kernel(A, B)`` gives the cross-covariance, ``kernel(A)`` the covariance and
    ``kernel.diag(A)`` the variances. The other arguments and the returns are those of :func:`conditional`."""
    Knn = kernel(X) if full_cov else kernel.diag(X)
    Lmm = ops.cholesky(kernel(Z))
    return conditional(kernel(Z, X), Lmm, Knn, q_mu, q_sqrt, whiten=whiten, full_cov=full_cov)


def _sqrt_times(q_sqrt: Array, B: Array) -> Array:
    """R^T B for every latent function: [P, M, M] or diagonal [P, M] with B [M, N] -> [P, M, N]."""
    if q_sqrt.ndim == 2:
        return q_sqrt[:, :, None] * B
    return ops.matrix_transpose(q_sqrt) @ B


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


def _as_columns(y: Array) -> Array:
    """y [N] -> [N, 1]; y [N, P] unchanged."""
    return y[:, None] if y.ndim == 1 else y


def _collapsed_terms(Kmn: Array, Kmm: Array, y: Array, noise_variance: Array, Lmm: Array | None = None):
    """Shared factorisations of the Titsias bound: Lmm, A = Lmm^{-1} Kmn / σ, L_B, c = L_B^{-1} A y / σ."""
    xp = ops.namespace(Kmn, Kmm)
    sigma = xp.sqrt(xp.asarray(noise_variance, dtype=Kmn.dtype))
    Lmm = ops.cholesky(Kmm) if Lmm is None else Lmm
    A = _project(Lmm, Kmn) / sigma
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
        Lmm: a Cholesky factor of Kmm computed by the caller (e.g. :func:`ppl_sparsegp.inducing.masking.
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


def gaussian_posterior(
    K: Array, Ksn: Array, Kss: Array, y: Array, noise_variance: Array, *, full_cov: bool = False
) -> tuple[Array, Array]:
    """Exact GP regression posterior of f at new inputs (thesis eq 1.24).

    ``mean = K_sn (K + σ²I)⁻¹ y``, ``cov = K_ss - K_sn (K + σ²I)⁻¹ K_ns``.

    Args:
        K: K(X, X) [N, N]; Ksn: K(X*, X) [S, N]; Kss: diag [S] or full [S, S]; y: [N] or [N, P].

    Returns:
        mean [P, S] and variance [S] (or covariance [S, S]), shared by the P output columns.
    """
    xp = ops.namespace(K)
    N = K.shape[-1]
    L = ops.cholesky(K + noise_variance * xp.eye(N, dtype=K.dtype))
    V = ops.solve_triangular(L, ops.matrix_transpose(Ksn), lower=True)  # [N, S]
    alpha = ops.solve_triangular(L, _as_columns(y), lower=True)  # [N, P]
    mean = ops.matrix_transpose(V) @ alpha
    cov = Kss - ops.matrix_transpose(V) @ V if full_cov else Kss - xp.sum(V * V, axis=0)
    return ops.matrix_transpose(mean), cov
