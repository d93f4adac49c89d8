"""Priors over the inducing inputs Z [M, D] of BSGP (Rossi et al.), as NumPyro distributions.

The DPP and Strauss densities are :mod:`ppl_sparsegp.core.point_processes`'s, compiled here with ``jax.jit``.

BSGP treats the M inducing inputs ``Z = {z_1, ..., z_M}``, ``z_j`` in R^D, as a random variable. The paper's priors
(Eqs. 7-9, all on *standardised* inputs) and the improper baseline are::

    normal    (Eq. 7)  p_N(Z) = prod_j N(z_j | 0, s^2 I)                  s = 1 in the paper: the default
    dpp       (Eq. 8)  p_D(Z) ∝ det K_zz|theta                            the GP's own kernel, theta sampled
    strauss   (Eq. 9)  p_S(Z) ∝ beta^M gamma^{S_R(Z)},                     S_R = #{i < j : |z_i - z_j| <= R}
    uniform            log p_U(Z) = 0                                     improper

Each is a :class:`numpyro.distributions.Distribution` with ``event_shape == (M, D)``, ``batch_shape == ()`` and
support ``independent(real, 2)``, so NumPyro's initialisation, ``potential_energy`` and gradient samplers work on Z
directly (identity transform). ``log_prob`` takes Z [..., M, D] and returns [...]; it is pure jax and works under
``jit``/``grad``/``vmap``, with the kernel hyperparameters of the DPP traced. Only the Normal prior can ``sample``
in the ordinary way. The others cannot (the uniform is improper, the DPP and Strauss densities are unnormalised
on R^D), so use them with an initialisation that does not sample the prior, e.g. NumPyro's default
``init_to_uniform``. Their finite or windowed samplers, :func:`~ppl_sparsegp.inducing.samplers.sample_k_dpp` and
:func:`~ppl_sparsegp.inducing.samplers.sample_strauss`, run on the host in :mod:`ppl_sparsegp.inducing.samplers`.

**Pitfalls** (spec 001, §1.4 and §5):

* The hard Strauss count is piecewise constant in Z, so its gradient is zero almost everywhere: SGHMC or NUTS see
  it as the uniform prior. That is the paper's behaviour and the default here; ``smoothness=s`` swaps the count for
  a sigmoid relaxation with a useful gradient, which is *not* the paper's prior.
* The DPP density is unnormalised and its normaliser depends on theta. It is ignored, as in the paper, so the
  log-det also pushes theta (towards larger variance and shorter lengthscales, which raise det K_zz).
* The uniform prior is improper: nothing but the likelihood keeps Z near the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ppl_sparsegp.core import ops, point_processes
from ppl_sparsegp.inducing.samplers import KeyOrRng, sample_k_dpp
from ppl_sparsegp.validation import check_count, check_positive_float

Array = Any

__all__ = [
    "Z_PRIORS",
    "NormalZPrior",
    "DeterminantalZPrior",
    "StraussZPrior",
    "UniformZPrior",
    "z_prior",
]

Z_PRIORS = ("normal", "dpp", "strauss", "uniform")
"""Names accepted by :func:`z_prior`."""


# --------------------------------------------------------------------------------------------------
# Distributions
# --------------------------------------------------------------------------------------------------


class _ZPrior(dist.Distribution):
    """Common part: a distribution over one set Z [M, D] of inducing inputs (event shape [M, D])."""

    support = constraints.independent(constraints.real, 2)
    arg_constraints: dict = {}
    pytree_aux_fields = ("num_inducing", "input_dim")

    def __init__(self, num_inducing: int, input_dim: int) -> None:
        self.num_inducing = check_count("num_inducing", num_inducing, minimum=1)
        self.input_dim = check_count("input_dim", input_dim, minimum=1)
        super().__init__(batch_shape=(), event_shape=(self.num_inducing, self.input_dim))

    def _as_inputs(self, Z: Array) -> jax.Array:
        """Z [..., M, D] as a floating jax array; its trailing shape is checked (shapes are static under jit)."""
        Z = jnp.asarray(Z)
        if Z.shape[-2:] != self.event_shape:
            raise ValueError(f"Z must have shape [..., {self.num_inducing}, {self.input_dim}], got {Z.shape}")
        return Z if jnp.issubdtype(Z.dtype, jnp.floating) else Z.astype(jnp.result_type(float))


class NormalZPrior(_ZPrior):
    """iid ``z_j ~ N(0, scale^2 I_D)`` (paper Eq. 7 with ``scale = 1``, the default on standardised inputs).

    It matches the mean and variance of standardised data and pulls Z towards the data barycentre.

    Args:
        num_inducing: M.
        input_dim: D.
        scale: standard deviation of every coordinate (> 0).
    """

    pytree_aux_fields = ("scale",)

    def __init__(self, num_inducing: int, input_dim: int, scale: float = 1.0) -> None:
        self.scale = check_positive_float("scale", scale)
        super().__init__(num_inducing, input_dim)

    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        """Z of shape ``sample_shape + [M, D]``."""
        return self.scale * jax.random.normal(key, sample_shape + self.event_shape, dtype=jnp.result_type(float))

    def log_prob(self, value: Array) -> jax.Array:
        """Normalised log density ``sum_{j,d} log N(Z_jd | 0, scale^2)``: Z [..., M, D] -> [...]."""
        return point_processes.normal_log_density(self._as_inputs(value), self.scale)


_log_det_psd = jax.jit(point_processes.dpp_log_density)
"""log det K_zz, compiled as one unit (called eagerly, its dozens of operations would each be dispatched); inside it
the factorisation has the static jitter of compiled programs, so an eager caller that gets a non-finite value
recomputes it uncompiled, where :func:`ppl_sparsegp.core.ops.cholesky` escalates."""


class DeterminantalZPrior(_ZPrior):
    """L-ensemble DPP prior ``log p(Z) = log det K_zz`` (paper Eq. 8), unnormalised.

    The normaliser of a DPP on R^D depends on the kernel hyperparameters theta; as in the paper it is ignored, so
    the gradient of ``log_prob`` also pushes theta (towards larger det K_zz: more variance, shorter lengthscales).
    Because theta is sampled in the model, build this distribution inside the model on every call, with the kernel
    of the current theta (its hyperparameters may be jax tracers).

    ``K_zz`` is factorised by :func:`ppl_sparsegp.core.ops.cholesky`, the project's single jitter policy (a *relative*
    jitter ``JITTER[dtype] * mean(diag K_zz)``, escalated with a warning when needed); the authors' code instead adds
    an absolute ``1e-7 I``. Both are negligible unless two inducing inputs nearly coincide.

    With a stationary kernel ``det K_zz`` tends to a constant as the points spread out, so the density is not
    normalisable on R^D: like the uniform prior, it does not keep Z near the data (only the likelihood does). There
    is no ``sample`` on R^D; draw from a finite candidate set with :meth:`sample_from_candidates` (exact k-DPP).

    Args:
        kernel: covariance, ``kernel(Z)`` with Z [M, D] -> K_zz [M, M] (a :class:`ppl_sparsegp.core.kernels.Kernel`).
        num_inducing: M.
        input_dim: D.
    """

    pytree_aux_fields = ("kernel",)

    def __init__(self, kernel: Callable[[Array], Array], num_inducing: int, input_dim: int) -> None:
        if kernel is None or not callable(kernel):
            raise ValueError(f"kernel must be a Kernel (a callable Z [M, D] -> K [M, M]), got {kernel!r}")
        self.kernel = kernel
        super().__init__(num_inducing, input_dim)

    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        raise NotImplementedError(
            "the DPP prior over Z has no sampler on continuous space; use "
            "DeterminantalZPrior.sample_from_candidates (or ppl_sparsegp.inducing.samplers.sample_k_dpp) to draw M "
            "points from a candidate set"
        )

    def log_prob(self, value: Array) -> jax.Array:
        """``log det K_zz`` (unnormalised): Z [..., M, D] -> [...].

        Raises:
            ppl_sparsegp.core.ops.CholeskyError: (eagerly only) K_zz could not be factorised even with the escalated
                jitter; under ``jit`` the value is NaN instead, as for every Cholesky in the project.
        """
        Z = self._as_inputs(value)
        flat = Z.reshape((-1, *self.event_shape))
        if Z.ndim == 2:
            log_det = _log_det_psd(self.kernel(Z))
        else:
            log_det = jax.vmap(lambda z: _log_det_psd(self.kernel(z)))(flat).reshape(Z.shape[:-2])
        if not isinstance(log_det, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(log_det))):
            try:  # eagerly, uncompiled: each failed factorisation escalates its jitter
                eager = [point_processes.dpp_log_density(self.kernel(z)) for z in flat]
            except ops.CholeskyError:
                raise ops.CholeskyError(
                    "K_zz of the DPP prior could not be factorised even with the escalated jitter "
                    "(non-finite inducing inputs or kernel hyperparameters?)"
                ) from None
            log_det = jnp.stack(eager).reshape(Z.shape[:-2])
        return log_det

    def sample_from_candidates(self, key_or_rng: KeyOrRng, candidates: Array) -> np.ndarray:
        """Exact k-DPP draw of M of the candidate points, with this prior's kernel.

        Args:
            key_or_rng: JAX key or numpy Generator (see the module docstring).
            candidates: [N, D] with N >= M.

        Returns:
            Z [M, D], rows of ``candidates`` in increasing index order.
        """
        candidates = np.asarray(candidates)
        if candidates.ndim != 2 or candidates.shape[1] != self.input_dim:
            raise ValueError(f"candidates must have shape [N, {self.input_dim}], got {candidates.shape}")
        return candidates[sample_k_dpp(key_or_rng, candidates, self.kernel, self.num_inducing)]


_pair_count = jax.jit(point_processes.strauss_pair_count)
"""S_R(Z), hard or smoothed, compiled as one unit so that eager calls do not compile operation by operation."""


class StraussZPrior(_ZPrior):
    """Strauss process with a fixed number of points (paper Eq. 9)::

        log p(Z) = M log beta + S_R(Z) log gamma,   S_R(Z) = #{(i, j) : i < j, |z_i - z_j| <= R}

    (unnormalised; ``beta^M`` is a constant since M is fixed). Eq. 9 writes ``< R``; the authors' code counts
    ``<= R``, as here (the two differ on a null set). The density is finite on all of R^D but only
    normalisable on a bounded window, which is why its sampler
    (:func:`~ppl_sparsegp.inducing.samplers.sample_strauss`) needs one.

    **Gradient.** The hard count is piecewise constant in Z, so its gradient is zero almost everywhere and every
    gradient-based sampler (SGHMC, HMC/NUTS) treats the hard Strauss prior exactly as the uniform prior (spec §1.4;
    the paper's "uniform and Strauss behave similarly"). This is the paper's prior and the default. With
    ``smoothness = s > 0`` the count becomes ``sum_{i<j} sigmoid((R - d_ij) / s)``, which tends to the hard count as
    ``s -> 0`` and has a non-zero gradient that actually repels nearby points; it is *not* the paper's prior.

    Distances use ``sqrt(max(d^2, tiny))`` so that gradients stay finite when points coincide.

    Args:
        num_inducing: M.
        input_dim: D.
        beta: intensity (> 0); the paper's lambda.
        gamma: interaction (0 < gamma <= 1; 1 is the uniform prior, small values repel strongly).
        radius: interaction radius R (> 0).
        smoothness: ``None`` for the hard count, or the sigmoid's width s (> 0).
    """

    pytree_aux_fields = ("beta", "gamma", "radius", "smoothness")

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

    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        raise NotImplementedError(
            "the Strauss prior is only normalisable on a bounded window; draw from it with "
            "ppl_sparsegp.inducing.samplers.sample_strauss(key_or_rng, prior, window=(low, high), num_steps=...)"
        )

    def pair_count(self, value: Array) -> jax.Array:
        """``S_R(Z)``, hard or smoothed as configured: Z [..., M, D] -> [...] (floating)."""
        return _pair_count(self._as_inputs(value), self.radius, self.smoothness)

    def log_prob(self, value: Array) -> jax.Array:
        """``M log beta + S_R(Z) log gamma`` (unnormalised): Z [..., M, D] -> [...]."""
        return self.num_inducing * math.log(self.beta) + self.pair_count(value) * math.log(self.gamma)


class UniformZPrior(_ZPrior):
    """Improper flat prior, ``log p(Z) = 0`` (the paper's "vanishing" baseline).

    Nothing but the likelihood then anchors Z near the data. It has no sampler (it is improper).

    Args:
        num_inducing: M.
        input_dim: D.
    """

    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        raise NotImplementedError("the uniform prior over Z is improper and cannot be sampled")

    def log_prob(self, value: Array) -> jax.Array:
        """Zeros: Z [..., M, D] -> [...], in Z's floating dtype."""
        Z = self._as_inputs(value)
        return jnp.zeros(Z.shape[:-2], dtype=Z.dtype)


# --------------------------------------------------------------------------------------------------
# Factory
# --------------------------------------------------------------------------------------------------

_OPTIONS = {"normal": ("scale",), "dpp": (), "strauss": ("beta", "gamma", "radius", "smoothness"), "uniform": ()}


def z_prior(
    name: str, num_inducing: int, input_dim: int, kernel: Callable[[Array], Array] | None = None, **options: Any
) -> dist.Distribution:
    """The prior over Z [M, D] called ``name`` (one of :data:`Z_PRIORS`).

    Args:
        name: ``"normal"``, ``"dpp"``, ``"strauss"`` or ``"uniform"`` (case-insensitive).
        num_inducing: M.
        input_dim: D.
        kernel: the GP's kernel at the current hyperparameters; required by ``"dpp"``, ignored by the others (so a
            model may always pass it).
        **options: ``scale`` for ``"normal"``; ``beta``, ``gamma``, ``radius``, ``smoothness`` for ``"strauss"``.

    Returns:
        A distribution with event shape [M, D].

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
