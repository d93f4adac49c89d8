"""ArviZ output for every engine: InferenceData from NUTS/HMC, SG-MCMC and SVI runs, saved to and loaded from netCDF.

Groups written (ArviZ conventions, so ``az.summary``, ``az.rhat``, ``az.ess``, ``az.loo`` and ``az.waic`` work):

* ``posterior``: the sampled sites, dims (chain, draw, ...). Named dimensions follow the models' shapes:
  ``"u"`` [P, M] -> (latent, inducing_point), ``"Z"`` [M, D] -> (inducing_point, input_dim), a lengthscale
  [D] -> (input_dim,).
* ``sample_stats``: per-draw kernel statistics, renamed to ArviZ's names where one exists
  (diverging, acceptance_rate, step_size, n_steps, lp = -potential energy); the SG-MCMC kernels' own fields
  keep their names with "." replaced by "_".
* ``log_likelihood``: ``"y"`` [chain, draw, obs(, output)], the model's per-point log-likelihood terms
  (for SVGP/SGPMC the variational potential of each point, the factor the sampler targets).
* ``posterior_predictive``: ``"y"`` drawn once per posterior draw at the training inputs, from the draw's
  marginal p(f(x_n) | draw) and the likelihood.
* ``observed_data``: ``"y"``.
* ``predictions`` (:func:`with_predictions`): ``"y_mean"`` [chain, draw, point(, output)], each draw's predictive
  mean at new inputs (BSGP's test points), whose R-hat across chains :func:`predictive_rhat` computes.
* ``constant_data`` (:func:`with_constant_data`): fixed inputs of the model, e.g. a fixed Z.

ArviZ 0.x builds an ``az.InferenceData``; ArviZ >= 1.0 (Python >= 3.12) an ``xarray.DataTree`` with the same
groups, which its functions take in place of InferenceData.
"""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

from ppl_sparsegp import results, validation
from ppl_sparsegp.infer.mcmc import MCMCResult
from ppl_sparsegp.infer.svi import SVIResult
from ppl_sparsegp.numpyro.distributions import observation_distribution
from ppl_sparsegp.posterior.predict import draw_moments, guide_sampler

if TYPE_CHECKING:
    import xarray as xr

Array = Any

ARVIZ_MAJOR = int(importlib.metadata.version("arviz").split(".")[0])
"""ArviZ's major version, read from its metadata: arviz and xarray are imported by the functions that use them."""
STAT_NAMES = {
    "diverging": "diverging",
    "accept_prob": "acceptance_rate",
    "adapt_state.step_size": "step_size",
    "num_steps": "n_steps",
}


def site_dims(samples: Mapping[str, np.ndarray], num_inputs: int | None = None) -> dict[str, list[str]]:
    """Dimension names (beyond chain, draw) of the sites the models share; others get ArviZ's defaults.

    Args:
        samples: site -> [C, S, ...].
        num_inputs: D, to recognise ARD lengthscales [D].

    Deep GP sites ``"layer<l>.<name>"`` get dimensions of their own per layer (``"layer<l>_inducing_point"``...),
    as the layers' widths may differ.
    """
    dims: dict[str, list[str]] = {}
    for site, value in samples.items():
        shape = np.shape(value)[2:]
        layer, _, name = site.rpartition(".") if site.startswith("layer") else ("", "", site)
        prefix = f"{layer.split('.')[0]}_" if layer else ""  # deep GPs: "layer<l>.Z" -> "layer<l>_inducing_point"
        if name == "u" and len(shape) == 2:
            dims[site] = [f"{prefix}latent", f"{prefix}inducing_point"]
        elif name == "Z" and len(shape) == 2:
            dims[site] = [f"{prefix}inducing_point", f"{prefix}input_dim"]
        elif name.endswith("lengthscale") and len(shape) == 1 and (prefix or shape[0] == num_inputs):
            dims[site] = [f"{prefix}input_dim"]
    return dims


def _dataset(arrays: Mapping[str, Array], dims: Mapping[str, list[str]], leading: list[str]) -> xr.Dataset:
    import xarray as xr

    variables = {}
    for name, value in arrays.items():
        value = np.asarray(value)
        extra = list(dims.get(name, [f"{name}_dim_{i}" for i in range(value.ndim - len(leading))]))
        variables[name] = (leading + extra, value)
    ds = xr.Dataset(variables)
    return ds.assign_coords({d: np.arange(ds.sizes[d]) for d in ds.dims})


def to_inference_data(
    samples: Mapping[str, Array],
    *,
    sample_stats: Mapping[str, Array] | None = None,
    log_likelihood: Mapping[str, Array] | None = None,
    posterior_predictive: Mapping[str, Array] | None = None,
    observed_data: Mapping[str, Array] | None = None,
    dims: Mapping[str, list[str]] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> Any:
    """Assemble InferenceData (ArviZ 0.x) or a DataTree (ArviZ >= 1.0) from arrays: :func:`assemble` of
    :func:`inference_groups` (the same arguments)."""
    return assemble(
        inference_groups(samples, sample_stats=sample_stats, log_likelihood=log_likelihood,
                         posterior_predictive=posterior_predictive, observed_data=observed_data, dims=dims,
                         attrs=attrs)
    )  # fmt: skip


def inference_groups(
    samples: Mapping[str, Array],
    *,
    sample_stats: Mapping[str, Array] | None = None,
    log_likelihood: Mapping[str, Array] | None = None,
    posterior_predictive: Mapping[str, Array] | None = None,
    observed_data: Mapping[str, Array] | None = None,
    dims: Mapping[str, list[str]] | None = None,
    attrs: Mapping[str, Any] | None = None,
) -> dict[str, xr.Dataset]:
    """The groups of an InferenceData as xarray Datasets, group name -> Dataset, built with xarray alone (ArviZ is
    not imported: :func:`netcdf_file` writes them as ArviZ would, :func:`assemble` makes the InferenceData).

    Args:
        samples: site -> [C, S, ...] posterior draws.
        sample_stats: statistic -> [C, S].
        log_likelihood, posterior_predictive: variable -> [C, S, ...].
        observed_data: variable -> [...].
        dims: variable -> names of its dimensions beyond (chain, draw); for observed data, all its dimensions.
        attrs: attributes stored on every group (e.g. the engine and its settings).
    """
    dims = dict(dims or {})
    groups = {"posterior": _dataset(samples, dims, ["chain", "draw"])}
    for name, arrays in (
        ("sample_stats", sample_stats),
        ("log_likelihood", log_likelihood),
        ("posterior_predictive", posterior_predictive),
    ):
        if arrays:
            groups[name] = _dataset(arrays, dims, ["chain", "draw"])
    if observed_data:
        groups["observed_data"] = _dataset(observed_data, dims, [])
    for ds in groups.values():
        ds.attrs.update({k: str(v) for k, v in (attrs or {}).items()})
    return groups


def assemble(groups: Mapping[str, xr.Dataset]) -> Any:
    """InferenceData (ArviZ 0.x) or a DataTree (ArviZ >= 1.0) of ``groups`` (:func:`inference_groups`)."""
    if ARVIZ_MAJOR >= 1:
        import xarray as xr

        return xr.DataTree.from_dict(dict(groups))
    import arviz as az

    return az.InferenceData(**groups)


def _sample_stats(extra_fields: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    stats = {}
    for name, value in extra_fields.items():
        if name == "potential_energy":
            stats["lp"] = -np.asarray(value)
        else:
            stats[STAT_NAMES.get(name, name.replace(".", "_"))] = np.asarray(value)
    return stats


PER_DRAW_BATCH = 64
"""Draws evaluated at once (vmapped) by :func:`_per_draw`."""


def _per_draw(
    fns: Mapping[str, Callable],
    samples: Mapping[str, Array] | Callable[..., Mapping[str, Array]],
    params: Mapping[str, Array] | None,
    key: Array,
    data: Mapping[str, Array],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every ``fns[name](draw, index, key, data)`` over every draw of [C, S, ...] ``samples`` (``params`` filling the
    sites a draw does not hold), all in one compiled program. ``samples`` may also be a function ``(k, params, data)
    -> site -> [C, S, ...]`` that draws them inside that program, from the first key of ``jax.random.split(key)``
    (the ``fns`` then get the second). ``data`` (name -> array: the training data) and ``params`` are arguments of
    the program, never constants of it (XLA would fold the network or kernel products of the data at compile time).
    Returns the samples and name -> [C, S, ...]."""

    def program(given: Mapping[str, Array], fixed: Mapping[str, Array], data: Mapping[str, Array], key: Array):
        if callable(samples):
            draw_key, key = jax.random.split(key)
            given = samples(draw_key, fixed, data)
        C, S = next(iter(given.values())).shape[:2]
        flat = {k: jnp.reshape(v, (C * S, *v.shape[2:])) for k, v in given.items()}

        def one(x: tuple) -> dict:
            draw, index = x
            return {name: fn({**fixed, **draw}, index, key, data) for name, fn in fns.items()}

        out = jax.lax.map(one, (flat, jnp.arange(C * S)), batch_size=PER_DRAW_BATCH) if fns else {}
        return given, {name: v.reshape((C, S, *v.shape[1:])) for name, v in out.items()}

    fixed = jax.tree_util.tree_map(jnp.asarray, dict(params or {}))  # a site may hold a pytree (IDSGP's network)
    given = {} if callable(samples) else dict(samples)
    given, out = jax.device_get(jax.jit(program)(given, fixed, dict(data), key))
    return {k: np.asarray(v) for k, v in given.items()}, {k: np.asarray(v) for k, v in out.items()}


def observation_dims(y: Array) -> list[str]:
    """Dimension names of observations y [N] or [N, P]: ("obs",) or ("obs", "output")."""
    return ["obs"] if np.ndim(y) == 1 else ["obs", "output"]


LOG_LIKELIHOODS = ("potential", "predictive")
"""What a ``log_likelihood`` group holds per draw and data point: the model's own factor of y_n given the draw
(``"potential"``, :meth:`pointwise_log_likelihood`; for SVGP/SGPMC log φ(y_n | u, θ) = E_{p(f_n | u, θ)}[log
p(y_n | f_n)], the factor the sampler targets), or the predictive density of y_n given the draw, f_n integrated
out (``"predictive"``: log ∫ p(y_n | f) p(f | draw, x_n) df, :meth:`predict_log_density`), which every model has
and which puts PSIS-LOO of different methods on one footing (``ppl-sparsegp compare``). For a deep GP (a model
whose ``random_prediction`` is True) the inner layers are integrated out by :data:`RANDOM_PROPAGATIONS` propagated
draws per posterior draw: log (1/S) Σ_s p(y_n | draw, propagation s)."""
RANDOM_PROPAGATIONS = 16
"""Propagations of a deep GP's inner layers averaged per posterior draw in its predictive log-likelihood."""


def _data_groups(
    model: Any,
    samples: Mapping[str, Array] | Callable[..., Mapping[str, Array]],
    X: Array,
    y: Array,
    params: Mapping[str, Array] | None,
    key: Array,
    log_likelihood: bool | None,
    posterior_predictive: bool,
    log_likelihood_of: str = "potential",
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The samples (``samples``, or what the sampler ``samples`` drew: :func:`_per_draw`) and the data groups:
    ``observed_data``, and (one compiled program) ``log_likelihood`` and ``posterior_predictive``."""
    validation.check_choice("log_likelihood_of", log_likelihood_of, LOG_LIKELIHOODS)
    X, y = jnp.asarray(X), jnp.asarray(y)
    fns: dict[str, Callable] = {}
    if log_likelihood is not False:
        if log_likelihood_of == "predictive" and getattr(model, "random_prediction", False):

            def pointwise(d: dict, i: Array, key: Array, data: dict) -> Array:
                ll_key = jax.random.fold_in(jax.random.fold_in(key, 1), i)
                return model.predict_log_density(d, data["X"], data["y"], key=ll_key, num_samples=RANDOM_PROPAGATIONS)

        elif log_likelihood_of == "predictive":
            pointwise = lambda d, i, key, data: model.predict_log_density(d, data["X"], data["y"], **data)  # noqa: E731
        else:
            pointwise = lambda d, i, key, data: model.pointwise_log_likelihood(d, data["X"], data["y"])  # noqa: E731
        fns["log_likelihood"] = pointwise
    if posterior_predictive:

        def draw_y(d: dict, i: Array, key: Array, data: dict) -> Array:
            _, likelihood = model.fitted(d)
            mean, var = model.predict_f(d, data["X"], **data)
            f_key, y_key = jax.random.split(jax.random.fold_in(key, i))
            f = mean + jnp.sqrt(jnp.clip(var, 0.0)) * jax.random.normal(f_key, jnp.shape(mean), mean.dtype)
            return observation_distribution(likelihood, f).sample(y_key)

        fns["posterior_predictive"] = draw_y
    try:
        drawn, computed = _per_draw(fns, samples, params, key, {"X": X, "y": y})
    except NotImplementedError:  # the model has no pointwise log-likelihood (raised while tracing it)
        if log_likelihood or "log_likelihood" not in fns:
            raise
        del fns["log_likelihood"]
        drawn, computed = _per_draw(fns, samples, params, key, {"X": X, "y": y})
    return drawn, {"observed_data": {"y": np.asarray(y)}, **{group: {"y": v} for group, v in computed.items()}}


def _mcmc_parts(result: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]]:
    """Draws [C, S, ...], per-draw statistics [C, S] and the run's attributes of an :class:`MCMCResult` or of a
    plain ``numpyro.infer.MCMC`` that has run.

    Raises:
        ValueError: ``result`` is neither, or an ``MCMC`` that has not run.
    """
    if isinstance(result, MCMCResult):
        attrs = {"engine": result.kernel_name, "num_warmup": result.num_warmup, "thinning": result.thinning}
        return result.samples, result.extra_fields, attrs
    if not isinstance(result, MCMC):
        raise ValueError(f"result: expected an MCMCResult (run_mcmc) or a numpyro.infer.MCMC, got {type(result)!r}")
    try:
        samples = result.get_samples(group_by_chain=True)
    except (AssertionError, AttributeError, KeyError, TypeError):  # NumPyro asserts `run` came first (not under -O)
        raise ValueError("result: this numpyro.infer.MCMC has no draws yet; call its .run(...) first") from None
    extra = result.get_extra_fields(group_by_chain=True)
    attrs = {"engine": type(result.sampler).__name__, "num_warmup": result.num_warmup, "thinning": result.thinning}
    as_numpy = lambda tree: {k: np.asarray(v) for k, v in tree.items()}  # noqa: E731
    return as_numpy(samples), as_numpy(extra), attrs


def group_names(idata: Any) -> list[str]:
    """The groups of an InferenceData (ArviZ 0.x) or the children of a DataTree (ArviZ >= 1.0)."""
    return list(idata.children) if hasattr(idata, "children") else list(idata.groups())


def from_mcmc(
    result: MCMCResult | MCMC,
    model: Any,
    X: Array,
    y: Array,
    *,
    params: Mapping[str, Array] | None = None,
    key: Array | None = None,
    log_likelihood: bool | None = None,
    posterior_predictive: bool = True,
    log_likelihood_of: str = "potential",
    dims: Mapping[str, list[str]] | None = None,
) -> Any:
    """InferenceData for an MCMC run (NUTS, HMC or an SG-MCMC kernel) of a model from :mod:`ppl_sparsegp.models`.

    Args:
        result: from :func:`ppl_sparsegp.infer.mcmc.run_mcmc`, or a ``numpyro.infer.MCMC`` that has run.
        model: the model object whose ``.model`` was sampled.
        X [N, D], y [N] or [N, P]: the training data.
        params: values of non-sampled sites (e.g. a learnt ``"Z"``), as for prediction.
        key: PRNG key for the posterior predictive draws (default key 0).
        log_likelihood: None (include when the model has pointwise terms), True (require) or False.
        posterior_predictive: include posterior predictive draws of y at X.
        log_likelihood_of: what the log_likelihood group holds, ``"potential"`` or ``"predictive"``
            (:data:`LOG_LIKELIHOODS`); recorded as the attribute ``log_likelihood``.
        dims: dimension names of sites, replacing those of :func:`site_dims`.
    """
    samples, extra_fields, attrs = _mcmc_parts(result)
    key = jax.random.PRNGKey(0) if key is None else key
    _, groups = _data_groups(model, samples, X, y, params, key, log_likelihood, posterior_predictive, log_likelihood_of)
    dims = {**site_dims(samples, np.shape(X)[1]), "y": observation_dims(y), **(dims or {})}
    attrs = {**attrs, "log_likelihood": log_likelihood_of if "log_likelihood" in groups else "none"}
    return to_inference_data(samples, sample_stats=_sample_stats(extra_fields), dims=dims, attrs=attrs, **groups)


def svi_groups(
    model: Any,
    params: Mapping[str, Array],
    X: Array,
    y: Array,
    *,
    num_draws: int = 1000,
    key: Array | None = None,
    log_likelihood: bool | None = None,
    posterior_predictive: bool = True,
    log_likelihood_of: str = "potential",
    local: Collection[str] = (),
) -> dict[str, xr.Dataset]:
    """The groups (:func:`inference_groups`) of :func:`from_svi`'s InferenceData for an SVI fit: ``num_draws`` draws
    of the fitted guide as one chain.

    u at draws of q(u); the hyperparameters at their point estimates (constant over the draws; the attribute
    ``point_estimates`` names them). ``local``: sites with one value per data point (IDSGP's u [N, M]) that are
    drawn for the log-likelihood and the predictive but not kept in the posterior group. Other arguments as
    :func:`from_mcmc`.
    """
    key = jax.random.PRNGKey(0) if key is None else key
    draw = guide_sampler(model.guide, num_draws)
    one_chain = lambda k, fitted, data: {site: v[None] for site, v in draw(k, fitted, data["X"], data["y"]).items()}  # noqa: E731
    samples, groups = _data_groups(
        model, one_chain, X, y, params, key, log_likelihood, posterior_predictive, log_likelihood_of
    )
    points = [s for s in model.hyperparameter_sites() if s in params and s not in samples]
    kept = {k: v for k, v in samples.items() if k not in local}
    kept.update({s: np.broadcast_to(np.asarray(params[s]), (1, num_draws, *np.shape(params[s]))) for s in points})
    dims = {**site_dims(kept, np.shape(X)[1]), "y": observation_dims(y)}
    attrs = {"engine": "SVI", "log_likelihood": log_likelihood_of if "log_likelihood" in groups else "none",
             "point_estimates": ", ".join(points)}  # fmt: skip
    return inference_groups(kept, dims=dims, attrs=attrs, **groups)


def from_svi(
    model: Any,
    params: Mapping[str, Array],
    X: Array,
    y: Array,
    *,
    num_draws: int = 1000,
    key: Array | None = None,
    log_likelihood: bool | None = None,
    posterior_predictive: bool = True,
    log_likelihood_of: str = "potential",
    local: Collection[str] = (),
) -> Any:
    """InferenceData for an SVI fit: ``num_draws`` draws of the fitted guide as one chain (:func:`svi_groups`,
    the same arguments, assembled)."""
    return assemble(
        svi_groups(model, params, X, y, num_draws=num_draws, key=key, log_likelihood=log_likelihood,
                   posterior_predictive=posterior_predictive, log_likelihood_of=log_likelihood_of, local=local)
    )  # fmt: skip


def from_fit(fit: SVIResult | MCMCResult | MCMC, model: Any, X: Array, y: Array, **options: Any) -> Any:
    """InferenceData of any engine's result (``psg.to_inference_data``): :func:`from_svi` for an ``SVIResult``
    (:func:`ppl_sparsegp.infer.svi.fit_svi`, its fitted ``params``), :func:`from_mcmc` for an ``MCMCResult`` or a
    ``numpyro.infer.MCMC`` that has run; ``options`` go to that function.

    Raises:
        ValueError: ``fit`` is none of these.
    """
    if isinstance(fit, SVIResult):
        return from_svi(model, fit.params, X, y, **options)
    if isinstance(fit, MCMCResult | MCMC):
        return from_mcmc(fit, model, X, y, **options)
    raise ValueError(f"fit: expected an SVIResult, an MCMCResult or a numpyro.infer.MCMC, got {type(fit).__name__}")


RHAT_THRESHOLD = 1.1
"""The usual bound on R-hat below which chains are taken to agree (BSGP reports R-hat < 1.1 on AIRLINE)."""
RHAT_MIN_CHAINS, RHAT_MIN_DRAWS = 2, 4
"""Chains and draws per chain that :func:`predictive_rhat` needs (ArviZ's R-hat is NaN with fewer)."""


@dataclass(frozen=True)
class PredictiveRhat:
    """R-hat across chains of the per-draw predictive means at test points (BSGP paper §4.2, AIRLINE: 4 chains,
    R-hat 1.02 ± 0.045 over the test points).

    Attributes:
        means: E[y | draw] per chain, draw and point, [C, S, N] or [C, S, N, P], in the units they were given in
            (R-hat is rank-based: an increasing affine map of them changes it only by rounding).
        rhat: ArviZ's rank-normalised split R-hat per point, [N] or [N, P].
        threshold: the bound :attr:`fraction_below` counts against.
    """

    means: np.ndarray
    rhat: np.ndarray
    threshold: float = RHAT_THRESHOLD

    @property
    def max(self) -> float:
        """The largest R-hat over the points (NaN if a point's means are constant over every draw)."""
        return float(np.max(self.rhat))

    @property
    def fraction_below(self) -> float:
        """The fraction of points with R-hat < :attr:`threshold`."""
        return float(np.mean(self.rhat < self.threshold))

    def summary(self) -> dict[str, float | int]:
        """max, mean and SD over the points (the paper reports mean ± SD), the fraction below the threshold, and
        the numbers of chains, draws per chain and points (outputs counted as points)."""
        C, S = self.means.shape[:2]
        return {
            "max": self.max, "mean": float(np.mean(self.rhat)), "sd": float(np.std(self.rhat)),
            "fraction_below": self.fraction_below, "threshold": self.threshold, "chains": C, "draws_per_chain": S,
            "points": int(self.rhat.size),
        }  # fmt: skip


def prediction_dims(means: np.ndarray) -> list[str]:
    """Dimension names beyond (chain, draw) of per-draw predictions [C, S, N] or [C, S, N, P]."""
    return ["point"] if np.ndim(means) == 3 else ["point", "output"]


def predictive_means(
    model: Any,
    result: MCMCResult | MCMC,
    X_new: Array,
    *,
    params: Mapping[str, Array] | None = None,
    key: Array | None = None,
) -> np.ndarray:
    """E[y | draw] at ``X_new`` [N, D] for every kept draw of every chain: [C, S, N] or [C, S, N, P].

    Args:
        model: a NumPyro model object of :mod:`ppl_sparsegp.models` (its ``predict_f`` and likelihood).
        result: an :class:`MCMCResult`, from either engine (the Pyro runner :func:`ppl_sparsegp.pyro.mcmc.run_mcmc`
            returns the same class, and the Pyro twins' sites have the NumPyro models' names), or a
            ``numpyro.infer.MCMC`` that has run.
        params, key: as :func:`ppl_sparsegp.posterior.predict.draw_moments` (a deep GP needs ``key``).
    """
    samples = _mcmc_parts(result)[0]
    C, S = next(iter(samples.values())).shape[:2]
    flat = {k: np.reshape(v, (C * S, *np.shape(v)[2:])) for k, v in samples.items()}
    y_mean = np.asarray(draw_moments(model, flat, X_new, params=params, key=key)[2])
    return y_mean.reshape((C, S, *y_mean.shape[1:]))


def predictive_rhat(means: Array, threshold: float = RHAT_THRESHOLD) -> PredictiveRhat:
    """ArviZ's R-hat (rank-normalised, split) of per-draw predictive means [C, S, N] or [C, S, N, P] (e.g. from
    :func:`predictive_means`), point by point: the chains' halves compared (split R-hat; :func:`rhat_defined`).

    Raises:
        ValueError: ``means`` is not [C, S, N(, P)] with C >= :data:`RHAT_MIN_CHAINS`, S >=
            :data:`RHAT_MIN_DRAWS` and finite values, or ``threshold`` is not > 1.
    """
    import arviz as az
    import xarray as xr

    means = np.asarray(means, dtype=float)
    if means.ndim not in (3, 4) or not rhat_defined(means) or 0 in means.shape:
        raise ValueError(
            f"means: expected [chains >= {RHAT_MIN_CHAINS}, draws >= {RHAT_MIN_DRAWS}, points(, outputs)], got "
            f"shape {means.shape}"
        )
    if not np.all(np.isfinite(means)):
        raise ValueError("means: expected finite predictive means")
    if not (isinstance(threshold, int | float) and threshold > 1):
        raise ValueError(f"threshold: expected a number > 1, got {threshold!r}")
    data = xr.Dataset({"y_mean": (["chain", "draw", *prediction_dims(means)], means)})
    return PredictiveRhat(means, np.asarray(az.rhat(data)["y_mean"]), float(threshold))


def rhat_defined(means: Array) -> bool:
    """Whether per-draw values [C, S, ...] have the chains and draws R-hat needs (:data:`RHAT_MIN_CHAINS`,
    :data:`RHAT_MIN_DRAWS`)."""
    shape = np.shape(means)
    return len(shape) >= 2 and shape[0] >= RHAT_MIN_CHAINS and shape[1] >= RHAT_MIN_DRAWS


def with_predictions(idata: Any, means: Array, X_new: Array) -> Any:
    """``idata`` with a ``predictions`` group holding ``"y_mean"``, per-draw predictive means [C, S, N(, P)] at
    new inputs, and a ``predictions_constant_data`` group holding those inputs ``"X"`` [N, D] (ArviZ's groups for
    out-of-sample predictions; ``posterior_predictive`` is for replicates of the observed data)."""
    means, X_new = np.asarray(means), np.asarray(X_new)
    groups = {
        "predictions": _dataset({"y_mean": means}, {"y_mean": prediction_dims(means)}, ["chain", "draw"]),
        "predictions_constant_data": _dataset({"X": X_new}, {"X": ["point", "input_dim"]}, []),
    }
    if ARVIZ_MAJOR >= 1:
        import xarray as xr

        for name, group in groups.items():
            idata[name] = xr.DataTree(group)
    else:
        idata.add_groups(groups)
    return idata


def with_constant_data(idata: Any, arrays: Mapping[str, Array]) -> Any:
    """``idata`` with a ``constant_data`` group of ``arrays`` (name -> array: fixed inputs of the model such as a
    fixed Z, the data's standardisation), which :func:`ppl_sparsegp.runs.load_run` reads back."""
    group = _dataset(arrays, {}, [])
    if ARVIZ_MAJOR >= 1:
        import xarray as xr

        idata["constant_data"] = xr.DataTree(group)
    else:
        idata.add_groups(constant_data=group)
    return idata


def save(idata: Any, path: str | os.PathLike) -> Path:
    """Write InferenceData (or a DataTree) to netCDF atomically: a temporary file in the same folder, renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~results.current_umask())  # mkstemp creates 0600; give the file the usual permissions
    try:
        idata.to_netcdf(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


NETCDF_GROUP_ORDER = (
    "posterior", "posterior_predictive", "predictions", "log_likelihood", "sample_stats", "observed_data",
    "constant_data", "predictions_constant_data",
)  # fmt: skip
"""The order in which ArviZ 0.x holds (and writes) the groups this module builds."""


def netcdf_file(idata: Any) -> results.FileWriter:
    """A writer of InferenceData (or a DataTree) as netCDF, for :func:`ppl_sparsegp.results.write_output_set`; or
    of a dict of groups (:func:`inference_groups`, :func:`svi_groups`), written as their InferenceData would be
    without importing ArviZ: with ArviZ 0.x each group a netCDF group (h5netcdf, zlib on the numeric variables,
    in :data:`NETCDF_GROUP_ORDER`), with ArviZ >= 1.0 as their DataTree."""
    if not isinstance(idata, dict):
        return lambda path: idata.to_netcdf(str(path))
    if ARVIZ_MAJOR >= 1:
        return lambda path: assemble(idata).to_netcdf(str(path))
    order = [g for g in NETCDF_GROUP_ORDER if g in idata] + [g for g in idata if g not in NETCDF_GROUP_ORDER]

    def write(path: Path) -> None:
        for i, name in enumerate(order):
            group = idata[name]
            encoding = {v: {"zlib": True} for v, values in group.variables.items() if values.dtype.kind in "biufcS"}
            group.to_netcdf(str(path), mode="a" if i else "w", group=name, engine="h5netcdf", encoding=encoding)

    return write


def load(path: str | os.PathLike) -> Any:
    """Read what :func:`save` wrote (fully into memory, so the file is closed)."""
    if ARVIZ_MAJOR >= 1:
        import xarray as xr

        return xr.open_datatree(path).load()
    import arviz as az

    idata = az.from_netcdf(path)
    idata.load()
    return idata


def summary(idata: Any, var_names: list[str] | None = None) -> Any:
    """``az.summary`` (mean, sd, HDI, MCSE, ESS, R-hat) as a pandas DataFrame."""
    import arviz as az

    return az.summary(idata, var_names=var_names)
