"""Log-Gaussian Cox process utilities (thesis §6.6.1): point patterns binned into counts, bin sizes and a grid of
inducing inputs, for a GP on log intensity with the Poisson likelihood ``Poisson(binsize=...)``.

A point pattern on a box is cut into equal bins; bin b's count is Poisson with mean ``binsize * exp f(c_b)`` where
``c_b`` is its centre, the usual discretisation of the LGCP likelihood (``binsize`` the bin's length or area).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ppl_sparsegp import validation


@dataclass(frozen=True)
class Binned:
    """A binned point pattern: bin centres ``X`` [B, D], counts ``y`` [B] (float), and the bin size (length in
    1-D, area in 2-D) shared by every bin."""

    X: np.ndarray
    y: np.ndarray
    binsize: float


def _box(bounds: Sequence[tuple[float, float]], shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """``bounds`` [(low, high)] per dimension and ``shape`` (bins per dimension) checked: lows, highs, counts."""
    bounds = np.asarray(bounds, dtype=np.float64)
    if (
        bounds.ndim != 2
        or bounds.shape[1] != 2
        or not np.all(np.isfinite(bounds))
        or np.any(bounds[:, 1] <= bounds[:, 0])
    ):
        raise ValueError(
            f"bounds: expected (low, high) pairs with low < high, one per dimension, got {bounds.tolist()}"
        )
    counts = [validation.check_count("shape", n, minimum=1) for n in shape]
    if len(counts) != len(bounds):
        raise ValueError(f"shape: expected {len(bounds)} bin counts (one per dimension of bounds), got {len(counts)}")
    return bounds[:, 0], bounds[:, 1], counts


def grid(bounds: Sequence[tuple[float, float]], shape: Sequence[int]) -> np.ndarray:
    """The centres of the ``shape`` grid of equal cells on the box ``bounds`` (e.g. [(0, 1)] and (50,), or
    [(0, 1), (0, 2)] and (20, 30)), [prod(shape), D], the first dimension varying slowest: bin centres, or the
    inducing inputs Z of a gridded LGCP."""
    low, high, counts = _box(bounds, shape)
    axes = [lo + (np.arange(n) + 0.5) * (hi - lo) / n for lo, hi, n in zip(low, high, counts, strict=True)]
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(axes))


def bin_events(events: np.ndarray, bounds: Sequence[tuple[float, float]], shape: Sequence[int]) -> Binned:
    """Counts of the ``events`` [n] (1-D) or [n, D] in the ``shape`` grid of equal bins on ``bounds``, with the bin
    centres (:func:`grid`, same order) and the bin size prod((high - low) / shape).

    Raises:
        ValueError: bad bounds or shape, non-finite events, or events outside the box (naming how many).
    """
    events = np.asarray(events, dtype=np.float64)
    events = events[:, None] if events.ndim == 1 else events
    low, high, counts = _box(bounds, shape)
    if events.ndim != 2 or events.shape[1] != len(low):
        raise ValueError(f"events: expected [n, {len(low)}] points (or [n] in 1-D), got shape {events.shape}")
    validation.check_finite("events", events)
    outside = int(np.sum(np.any((events < low) | (events > high), axis=1)))
    if outside:
        raise ValueError(f"events: {outside} of {len(events)} lie outside bounds {np.stack([low, high], 1).tolist()}")
    edges = [np.linspace(lo, hi, n + 1) for lo, hi, n in zip(low, high, counts, strict=True)]
    histogram, _ = np.histogramdd(events, bins=edges)
    binsize = float(np.prod((high - low) / np.asarray(counts)))
    return Binned(grid(np.stack([low, high], 1), counts), histogram.reshape(-1).astype(np.float64), binsize)
