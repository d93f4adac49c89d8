"""The arrays of a run folder, both ways: params.npz (fitted parameters, a network's weights one array per leaf,
and the standardisation), posterior.nc's ``constant_data``, results.json read and checked, and the posterior.nc of
a fit by SVI; :class:`StoredRun`, what a folder holds. Nothing here executes what it reads: npz without pickle,
JSON, netCDF.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ppl_sparsegp import data
from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.numpyro.idsgp import IDSGP
from ppl_sparsegp.posterior import diagnostics

STANDARDIZER = "standardizer."
"""Prefix of the standardisation's arrays in params.npz and in posterior.nc's constant_data."""
POSTERIOR_FLOPS = 10**11
"""Budget of the predictive log-likelihood of an SVI fit's posterior.nc: draws x N x M^2 (IDSGP: x M^3, a
factorisation per input), with 10 to 100 draws."""


def standardizer_arrays(scaler: data.Standardizer) -> dict[str, np.ndarray]:
    """The standardisation as ``standardizer.<name>`` arrays (params.npz, posterior.nc's constant_data)."""
    return {f"{STANDARDIZER}{k}": np.asarray(v) for k, v in vars(scaler).items()}


def split_standardizer(arrays: Mapping[str, np.ndarray], path: Path) -> tuple[dict, data.Standardizer]:
    """The arrays of ``path`` without the standardisation, and the standardisation.

    Raises:
        ValueError: one of the ``standardizer.<name>`` arrays is missing (the message names ``path``).
    """
    names = ("x_mean", "x_scale", "y_mean", "y_scale")
    missing = [n for n in names if STANDARDIZER + n not in arrays]
    if missing:
        raise ValueError(f"{path}: no standardisation stored ({', '.join(STANDARDIZER + n for n in missing)})")
    scaler = data.Standardizer(*(np.asarray(arrays[STANDARDIZER + n]) for n in names))
    return {k: v for k, v in arrays.items() if not k.startswith(STANDARDIZER)}, scaler


def flat_params(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Fitted parameters as arrays, a site holding a pytree (such as a network's weights) as one array per leaf,
    ``<site><path>``, e.g. ``network$params.layers[0].weight``."""
    leaves = {k: jax.tree_util.tree_flatten_with_path(v)[0] for k, v in params.items()}
    return {k + jax.tree_util.keystr(path): np.asarray(a) for k, found in leaves.items() for path, a in found}


def params_arrays(params: Mapping[str, Any], scaler: data.Standardizer) -> dict[str, np.ndarray]:
    """params.npz's arrays: :func:`flat_params` (standardised units) and the standardisation
    (``standardizer.<name>``)."""
    return {**flat_params(params), **standardizer_arrays(scaler)}


def nested_params(arrays: Mapping[str, np.ndarray], templates: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`flat_params`: each site of ``templates`` (site -> a pytree of the site's
    structure, e.g. a network's initial weights) rebuilt from its ``<site><path>`` arrays; other sites as they are.

    Raises:
        ValueError: an array of a templated site is missing or has another shape.
    """
    nested = {k: v for k, v in arrays.items() if not any(k.startswith(site) for site in templates)}
    for site, template in templates.items():
        found, treedef = jax.tree_util.tree_flatten_with_path(template)
        leaves = []
        for path, like in found:
            name = site + jax.tree_util.keystr(path)
            if name not in arrays or np.shape(arrays[name]) != np.shape(like):
                got = np.shape(arrays[name]) if name in arrays else "nothing"
                raise ValueError(f"params.npz: expected {name} of shape {np.shape(like)}, got {got}")
            leaves.append(arrays[name])
        nested[site] = jax.tree_util.tree_unflatten(treedef, leaves)
    return nested


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


def read_posterior(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Draws (site -> [S, ...], chains flattened) and constant data of the posterior.nc at ``path``.

    Raises:
        ValueError: the file is damaged or not an InferenceData with a posterior and constant_data.
    """
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


def svi_posterior(gp: Any, params: Mapping[str, Any], X: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """posterior.nc's groups (:func:`ppl_sparsegp.posterior.diagnostics.svi_groups`, written by
    :func:`~ppl_sparsegp.posterior.diagnostics.netcdf_file`) of a fit by SVI on ``X`` [N, D], ``y`` (standardised):
    draws of q(u) (sgpr, gpr: of the optimal q*(u), :meth:`as_svgp`; IDSGP: of every input's own q(u | x_n), used
    but not kept), the hyperparameters' point estimates, the ``"predictive"`` log-likelihood of every training point
    (what :func:`ppl_sparsegp.runs.compare_runs` reads; none for IDSGP, see
    :data:`ppl_sparsegp.runs.compare.NOT_COMPARED`), posterior predictive draws of y and the observed y; 10 to 100
    draws within :data:`POSTERIOR_FLOPS`."""
    model, params = gp.as_svgp(params, X, y) if hasattr(gp, "as_svgp") else (gp, params)
    per_input = isinstance(model, IDSGP)
    model = replace(model, batch_size=None)  # u of every training input, not of a minibatch
    M = model.num_inducing
    cost = X.shape[0] * (M**3 if per_input else M**2)
    draws = int(np.clip(POSTERIOR_FLOPS // cost, 10, 100))
    per_input_options = {"log_likelihood": False, "local": ("u",)} if per_input else {}
    return diagnostics.svi_groups(model, params, X, y, num_draws=draws, log_likelihood_of="predictive",
                                  **per_input_options)  # fmt: skip


@dataclass
class StoredRun:
    """What a run folder holds, for the method's rebuilder in :data:`ppl_sparsegp.runs.rebuild.MODEL_FROM_RUN`.

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
    _dataset: data.Dataset | None = field(default=None, repr=False)
    _standardised_data: data.Dataset | None = field(default=None, repr=False)

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
        std = self._standardised()
        return std.X_train.astype(self.dtype), std.y_train.astype(self.dtype)

    def evaluation(self) -> tuple[np.ndarray, np.ndarray]:
        """The points the run was evaluated on (results.json's ``evaluated_on``: the test split, else the training
        set), in original units: X [S, D] and y [S] (or [S, P]; class labels for classification)."""
        self._standardised()
        ds = self._dataset
        return (ds.X_test, ds.y_test) if self.record.get("evaluated_on", "test") == "test" else (ds.X_train, ds.y_train)

    def _standardised(self) -> data.Dataset:
        """The run's dataset (``--data``, ``--split``, ``--target``), standardised, checked against the stored
        standardisation."""
        if self._standardised_data is None:
            name, split = self.record["data"], self.record["split"]
            try:
                ds = data.load_dataset(name, split, self.options.get("target"))
                ds = data.as_multiclass(ds) if self.record["task"] == "multiclass" else ds
                std, scaler = data.standardize(ds)
            except (ValueError, OSError) as err:
                raise ValueError(f"{self.folder}: the {self.record['method']} run's data {name} (split {split}) "
                                 f"could not be loaded: {err}") from None  # fmt: skip
            for key, value in vars(scaler).items():
                if not np.allclose(value, getattr(self.scaler, key), rtol=1e-12, atol=0.0):
                    raise ValueError(f"{self.folder}: {name} (split {split}) is not the data this run was fitted on "
                                     f"(its standardisation differs in {key})")  # fmt: skip
            self._dataset, self._standardised_data = ds, std
        return self._standardised_data
