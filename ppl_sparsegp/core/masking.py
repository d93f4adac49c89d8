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

Backend-neutral (jax, torch, numpy) through the array API, like :mod:`ppl_sparsegp.core.conditionals`.
"""

from __future__ import annotations

from typing import Any

from . import ops

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
