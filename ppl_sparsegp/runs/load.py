"""A run folder written by ``ppl-sparsegp fit``, loaded back (:func:`load_run`): the fitted model, its parameters or
posterior draws and the standardisation, predicting in original units (:meth:`Run.predict`), in chunks.

The model is rebuilt from results.json's options by the method's rebuilder
(:data:`ppl_sparsegp.runs.rebuild.MODEL_FROM_RUN`), the code that built it for the fit; nothing in the folder is
executed. Methods that predict from the training data (gpr, sgpr, the collapsed selective bound) and deep BSGP
(whose inner means are fitted to X) reload the dataset, and refuse it when its standardisation differs from the
stored one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ppl_sparsegp import data, results
from ppl_sparsegp.core.mixtures import mixture_moments
from ppl_sparsegp.infer import hot_path
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.posterior.predict import draw_moments, log_predictive_density
from ppl_sparsegp.runs.rebuild import MODEL_FROM_RUN, bsgp_prediction_key
from ppl_sparsegp.runs.store import StoredRun, read_posterior, read_record, split_standardizer

NOT_LOADABLE = {
    "sas": "a GP-LVM decoder maps its latents to the observations and has no inputs to predict at; rebuild it with "
    "ppl_sparsegp.recipes.sas_gplvm.build_sas and reconstruct with the arrays of params.npz",
}
"""Methods whose runs :func:`load_run` refuses, and why."""
DEFAULT_CHUNK = 10_000
"""Test points predicted per compiled call: memory stays bounded whatever the number of points."""


@dataclass
class Run:
    """A fitted run, loaded back: ``model``, ``params`` (fitted values, or fixed values beside ``draws``),
    ``draws`` (site -> [S, ...], MCMC runs) and ``scaler``; :meth:`predict` in original units (``key``: of a deep
    model's inner-layer draws, the run's own)."""

    folder: Path
    record: dict[str, Any]
    model: Any
    params: dict[str, np.ndarray]
    draws: dict[str, np.ndarray] | None
    scaler: data.Standardizer
    stored: StoredRun = field(repr=False)
    key: jax.Array = field(default_factory=lambda: jax.random.PRNGKey(0), repr=False)

    @property
    def method(self) -> str:
        return self.record["method"]

    @property
    def task(self) -> str:
        return self.record["task"]

    def predict(self, X_new: Any, *, chunk_size: int = DEFAULT_CHUNK) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and variance of y at ``X_new`` [S, D] (original units), ``chunk_size`` points at a time:
        [S] each (or [S, P]); for binary data the mean is p(y = 1), for multi-class data it is the class
        probabilities [S, J] (and the variance p (1 - p)). MCMC runs give the mixture over the draws.

        Raises:
            ValueError: ``X_new`` is not a finite [S, D] array, or ``chunk_size`` is not a positive integer.
        """
        X_std = self._standardised_inputs(X_new, chunk_size)
        with jax.enable_x64(self.stored.dtype == np.float64):
            parts = [self._predict_std(X_std[i : i + chunk_size]) for i in range(0, len(X_std), chunk_size)]
        mean, var = (np.concatenate([p[k] for p in parts]) for k in range(2))
        if self.task != "regression":
            return mean, var
        return self.scaler.inverse_mean(mean), self.scaler.inverse_var(var)

    def log_density(self, X_new: Any, y_new: Any, *, chunk_size: int = DEFAULT_CHUNK) -> np.ndarray:
        """log p(y_new | the run) per point, in original units for regression (summed over outputs), of the class
        label otherwise: X_new [S, D], y_new [S] (or [S, P]) -> [S]. MCMC runs give the density of the mixture over
        the draws; the run's test NLPD in results.json is minus the mean of this over its test points.

        Raises:
            ValueError: as :meth:`predict`, or ``y_new`` without one row per input.
        """
        X_std = self._standardised_inputs(X_new, chunk_size)
        y_new = np.asarray(y_new)
        if y_new.shape[:1] != X_std.shape[:1]:
            raise ValueError(f"y_new: expected {len(X_std)} rows like X_new, got shape {y_new.shape}")
        y_std = (self.scaler.transform_y(y_new) if self.task == "regression" else y_new).astype(self.stored.dtype)
        with jax.enable_x64(self.stored.dtype == np.float64):
            model, params, training = self._prepared  # formed in the run's precision
            parts = []
            for i in range(0, len(X_std), chunk_size):
                X, y = jnp.asarray(X_std[i : i + chunk_size]), jnp.asarray(y_std[i : i + chunk_size])
                if self.draws is None:
                    parts.append(np.asarray(self._point_log_density(params, X, y, training)))
                else:
                    key = self.key if hasattr(model, "num_layers") else None
                    parts.append(log_predictive_density(model, self.draws, X, y, params=params, key=key, **training))
        logp = np.concatenate(parts)
        logp = self.scaler.log_density_to_original(logp) if self.task == "regression" else logp
        return logp.reshape(len(logp), -1).sum(axis=1)

    def _standardised_inputs(self, X_new: Any, chunk_size: int) -> np.ndarray:
        """``X_new`` checked (finite [S, D]) and standardised, in the run's dtype."""
        X_new = np.asarray(X_new, dtype=np.float64)
        if X_new.ndim != 2 or X_new.shape[1] != self.stored.input_dim:
            raise ValueError(f"X_new: expected [S, {self.stored.input_dim}] (the run's inputs), got {X_new.shape}")
        if not np.all(np.isfinite(X_new)):
            raise ValueError("X_new: contains NaN or inf")
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size: expected a positive integer, got {chunk_size!r}")
        return self.scaler.transform_x(X_new).astype(self.stored.dtype)

    @cached_property
    def _point_log_density(self) -> Any:
        model = self._prepared[0]
        return hot_path.EscalatingJit(lambda p, X, y, data: model.predict_log_density(p, X, y, **data), "log densities")

    def _predict_std(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        predict, state, training = self._predictor
        mean, var = predict(state, jnp.asarray(X), training)
        return np.asarray(mean), np.asarray(var)

    @property
    def _training(self) -> dict[str, np.ndarray]:
        """``X``, ``y`` of the training data for a model that predicts from it, else nothing."""
        if not getattr(self.model, "predicts_from_data", False):
            return {}
        return dict(zip(("X", "y"), self.stored.training(), strict=True))

    @cached_property
    def _prepared(self) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """The model, its parameters and the training data it predicts from, as prediction uses them: an SGPR is
        turned once into the SVGP of its optimal q*(u) (:meth:`SGPR.as_svgp`, the same equations), so that every
        chunk costs O(chunk M²) rather than the O(N M²) of recomputing q*(u). A GPR keeps the Cholesky factor of
        K + σ²I (:meth:`GPR.with_posterior_factor`), the exact path's own, so that a chunk costs O(chunk N²) rather
        than O(N³). Called inside the run's precision (``jax.enable_x64``): formed outside, the factors are float32."""
        model, params, training = self.model, self.params, self._training
        if self.draws is None and isinstance(model, SGPR):
            model, params = model.as_svgp(params, training["X"], training["y"])
            training = {}
        if self.draws is None and isinstance(model, GPR):
            params = model.with_posterior_factor(params, training["X"], training["y"])
        return model, params, training

    @cached_property
    def _predictor(self) -> tuple[Any, Any, dict[str, Any]]:
        """The predictor compiled once for every chunk of one size, its state and the training data it reads: the
        mixture over the draws of an MCMC run (``key``: a deep model's inner-layer draws), else the point fit's
        ``predict_y`` (of :attr:`_prepared`)."""
        model, params, training = self._prepared
        if self.draws is not None:
            key = self.key if hasattr(model, "num_layers") else None

            def mixture(state: tuple, X: jax.Array, data: dict) -> tuple[jax.Array, jax.Array]:
                draws, fixed = state
                _, _, y_mean, y_var = draw_moments(model, draws, X, params=fixed, key=key, **data)
                return mixture_moments(y_mean, y_var)

            return hot_path.EscalatingJit(mixture, "predictions"), (self.draws, params), training
        return hot_path.EscalatingJit(lambda p, X, data: model.predict_y(p, X, **data), "predictions"), params, training


def load_run(folder: str | os.PathLike) -> Run:
    """The run that ``ppl-sparsegp fit`` wrote to ``folder``, ready to predict (module docstring).

    Raises:
        ValueError: one line naming the folder or file when it is not a complete run of a known method.
    """
    folder = Path(folder)
    record = read_record(folder)
    method = record["method"]
    if method in NOT_LOADABLE:
        raise ValueError(f"{folder}: a {method} run cannot be loaded to predict: {NOT_LOADABLE[method]}")
    if method not in MODEL_FROM_RUN:
        known = ", ".join(MODEL_FROM_RUN)
        raise ValueError(f"{folder}: unknown method {method!r} in results.json (known: {known})")
    params_path, posterior_path = folder / "params.npz", folder / "posterior.nc"
    if params_path.is_file():
        arrays, scaler = split_standardizer(results.read_npz(params_path), params_path)
        draws = None
    elif posterior_path.is_file():
        draws, constant = read_posterior(posterior_path)
        arrays, scaler = split_standardizer(constant, posterior_path)
    else:
        raise ValueError(f"{folder}: neither params.npz nor posterior.nc (the fit did not finish writing its outputs)")
    stored = StoredRun(folder, record, arrays, draws, scaler)
    model, params = MODEL_FROM_RUN[method](record["options"], stored)
    run = Run(folder, record, model, params, draws, scaler, stored)
    if method == "bsgp":
        run.key = bsgp_prediction_key(record["options"])
    return run


def prediction_columns(mean: np.ndarray, var: np.ndarray, task: str, level: float) -> dict[str, np.ndarray]:
    """Column name -> [S] of the predictions ``mean``, ``var`` ([S] or [S, P]; multi-class: [S, J]) of a ``task``
    run: regression ``mean``, ``variance`` and the central ``level`` interval ``lower``, ``upper`` of a normal with
    that mean and variance (exact for a Gaussian likelihood's predictive, an approximation for mixtures over draws
    and for Student-t); binary ``p1`` = p(y = 1) and ``variance``; multi-class ``p0`` .. ``p<J-1>``. Several
    outputs get one set of columns each, suffixed ``_<output>``."""
    if task == "multiclass":
        return {f"p{k}": mean[:, k] for k in range(mean.shape[1])}
    from scipy import stats

    mean, var = np.atleast_2d(mean.T).T, np.atleast_2d(var.T).T
    z = stats.norm.ppf(0.5 + level / 2)
    columns = {}
    for p in range(mean.shape[1]):
        suffix = f"_{p}" if mean.shape[1] > 1 else ""
        if task == "binary":
            columns.update({f"p1{suffix}": mean[:, p], f"variance{suffix}": var[:, p]})
            continue
        sd = np.sqrt(np.clip(var[:, p], 0.0, None))
        columns.update({f"mean{suffix}": mean[:, p], f"variance{suffix}": var[:, p],
                        f"lower{suffix}": mean[:, p] - z * sd, f"upper{suffix}": mean[:, p] + z * sd})  # fmt: skip
    return columns
