"""Posterior predictives of the Pyro twins over posterior draws (Pyro's ``MCMC``), the twin of
:mod:`ppl_sparsegp.posterior.predict`: each draw's Gaussian from the model's ``predict_f`` (torch, no gradients),
mixed with equal weights by :mod:`ppl_sparsegp.core.mixtures` (thesis §5.5).

Draws are ``site -> [S, ...]`` tensors or arrays, as ``pyro.infer.MCMC.get_samples()`` returns them (chains
flattened); ``params`` holds values of sites that were not sampled (e.g. a fitted ``"Z"``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from ppl_sparsegp.core.mixtures import mixture_log_density, mixture_moments
from ppl_sparsegp.data import Standardizer
from ppl_sparsegp.posterior.predict import PosteriorPredictive, in_units
from ppl_sparsegp.pyro.dtype import as_tensor

Array = Any


def draws(samples: Mapping[str, Array], params: Mapping[str, Array] | None = None) -> Iterator[dict[str, Array]]:
    """Each posterior draw as a ``params`` dict: ``params`` with draw s of every sampled site, s = 0 .. S-1.

    Raises:
        ValueError: no samples, or sites with different numbers of draws.
    """
    counts = {name: len(value) for name, value in samples.items()}
    if not counts or len(set(counts.values())) != 1:
        raise ValueError(f"samples: expected site -> [S, ...] with one S for every site, got draws per site {counts}")
    tensors = {name: as_tensor(value) for name, value in samples.items()}
    fixed = dict(params or {})
    for s in range(next(iter(counts.values()))):
        yield {**fixed, **{name: value[s] for name, value in tensors.items()}}


def _stacked(fn: Callable[[dict[str, Array]], tuple[Array, ...]], samples, params) -> tuple[Array, ...]:
    """``fn(draw)`` for every draw, each output stacked over draws: [S, ...]."""
    with torch.no_grad():
        outputs = [fn(draw) for draw in draws(samples, params)]
    return tuple(torch.stack(parts) for parts in zip(*outputs, strict=True))


def posterior_predictive(
    model: Any,
    samples: Mapping[str, Array],
    X_new: Array,
    *,
    params: Mapping[str, Array] | None = None,
    standardizer: Standardizer | None = None,
    **data: Array,
) -> PosteriorPredictive:
    """Mean and variance of the mixture predictive of f and y at ``X_new`` [S_new, D], as numpy arrays [S_new] or
    [S_new, P]; with ``standardizer`` in the original units of y. ``data``: the training ``X``, ``y`` of a model
    that predicts from them."""

    def moments(draw: dict[str, Array]) -> tuple[Array, ...]:
        _, likelihood = model.fitted(draw)
        mean, var = model.predict_f(draw, X_new, **data)
        return (mean, var, *likelihood.predict_mean_and_var(mean, var))

    f_mean, f_var, y_mean, y_var = _stacked(moments, samples, params)
    mixed = (*mixture_moments(f_mean, f_var), *mixture_moments(y_mean, y_var))
    return in_units(PosteriorPredictive(*(m.numpy() for m in mixed)), standardizer)


def log_predictive_density(
    model: Any,
    samples: Mapping[str, Array],
    X_new: Array,
    y_new: Array,
    *,
    params: Mapping[str, Array] | None = None,
    standardizer: Standardizer | None = None,
    **data: Array,
) -> np.ndarray:
    """log p(y_new | D) per test point (and output) under the mixture over draws: [S_new] or [S_new, P]; ``y_new``
    in the units the model was trained on (with ``standardizer``, the density of y in original units).

    Raises:
        ValueError: ``y_new`` has another number of rows than ``X_new``.
    """
    if len(y_new) != len(X_new):
        raise ValueError(f"y_new: expected {len(X_new)} rows like X_new, got shape {tuple(np.shape(y_new))}")
    (logp,) = _stacked(lambda draw: (model.predict_log_density(draw, X_new, y_new, **data),), samples, params)
    mixture = mixture_log_density(logp).numpy()
    return mixture if standardizer is None else standardizer.log_density_to_original(mixture)
