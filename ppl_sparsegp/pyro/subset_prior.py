"""Pyro distributions over subsets of K candidate inducing inputs (Uhrenholt, Charvet & Jensen, UAI 2021), the twins
of :mod:`ppl_sparsegp.numpyro.subset_prior` (its docstring states the prior, the guide family and the KL).

The densities and the KL are the backend-neutral functions of :mod:`ppl_sparsegp.core.point_processes`, called here on
torch tensors; this module adds torch samplers and Pyro's distribution interface. A mask s ∈ {0,1}^K has event
shape [K] and is a **float 0/1 tensor** of the parameters' dtype, as on the NumPyro side::

    p_α(S) = C · exp(−α |S|²),   C = 1 / Σ_{n=0}^{K} binom(K, n) exp(−α n²)     SubsetPointProcess (paper §3)
    q_λ(s) = Π_k λ_k^{s_k} (1 − λ_k)^{1 − s_k}                                    IndependentInclusion (paper §3)
    KL[q_λ ‖ p_α] = α (Var|S| + (E|S|)²) − log C − H(λ)                           (paper Eq. 4, entropy corrected)

The KL is registered with torch's ``kl_divergence`` (:func:`torch.distributions.kl.register_kl`). Neither
distribution is reparameterisable (``has_rsample = False``), so Pyro's ``TraceGraph_ELBO`` (and ``Trace_ELBO``) give
λ score-function gradients, as does :class:`ppl_sparsegp.pyro.score_function.ScoreFunctionELBO` (the KL in closed
form), which the selective recipes use; see :mod:`models.pyro.selective`.

Shapes: masks [..., K]; ``probs`` λ [..., K] (leading axes are the guide's batch shape); α a scalar;
``size_log_probs()`` [K + 1]; ``log_prob`` and the KL drop the last axis. Constructors check their arguments eagerly
and raise ``ValueError`` naming the argument.
"""

from __future__ import annotations

from typing import Any

import pyro.distributions as dist
import torch
from torch.distributions import constraints
from torch.distributions.kl import register_kl

from ppl_sparsegp.core import point_processes
from ppl_sparsegp.core.point_processes import no_signal_inclusion_probability
from ppl_sparsegp.pyro.dtype import as_tensor

Array = Any

_MASK_SUPPORT = constraints.independent(constraints.boolean, 1)


def _check_alpha(alpha: Any) -> Array:
    try:
        a = as_tensor(alpha)
    except (TypeError, ValueError):
        a = None
    if a is None or a.ndim != 0 or a.dtype == torch.bool or a.is_complex():
        raise ValueError(f"alpha must be a finite real scalar >= 0 (the prior strength), got {alpha!r}")
    a = a if a.is_floating_point() else a.to(torch.get_default_dtype())
    if not bool(torch.isfinite(a)) or bool(a < 0):
        raise ValueError(f"alpha must be a finite real scalar >= 0 (the prior strength), got {alpha!r}")
    return a


def _check_probs(probs: Any) -> Array:
    try:
        p = as_tensor(probs)
    except (TypeError, ValueError):
        p = None
    if p is None or p.ndim < 1 or p.shape[-1] < 1 or p.dtype == torch.bool or p.is_complex():
        raise ValueError(f"probs must be an array [..., K] with K >= 1 of probabilities, got {probs!r}")
    p = p if p.is_floating_point() else p.to(torch.get_default_dtype())
    if not bool(torch.all(torch.isfinite(p) & (p >= 0) & (p <= 1))):
        raise ValueError("probs must hold inclusion probabilities in [0, 1], got values outside [0, 1] or non-finite")
    return p


def _check_mask_shape(value: Array, num_candidates: int) -> None:
    if tuple(value.shape[-1:]) != (num_candidates,):
        raise ValueError(f"mask must have shape [..., {num_candidates}], got shape {tuple(value.shape)}")


class SubsetPointProcess(dist.TorchDistribution):
    """Prior p_α(S) = C · exp(−α |S|²) over inclusion masks s ∈ {0,1}^K, event shape [K].

    Args:
        num_candidates: K >= 1.
        alpha: the prior strength α >= 0 (a scalar; fixed, not learned, in the paper).
    """

    arg_constraints = {"alpha": constraints.nonnegative}
    support = _MASK_SUPPORT
    has_rsample = False
    has_enumerate_support = False

    def __init__(self, num_candidates: int, alpha: float | Array, *, validate_args: bool | None = None) -> None:
        self.num_candidates = point_processes.check_num_candidates(num_candidates)
        self.alpha = _check_alpha(alpha)
        super().__init__(torch.Size(), torch.Size((self.num_candidates,)), validate_args=validate_args)

    def expand(self, batch_shape: tuple[int, ...], _instance: Any = None) -> dist.TorchDistribution:
        """p_α has no parameters per batch element: a batch of them is this one expanded."""
        return dist.ExpandedDistribution(self, torch.Size(batch_shape))

    @property
    def log_normalizer(self) -> Array:
        """log C = −log Σ_{n=0}^{K} binom(K, n) exp(−α n²), a scalar <= 0."""
        return point_processes.subset_size_log_probs(self.num_candidates, self.alpha)[1]

    def size_log_probs(self) -> Array:
        """log P(|S| = n) = log binom(K, n) − α n² + log C for n = 0..K -> [K + 1]."""
        return point_processes.subset_size_log_probs(self.num_candidates, self.alpha)[0]

    def sample(self, sample_shape: tuple[int, ...] = ()) -> Array:
        """Masks [*sample_shape, K] of float 0/1 from torch's generator: the size n from its marginal, then the
        candidates whose ranks in a uniformly random permutation are below n."""
        shape = torch.Size(sample_shape)
        with torch.no_grad():
            sizes = torch.distributions.Categorical(logits=self.size_log_probs()).sample(shape)
            scores = torch.rand(shape + self.event_shape, dtype=self.alpha.dtype)
            ranks = torch.argsort(torch.argsort(scores, dim=-1), dim=-1)
            return (ranks < sizes[..., None]).to(self.alpha.dtype)

    def log_prob(self, value: Array) -> Array:
        """log p_α(s) = −α |S|² + log C for masks [..., K] -> [...]."""
        _check_mask_shape(value, self.num_candidates)
        if self._validate_args:
            self._validate_sample(value)
        return point_processes.subset_prior_log_prob(value, self.alpha, self.log_normalizer)


class IndependentInclusion(dist.TorchDistribution):
    """Guide q_λ(s) = Π_k Bernoulli(s_k | λ_k) over masks, event shape [K], batch shape ``probs.shape[:-1]``.

    Args:
        probs: inclusion probabilities λ [..., K] in [0, 1] (typically sigmoid of free logits).
    """

    arg_constraints = {"probs": constraints.unit_interval}
    support = _MASK_SUPPORT
    has_rsample = False
    has_enumerate_support = False

    def __init__(self, probs: Array, *, validate_args: bool | None = None) -> None:
        self.probs = _check_probs(probs)
        shape = self.probs.shape
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape: tuple[int, ...], _instance: Any = None) -> IndependentInclusion:
        """The same λ [K] for every element of ``batch_shape``."""
        return IndependentInclusion(self.probs.expand(torch.Size(batch_shape) + self.event_shape))

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
        return torch.sum(self.probs, dim=-1)

    @property
    def count_variance(self) -> Array:
        """Var|S| = Σ_k λ_k (1 − λ_k) [...] (|S| is Poisson-binomial)."""
        return torch.sum(self.variance, dim=-1)

    def entropy(self) -> Array:
        """H(λ) = −Σ_k [λ_k log λ_k + (1 − λ_k) log(1 − λ_k)] [...]."""
        return point_processes.inclusion_entropy(self.probs)

    def sample(self, sample_shape: tuple[int, ...] = ()) -> Array:
        """Masks [*sample_shape, ..., K] of float 0/1 (the dtype of ``probs``) from torch's generator."""
        shape = torch.Size(sample_shape) + self.batch_shape + self.event_shape
        with torch.no_grad():
            return (torch.rand(shape, dtype=self.probs.dtype) < self.probs).to(self.probs.dtype)

    def log_prob(self, value: Array) -> Array:
        """log q_λ(s) = Σ_k [s_k log λ_k + (1 − s_k) log(1 − λ_k)] for masks [..., K] -> [...]."""
        _check_mask_shape(value, self.event_shape[0])
        if self._validate_args:
            self._validate_sample(value)
        return point_processes.inclusion_log_prob(self.probs, value)


@register_kl(IndependentInclusion, SubsetPointProcess)
def kl_inclusion_point_process(q: IndependentInclusion, p: SubsetPointProcess) -> Array:
    """KL[q_λ ‖ p_α] = α (Var|S| + (E|S|)²) − log C − H(λ) -> q's batch shape (paper Eq. 4, corrected entropy).

    Differentiable in λ (and α); the entropy is exact and has finite gradients at λ_k ∈ {0, 1}.
    """
    if q.event_shape != p.event_shape:
        raise ValueError(
            f"q and p must be over the same candidates: q has event shape {tuple(q.event_shape)}, p has "
            f"{tuple(p.event_shape)}"
        )
    return point_processes.kl_inclusion_subset_prior(q.probs, p.alpha, p.log_normalizer)


__all__ = [
    "IndependentInclusion",
    "SubsetPointProcess",
    "kl_inclusion_point_process",
    "no_signal_inclusion_probability",
]
