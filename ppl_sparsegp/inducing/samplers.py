"""Host-side samplers of point processes over a finite or bounded set of inducing inputs (numpy, not traced).

* :func:`sample_k_dpp`: exact k-DPP over a finite candidate set, ``P(S) ∝ det K_SS`` with ``|S| = k`` (Kulesza &
  Taskar 2012, Alg. 8), e.g. a DPP-distributed initial Z for BSGP (Rossi et al., Eq. 8);
* :func:`sample_strauss`: Metropolis-Hastings for the Strauss density (Rossi et al., Eq. 9) on a bounded box.

They serve one-off draws such as an initial Z, so they run on the host in numpy. Their first argument
``key_or_rng`` is either a JAX PRNG key, from whose key data a fresh ``numpy.random.Generator`` is seeded (the same
key gives the same draw), or a ``numpy.random.Generator``, which is used and advanced in place (so successive calls
continue one random stream). The densities themselves are :mod:`ppl_sparsegp.core.point_processes`'s and the
NumPyro priors :mod:`ppl_sparsegp.numpyro.z_priors`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import jax
import numpy as np
from scipy.special import expit

from ppl_sparsegp.validation import check_count

Array = Any
KeyOrRng = Any

__all__ = ["sample_k_dpp", "sample_strauss"]


class StraussParameters(Protocol):
    """What :func:`sample_strauss` reads of a Strauss prior (e.g. :class:`ppl_sparsegp.numpyro.z_priors.StraussZPrior`):
    ``gamma`` in (0, 1], the interaction ``radius`` R > 0, ``smoothness`` (None: the hard pair count) and
    ``event_shape`` (M, D)."""

    gamma: float
    radius: float
    smoothness: float | None
    event_shape: tuple[int, int]


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
    k = check_count("k", k, minimum=1)
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
    num_samples = check_count("num_samples", num_samples, minimum=1)
    return np.stack([_k_dpp_draw(rng, eigenvalues, eigenvectors, E, k) for _ in range(num_samples)])


def _strauss_terms(d: np.ndarray, prior: StraussParameters) -> np.ndarray:
    """Per-pair contributions to ``S_R``, elementwise over distances ``d``."""
    if prior.smoothness is None:
        return (d <= prior.radius).astype(float)
    return expit((prior.radius - d) / prior.smoothness)


def sample_strauss(
    key_or_rng: KeyOrRng,
    prior: StraussParameters,
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
    num_steps = check_count("num_steps", num_steps)
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
