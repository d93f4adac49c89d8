"""Point-process log densities over inducing inputs, and the KL of independent inclusions to a subset prior.

Backend-neutral (jax, torch, numpy) through the array API and :mod:`ppl_sparsegp.core.ops`; the NumPyro
distributions built on them are in :mod:`ppl_sparsegp.numpyro.subset_prior` and :mod:`ppl_sparsegp.numpyro.z_priors`.

**Subsets of K candidates** (Uhrenholt, Charvet & Jensen, UAI 2021; spec 000 §2). A subset S is a float 0/1 mask
s [..., K], |S| = Σ_k s_k. The prior and the variational family are::

    p_α(S) = C · exp(−α |S|²),   C = 1 / Σ_{n=0}^{K} binom(K, n) exp(−α n²)           (paper §3; spec §2.2)
    q_λ(s) = Π_k λ_k^{s_k} (1 − λ_k)^{1 − s_k}                                            (paper §3; spec §2.3)
    KL[q_λ ‖ p_α] = α (Var|S| + (E|S|)²) − log C − H(λ)                                    (paper Eq. 4, spec §2.6)

with E|S| = Σ λ_k, Var|S| = Σ λ_k (1 − λ_k) and H the Bernoulli entropy. ``log C`` is negative (K = 80, α = 0.05:
−26.96, spec §2.2), and the sum starts at n = 0 because the empty mask is in the support (spec erratum 3).

**Sets of M inducing inputs Z [M, D]** (BSGP, Rossi et al. 2021, Eqs. 8-9), unnormalised::

    dpp       log p(Z) = log det K_zz
    strauss   log p(Z) = M log β + S_R(Z) log γ,   S_R(Z) = #{i < j : |z_i − z_j| <= R}

The hard Strauss count is piecewise constant (zero gradient almost everywhere); ``smoothness=s`` replaces each
indicator by sigmoid((R − d_ij) / s), which is not the paper's prior but repels under gradient samplers.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from . import ops

Array = Any


def check_num_candidates(num_candidates: Any) -> int:
    """K, the number of candidates of a subset prior: a positive int, else ValueError naming ``num_candidates``."""
    if isinstance(num_candidates, bool) or not isinstance(num_candidates, numbers.Integral) or num_candidates < 1:
        raise ValueError(f"num_candidates must be a positive int (K, the number of candidates), got {num_candidates!r}")
    return int(num_candidates)


def inclusion_entropy(probs: Array) -> Array:
    """H(λ) = Σ_k −λ_k log λ_k − (1 − λ_k) log(1 − λ_k): λ [..., K] -> [...].

    Terms at λ_k ∈ {0, 1} are exactly 0 and have finite gradients."""
    xp = ops.namespace(probs)
    inside = (probs > 0) & (probs < 1)
    safe = xp.where(inside, probs, 0.5 + 0.0 * probs)
    terms = -(safe * xp.log(safe) + (1 - safe) * xp.log1p(-safe))
    return xp.sum(xp.where(inside, terms, 0.0 * terms), axis=-1)


def inclusion_log_prob(probs: Array, mask: Array) -> Array:
    """log q_λ(s) = Σ_k [s_k log λ_k + (1 − s_k) log(1 − λ_k)]: λ [..., K], s [..., K] -> [...].

    A term whose coefficient is 0 contributes 0 even where its logarithm is −∞ (as ``xlogy``)."""
    xp = ops.namespace(probs, mask)
    present = xp.where(mask > 0, probs, 1.0 + 0.0 * probs)
    absent = xp.where(mask < 1, probs, 0.0 * probs)
    return xp.sum(mask * xp.log(present) + (1 - mask) * xp.log1p(-absent), axis=-1)


def subset_size_log_probs(num_candidates: int, alpha: Array) -> tuple[Array, Array]:
    """(log P(|S| = n) for n = 0..K [K + 1], log C) under p_α: log binom(K, n) − α n² + log C.

    ``alpha`` is a scalar array (its backend and dtype are used)."""
    xp = ops.namespace(alpha)
    K = num_candidates
    n = xp.arange(K + 1, dtype=alpha.dtype)
    log_binom = ops.gammaln(n * 0.0 + (K + 1.0)) - ops.gammaln(n + 1.0) - ops.gammaln(K - n + 1.0)
    unnormalised = log_binom - alpha * n**2
    log_c = -ops.logsumexp(unnormalised, axis=-1)
    return unnormalised + log_c, log_c


def subset_prior_log_prob(mask: Array, alpha: Array, log_c: Array) -> Array:
    """log p_α(s) = −α |S|² + log C: masks [..., K] -> [...]."""
    size = ops.namespace(mask).sum(mask, axis=-1)
    return -alpha * size**2 + log_c


def kl_inclusion_subset_prior(probs: Array, alpha: Array, log_c: Array) -> Array:
    """KL[q_λ ‖ p_α] = α (Var|S| + (E|S|)²) − log C − H(λ): λ [..., K] -> [...] (paper Eq. 4, entropy corrected).

    Its gradient is ∂KL/∂λ_k = α (1 − 2 λ_k + 2 E|S|) + log(λ_k / (1 − λ_k)) (spec §2.6)."""
    xp = ops.namespace(probs)
    expected = xp.sum(probs, axis=-1)
    variance = xp.sum(probs * (1 - probs), axis=-1)
    return alpha * (variance + expected**2) - log_c - inclusion_entropy(probs)


def no_signal_inclusion_probability(num_candidates: int, alpha: float) -> float:
    """The common λ* at which KL[q_λ ‖ p_α] alone is stationary (no data signal), as a Python float.

    With every λ_k = λ, d/dλ KL = K [α (1 − 2λ + 2Kλ) + logit λ], so λ* solves logit λ = −α (1 + 2 (K − 1) λ)
    (spec §2.6). The left side increases from −∞ to ∞ and the right side does not increase, so the root is
    unique; in r = logit λ it lies in [−α (2K − 1), −α], which Brent's method brackets. For α <= 2 the KL is
    strictly convex in λ (Hessian diag(1 / (λ_k (1 − λ_k)) − 2α) + 2α 11ᵀ), so λ* is then its unique minimiser.
    K = 80, α = 0.05 gives 0.183; α = 0 gives 0.5.

    Args:
        num_candidates: K >= 1.
        alpha: the prior strength α >= 0.
    """
    K = check_num_candidates(num_candidates)
    a = np.asarray(alpha)
    if a.ndim != 0 or a.dtype.kind not in "fiu" or not np.isfinite(a) or a < 0:
        raise ValueError(f"alpha must be a finite real scalar >= 0 (the prior strength), got {alpha!r}")
    from scipy.optimize import brentq  # scipy on first use: importing the core stays light
    from scipy.special import expit

    a = float(a)
    lo, hi = -a * (2 * K - 1), -a
    if lo == hi:
        return float(expit(hi))

    def stationarity(r: float) -> float:
        return r + a * (1 + 2 * (K - 1) * expit(r))

    root = brentq(stationarity, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    return float(expit(root))


def normal_log_density(Z: Array, scale: float) -> Array:
    """Σ_{j,d} log N(Z_jd | 0, scale²) (BSGP Eq. 7, normalised; scale 1 in the paper): Z [..., M, D] -> [...]."""
    xp = ops.namespace(Z)
    size = Z.shape[-2] * Z.shape[-1]
    maha = xp.sum((Z / scale) ** 2, axis=(-2, -1))
    return -0.5 * maha - size * (math.log(scale) + 0.5 * math.log(2.0 * math.pi))


def dpp_log_density(Kzz: Array) -> Array:
    """log det K_zz (BSGP Eq. 8, unnormalised), K_zz [..., M, M] -> [...], through the jitter policy of
    :func:`ppl_sparsegp.core.ops.cholesky`."""
    return ops.logdet_from_cholesky(ops.cholesky(Kzz))


def strauss_pair_count(Z: Array, radius: float, smoothness: float | None = None) -> Array:
    """S_R(Z) for Z [..., M, D] -> [...]: the number of pairs i < j with d_ij <= R, or with ``smoothness`` the
    sum of sigmoid((R − d_ij) / smoothness). d_ij = sqrt(max(d_ij², tiny)) keeps gradients finite where points
    coincide."""
    xp = ops.namespace(Z)
    diff = Z[..., :, None, :] - Z[..., None, :, :]
    d = xp.sqrt(xp.clip(xp.sum(diff * diff, axis=-1), min=float(xp.finfo(Z.dtype).tiny)))
    index = xp.arange(Z.shape[-2])
    upper = index[:, None] < index[None, :]
    if smoothness is None:
        terms = xp.astype(upper & (d <= radius), Z.dtype)
    else:
        terms = xp.where(upper, xp.exp(ops.log_sigmoid((radius - d) / smoothness)), 0.0 * d)
    return xp.sum(terms, axis=(-2, -1))


def strauss_log_density(Z: Array, beta: float, gamma: float, radius: float, smoothness: float | None = None) -> Array:
    """M log β + S_R(Z) log γ (BSGP Eq. 9, unnormalised): Z [..., M, D] -> [...]."""
    return Z.shape[-2] * math.log(beta) + strauss_pair_count(Z, radius, smoothness) * math.log(gamma)
