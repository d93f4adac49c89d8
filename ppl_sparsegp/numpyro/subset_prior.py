"""NumPyro distributions over subsets of K candidate inducing inputs (Uhrenholt, Charvet & Jensen, UAI 2021).

The densities and the KL are the backend-neutral functions of :mod:`ppl_sparsegp.core.point_processes`, compiled
here with ``jax.jit``; this module adds the samplers and NumPyro's distribution interface.

A subset S of the candidates Z* = {z_1, ..., z_K} is written as a binary inclusion mask s ∈ {0,1}^K, with
|S| = Σ_k s_k. Every mask here has event shape [K]; samples are **float 0/1 arrays** (the dtype of the parameters),
not integers or booleans, so that ``mask * x``, ``mask @ A`` and the score ``s − λ`` need no casts.

Prior (paper §3, unnumbered equation above Eq. 4; spec §2.2), :class:`SubsetPointProcess`::

    p_α(S) = C · exp(−α |S|²),        C = 1 / Σ_{n=0}^{K} binom(K, n) exp(−α n²),   α ≥ 0 fixed.

C is the spec's (and the paper's) normalising constant, so ``log C`` is **negative**: K = 80, α = 0.05 gives
log C = −26.96 (spec §2.2 table). The sum runs over n = 0..K because the empty mask is in the support (the paper
starts at n = 1: spec erratum 3). The size |S| has pmf P(|S| = n) = C · binom(K, n) · exp(−α n²); given its size,
the subset is uniform.

Variational posterior (paper §3, spec §2.3), :class:`IndependentInclusion`: independent Bernoulli inclusions::

    q_λ(s) = Π_k λ_k^{s_k} (1 − λ_k)^{1 − s_k},   E|S| = Σ_k λ_k,   Var|S| = Σ_k λ_k (1 − λ_k).

KL in closed form (paper Eq. 4 with the entropy typo corrected, spec §2.6), :func:`kl_inclusion_point_process`,
registered with NumPyro's ``kl_divergence`` so that ``TraceMeanField_ELBO`` uses it::

    KL[q_λ ‖ p_α] = CE(λ, α) − H(λ) = α (Var|S| + (E|S|)²) − log C − H(λ),
    H(λ) = −Σ_k [λ_k log λ_k + (1 − λ_k) log(1 − λ_k)].

Its gradient is ∂KL/∂λ_k = α (1 − 2 λ_k + 2 E|S|) + log(λ_k / (1 − λ_k)) (spec §2.6).

Without a data signal each λ_k settles where that gradient vanishes;
:func:`ppl_sparsegp.core.point_processes.no_signal_inclusion_probability` solves for the common value (e.g.
K = 80, α = 0.05 → λ* = 0.183).

Shapes: masks [..., K]; ``probs`` λ [..., K] (leading axes are the guide's batch shape); α a scalar;
``size_log_probs()`` [K + 1]; ``log_prob`` and the KL drop the last axis.

Constructors check their arguments eagerly and raise ``ValueError`` naming the argument. Values that are jax
tracers (inside ``jit``/``grad``) are only checked for their shapes. The arithmetic lives in small jitted pure
functions, so each shape is compiled once instead of op by op.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.kl import kl_divergence
from numpyro.distributions.util import validate_sample

from ppl_sparsegp.core import point_processes
from ppl_sparsegp.core.point_processes import no_signal_inclusion_probability

Array = Any

_MASK_SUPPORT = constraints.independent(constraints.boolean, 1)


def _check_alpha(alpha: Any) -> Array:
    if isinstance(alpha, jax.core.Tracer):
        if jnp.ndim(alpha) != 0:
            raise ValueError(f"alpha must be a scalar, got shape {jnp.shape(alpha)}")
        return alpha
    a = np.asarray(alpha)
    if a.ndim != 0 or a.dtype.kind not in "fiu" or not np.isfinite(a) or a < 0:
        raise ValueError(f"alpha must be a finite real scalar >= 0 (the prior strength), got {alpha!r}")
    return jnp.asarray(alpha, dtype=jnp.result_type(float))


def _check_probs(probs: Any) -> Array:
    if isinstance(probs, jax.core.Tracer):
        if jnp.ndim(probs) < 1:
            raise ValueError(f"probs must have at least one axis [..., K], got shape {jnp.shape(probs)}")
        return probs
    p = np.asarray(probs)
    if p.ndim < 1 or p.shape[-1] < 1:
        raise ValueError(f"probs must be an array [..., K] with K >= 1, got shape {p.shape}")
    if p.dtype.kind not in "fiu" or not np.all(np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise ValueError("probs must hold inclusion probabilities in [0, 1], got values outside [0, 1] or non-finite")
    return jnp.asarray(probs, dtype=jnp.result_type(p.dtype, float))


def _check_mask_shape(value: Array, num_candidates: int) -> None:
    if jnp.shape(value)[-1:] != (num_candidates,):
        raise ValueError(f"mask must have shape [..., {num_candidates}], got shape {jnp.shape(value)}")


_entropy = jax.jit(point_processes.inclusion_entropy)
_inclusion_log_prob = jax.jit(point_processes.inclusion_log_prob)
_size_log_probs = jax.jit(point_processes.subset_size_log_probs, static_argnums=0)
_prior_log_prob = jax.jit(point_processes.subset_prior_log_prob)
_kl = jax.jit(point_processes.kl_inclusion_subset_prior)


def _uniform(key: Array, shape: tuple[int, ...], dtype: Any) -> Array:
    """Uniform [0, 1) draws of ``shape``, generated flat (XLA compiles multi-axis threefry draws slowly on CPU)."""
    return jax.random.uniform(key, (math.prod(shape),), dtype=dtype).reshape(shape)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _sample_subsets(key: Array, size_log_probs: Array, sample_shape: tuple[int, ...], num_candidates: int) -> Array:
    size_key, subset_key = jax.random.split(key)
    num_draws = math.prod(sample_shape)
    sizes = jax.random.categorical(size_key, size_log_probs, shape=(num_draws,)).reshape(sample_shape)
    scores = _uniform(subset_key, (*sample_shape, num_candidates), size_log_probs.dtype)
    ranks = jnp.argsort(jnp.argsort(scores, axis=-1), axis=-1)
    return (ranks < sizes[..., None]).astype(size_log_probs.dtype)


@functools.partial(jax.jit, static_argnums=2)
def _sample_inclusions(key: Array, probs: Array, shape: tuple[int, ...]) -> Array:
    return (_uniform(key, shape, probs.dtype) < probs).astype(probs.dtype)


class SubsetPointProcess(dist.Distribution):
    """Prior p_α(S) = C · exp(−α |S|²) over inclusion masks s ∈ {0,1}^K, event shape [K].

    Args:
        num_candidates: K >= 1.
        alpha: the prior strength α >= 0 (a scalar; fixed, not learned, in the paper).
    """

    arg_constraints = {"alpha": constraints.nonnegative}
    support = _MASK_SUPPORT
    has_enumerate_support = False
    pytree_data_fields = ("alpha",)
    pytree_aux_fields = ("num_candidates",)

    def __init__(self, num_candidates: int, alpha: float | Array, *, validate_args: bool | None = None):
        self.num_candidates = point_processes.check_num_candidates(num_candidates)
        self.alpha = _check_alpha(alpha)
        super().__init__(batch_shape=(), event_shape=(self.num_candidates,), validate_args=validate_args)

    @property
    def log_normalizer(self) -> Array:
        """log C = −log Σ_{n=0}^{K} binom(K, n) exp(−α n²), a scalar <= 0 (logsumexp over the K + 1 sizes)."""
        return _size_log_probs(self.num_candidates, self.alpha)[1]

    def size_log_probs(self) -> Array:
        """log P(|S| = n) = log binom(K, n) − α n² + log C for n = 0..K -> [K + 1]."""
        return _size_log_probs(self.num_candidates, self.alpha)[0]

    def sample(self, key: Array, sample_shape: tuple[int, ...] = ()) -> Array:
        """Masks [*sample_shape, K] of float 0/1: the size n from its marginal, then a uniform subset of size n.

        The subset is the candidates whose ranks in a uniformly random permutation are below n.
        """
        return _sample_subsets(key, self.size_log_probs(), tuple(sample_shape), self.num_candidates)

    @validate_sample
    def log_prob(self, value: Array) -> Array:
        """log p_α(s) = −α |S|² + log C for masks [..., K] -> [...]."""
        _check_mask_shape(value, self.num_candidates)
        return _prior_log_prob(value, self.alpha, self.log_normalizer)


class IndependentInclusion(dist.Distribution):
    """Guide q_λ(s) = Π_k Bernoulli(s_k | λ_k) over masks, event shape [K], batch shape ``probs.shape[:-1]``.

    Args:
        probs: inclusion probabilities λ [..., K] in [0, 1] (typically sigmoid of free logits).
    """

    arg_constraints = {"probs": constraints.unit_interval}
    support = _MASK_SUPPORT
    has_enumerate_support = False

    def __init__(self, probs: Array, *, validate_args: bool | None = None):
        self.probs = _check_probs(probs)
        shape = jnp.shape(self.probs)
        super().__init__(batch_shape=shape[:-1], event_shape=shape[-1:], validate_args=validate_args)

    @property
    def mean(self) -> Array:
        """E[s] = λ [..., K]."""
        return self.probs

    @property
    def variance(self) -> Array:
        """Var[s_k] = λ_k (1 − λ_k) [..., K]."""
        return self.probs * (1 - self.probs)

    @property
    def expected_count(self) -> Array:
        """E|S| = Σ_k λ_k [...]."""
        return jnp.sum(self.probs, axis=-1)

    @property
    def count_variance(self) -> Array:
        """Var|S| = Σ_k λ_k (1 − λ_k) [...] (|S| is Poisson-binomial)."""
        return jnp.sum(self.variance, axis=-1)

    def entropy(self) -> Array:
        """H(λ) = −Σ_k [λ_k log λ_k + (1 − λ_k) log(1 − λ_k)] [...]."""
        return _entropy(self.probs)

    def sample(self, key: Array, sample_shape: tuple[int, ...] = ()) -> Array:
        """Masks [*sample_shape, ..., K] of float 0/1 (the dtype of ``probs``)."""
        return _sample_inclusions(key, self.probs, tuple(sample_shape) + self.batch_shape + self.event_shape)

    @validate_sample
    def log_prob(self, value: Array) -> Array:
        """log q_λ(s) = Σ_k [s_k log λ_k + (1 − s_k) log(1 − λ_k)] for masks [..., K] -> [...]."""
        _check_mask_shape(value, self.event_shape[0])
        return _inclusion_log_prob(self.probs, value)


@kl_divergence.register(IndependentInclusion, SubsetPointProcess)
def kl_inclusion_point_process(q: IndependentInclusion, p: SubsetPointProcess) -> Array:
    """KL[q_λ ‖ p_α] = α (Var|S| + (E|S|)²) − log C − H(λ) -> q's batch shape (paper Eq. 4, corrected entropy).

    Differentiable in λ (and α); the entropy is exact and has finite gradients at λ_k ∈ {0, 1}.
    """
    if q.event_shape != p.event_shape:
        raise ValueError(
            f"q and p must be over the same candidates: q has event shape {q.event_shape}, p has {p.event_shape}"
        )
    return _kl(q.probs, p.alpha, p.log_normalizer)


__all__ = [
    "IndependentInclusion",
    "SubsetPointProcess",
    "kl_inclusion_point_process",
    "no_signal_inclusion_probability",
]
