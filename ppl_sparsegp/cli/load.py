"""A run folder written by ``ppl-sparsegp fit``, loaded back (:func:`load_run`): the fitted model, its parameters or
posterior draws and the standardisation, predicting in original units.

A run folder holds data only: results.json (the method and every option), params.npz (the SVI methods: fitted
parameters in standardised units and ``standardizer.<name>``) or posterior.nc (sgpmc, bsgp: the draws, with the
standardisation and fixed inputs such as sgpmc's Z in its ``constant_data`` group). The model is rebuilt from the
options by the method's own module (``model_from_run(opts, stored)`` in ``ppl_sparsegp.cli.<method>``), the way its
``run`` built it; nothing in the folder is executed. Methods that predict from the training data (gpr, sgpr, the
collapsed selective bound) and deep BSGP (whose inner means are fitted to X) reload the dataset, and refuse it when
its standardisation differs from the stored one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ppl_sparsegp import data, results
from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.posterior.predict import draw_moments, mixture_moments

STANDARDIZER = "standardizer."
"""Prefix of the standardisation's arrays in params.npz and in posterior.nc's constant_data."""
DEFAULT_CHUNK = 10_000
"""Test points predicted per compiled call: memory stays bounded whatever the number of points."""


@dataclass
class StoredRun:
    """What a run folder holds, for a method's ``model_from_run(opts, stored)``.

    Attributes:
        record: results.json. arrays: params.npz or posterior.nc's constant_data, the standardisation left out.
        draws: posterior draws, site -> [S, ...] (chains flattened), or None for a fit by SVI.
        scaler: the training standardisation.
    """

    folder: Path
    record: dict[str, Any]
    arrays: dict[str, np.ndarray]
    draws: dict[str, np.ndarray] | None
    scaler: data.Standardizer
    _training: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def options(self) -> dict[str, Any]:
        return self.record["options"]

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.options["dtype"])

    @property
    def input_dim(self) -> int:
        return int(self.record["input_dim"])

    @property
    def num_outputs(self) -> int:
        return int(self.record["num_outputs"])

    def likelihood(self) -> likelihoods.Likelihood:
        """The likelihood of ``--likelihood`` (its parameters are read from the fitted values)."""
        noise, classes = self.options["noise_variance"], self.record.get("num_classes") or 2
        return likelihoods.likelihood_with_noise(self.options["likelihood"], noise, self.dtype, classes)

    def parts(self) -> dict[str, Any]:
        """The constructor arguments every sparse model shares: the ``--kernel`` over D inputs, the likelihood and,
        where the run stored one, ``Z`` (the fitted values are in the parameters)."""
        kernel = kernels.kernel_from_name(self.options["kernel"], self.input_dim, dtype=self.dtype)
        found = {"Z": self.arrays["Z"]} if "Z" in self.arrays else {}
        return {"kernel": kernel, "likelihood": self.likelihood(), **found}

    def training(self) -> tuple[np.ndarray, np.ndarray]:
        """The standardised training data X [N, D], y (``--dtype``), reloaded from ``--data`` and ``--split``.

        Raises:
            ValueError: the dataset cannot be loaded, or its standardisation is not the stored one.
        """
        if self._training is None:
            name, split = self.record["data"], self.record["split"]
            try:
                std, scaler = data.standardize(data.load_dataset(name, split, self.options.get("target")))
            except (ValueError, OSError) as err:
                raise ValueError(f"{self.folder}: the {self.record['method']} model predicts from its training data, "
                                 f"and {name} (split {split}) could not be loaded: {err}") from None  # fmt: skip
            for key, value in vars(scaler).items():
                if not np.allclose(value, getattr(self.scaler, key), rtol=1e-12, atol=0.0):
                    raise ValueError(f"{self.folder}: {name} (split {split}) is not the data this run was fitted on "
                                     f"(its standardisation differs in {key})")  # fmt: skip
            self._training = std.X_train.astype(self.dtype), std.y_train.astype(self.dtype)
        return self._training


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
        X_new = np.asarray(X_new, dtype=np.float64)
        if X_new.ndim != 2 or X_new.shape[1] != self.stored.input_dim:
            raise ValueError(f"X_new: expected [S, {self.stored.input_dim}] (the run's inputs), got {X_new.shape}")
        if not np.all(np.isfinite(X_new)):
            raise ValueError("X_new: contains NaN or inf")
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size: expected a positive integer, got {chunk_size!r}")
        X_std = self.scaler.transform_x(X_new).astype(self.stored.dtype)
        with jax.enable_x64(self.stored.dtype == np.float64):
            parts = [self._predict_std(X_std[i : i + chunk_size]) for i in range(0, len(X_std), chunk_size)]
        mean, var = (np.concatenate([p[k] for p in parts]) for k in range(2))
        if self.task != "regression":
            return mean, var
        return self.scaler.inverse_mean(mean), self.scaler.inverse_var(var)

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
    def _predictor(self) -> tuple[Any, Any, dict[str, Any]]:
        """The predictor compiled once for every chunk of one size, its state and the training data it reads: the
        mixture over the draws of an MCMC run (``key``: a deep model's inner-layer draws), else the point fit's
        ``predict_y``. An SGPR is turned once into the SVGP of its optimal q*(u) (:meth:`SGPR.as_svgp`, the same
        equations), so that every chunk costs O(chunk M²) rather than the O(N M²) of recomputing q*(u)."""
        model, params, training = self.model, self.params, self._training
        if self.draws is not None:
            key = self.key if hasattr(model, "num_layers") else None

            def mixture(state: tuple, X: jax.Array, data: dict) -> tuple[jax.Array, jax.Array]:
                draws, fixed = state
                _, _, y_mean, y_var = draw_moments(model, draws, X, params=fixed, key=key, **data)
                return mixture_moments(y_mean, y_var)

            return jax.jit(mixture), (self.draws, params), training
        if isinstance(model, SGPR):
            model, params = model.as_svgp(params, training["X"], training["y"])
            training = {}
        return jax.jit(lambda p, X, data: model.predict_y(p, X, **data)), params, training


def read_record(folder: Path) -> dict[str, Any]:
    """results.json of the run in ``folder``, checked to be one (one ``ValueError`` naming the file if not)."""
    path = folder / "results.json"
    if not path.is_file():
        raise ValueError(f"{folder}: no results.json (expected the output folder of `ppl-sparsegp fit`)")
    try:
        record = json.loads(path.read_text())
        record["method"], record["options"], record["input_dim"]  # noqa: B018  (the keys every run writes)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a run record of `ppl-sparsegp fit` ({type(err).__name__}: {err})") from None
    return record


def _split_standardizer(arrays: Mapping[str, np.ndarray], path: Path) -> tuple[dict, data.Standardizer]:
    names = ("x_mean", "x_scale", "y_mean", "y_scale")
    missing = [n for n in names if STANDARDIZER + n not in arrays]
    if missing:
        raise ValueError(f"{path}: no standardisation stored ({', '.join(STANDARDIZER + n for n in missing)})")
    scaler = data.Standardizer(*(np.asarray(arrays[STANDARDIZER + n]) for n in names))
    return {k: v for k, v in arrays.items() if not k.startswith(STANDARDIZER)}, scaler


def _read_posterior(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Draws (chains flattened) and constant data of posterior.nc."""
    try:
        idata = diagnostics.load(path)
        posterior, constant = idata["posterior"], idata["constant_data"]
    except Exception as err:  # a damaged or foreign file: say which, whatever netCDF raised
        raise ValueError(f"{path} is not a readable posterior of `ppl-sparsegp fit` ({type(err).__name__}: "
                         f"{' '.join(str(err).split())})") from None  # fmt: skip
    draws = {}
    for name, value in posterior.data_vars.items():
        value = np.asarray(value)
        draws[str(name)] = value.reshape((-1, *value.shape[2:]))
    return draws, {str(k): np.asarray(v) for k, v in constant.data_vars.items()}


def load_run(folder: str | os.PathLike) -> Run:
    """The run that ``ppl-sparsegp fit`` wrote to ``folder``, ready to predict (module docstring).

    Raises:
        ValueError: one line naming the folder or file when it is not a complete run of a known method.
    """
    from ppl_sparsegp.cli.__main__ import METHODS  # the method modules, each with model_from_run

    folder = Path(folder)
    record = read_record(folder)
    method = record["method"]
    if method not in METHODS:
        raise ValueError(f"{folder}: unknown method {method!r} in results.json (known: {', '.join(METHODS)})")
    params_path, posterior_path = folder / "params.npz", folder / "posterior.nc"
    if params_path.is_file():
        arrays, scaler = _split_standardizer(results.read_npz(params_path), params_path)
        draws = None
    elif posterior_path.is_file():
        draws, constant = _read_posterior(posterior_path)
        arrays, scaler = _split_standardizer(constant, posterior_path)
    else:
        raise ValueError(f"{folder}: neither params.npz nor posterior.nc (the fit did not finish writing its outputs)")
    stored = StoredRun(folder, record, arrays, draws, scaler)
    module = METHODS[method]
    model, params = module.model_from_run(record["options"], stored)
    run = Run(folder, record, model, params, draws, scaler, stored)
    if hasattr(module, "prediction_key"):
        run.key = module.prediction_key(record["options"])
    return run
