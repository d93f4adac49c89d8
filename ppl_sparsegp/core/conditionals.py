"""Sparse GP conditionals: q(f(X)) from q(u), for inducing inputs shared by all inputs or chosen per input.

Backend-neutral (jax, torch, numpy) through the array API and :mod:`ppl_sparsegp.core.ops`. The KL terms are in
:mod:`ppl_sparsegp.core.kl`, the collapsed bound and exact-GP formulas in :mod:`ppl_sparsegp.core.bounds`.

Notation (Matthews 2016, thesis ch. 3-5): ``Kmm = K(Z, Z)`` [M, M] with lower Cholesky factor ``Lmm``,
``Kmn = K(Z, X)`` [M, N], ``Knn`` the prior (co)variance at X. q(u) = N(m, S), S = R R^T, one Gaussian per
latent function p = 1..P (``q_mu`` [P, M], ``q_sqrt`` [P, M, M] lower triangular, or [P, M] for a diagonal S).
Whitened: u = Lmm v and the Gaussian is over v, with prior N(0, I).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import ops

Array = Any


UNWHITENED_ADVICE = (
    "The unwhitened conditional multiplies q(u) by Kmm⁻¹: move near-duplicate inducing inputs apart, raise the "
    "jitter, or use the whitened parameterisation (whiten=True)."
)


def project(Lmm: Array, Kmn: Array) -> Array:
    """A = Lmm^{-1} Kmn, shape [M, N] (see :func:`ppl_sparsegp.core.ops.lower_solve`)."""
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
        projection: A = Lmm^{-1} Kmn [M, N] when already formed (e.g. by :func:`ppl_sparsegp.core.ops.cholesky_project`,
            whose gradient is cheaper); None: computed here.

    Returns:
        (mean [P, N], var [P, N]) or (mean [P, N], cov [P, N, N]).

    Warns:
        ConditioningWarning: unwhitened, evaluated eagerly, and Kmm nearly singular
            (:func:`ppl_sparsegp.core.ops.warn_if_ill_conditioned`): q(u) then enters through Kmm⁻¹, which
            magnifies it (near-duplicate inducing inputs can turn a variance of 1 into hundreds).
    """
    xp = ops.namespace(Kmn, Lmm, q_mu)
    if not whiten:
        ops.warn_if_ill_conditioned(Lmm, "Kmm = k(Z, Z)", UNWHITENED_ADVICE)
    A = project(Lmm, Kmn) if projection is None else projection
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
    if q_sqrt is not None and q_sqrt.ndim == 2:  # Σ_m s_pm² B_mn² as one [P, M] @ [M, N] product, no [P, M, N]
        var = var + (q_sqrt * q_sqrt) @ (B * B)
    elif q_sqrt is not None:
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
    Lmm = chol k(Z, Z) (the jitter policy of :func:`ppl_sparsegp.core.ops.cholesky`) and Knn = diag k(X, X) (k(X, X)
    with ``full_cov``). ``kernel(A, B)`` gives the cross-covariance, ``kernel(A)`` the covariance and
    ``kernel.diag(A)`` the variances. The other arguments and the returns are those of :func:`conditional`."""
    Knn = kernel(X) if full_cov else kernel.diag(X)
    Kmm, Kmn = kernel(Z), kernel(Z, X)
    if whiten:  # only A = Lmm⁻¹ Kmn is needed: the fused projection has the cheaper gradient
        A = ops.cholesky_project(Kmm, Kmn)
        return conditional(Kmn, None, Knn, q_mu, q_sqrt, whiten=True, full_cov=full_cov, projection=A)
    return conditional(Kmn, ops.cholesky(Kmm), Knn, q_mu, q_sqrt, whiten=False, full_cov=full_cov)


def _sqrt_times(q_sqrt: Array, B: Array) -> Array:
    """R^T B for every latent function: [P, M, M] or diagonal [P, M] with B [M, N] -> [P, M, N]."""
    if q_sqrt.ndim == 2:
        return q_sqrt[:, :, None] * B
    return ops.matrix_transpose(q_sqrt) @ B


def per_input_conditional(
    Lmm: Array, kmn: Array, knn: Array, q_mu: Array, q_sqrt: Array | None = None, *, whiten: bool = True
) -> tuple[Array, Array]:
    """Marginals of q(f(x_n)) when every input x_n has its own inducing inputs Z_n and its own q(u_n).

    The conditional of :func:`conditional` for one input at a time (IDSGP, Padidar-style per-input inducing
    points; thesis eq 4.24 with N = 1), batched over n: with L_n = chol K(Z_n, Z_n), a_n = L_n⁻¹ k(Z_n, x_n) and,
    whitened, b_n = a_n, or, unwhitened, b_n = L_n⁻ᵀ a_n,

        mean_n = b_nᵀ m_n,   var_n = k(x_n, x_n) - a_nᵀ a_n + |R_nᵀ b_n|².

    The caller evaluates the kernel blocks (e.g. with ``jax.vmap`` over n), so this stays backend-neutral.

    Args:
        Lmm: the lower Cholesky factor L_n of K(Z_n, Z_n) for every input, [N, M, M].
        kmn: k(Z_n, x_n), [N, M].
        knn: k(x_n, x_n), [N].
        q_mu: mean of q(u_n) (of q(v_n) when ``whiten``), [N, M].
        q_sqrt: lower-triangular square root of S_n [N, M, M], its diagonal [N, M], or None (S_n = 0).
        whiten: whether ``q_mu`` and ``q_sqrt`` describe v_n = L_n⁻¹ u_n.

    Returns:
        (mean [N], var [N]).
    """
    xp = ops.namespace(Lmm, kmn, q_mu)
    a = ops.solve_triangular(Lmm, kmn[..., None], lower=True)  # [N, M, 1]
    b = a if whiten else ops.solve_triangular(Lmm, a, lower=True, transpose=True)
    mean = xp.sum(q_mu * b[..., 0], axis=-1)
    var = knn - xp.sum(a[..., 0] * a[..., 0], axis=-1)
    if q_sqrt is not None:
        Rb = q_sqrt * b[..., 0] if q_sqrt.ndim == 2 else (ops.matrix_transpose(q_sqrt) @ b)[..., 0]
        var = var + xp.sum(Rb * Rb, axis=-1)
    return mean, var


def propagate_layer(F: Array, W: Array, mean: Array, var: Array, eps: Array) -> Array:
    """One reparameterised draw of a deep GP's next layer (BSGP Eq. 16; Salimbeni & Deisenroth 2017, Eq. 7)::

        F' = F W + (mean + √max(var, 0) ε)ᵀ

    F [B, D] the layer's inputs, W [D, D'] its fixed linear mean, mean, var [D', B] its marginals at F and
    ε [D', B] standard normal; returns F' [B, D']."""
    xp = ops.namespace(F, mean, var)  # F may be numpy while the marginals are traced (Predictive's vmap)
    return xp.asarray(F) @ xp.asarray(W) + (mean + xp.sqrt(xp.clip(var, min=0.0)) * eps).T
