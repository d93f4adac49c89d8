"""Sparse GP algebra for a subset of K candidate inducing inputs chosen by a binary mask, at fixed shapes.

Uhrenholt, Charvet & Jensen (UAI 2021), App. B.1: evaluate the bound on all K candidates under a GP in which the
excluded inducing outputs are decoupled from everything. With a mask b ∈ {0,1}^K (float 0/1) and the included
index set I = {k : b_k = 1}:

    K̂_mm = b bᵀ ⊙ K_mm + diag(1 − b),        K̂_mn = b ⊙ K_mn  (rows of excluded candidates zeroed),
    m̃    = b ⊙ m,                            S̃    = b bᵀ ⊙ S + diag(1 − b)   (spec §3.3, uncollapsed form).

Excluded outputs are then independent N(0, 1) under both the prior and q, so they add nothing to
KL[q(u) ‖ p(u)], nothing to q(f) (their rows of K̂_mn are zero), and nothing to the collapsed bound. Every
quantity equals the one computed on the sub-vector m_I, sub-blocks K_II, S_II and rows K_In: the subset bound of
the paper (Eq. 1 with Z = Z*_I), while arrays keep the fixed shapes [K], [K, K] that ``jit`` and ``vmap`` need.
The price is O(K³) per mask instead of O(|I|³).

Jitter: :func:`masked_cholesky` adds the relative jitter of :mod:`ppl_sparsegp.core.ops` scaled by the mean diagonal
of the **included** block, mean_{k∈I} K_kk, to the included diagonal only, so its factor of the included block is
exactly ``ops.cholesky(K_II)``; the collapsed bound's second factor, of B = I + A Aᵀ, takes no jitter. The masked
and the direct subset bounds therefore agree to round-off.

The selective models evaluate their bound L(s) with :func:`masked_conditional` (uncollapsed: q(f) of the sparse GP on
the selected candidates, from one unwhitened q(u) over all K restricted by :func:`masked_q`) or
:func:`masked_sgpr_elbo` (collapsed: Titsias' bound of the selected candidates); :func:`subset_q` is what pruning
keeps.

Backend-neutral (jax, torch, numpy) through the array API, like :mod:`ppl_sparsegp.core.conditionals`.
"""

from __future__ import annotations

from typing import Any

from . import bounds, conditionals, ops

Array = Any


def masked_cholesky(A: Array, mask: Array) -> Array:
    """Lower Cholesky factor of b bᵀ ⊙ A + diag(1 − b), jittered like ``ops.cholesky`` of the included block.

    Args:
        A: a symmetric positive-definite matrix over the K candidates, [K, K] (e.g. K(Z*, Z*)).
        mask: inclusion mask b [K] of 0/1 values (same dtype as ``A``).

    Returns:
        L [K, K] lower triangular: its included block (rows and columns in I) is the jittered Cholesky factor of
        A_II, its excluded diagonal is 1 and every other excluded entry 0.
    """
    xp = ops.namespace(A, mask)
    diag = xp.linalg.diagonal(A)
    count = xp.sum(mask)
    included_scale = xp.sum(mask * diag) / xp.maximum(count, xp.asarray(1.0, dtype=A.dtype))
    jitter = ops.base_jitter(A) * ops.stop_gradient(included_scale)  # held constant, as in ops.cholesky
    masked = mask[:, None] * A * mask[None, :]
    eye = xp.eye(A.shape[-1], dtype=A.dtype)
    return ops.cholesky(masked + eye * (1.0 - mask + jitter * mask)[None, :], jitter=0.0)


def masked_mean(q_mu: Array, mask: Array) -> Array:
    """m̃ = b ⊙ m: q_mu [P, K] -> [P, K] with excluded entries 0."""
    return q_mu * mask


def masked_scale(q_sqrt: Array, mask: Array) -> Array:
    """A square root of S̃ = b bᵀ ⊙ S + diag(1 − b) for each latent function.

    Args:
        q_sqrt: lower-triangular R [P, K, K] with S = R Rᵀ, or the diagonal [P, K] of a mean-field q.
        mask: b [K].

    Returns:
        [P, K, K] lower triangular (the Cholesky factor of S̃, whose included block is that of S_II, the
        marginal covariance of u_I), or [P, K] (diagonal: b ⊙ R + (1 − b)).
    """
    if q_sqrt.ndim == 2:
        return q_sqrt * mask + (1.0 - mask)
    xp = ops.namespace(q_sqrt, mask)
    S = q_sqrt @ ops.matrix_transpose(q_sqrt)
    masked = mask[:, None] * S * mask[None, :]
    eye = xp.eye(q_sqrt.shape[-1], dtype=q_sqrt.dtype)
    return ops.cholesky(masked + eye * (1.0 - mask)[None, :], jitter=0.0)


def masked_q(q_mu: Array, q_sqrt: Array, mask: Array) -> tuple[Array, Array]:
    """q(u) over all K candidates restricted to those in ``mask``: (:func:`masked_mean`, :func:`masked_scale`).

    Args:
        q_mu: m [P, K]; q_sqrt: lower-triangular R [P, K, K] (S = R Rᵀ) or the diagonal [P, K] of a mean-field q.
        mask: b [K].

    Returns:
        (m̃ [P, K], the square root of S̃ [P, K, K] or [P, K]): the marginal q(u_I) on the included entries,
        independent N(0, 1) on the excluded ones.
    """
    return masked_mean(q_mu, mask), masked_scale(q_sqrt, mask)


def masked_conditional(
    Kmn: Array,
    Lmm: Array,
    Knn: Array,
    mask: Array,
    q_mu: Array,
    q_sqrt: Array | None = None,
    *,
    full_cov: bool = False,
) -> tuple[Array, Array]:
    """q(f(X)) of the sparse GP whose inducing inputs are the candidates in ``mask``, at fixed shapes.

    Equals :func:`ppl_sparsegp.core.conditionals.conditional` (unwhitened) of the selected candidates alone, with
    K_In, chol K_II, m_I and S_II (the subset bound's q(f), paper Eq. 1 with Z = Z*_I): the excluded rows of Kmn
    are zeroed here, so the excluded entries of ``q_mu`` and ``q_sqrt`` do not matter.

    Args:
        Kmn: K(Z*, X) over all K candidates, [K, N].
        Lmm: :func:`masked_cholesky` of K(Z*, Z*) and ``mask``, [K, K].
        Knn: prior variances diag K(X, X) [N] (or K(X, X) [N, N] with ``full_cov``).
        mask: b [K] (0/1, the dtype of Kmn).
        q_mu, q_sqrt: q(u) over the candidates as :func:`masked_q` restricts it (m̃ [P, K]; [P, K, K] or [P, K]),
            or a draw u [P, K] of that q with ``q_sqrt=None`` (the conditional given u).
        full_cov: the full covariance over X instead of the marginal variances.

    Returns:
        (mean [P, N], var [P, N]) or (mean [P, N], cov [P, N, N]).
    """
    return conditionals.conditional(mask[:, None] * Kmn, Lmm, Knn, q_mu, q_sqrt, whiten=False, full_cov=full_cov)


def masked_sgpr_elbo(Kmn: Array, Kmm: Array, Knn_diag: Array, y: Array, noise_variance: Array, mask: Array) -> Array:
    """Titsias' collapsed bound (:func:`ppl_sparsegp.core.bounds.sgpr_elbo`) of the candidates in ``mask`` alone,
    at fixed shapes; with an empty mask, the prior-only bound log N(y | 0, σ² I) − Tr(K_nn) / (2σ²).

    Args:
        Kmn: K(Z*, X) [K, N]; Kmm: K(Z*, Z*) [K, K]; Knn_diag: [N]; y: [N] or [N, P]; noise_variance: σ²;
        mask: b [K] (0/1, the dtype of Kmm).

    Returns:
        The bound (scalar).
    """
    Lmm = masked_cholesky(Kmm, mask)
    return bounds.sgpr_elbo(mask[:, None] * Kmn, Kmm, Knn_diag, y, noise_variance, Lmm=Lmm)


def subset_q(q_mu: Array, q_sqrt: Array, index: Array) -> tuple[Array, Array]:
    """The marginal q(u_I) = N(m_I, S_II) of the candidates ``index`` (what pruning keeps; Gaussian marginalisation).

    Args:
        q_mu: m [P, K]; q_sqrt: lower-triangular R [P, K, K] (S = R Rᵀ) or the diagonal [P, K] of a mean-field q.
        index: integer indices I [M] of the kept candidates.

    Returns:
        (m_I [P, M], the Cholesky factor of S_II [P, M, M], or the kept diagonal [P, M]).
    """
    if q_sqrt.ndim == 2:
        return q_mu[:, index], q_sqrt[:, index]
    S = q_sqrt @ ops.matrix_transpose(q_sqrt)
    return q_mu[:, index], ops.cholesky(S[:, index][:, :, index], jitter=0.0)
