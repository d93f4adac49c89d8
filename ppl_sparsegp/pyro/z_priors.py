"""Priors over the inducing inputs Z [M, D] of BSGP (Rossi et al., Eqs. 7-9) as Pyro distributions, the twins of
:mod:`ppl_sparsegp.numpyro.z_priors` (same classes, names, options and defaults; its docstring discusses each
prior and its pitfalls).

    normal    (Eq. 7)  Σ_{j,d} log N(Z_jd | 0, s²)           core.point_processes.normal_log_density
    dpp       (Eq. 8)  log det K_zz|θ  (unnormalised)         core.point_processes.dpp_log_density
    strauss   (Eq. 9)  M log β + S_R(Z) log γ (unnormalised)  core.point_processes.strauss_log_density
    uniform            0 (improper)

Each has ``event_shape == (M, D)``, ``batch_shape == ()`` and support ``independent(real, 2)``; ``log_prob`` takes Z
[..., M, D] -> [...] and is differentiable by autograd (the DPP's kernel hyperparameters too). Only the Normal prior
samples; the others raise, so start a chain from given values (e.g. ``init_to_value`` with the model's
``initial_values()``): Pyro's ``init_to_uniform`` draws from the prior first. Their host-side samplers are the shared
:func:`ppl_sparsegp.inducing.samplers.sample_k_dpp` (:meth:`DeterminantalZPrior.sample_from_candidates`) and
:func:`ppl_sparsegp.inducing.samplers.sample_strauss` (which reads a :class:`StraussZPrior`'s settings).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from ppl_sparsegp.core import point_processes
from ppl_sparsegp.pyro.dtype import as_tensor
from ppl_sparsegp.validation import check_count, check_positive_float

Array = Any

__all__ = ["Z_PRIORS", "DeterminantalZPrior", "NormalZPrior", "StraussZPrior", "UniformZPrior", "z_prior"]

Z_PRIORS = ("normal", "dpp", "strauss", "uniform")
"""Names accepted by :func:`z_prior`."""


class _ZPrior(dist.TorchDistribution):
    """Common part: a distribution over one set Z [M, D] of inducing inputs (event shape [M, D])."""

    support = constraints.independent(constraints.real, 2)
    arg_constraints: dict = {}

    def __init__(self, num_inducing: int, input_dim: int) -> None:
        self.num_inducing = check_count("num_inducing", num_inducing, minimum=1)
        self.input_dim = check_count("input_dim", input_dim, minimum=1)
        super().__init__(batch_shape=torch.Size(), event_shape=torch.Size((self.num_inducing, self.input_dim)))

    def _as_inputs(self, Z: Array) -> torch.Tensor:
        """Z [..., M, D] as a floating tensor, its trailing shape checked."""
        Z = as_tensor(Z)
        if tuple(Z.shape[-2:]) != tuple(self.event_shape):
            raise ValueError(f"Z must have shape [..., {self.num_inducing}, {self.input_dim}], got {tuple(Z.shape)}")
        return Z


class NormalZPrior(_ZPrior):
    """iid ``z_j ~ N(0, scale² I_D)`` (paper Eq. 7 with ``scale = 1``, the default on standardised inputs).

    Args:
        num_inducing: M.
        input_dim: D.
        scale: standard deviation of every coordinate (> 0).
    """

    def __init__(self, num_inducing: int, input_dim: int, scale: float = 1.0) -> None:
        self.scale = check_positive_float("scale", scale)
        super().__init__(num_inducing, input_dim)

    def sample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        """Z of shape ``sample_shape + [M, D]`` from torch's generator."""
        return self.scale * torch.randn(torch.Size(sample_shape) + self.event_shape)

    def log_prob(self, value: Array) -> torch.Tensor:
        """Normalised log density: Z [..., M, D] -> [...]."""
        return point_processes.normal_log_density(self._as_inputs(value), self.scale)


class DeterminantalZPrior(_ZPrior):
    """L-ensemble DPP prior ``log p(Z) = log det K_zz`` (paper Eq. 8), unnormalised; K_zz is factorised under the
    project's jitter policy (:func:`ppl_sparsegp.core.ops.cholesky`, which escalates on torch tensors). Build it
    inside the model with the kernel at the current hyperparameters.

    Args:
        kernel: covariance, ``kernel(Z)`` with Z [M, D] -> K_zz [M, M] (a :class:`ppl_sparsegp.core.kernels.Kernel`).
        num_inducing: M.
        input_dim: D.
    """

    def __init__(self, kernel: Callable[[Array], Array], num_inducing: int, input_dim: int) -> None:
        if kernel is None or not callable(kernel):
            raise ValueError(f"kernel must be a Kernel (a callable Z [M, D] -> K [M, M]), got {kernel!r}")
        self.kernel = kernel
        super().__init__(num_inducing, input_dim)

    def sample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        raise NotImplementedError(
            "the DPP prior over Z has no sampler on continuous space; use "
            "DeterminantalZPrior.sample_from_candidates (or ppl_sparsegp.inducing.samplers.sample_k_dpp) to draw M "
            "points from a candidate set"
        )

    def log_prob(self, value: Array) -> torch.Tensor:
        """``log det K_zz`` (unnormalised): Z [..., M, D] -> [...]."""
        Z = self._as_inputs(value)
        flat = Z.reshape((-1, *self.event_shape))
        log_det = [point_processes.dpp_log_density(self.kernel(z)) for z in flat]
        return torch.stack(log_det).reshape(Z.shape[:-2])

    def sample_from_candidates(self, key_or_rng: Any, candidates: Array) -> np.ndarray:
        """Exact k-DPP draw of M of the candidate points [N, D] with this prior's kernel (the shared host-side
        sampler; ``key_or_rng`` a numpy Generator or a JAX key). Returns Z [M, D], rows of ``candidates``."""
        from ppl_sparsegp.inducing.samplers import sample_k_dpp  # host-side numpy (it imports jax for keys)

        candidates = np.asarray(candidates)
        if candidates.ndim != 2 or candidates.shape[1] != self.input_dim:
            raise ValueError(f"candidates must have shape [N, {self.input_dim}], got {candidates.shape}")

        def kernel(x: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return self.kernel(torch.as_tensor(x)).numpy()

        return candidates[sample_k_dpp(key_or_rng, candidates, kernel, self.num_inducing)]


class StraussZPrior(_ZPrior):
    """Strauss process with M points (paper Eq. 9): ``log p(Z) = M log β + S_R(Z) log γ``, unnormalised, with the
    hard pair count (zero gradient almost everywhere: the paper's prior) or, with ``smoothness``, its sigmoid
    relaxation. Its host-side sampler is :func:`ppl_sparsegp.inducing.samplers.sample_strauss`.

    Args:
        num_inducing: M.
        input_dim: D.
        beta: intensity (> 0).
        gamma: interaction, 0 < γ <= 1.
        radius: interaction radius R (> 0).
        smoothness: None for the hard count, or the sigmoid's width (> 0).
    """

    def __init__(
        self,
        num_inducing: int,
        input_dim: int,
        beta: float = 1.0,
        gamma: float = 0.5,
        radius: float = 0.5,
        smoothness: float | None = None,
    ) -> None:
        self.beta = check_positive_float("beta", beta)
        self.gamma = check_positive_float("gamma", gamma)
        if self.gamma > 1.0:
            raise ValueError(f"gamma must lie in (0, 1], got {gamma!r}")
        self.radius = check_positive_float("radius", radius)
        self.smoothness = None if smoothness is None else check_positive_float("smoothness", smoothness)
        super().__init__(num_inducing, input_dim)

    def sample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        raise NotImplementedError(
            "the Strauss prior is only normalisable on a bounded window; draw from it with "
            "ppl_sparsegp.inducing.samplers.sample_strauss(key_or_rng, prior, window=(low, high), num_steps=...)"
        )

    def pair_count(self, value: Array) -> torch.Tensor:
        """``S_R(Z)``, hard or smoothed as configured: Z [..., M, D] -> [...] (floating)."""
        return point_processes.strauss_pair_count(self._as_inputs(value), self.radius, self.smoothness)

    def log_prob(self, value: Array) -> torch.Tensor:
        """``M log β + S_R(Z) log γ`` (unnormalised): Z [..., M, D] -> [...]."""
        Z = self._as_inputs(value)
        return point_processes.strauss_log_density(Z, self.beta, self.gamma, self.radius, self.smoothness)


class UniformZPrior(_ZPrior):
    """Improper flat prior, ``log p(Z) = 0``; it cannot be sampled.

    Args:
        num_inducing: M.
        input_dim: D.
    """

    def sample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        raise NotImplementedError("the uniform prior over Z is improper and cannot be sampled")

    def log_prob(self, value: Array) -> torch.Tensor:
        """Zeros: Z [..., M, D] -> [...], in Z's floating dtype."""
        Z = self._as_inputs(value)
        return torch.zeros(Z.shape[:-2], dtype=Z.dtype)


_OPTIONS = {"normal": ("scale",), "dpp": (), "strauss": ("beta", "gamma", "radius", "smoothness"), "uniform": ()}


def z_prior(
    name: str, num_inducing: int, input_dim: int, kernel: Callable[[Array], Array] | None = None, **options: Any
) -> dist.TorchDistribution:
    """The prior over Z [M, D] called ``name`` (one of :data:`Z_PRIORS`, case-insensitive); ``kernel`` (the GP's, at
    the current hyperparameters) is required by ``"dpp"`` and ignored by the others; ``options`` as
    :func:`ppl_sparsegp.numpyro.z_priors.z_prior`'s.

    Raises:
        ValueError: unknown name or option, missing kernel for the DPP, or an argument out of range.
    """
    if not isinstance(name, str) or name.lower() not in _OPTIONS:
        raise ValueError(f"name must be one of {Z_PRIORS}, got {name!r}")
    key = name.lower()
    unknown = sorted(set(options) - set(_OPTIONS[key]))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for the {key!r} prior; valid options are {_OPTIONS[key]}")
    if key == "normal":
        return NormalZPrior(num_inducing, input_dim, **options)
    if key == "dpp":
        if kernel is None:
            raise ValueError("kernel is required for the 'dpp' prior (it uses the GP's own kernel)")
        return DeterminantalZPrior(kernel, num_inducing, input_dim)
    if key == "strauss":
        return StraussZPrior(num_inducing, input_dim, **options)
    return UniformZPrior(num_inducing, input_dim)
