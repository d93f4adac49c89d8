"""The ``ppl-sparsegp`` command line: fit GPR, SGPR, SVGP, SGPMC, BSGP or selective to a dataset, evaluate it, write
the results.

Usage::

    ppl-sparsegp fit {svgp,sgpr,gpr} [--data diabetes] [--split 0] [--inducing 128] [--steps 2000] ... [--out DIR]
    ppl-sparsegp fit sgpmc [--engine nuts|hmc|sghmc|sgld] [--warmup 500] [--samples 1000] ...   (see cli_mcmc)
    ppl-sparsegp fit bsgp [--data boston] [--layers 1] [--z-prior normal|dpp|strauss|uniform] ...  (see cli_bsgp)
    ppl-sparsegp fit selective [--candidates 100] [--alpha 0.1] [--bound collapsed|uncollapsed] ... (see cli_selective)
    ppl-sparsegp diagnose RUN_DIR

``ppl-sparsegp fit --help`` lists every option with its default. One run:

1. checks every option (``--out`` included: a folder this process can write, or create) and then the dataset
   (sizes, task, ``M <= N``) -- all before anything is compiled; a problem is a ``ValueError`` naming the option,
   printed as one line ``error: ...`` with exit code 2;
2. loads the dataset (:func:`ppl_sparsegp.data.load_dataset`) and standardises X (and y for regression) with
   training statistics (:func:`ppl_sparsegp.data.standardize`);
3. builds the model (ARD kernel with variance and lengthscales from the options, initial noise variance 0.1 in
   standardised units, inducing inputs by k-means, random subset or greedy variance selection);
4. fits it with :func:`ppl_sparsegp.infer.svi.fit_svi` and Adam (optax), checkpointing the SVI state to
   ``OUT/checkpoint.npz`` (:mod:`ppl_sparsegp.infer.checkpoint`) with a fingerprint of every option that changes
   the result and of the data; re-running the same command (``--steps`` may be raised) resumes from it, a run with
   any other difference is refused before any work, naming what differs, and ``--restart`` discards it;
5. predicts on the test set (the training set when the dataset has no test targets, e.g. ``snelson``) and
   computes metrics in original units: RMSE, MAE and NLPD for regression; accuracy, NLL, ECE and AUC for binary
   classification;
6. writes ``OUT/params.npz`` (fitted parameters in standardised units, plus the standardisation statistics),
   ``OUT/fit.png`` (loss trace and a picture of the fit) and ``OUT/results.json`` as one set
   (:func:`ppl_sparsegp.results.write_output_set`): a failure part-way leaves the previous set as it was.

Exit codes: 0 success; 2 bad options or data (argparse's own errors included), or a checkpoint in ``--out`` that
is damaged, non-finite or another run's; 1 a run-time failure that is not the user's input (missing or corrupt data
files, a failed Cholesky, a non-finite loss, a full disk), also as one line;
130 interrupted (Ctrl-C), after ``fit_svi`` has saved the checkpoint that a re-run resumes from.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import math
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import numpyro
import optax

from ppl_sparsegp import cli_bsgp, cli_mcmc, cli_selective, data, results, validation
from ppl_sparsegp.cli_checks import (
    RESTART_HINT,
    check_counts,
    check_output_folder,
    fingerprint_settings,
    flag,
    prepare_checkpoints,
)
from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.data import DataIntegrityError, Dataset, Standardizer
from ppl_sparsegp.inducing import initialise
from ppl_sparsegp.infer.checkpoint import CheckpointError
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models._base import GPModel, to_numpy_params
from ppl_sparsegp.models.gpr import GPR
from ppl_sparsegp.models.sgpr import SGPR
from ppl_sparsegp.models.svgp import SVGP
from ppl_sparsegp.reporting import evaluate, plot_fit, plt

METHODS = ("svgp", "sgpr", "gpr", "sgpmc", "bsgp", "selective")
INITIALISERS = ("kmeans", "random", "greedy")
DTYPES = ("float64", "float32")
GPR_MAX_N = 5000
"""Largest training set ``gpr`` accepts: its cost is O(N^3) time and O(N^2) memory per step."""
LIKELIHOODS_BY_TASK = {"regression": ("gaussian", "studentt"), "binary": ("bernoulli", "probit", "logit")}
DEFAULTS = {
    "data": "diabetes",
    "split": 0,
    "inducing": 128,
    "init": "kmeans",
    "steps": 2000,
    "lr": 0.01,
    "kernel": "rbf",
    "kernel_variance": 1.0,
    "lengthscale": 1.0,
    "noise_variance": 0.1,
    "whiten": True,
    "q_diag": False,
    "seed": 0,
    "dtype": "float64",
    "checkpoint_every": 500,
}
_SVGP_ONLY = ("whiten", "q_diag")
_UNCOLLAPSED_ONLY = ("batch_size", "likelihood")  # svgp, sgpmc, bsgp and selective (uncollapsed bound)
_SPARSE_ONLY = ("inducing", "init")
_NOT_BSGP = ("steps", "lr", "checkpoint_every", "kernel", "kernel_variance")  # None in the parser, so bsgp can refuse


# --------------------------------------------------------------------------------------------------------
# Command-line syntax


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ppl-sparsegp`` (one sub-command, ``fit``).

    Options that apply to some methods only default to ``None`` here, so that :func:`resolve_options` can tell
    an option the user gave (an error for the wrong method) from one left out (the documented default).
    """
    parser = argparse.ArgumentParser(
        prog="ppl-sparsegp", description="Sparse Gaussian processes as NumPyro programs, from the command line."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fit = commands.add_parser(
        "fit",
        help="fit a GP to a dataset, evaluate it on the test set and write the results",
        description="Fit a GP (svgp, sgpr or gpr) by SVI with Adam; write results.json, params.npz and fit.png "
        "to --out. Data are standardised with training statistics; metrics are in original units. Re-running the "
        "same command resumes from OUT/checkpoint.npz (a run with other settings is refused; --restart discards it). "
        "sgpmc and bsgp sample by MCMC, and selective chooses the inducing points from K candidates (see their "
        "option groups).",
    )
    fit.add_argument(
        "method",
        choices=METHODS,
        help="svgp (any likelihood), sgpr (collapsed bound), gpr (exact), sgpmc (MCMC over v and θ, Z from svgp), "
        "bsgp (SGHMC or NUTS over v, Z and θ; deep with --layers > 1), selective (probabilistic selection of the "
        "inducing points from --candidates K, then a pruned sgpr or svgp)",
    )

    d = DEFAULTS
    group = fit.add_argument_group("data")
    group.add_argument(
        "--data",
        default=d["data"],
        metavar="NAME",
        help="dataset for ppl_sparsegp.data.load_dataset, e.g. diabetes, breast_cancer, kin8nm, wilson/elevators, "
        f"raetsch/banana, snelson, bsgp/boston; for bsgp a bare BSGP name (boston, yacht, ...) means bsgp/<name> "
        f"(default: {d['data']}, bundled with scikit-learn)",
    )
    group.add_argument(
        "--split", type=int, default=d["split"], help=f"split index or seed of the dataset (default: {d['split']})"
    )

    group = fit.add_argument_group("model")
    group.add_argument(
        "--kernel",
        default=None,
        metavar="NAME",
        help="ARD kernel: rbf, matern12, matern32, matern52, linear, periodic, or a '+'-joined sum such as "
        f"rbf+linear; not bsgp (default: {d['kernel']})",
    )
    group.add_argument(
        "--kernel-variance",
        type=float,
        default=None,
        metavar="V",
        help=f"initial kernel variance(s), > 0, standardised units; not bsgp (default: {d['kernel_variance']})",
    )
    group.add_argument(
        "--lengthscale",
        type=float,
        default=None,
        metavar="L",
        help="initial value of every ARD lengthscale, > 0, standardised units (default: 1.0; sgpmc: sqrt(D), "
        "since from 1.0 the Gamma prior can pull a high-dimensional Gaussian fit into the all-short-lengthscales "
        "mode where the GP explains nothing; not bsgp)",
    )
    group.add_argument(
        "--noise-variance",
        type=float,
        default=None,
        metavar="V",
        help="initial noise variance, > 0, standardised units; for studentt the squared scale; not for "
        f"bernoulli (default: {d['noise_variance']}; bsgp and selective: 1.0)",
    )
    group.add_argument(
        "--likelihood",
        default=None,
        metavar="NAME",
        help="svgp, sgpmc, bsgp and selective (--bound uncollapsed): gaussian or studentt for regression data, "
        "bernoulli (= probit), probit or logit for binary data (default: gaussian for regression, probit for binary)",
    )
    group.add_argument(
        "--inducing",
        type=int,
        default=None,
        metavar="M",
        help="number of inducing points, 1 <= M <= N; sparse methods, per layer for bsgp, not selective (default: "
        f"{d['inducing']}; bsgp: 100)",
    )
    group.add_argument(
        "--init",
        choices=INITIALISERS,
        default=None,
        help="how inducing inputs are initialised from the training inputs; sparse methods; selective: how its "
        f"candidates are drawn, random or kmeans (default: {d['init']}; selective: random)",
    )
    group.add_argument(
        "--whiten",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="svgp only: parameterise q(u) in whitened coordinates v = L^-1 u (default: --whiten)",
    )
    group.add_argument(
        "--q-diag",
        action="store_true",
        default=None,
        help="svgp only: mean-field (diagonal) q(u) (default: full lower-triangular covariance)",
    )

    group = fit.add_argument_group("optimisation")
    group.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"SVI steps in all, those of a resumed checkpoint included; not bsgp or selective (default: {d['steps']})",
    )
    group.add_argument(
        "--lr",
        type=float,
        default=None,
        help=f"Adam learning rate (selective: of the GP parameters); not bsgp (default: {d['lr']})",
    )
    group.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="B",
        help="svgp, sgpmc (SVI fit, sghmc/sgld), bsgp (sghmc) and selective (--bound uncollapsed): minibatch size; "
        "B >= N means full batch (default: full batch; bsgp: 1000)",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=d["seed"],
        help=f"seed of the SVI or MCMC key and the inducing initialisation (default: {d['seed']})",
    )
    group.add_argument(
        "--dtype",
        choices=DTYPES,
        default=d["dtype"],
        help=f"floating-point precision; float64 enables jax_enable_x64 (default: {d['dtype']})",
    )
    group.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="STEPS",
        help="SVI steps between checkpoints to OUT/checkpoint.npz (selective: OUT/selective_<phase>.npz); not bsgp "
        f"(default: {d['checkpoint_every']})",
    )

    group = fit.add_argument_group("output")
    group.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="output folder (default: runs/<method>-<data>-<split>)"
    )
    group.add_argument(
        "--restart",
        action="store_true",
        help="discard the checkpoints in --out (checkpoint.npz, mcmc.ckpt, selective_<phase>.npz) and start afresh "
        "(default: resume from them; a run whose settings or data differ from theirs is refused)",
    )
    group.add_argument("--no-progress", action="store_true", help="hide the progress bar (default: shown)")
    group.add_argument(
        "--quiet", action="store_true", help="print nothing on success, progress bar included (default: off)"
    )
    cli_mcmc.add_mcmc_arguments(fit)
    cli_bsgp.add_bsgp_arguments(fit)
    cli_selective.add_selective_arguments(fit)
    cli_mcmc.add_diagnose_parser(commands)
    return parser


# --------------------------------------------------------------------------------------------------------
# Checks and defaults (all before any data are loaded or anything is compiled)


def resolve_options(args: argparse.Namespace) -> dict[str, Any]:
    """Check the parsed options and fill in the method-dependent defaults.

    Returns:
        The options as a plain dict (``likelihood`` and ``noise_variance`` stay ``None`` where they depend on
        the dataset; :func:`run_fit` settles them once the dataset is loaded).

    Raises:
        ValueError: naming the offending option and what was expected.
    """
    opts = {k: v for k, v in vars(args).items() if k != "command"}
    method = opts["method"]
    opts = cli_bsgp.resolve_bsgp_options(opts)
    opts = cli_selective.resolve_selective_options(opts)
    for name in _SVGP_ONLY if method != "svgp" else ():
        if opts[name] is not None:
            why = "bsgp samples whitened inducing outputs" if method == "bsgp" else "sgpmc is always whitened, full q"
            raise ValueError(f"{flag(name)} applies to svgp only, not {method} ({why})")
    for name in _UNCOLLAPSED_ONLY if method not in ("svgp", "sgpmc", "bsgp", "selective") else ():
        if opts[name] is not None and not (name == "likelihood" and opts[name].lower() == "gaussian"):
            raise ValueError(f"{flag(name)} applies to svgp and sgpmc only, not {method}")
    if method != "bsgp":  # bsgp's MCMC options are checked by resolve_bsgp_options
        unused = cli_selective.NOT_FOR_SELECTIVE if method == "selective" else {}
        opts = {**opts, **{k: DEFAULTS[k] if opts[k] is None else opts[k] for k in _NOT_BSGP if k not in unused}}
        opts = cli_mcmc.resolve_mcmc_options(opts)
    for name in _SPARSE_ONLY if method == "gpr" else ():
        if opts[name] is not None:
            raise ValueError(f"--{name} applies to sparse methods (svgp, sgpr, sgpmc); gpr uses no inducing points")
    if method not in ("gpr", "selective"):  # selective's --init default is set by resolve_selective_options
        opts["inducing"] = DEFAULTS["inducing"] if opts["inducing"] is None else opts["inducing"]
        opts["init"] = opts["init"] or DEFAULTS["init"]
    if method == "svgp":
        opts["whiten"] = DEFAULTS["whiten"] if opts["whiten"] is None else opts["whiten"]
        opts["q_diag"] = DEFAULTS["q_diag"] if opts["q_diag"] is None else opts["q_diag"]

    check_counts(opts, positive=("steps", "checkpoint_every", "inducing", "batch_size"), non_negative=("seed",))
    for name in ("lr", "kernel_variance", "lengthscale", "noise_variance"):
        if opts[name] is not None:
            validation.check_positive(flag(name), opts[name])

    try:
        if opts["kernel"] is not None:
            kernels.kernel_from_name(opts["kernel"], 1)
    except ValueError as err:
        raise ValueError(f"--kernel: {err}") from None
    if opts["likelihood"] is not None:
        try:
            likelihoods.likelihood_from_name(opts["likelihood"])
        except ValueError as err:
            raise ValueError(f"--likelihood: {err}") from None
        opts["likelihood"] = opts["likelihood"].lower()
    if method == "selective":
        cli_selective.check_bound(opts)
    if opts["out"] is None:
        opts["out"] = Path("runs") / f"{method}-{opts['data'].replace('/', '_')}-{opts['split']}"
    check_output_folder(opts["out"])
    return opts


def _load(name: str, split: int) -> Dataset:
    try:
        return data.load_dataset(name, split)
    except ValueError as err:
        raise ValueError(f"--data {name!r} (--split {split}): {err}") from None


def _check_dataset(opts: dict[str, Any], ds: Dataset) -> None:
    """Checks that need the dataset: its task against method and likelihood, N against gpr, --inducing, --candidates."""
    method, n = opts["method"], ds.X_train.shape[0]
    if ds.task not in LIKELIHOODS_BY_TASK:
        raise ValueError(f"--data: {ds.name} is a {ds.task} dataset; fit supports regression and binary classification")
    needs_regression = method in ("sgpr", "gpr") or (method == "selective" and opts["bound"] == "collapsed")
    if needs_regression and ds.task != "regression":
        what, use = (
            ("selective --bound collapsed", "--bound uncollapsed") if method == "selective" else (method, "svgp")
        )
        raise ValueError(f"--data: {ds.name} is a {ds.task} dataset; {what} needs regression data (use {use})")
    if opts["likelihood"] is not None and opts["likelihood"] not in LIKELIHOODS_BY_TASK[ds.task]:
        raise ValueError(
            f"--likelihood {opts['likelihood']!r} does not fit {ds.task} data ({ds.name}); "
            f"choose one of {', '.join(LIKELIHOODS_BY_TASK[ds.task])}"
        )
    if opts["noise_variance"] is not None and ds.task == "binary":
        raise ValueError(f"--noise-variance: the Bernoulli likelihood of {ds.task} data ({ds.name}) has no noise")
    if method == "gpr" and n > GPR_MAX_N:
        raise ValueError(
            f"--data: gpr is exact, O(N^3) time and O(N^2) memory, and {ds.name} has N = {n} > {GPR_MAX_N} "
            "training points; use sgpr or svgp"
        )
    if opts["inducing"] is not None:
        validation.check_inducing_count(opts["inducing"], n, name="--inducing")
    if method == "selective":
        cli_selective.check_dataset(opts, ds)


# --------------------------------------------------------------------------------------------------------
# Building the model


def _kernel(name: str, input_dim: int, variance: float, lengthscale: float, dtype: np.dtype) -> kernels.Kernel:
    """The ARD kernel ``name`` with every variance and lengthscale set to the given values, as ``dtype`` arrays."""
    kernel = kernels.kernel_from_name(name, input_dim, ard=True)
    fills = {"variance": variance, "lengthscale": lengthscale}
    values = {}
    for key, value in kernel.parameters().items():
        shape = np.shape(value)
        fill = fills.get(key.rsplit(".", 1)[-1])
        values[key] = np.asarray(value, dtype=dtype) if fill is None else np.full(shape, fill, dtype=dtype)
    return kernel.with_parameters(values)


def _settle_likelihood(opts: dict[str, Any], task: str) -> dict[str, Any]:
    """``opts`` with the dataset-dependent defaults of ``likelihood`` and ``noise_variance`` filled in."""
    name = opts["likelihood"] or ("gaussian" if task == "regression" else "probit")
    noise = opts["noise_variance"]
    if task == "regression" and noise is None:
        defaults = cli_selective.SELECTIVE_DEFAULTS if opts["method"] == "selective" else DEFAULTS
        noise = defaults["noise_variance"]
    return {**opts, "likelihood": name, "noise_variance": noise}


def _inducing_inputs(opts: dict[str, Any], X: np.ndarray, kernel: kernels.Kernel) -> np.ndarray:
    M, seed = opts["inducing"], opts["seed"]
    if opts["init"] == "kmeans":
        return initialise.kmeans(X, M, seed=seed)
    if opts["init"] == "random":
        return initialise.random_subset(X, M, seed=seed)
    return initialise.greedy_variance(X, M, kernel, seed=seed)


def model_parts(opts: dict[str, Any], ds: Dataset) -> dict[str, Any]:
    """The initial ``kernel``, ``likelihood`` and (sparse methods) inducing inputs ``Z`` for the standardised
    dataset ``ds``, as ``opts`` (from :func:`resolve_options`, likelihood settled) ask."""
    dtype = np.dtype(opts["dtype"])
    X = ds.X_train.astype(dtype)
    lengthscale = opts["lengthscale"]
    if lengthscale is None:
        lengthscale = math.sqrt(X.shape[1]) if opts["method"] == "sgpmc" else DEFAULTS["lengthscale"]
    kernel = _kernel(opts["kernel"], X.shape[1], opts["kernel_variance"], lengthscale, dtype)
    parts = {
        "kernel": kernel,
        "likelihood": likelihoods.likelihood_with_noise(opts["likelihood"], opts["noise_variance"], dtype),
    }
    if opts["method"] not in ("gpr", "selective"):  # selective draws its candidates itself
        parts["Z"] = _inducing_inputs(opts, X, kernel).astype(dtype)
    return parts


def build_model(opts: dict[str, Any], ds: Dataset) -> GPModel:
    """The GP of ``opts["method"]`` (gpr, sgpr or svgp) for the standardised dataset ``ds``, at its initial values."""
    parts = model_parts(opts, ds)
    if opts["method"] == "gpr":
        return GPR(**parts)
    if opts["method"] == "sgpr":
        return SGPR(**parts)
    batch = opts["batch_size"]
    return SVGP(
        **parts,
        num_latent=ds.num_outputs,
        whiten=opts["whiten"],
        q_diag=opts["q_diag"],
        batch_size=batch if batch is not None and batch < ds.X_train.shape[0] else None,
    )


# --------------------------------------------------------------------------------------------------------
# Evaluation and the picture


def compiled_predictor(gp: GPModel) -> Callable[..., tuple[Any, Any, Any]]:
    """One compiled ``predict(params, X, y, X_new, y_new) -> (mean, var, log_density)`` of y at ``X_new``.

    ``X`` [N, D], ``y`` [N] or [N, P] are the (standardised) training data that gpr and sgpr predict from;
    ``X_new`` [S, D]; ``y_new`` like ``y`` with S rows. Outputs are in standardised units, each [S] or [S, P].
    Compiling the prediction as one program is much cheaper than running it op by op, which compiles every
    operation on its own.
    """

    def predict(params, X, y, X_new, y_new):
        mean, var = gp.predict_y(params, X_new, X=X, y=y)
        return mean, var, gp.predict_log_density(params, X_new, y_new, X=X, y=y)

    return jax.jit(predict)


def _curve_1d(
    predict: Callable[..., tuple[Any, Any, Any]],
    params: dict[str, Any],
    train: tuple[np.ndarray, np.ndarray],
    ds: Dataset,
    scaler: Standardizer,
) -> dict[str, np.ndarray] | None:
    """Grid predictions for the 1-D picture (original units), or None when the picture does not apply."""
    if ds.X_train.shape[1] != 1 or ds.task != "regression" or ds.num_outputs != 1:
        return None
    lo, hi = float(ds.X_train.min()), float(ds.X_train.max())
    pad = 0.1 * (hi - lo)
    x = np.linspace(lo - pad, hi + pad, 400)
    X, y = train
    X_grid = scaler.transform_x(x[:, None]).astype(X.dtype)
    mean, var, _ = predict(params, X, y, X_grid, np.zeros(len(x), dtype=X.dtype))
    curve = {
        "x": x,
        "mean": scaler.inverse_mean(np.asarray(mean)),
        "var": scaler.inverse_var(np.asarray(var)),
        "X": ds.X_train[:, 0],
        "y": ds.y_train,
    }
    if "Z" in params:
        curve["Z"] = np.asarray(params["Z"])[:, 0] * scaler.x_scale[0] + scaler.x_mean[0]
    return curve


# --------------------------------------------------------------------------------------------------------
# The run


def _versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpyro": numpyro.__version__,
        "optax": optax.__version__,
        "numpy": np.__version__,
        "ppl_sparsegp": importlib.metadata.version("ppl-sparsegp"),
    }


def run_fit(opts: dict[str, Any], argv: Sequence[str] = ()) -> dict[str, Any]:
    """Run ``fit`` with options from :func:`resolve_options`; writes the output files and returns results.json.

    The whole run happens inside ``jax.enable_x64(dtype == "float64")``, so 64-bit mode is set before any jax
    array is created and a caller's own setting is restored afterwards (``float32`` is genuine 32-bit even in a
    process that enabled x64).

    Raises:
        ValueError: a problem with the options or the dataset, raised before anything is compiled.
    """
    with jax.enable_x64(opts["dtype"] == "float64"):
        return _run(opts, argv)


def _run(opts: dict[str, Any], argv: Sequence[str]) -> dict[str, Any]:
    dtype = np.dtype(opts["dtype"])
    bsgp = opts["method"] == "bsgp"
    ds = _load(cli_bsgp.dataset_name(opts["data"]) if bsgp else opts["data"], opts["split"])
    _check_dataset(opts, ds)
    if bsgp:
        return cli_bsgp.run_bsgp(opts, ds, argv, versions=_versions())
    opts = _settle_likelihood(opts, ds.task)
    std, scaler = data.standardize(ds)
    if opts["method"] == "sgpmc":
        return cli_mcmc.run_sgpmc(opts, model_parts, ds, std, scaler, argv)
    if opts["method"] == "selective":
        return cli_selective.run_selective(
            opts,
            model_parts,
            ds,
            std,
            scaler,
            argv,
            predictor=compiled_predictor,
            curve_1d=_curve_1d,
            versions=_versions(),
        )
    out = Path(opts["out"])
    checkpoint = out / "checkpoint.npz"
    X, y = std.X_train.astype(dtype), std.y_train.astype(dtype)
    settings = fingerprint_settings(opts, resumable=("steps",))
    found = prepare_checkpoints(opts, [checkpoint], settings, X, y)
    resumed_from = found[checkpoint].counters["step"] if checkpoint in found else 0

    gp = build_model(opts, std)
    t0 = time.perf_counter()
    fit = fit_svi(
        gp.model,
        gp.guide,
        X,
        y,
        optimizer=optax.adam(opts["lr"]),
        num_steps=opts["steps"],
        progress=not (opts["no_progress"] or opts["quiet"]),
        checkpoint=checkpoint,
        checkpoint_every=opts["checkpoint_every"],
        key=opts["seed"],
        fingerprint=settings,
        validate=gp.check_data,
    )
    train_seconds = time.perf_counter() - t0

    has_test = ds.y_test is not None
    evaluated_on = "test" if has_test else "train"
    X_eval = (std.X_test if has_test else std.X_train).astype(dtype)
    y_eval = ds.y_test if has_test else ds.y_train
    y_eval_std = (std.y_test if has_test else std.y_train).astype(dtype)
    predict = compiled_predictor(gp)
    scores, mean, var = evaluate(predict(fit.params, X, y, X_eval, y_eval_std), y_eval, scaler, ds.task)

    params = to_numpy_params(fit.params)
    params.update({f"standardizer.{k}": np.asarray(v) for k, v in vars(scaler).items()})
    curve = _curve_1d(predict, fit.params, (X, y), ds, scaler)
    figure = plot_fit(fit.losses, ds.task, evaluated_on, y_eval, mean, var, curve)
    record = {
        "method": opts["method"],
        "data": ds.name,
        "split": opts["split"],
        "task": ds.task,
        "n_train": int(ds.X_train.shape[0]),
        "n_eval": int(X_eval.shape[0]),
        "input_dim": int(ds.X_train.shape[1]),
        "num_outputs": ds.num_outputs,
        "evaluated_on": evaluated_on,
        "metrics": scores,
        "options": opts,
        "argv": list(argv),
        "steps": int(len(fit.losses)),
        "steps_this_run": int(len(fit.losses)) - resumed_from,
        "resumed_from_step": resumed_from,
        "final_loss": float(fit.losses[-1]),
        "stopped_early": fit.stopped_early,
        "train_seconds": train_seconds,
        "compile_seconds": fit.compile_seconds,
        "run_seconds": fit.run_seconds,
        "steps_per_second": fit.steps_per_second,
        "backend": jax.default_backend(),
        "versions": _versions(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "files": {"params": "params.npz", "figure": "fit.png", "checkpoint": checkpoint.name},
    }
    if not has_test:
        record["note"] = f"{ds.name} has no test targets; the metrics are on the training data"
    try:
        outputs = {"params.npz": results.npz_file(params), "fit.png": results.figure_file(figure)}
        results.write_output_set(out, {**outputs, "results.json": results.json_file(record)})
    finally:
        plt.close(figure)
    return record


def _summary(record: dict[str, Any], out: Path) -> str:
    m, o = record["metrics"], record["options"]
    size = f"N = {record['n_train']}, D = {record['input_dim']}" + (
        f", M = {o['inducing']}" if o.get("inducing") else ""
    )
    resumed = f", resumed from step {record['resumed_from_step']}" if record["resumed_from_step"] else ""
    lines = [
        f"{record['method']} on {record['data']} (split {record['split']}; {size})",
        f"  {record['steps_this_run']} steps in {record['run_seconds']:.1f} s "
        f"(+ {record['compile_seconds']:.1f} s compiling{resumed}); final loss {record['final_loss']:.4g}",
    ]
    where = record["evaluated_on"]
    if record["task"] == "regression":
        lines.append(
            f"  {where} RMSE {m['rmse']:.4g}  MAE {m['mae']:.4g}  NLPD {m['nlpd']:.4g}  (original units; "
            f"predicting the training mean gives RMSE {m['rmse_of_training_mean']:.4g})"
        )
    else:
        lines.append(
            f"  {where} accuracy {m['accuracy']:.4f}  NLL {m['nll']:.4f}  ECE {m['ece']:.4f}  AUC {m['auc']:.4f}"
        )
    lines.append(f"  wrote {out / 'results.json'}, params.npz, fit.png")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ppl-sparsegp``; returns the exit code (0 success, 1 run-time failure, 2 bad input, 130
    interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        if args.command == "diagnose":
            print(cli_mcmc.run_diagnose(args.run_dir, include_all=args.all))
            return 0
        opts = resolve_options(args)
        record = run_fit(opts, argv)
    except ValueError as err:
        if isinstance(err, CheckpointError):
            err.hint = RESTART_HINT
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except (OSError, FloatingPointError, DataIntegrityError) as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        checkpoints = {"sgpmc": "mcmc.ckpt", "bsgp": "mcmc.ckpt", "selective": "selective_<phase>.npz"}
        checkpoint = checkpoints.get(opts["method"], "checkpoint.npz")
        print(
            f"interrupted; run the same command again to resume from {Path(opts['out']) / checkpoint}", file=sys.stderr
        )
        return 130
    if not opts["quiet"]:
        summaries = {"sgpmc": cli_mcmc.summary_line, "bsgp": cli_bsgp.summary_line}
        summary = {**summaries, "selective": cli_selective.summary_line}.get(opts["method"], _summary)
        print(summary(record, Path(opts["out"])))
    return 0
