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
``init_to_uniform``. Their finite or windowed samplers are here instead:

* :func:`sample_k_dpp`: exact k-DPP over a finite candidate set (Kulesza & Taskar 2012, Alg. 8);
* :func:`sample_strauss`: Metropolis-Hastings for the Strauss density on a bounded box.

**Randomness.** These samplers run on the host in numpy (one-off draws, not inside ``jit``). Their first argument
``key_or_rng`` is either a JAX PRNG key, from whose key data a fresh ``numpy.random.Generator`` is seeded (the same
key gives the same draw), or a ``numpy.random.Generator``, which is used and advanced in place (so successive calls
continue one random stream).

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
from scipy.special import expit

from ppl_sparsegp.core import ops, point_processes

Array = Any
KeyOrRng = Any

__all__ = [
    "Z_PRIORS",
    "NormalZPrior",
    "DeterminantalZPrior",
    "StraussZPrior",
    "UniformZPrior",
    "sample_k_dpp",
    "sample_strauss",
    "z_prior",
]

Z_PRIORS = ("normal", "dpp", "strauss", "uniform")
"""Names accepted by :func:`z_prior`."""


# --------------------------------------------------------------------------------------------------
# Argument checks and host randomness
# --------------------------------------------------------------------------------------------------


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _positive_float(name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}") from None
    if isinstance(value, bool) or not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return number


def _host_rng(key_or_rng: KeyOrRng) -> np.random.Generator:
    """A numpy Generator: ``key_or_rng`` itself, or one seeded from a JAX key's data."""
    if isinstance(key_or_rng, np.random.Generator):
        return key_or_rng
    try:
        data = np.asarray(jax.random.key_data(key_or_rng), dtype=np.uint32)
    except (TypeError, ValueError):
        raise ValueError(
            f"key_or_rng must be a JAX PRNG key or a numpy.random.Generator, got {type(key_or_rng).__name__}"
        ) from None
    return np.random.default_rng(data.ravel().tolist())


# --------------------------------------------------------------------------------------------------
# Distributions
# --------------------------------------------------------------------------------------------------


class _ZPrior(dist.Distribution):
    """Common part: a distribution over one set Z [M, D] of inducing inputs (event shape [M, D])."""

    support = constraints.independent(constraints.real, 2)
    arg_constraints: dict = {}
    pytree_aux_fields = ("num_inducing", "input_dim")

    def __init__(self, num_inducing: int, input_dim: int) -> None:
        self.num_inducing = _positive_int("num_inducing", num_inducing)
        self.input_dim = _positive_int("input_dim", input_dim)
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
        self.scale = _positive_float("scale", scale)
        super().__init__(num_inducing, input_dim)

    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        """Z of shape ``sample_shape + [M, D]``."""
        return self.scale * jax.random.normal(key, sample_shape + self.event_shape, dtype=jnp.result_type(float))

    def log_prob(self, value: Array) -> jax.Array:
        """Normalised log density ``sum_{j,d} log N(Z_jd | 0, scale^2)``: Z [..., M, D] -> [...]."""
        Z = self._as_inputs(value)
        size = self.num_inducing * self.input_dim
        maha = jnp.sum(jnp.square(Z / self.scale), axis=(-2, -1))
        return -0.5 * maha - size * (math.log(self.scale) + 0.5 * math.log(2.0 * math.pi))


_log_det_psd = jax.jit(point_processes.dpp_log_density)
"""log det K_zz, compiled as one unit: called eagerly, the Cholesky's jitter-escalation loop would otherwise be
traced and compiled anew on every call."""


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
            "DeterminantalZPrior.sample_from_candidates (or sample_k_dpp) to draw M points from a candidate set"
        )

    def log_prob(self, value: Array) -> jax.Array:
        """``log det K_zz`` (unnormalised): Z [..., M, D] -> [...].

        Raises:
            ppl_sparsegp.core.ops.CholeskyError: (eagerly only) K_zz could not be factorised even with the escalated
                jitter; under ``jit`` the value is NaN instead, as for every Cholesky in the project.
        """
        Z = self._as_inputs(value)
        if Z.ndim == 2:
            log_det = _log_det_psd(self.kernel(Z))
        else:
            flat = Z.reshape((-1, *self.event_shape))
            log_det = jax.vmap(lambda z: _log_det_psd(self.kernel(z)))(flat).reshape(Z.shape[:-2])
        if not isinstance(log_det, jax.core.Tracer) and not bool(jnp.all(jnp.isfinite(log_det))):
            raise ops.CholeskyError(
                "K_zz of the DPP prior could not be factorised even with the escalated jitter "
                "(non-finite inducing inputs or kernel hyperparameters?)"
            )
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
    normalisable on a bounded window, which is why the sampler :func:`sample_strauss` needs one.

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
        self.beta = _positive_float("beta", beta)
        self.gamma = _positive_float("gamma", gamma)
        if self.gamma > 1.0:
            raise ValueError(f"gamma must lie in (0, 1], got {gamma!r}")
        self.radius = _positive_float("radius", radius)
        self.smoothness = None if smoothness is None else _positive_float("smoothness", smoothness)
        super().__init__(num_inducing, input_dim)

    def sample(self, key: jax.Array, sample_shape: tuple[int, ...] = ()) -> jax.Array:
        raise NotImplementedError(
            "the Strauss prior is only normalisable on a bounded window; draw from it with "
            "sample_strauss(key_or_rng, prior, window=(low, high), num_steps=...)"
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
# Samplers (host side, numpy)
# --------------------------------------------------------------------------------------------------


def _elementary_symmetric(eigenvalues: np.ndarray, k: int) -> np.ndarray:
    """``E[l, n] = e_l(lambda_1..lambda_n)`` for l = 0..k, n = 0..N: [k + 1, N + 1] (K&T Alg. 7)."""
    n_items = eigenvalues.shape[0]
    E = np.zeros((k + 1, n_items + 1))
    E[0, :] = 1.0
    for n in range(1, n_items + 1):
        E[1:, n] = E[1:, n - 1] + eigenvalues[n - 1] * E[:-1, n - 1]
    return E


def _k_dpp_draw(
    rng: np.random.Generator, eigenvalues: np.ndarray, eigenvectors: np.ndarray, E: np.ndarray, k: int
) -> np.ndarray:
    """One k-DPP draw given the eigendecomposition [N], [N, N] and the table of :func:`_elementary_symmetric`."""
    n_items = eigenvalues.shape[0]
    chosen, remaining = [], k
    for n in range(n_items, 0, -1):
        if remaining == 0:
            break
        if rng.random() < eigenvalues[n - 1] * E[remaining - 1, n - 1] / E[remaining, n]:
            chosen.append(n - 1)
            remaining -= 1
    V = eigenvectors[:, chosen]

    items = []
    for _ in range(k):
        probabilities = np.sum(V * V, axis=1)
        item = rng.choice(n_items, p=probabilities / probabilities.sum())
        items.append(item)
        pivot = np.argmax(np.abs(V[item]))
        V = V - np.outer(V[:, pivot] / V[item, pivot], V[item])
        V = np.delete(V, pivot, axis=1)
        if V.shape[1]:
            V = np.linalg.qr(V)[0]
    return np.sort(np.asarray(items, dtype=int))


def sample_k_dpp(
    key_or_rng: KeyOrRng,
    candidates: Array,
    kernel: Callable[[Array], Array],
    k: int,
    num_samples: int | None = None,
) -> np.ndarray:
    """Exact draw of a k-DPP over a finite candidate set: ``P(S) ∝ det K_SS`` over subsets with ``|S| = k``.

    Kulesza & Taskar (2012), Alg. 8: eigendecompose ``K = sum_n lambda_n v_n v_n^T``; pick k eigenvectors, from the
    last down, keeping ``v_n`` with probability ``lambda_n e_{l-1}^{n-1} / e_l^n`` (``e_l^n``: elementary
    symmetric polynomial of order l of the first n eigenvalues, l the number still to pick); then sample the
    projection DPP they span, one item at a time with probability ``|V^T e_i|^2 / |V|`` and restricting V to the
    complement of the chosen item.

    Runs in numpy on the host (O(N^3) for the eigendecomposition, shared by all draws), for one-off draws such as
    an initial Z. Meant for moderate N and k: the polynomials ``e_l^N`` (eigenvalues scaled to at most 1) are at
    most ``binom(N, k)`` and must stay within the float64 range.

    Args:
        key_or_rng: JAX key or numpy Generator (see the module docstring).
        candidates: X [N, D].
        kernel: ``kernel(X)`` -> K [N, N], positive semi-definite.
        k: subset size, ``1 <= k <= N``.
        num_samples: ``None`` for one draw, or the number of independent draws.

    Returns:
        indices [k] (or [num_samples, k]) into ``candidates``, distinct and sorted within each draw.

    Raises:
        ValueError: bad shapes or k, or ``rank(K) < k`` (every k-subset then has det 0).
    """
    rng = _host_rng(key_or_rng)
    candidates = np.asarray(candidates, dtype=float)
    if candidates.ndim != 2 or not np.all(np.isfinite(candidates)):
        raise ValueError(f"candidates must be a finite array [N, D], got shape {candidates.shape}")
    n_items = candidates.shape[0]
    k = _positive_int("k", k)
    if k > n_items:
        raise ValueError(f"k must be at most the number of candidates ({n_items}), got {k}")
    K = np.asarray(kernel(candidates), dtype=float)
    eigenvalues, eigenvectors = np.linalg.eigh(0.5 * (K + K.T))
    eigenvalues = eigenvalues / max(eigenvalues.max(), np.finfo(float).tiny)  # the k-DPP is scale free
    eigenvalues = np.where(eigenvalues > n_items * np.finfo(float).eps, eigenvalues, 0.0)  # rounding noise -> 0
    E = _elementary_symmetric(eigenvalues, k)
    if not E[k, n_items] > 0:
        raise ValueError(f"the kernel matrix of the candidates has rank below k = {k}; no k-subset has det > 0")
    if num_samples is None:
        return _k_dpp_draw(rng, eigenvalues, eigenvectors, E, k)
    num_samples = _positive_int("num_samples", num_samples)
    return np.stack([_k_dpp_draw(rng, eigenvalues, eigenvectors, E, k) for _ in range(num_samples)])


def _strauss_terms(d: np.ndarray, prior: StraussZPrior) -> np.ndarray:
    """Per-pair contributions to ``S_R``, elementwise over distances ``d``."""
    if prior.smoothness is None:
        return (d <= prior.radius).astype(float)
    return expit((prior.radius - d) / prior.smoothness)


def sample_strauss(
    key_or_rng: KeyOrRng,
    prior: StraussZPrior,
    window: tuple[Array, Array],
    num_steps: int,
    init: Array | None = None,
) -> np.ndarray:
    """Metropolis-Hastings draw from a Strauss prior restricted to a box window, M points fixed.

    The Strauss density is normalisable only on a bounded window W; the target is ``p(Z) 1[Z in W^M]``. Each step
    moves one uniformly chosen point to a uniform location in W (a symmetric proposal) and accepts with probability
    ``min(1, gamma^(S_R(Z') - S_R(Z)))``, the hard count or, for a smoothed prior, its smoothed count. ``beta`` cancels
    because M is fixed. Updates cost O(M D) per step.

    Args:
        key_or_rng: JAX key or numpy Generator (see the module docstring); passing the same Generator and the
            previous result as ``init`` continues one chain.
        prior: the Strauss prior (gamma, R, smoothness).
        window: ``(low, high)``, each [D], with ``low < high``.
        num_steps: number of MH steps (>= 0).
        init: starting Z [M, D] inside the window; ``None`` draws it uniformly in the window.

    Returns:
        Z [M, D], the chain's state after ``num_steps`` steps.
    """
    rng = _host_rng(key_or_rng)
    M, D = prior.event_shape
    low, high = (np.asarray(bound, dtype=float) for bound in window)
    if low.shape != (D,) or high.shape != (D,) or not np.all(np.isfinite(low) & np.isfinite(high) & (low < high)):
        raise ValueError(f"window must be (low, high), finite arrays of shape [{D}] with low < high, got {window!r}")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int | np.integer) or num_steps < 0:
        raise ValueError(f"num_steps must be a non-negative integer, got {num_steps!r}")
    if init is None:
        Z = low + (high - low) * rng.random((M, D))
    else:
        Z = np.array(init, dtype=float)
        if Z.shape != (M, D) or not np.all((Z >= low) & (Z <= high)):
            raise ValueError(f"init must be an array [{M}, {D}] inside the window, got shape {Z.shape}")

    terms = _strauss_terms(np.sqrt(np.sum((Z[:, None, :] - Z[None, :, :]) ** 2, axis=-1)), prior)
    np.fill_diagonal(terms, 0.0)
    log_gamma = math.log(prior.gamma)
    movers = rng.integers(M, size=num_steps)
    proposals = low + (high - low) * rng.random((num_steps, D))
    log_u = np.log(rng.random(num_steps))
    for i, z_new, threshold in zip(movers, proposals, log_u, strict=True):
        new_terms = _strauss_terms(np.sqrt(np.sum((Z - z_new) ** 2, axis=1)), prior)
        new_terms[i] = 0.0
        if threshold < log_gamma * (new_terms.sum() - terms[i].sum()):
            Z[i] = z_new
            terms[i, :] = new_terms
            terms[:, i] = new_terms
    return Z


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
