"""Posterior predictives as mixtures over posterior draws (NUTS, SG-MCMC, or draws from an SVI guide).

Each draw s (hyperparameters θ_s and, for SVGP/SGPMC/BSGP, inducing outputs u_s) gives a Gaussian
p(f_* | draw s) = N(m_s, v_s) from the model's ``predict_f`` and, through the likelihood, predictive moments
and densities of y. The posterior predictive is their equal-weight mixture (:mod:`ppl_sparsegp.core.mixtures`;
thesis §5.5; BSGP §2.5).

With a :class:`~ppl_sparsegp.data.Standardizer` the results are returned in the original units of y
(densities with the Jacobian of the standardisation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import Predictive

from ppl_sparsegp.core.mixtures import mixture_log_density, mixture_moments
from ppl_sparsegp.data import Standardizer
from ppl_sparsegp.infer import hot_path
from ppl_sparsegp.validation import check_count

Array = Any


@dataclass
class PosteriorPredictive:
    """Moments of the mixture predictive at S new inputs: each [S] (one output) or [S, P]."""

    f_mean: np.ndarray
    f_var: np.ndarray
    y_mean: np.ndarray
    y_var: np.ndarray


def _num_draws(samples: Mapping[str, Array]) -> int:
    sizes = {int(np.shape(v)[0]) for v in samples.values()}
    if len(sizes) != 1:
        raise ValueError(f"samples: expected every site to have the same number of draws, got sizes {sorted(sizes)}")
    return sizes.pop()


def _map_draws(
    fn: Callable,
    samples: Mapping[str, Array],
    params: Mapping[str, Array] | None,
    batch: int,
    key: Array | None,
    arrays: Mapping[str, Array],
) -> Any:
    """Apply ``fn(draw, kwargs, arrays)`` to every draw (with ``params`` filling the sites a draw does not hold); with
    a ``key``, ``kwargs`` holds a key of its own for every draw (models whose prediction is random), else it is
    empty. ``arrays`` (name -> array: the inputs and training data ``fn`` reads), the draws and ``params`` are
    arguments of the compiled program, never constants of it (XLA would fold a product with the data at compile
    time)."""
    if not samples:
        raise ValueError("samples: expected at least one site with posterior draws, got none")
    n = _num_draws(samples)
    fixed = jax.tree_util.tree_map(jnp.asarray, dict(params or {}))
    draws = {k: jnp.asarray(v) for k, v in samples.items()}
    keys = None if key is None else jax.random.split(key, n)

    def over_draws(draws: dict, keys: Array | None, fixed: dict, arrays: dict) -> Any:
        def one(pair: tuple) -> Any:
            draw, draw_key = pair
            return fn({**fixed, **draw}, {} if draw_key is None else {"key": draw_key}, arrays)

        return jax.lax.map(one, (draws, keys), batch_size=batch)

    arrays = jax.tree_util.tree_map(jnp.asarray, dict(arrays))
    return hot_path.EscalatingJit(over_draws, "predictions over draws")(draws, keys, fixed, arrays)


def draw_moments(
    model: Any,
    samples: Mapping[str, Array],
    X_new: Array,
    *,
    params: Mapping[str, Array] | None = None,
    batch: int = 64,
    key: Array | None = None,
    **data: Array,
) -> tuple[Array, Array, Array, Array]:
    """Per-draw Gaussian moments of f and predictive moments of y at ``X_new`` [S_new, D].

    Args:
        model: a model from :mod:`ppl_sparsegp.models` (its ``predict_f`` and likelihood are used).
        samples: site -> [num_draws, ...] (e.g. ``MCMCResult.flat_samples()``).
        params: values for sites the draws do not hold (e.g. a learnt ``"Z"``).
        batch: draws evaluated at once (memory: batch × S_new × M).
        key: a PRNG key for models whose prediction draws random numbers (deep GPs propagate one draw of their
            inner layers per posterior draw); split into one key per draw.
        data: the training data when ``predict_f`` needs it (GPR, SGPR: ``X=``, ``y=``).

    Returns:
        (f_mean, f_var, y_mean, y_var), each [num_draws, S_new] or [num_draws, S_new, P].
    """

    def one(draw: dict, random: dict, arrays: dict) -> tuple:
        _, likelihood = model.fitted(draw)
        mean, var = model.predict_f(draw, arrays["X_new"], **random, **arrays["data"])
        return (mean, var, *likelihood.predict_mean_and_var(mean, var))

    return _map_draws(one, samples, params, batch, key, {"X_new": X_new, "data": data})


def posterior_predictive(
    model: Any,
    samples: Mapping[str, Array],
    X_new: Array,
    *,
    params: Mapping[str, Array] | None = None,
    standardizer: Standardizer | None = None,
    batch: int = 64,
    key: Array | None = None,
    **data: Array,
) -> PosteriorPredictive:
    """Mean and variance of the mixture predictive of f and y at ``X_new`` [S_new, D].

    Args: as :func:`draw_moments`; ``standardizer`` maps the results back to original units of y.
    """
    f_mean, f_var, y_mean, y_var = draw_moments(model, samples, X_new, params=params, batch=batch, key=key, **data)
    moments = (*mixture_moments(f_mean, f_var), *mixture_moments(y_mean, y_var))
    return in_units(PosteriorPredictive(*(np.asarray(m) for m in moments)), standardizer)


def in_units(moments: PosteriorPredictive, standardizer: Standardizer | None) -> PosteriorPredictive:
    """``moments`` in the original units of y (``standardizer``), or as they are (None)."""
    if standardizer is None:
        return moments
    return PosteriorPredictive(
        standardizer.inverse_mean(moments.f_mean),
        standardizer.inverse_var(moments.f_var),
        standardizer.inverse_mean(moments.y_mean),
        standardizer.inverse_var(moments.y_var),
    )


def log_predictive_density(
    model: Any,
    samples: Mapping[str, Array],
    X_new: Array,
    y_new: Array,
    *,
    params: Mapping[str, Array] | None = None,
    standardizer: Standardizer | None = None,
    batch: int = 64,
    key: Array | None = None,
    **data: Array,
) -> np.ndarray:
    """log p(y_new | D) per test point (and output) under the mixture: [S_new] or [S_new, P].

    ``y_new`` is in the units the model was trained on (standardised if a ``standardizer`` is given; the
    result is then the density of y in original units).
    """
    X_new, y_new = jnp.asarray(X_new), jnp.asarray(y_new)
    if y_new.shape[0] != X_new.shape[0]:
        raise ValueError(f"y_new: expected {X_new.shape[0]} rows like X_new, got shape {tuple(y_new.shape)}")

    def one(draw: dict, random: dict, arrays: dict) -> Array:
        return model.predict_log_density(draw, arrays["X_new"], arrays["y_new"], **random, **arrays["data"])

    logp = _map_draws(one, samples, params, batch, key, {"X_new": X_new, "y_new": y_new, "data": data})
    mixture = np.asarray(mixture_log_density(logp))
    return mixture if standardizer is None else standardizer.log_density_to_original(mixture)


def guide_sampler(guide: Callable, num_draws: int) -> Callable[..., dict[str, Array]]:
    """``(key, params, *guide_args, **guide_kwargs) -> site -> [num_draws, ...]``: draws of every latent site of a
    guide fitted to ``params``, to be called inside a compiled program (eager tracing is far slower) that takes the
    params and the guide's arguments as its own arguments (closed over, they would be constants of the program)."""
    check_count("num_draws", num_draws, minimum=1)

    def draw(key: Array, params: Mapping[str, Array], *guide_args: Array, **guide_kwargs: Array) -> dict[str, Array]:
        return Predictive(guide, params=dict(params), num_samples=num_draws)(key, *guide_args, **guide_kwargs)

    return draw


def guide_draws(
    guide: Callable, params: Mapping[str, Array], num_draws: int, *guide_args: Array, key: Array, **guide_kwargs: Array
) -> dict[str, np.ndarray]:
    """Draws of every latent site of a fitted guide: site -> [num_draws, ...] (the SVI "posterior samples")."""
    (args, kwargs), static = hot_path.split_static(guide_args, guide_kwargs)
    draws = jax.jit(guide_sampler(static.bind(guide), num_draws))(key, dict(params), *args, **kwargs)
    return {k: np.asarray(v) for k, v in draws.items()}
