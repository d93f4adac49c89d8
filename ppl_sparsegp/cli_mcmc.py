"""The MCMC side of the ``ppl-sparsegp`` command line: ``fit sgpmc`` and ``diagnose RUN_DIR``.

``ppl-sparsegp fit sgpmc --data NAME [--engine nuts|hmc|sghmc|sgld] [--warmup 500] [--samples 1000] ...`` runs the
thesis recipe (:func:`models.sgpmc.fit_sgpmc`): an SVGP fit with priors on the hyperparameters (MAP), then the
chosen engine on the SGPMC target with Z fixed. It writes to ``--out``, as one set
(:func:`ppl_sparsegp.results.write_output_set`):

* ``posterior.nc``: ArviZ InferenceData (posterior, sample_stats, log_likelihood, posterior_predictive,
  observed_data) in standardised units;
* ``fit.png``: the SVI loss trace and the predictive picture of the mixture;
* ``results.json`` (last): test metrics of the mixture predictive in original units, NUTS/SG-MCMC statistics,
  R-hat and ESS of the hyperparameters, timings and versions.

The chains are checkpointed to ``OUT/mcmc.ckpt`` (an ``.npz``, see :mod:`ppl_sparsegp.infer.checkpoint`) after the
warmup and every ``--chunk`` draws, with a fingerprint of every option but the output ones and of the data;
re-running the same command repeats the (deterministic) SVI fit and resumes the chains from the checkpoint. A run
with any other option or data is refused before the SVI fit, naming what differs; ``--restart`` discards the
checkpoint.

``ppl-sparsegp diagnose RUN_DIR`` loads ``RUN_DIR/posterior.nc``, prints ``az.summary`` (hyperparameters by
default, ``--all`` for every variable) and writes ``trace.png`` and ``rank.png`` beside it.
"""

from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import arviz as az
import jax
import numpy as np

from ppl_sparsegp import results
from ppl_sparsegp.cli_checks import check_counts, fingerprint_settings, prepare_checkpoints, refuse_options_of
from ppl_sparsegp.data import Dataset, Standardizer
from ppl_sparsegp.infer.mcmc import ENGINES
from ppl_sparsegp.models.sgpmc import default_priors
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.posterior.predict import log_predictive_density, posterior_predictive
from ppl_sparsegp.recipes.sgpmc import fit_sgpmc
from ppl_sparsegp.reporting import evaluate, plot_fit, plt

MCMC_DEFAULTS = {"engine": "nuts", "warmup": 500, "samples": 1000, "chains": 2, "thinning": 1, "prior": "gamma"}
MCMC_OPTIONS = ("engine", "warmup", "samples", "chains", "thinning", "step_size", "prior", "chunk")
SG_ENGINES = ("sghmc", "sgld")


def add_mcmc_arguments(fit: argparse.ArgumentParser) -> None:
    """The sgpmc-only options of ``fit`` (defaults ``None`` so that giving one to another method is an error)."""
    d = MCMC_DEFAULTS
    group = fit.add_argument_group(
        "MCMC (sgpmc; bsgp takes --engine, --chains, --step-size, --warmup, --samples, --thinning)"
    )
    group.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help=f"sampler: nuts, hmc, sghmc (scale-adapted, BSGP's) or sgld (default: {d['engine']})",
    )
    group.add_argument("--warmup", type=int, default=None, help=f"adaptation steps (default: {d['warmup']})")
    group.add_argument(
        "--samples", type=int, default=None, help=f"post-warmup steps per chain (default: {d['samples']})"
    )
    group.add_argument("--chains", type=int, default=None, help=f"chains, vectorised (default: {d['chains']})")
    group.add_argument(
        "--thinning", type=int, default=None, help="keep every k-th draw; divides --samples (default: 1)"
    )
    group.add_argument(
        "--step-size",
        type=float,
        default=None,
        metavar="EPS",
        help="sghmc and sgld only: step size (default: 0.01 for sghmc; required for sgld)",
    )
    group.add_argument(
        "--prior",
        choices=("gamma", "lognormal"),
        default=None,
        help="prior on every hyperparameter: Gamma(1.1, 1) as in the thesis, or LogNormal(0, 1) (default: gamma)",
    )
    group.add_argument(
        "--chunk", type=int, default=None, help="post-warmup steps between checkpoints (default: all at once)"
    )


def resolve_mcmc_options(opts: dict[str, Any]) -> dict[str, Any]:
    """Check the MCMC options for ``fit``; fill in their defaults for sgpmc.

    Raises:
        ValueError: an MCMC option given to another method, or a bad value, naming the option.
    """
    refuse_options_of("sgpmc", opts, MCMC_OPTIONS)
    if opts["method"] != "sgpmc":
        return opts
    opts = {**opts, **{k: v if opts.get(k) is None else opts[k] for k, v in MCMC_DEFAULTS.items()}}
    check_counts(opts, positive=("samples", "chains", "thinning", "chunk"), non_negative=("warmup",))
    if opts["samples"] % opts["thinning"]:
        raise ValueError(f"--samples ({opts['samples']}) must be a multiple of --thinning ({opts['thinning']})")
    if opts["step_size"] is not None and opts["engine"] not in SG_ENGINES:
        raise ValueError(f"--step-size applies to the sghmc and sgld engines, not {opts['engine']}")
    if opts["engine"] == "sgld" and opts["step_size"] is None:
        raise ValueError("--step-size is required with --engine sgld (there is no safe default)")
    if opts["step_size"] is not None and not opts["step_size"] > 0:
        raise ValueError(f"--step-size must be positive, got {opts['step_size']}")
    if opts["batch_size"] is not None and opts["engine"] not in SG_ENGINES:
        raise ValueError(f"--batch-size applies to the SVI fit and the sghmc/sgld engines, not {opts['engine']}")
    if opts["chunk"] is not None and opts["chunk"] % opts["thinning"]:
        raise ValueError(f"--chunk ({opts['chunk']}) must be a multiple of --thinning ({opts['thinning']})")
    return opts


def run_sgpmc(
    opts: dict[str, Any],
    model_parts: Callable[[dict[str, Any], Dataset], dict[str, Any]],
    ds: Dataset,
    std: Dataset,
    scaler: Standardizer,
    argv: Sequence[str],
) -> dict[str, Any]:
    """Fit SGPMC on the standardised data ``std``; write posterior.nc, fit.png and results.json to ``opts["out"]``.

    ``model_parts(opts, std)`` (the CLI's) builds the initial ``kernel``, ``likelihood`` and inducing inputs ``Z``; it
    is called once the checkpoint in ``--out`` has been checked (or discarded by ``--restart``), so a changed run is
    refused before any work.
    """
    out = Path(opts["out"])
    dtype = np.dtype(opts["dtype"])
    X, y = std.X_train.astype(dtype), std.y_train.astype(dtype)
    settings = fingerprint_settings(opts)
    prepare_checkpoints(opts, [out / "mcmc.ckpt"], settings, X, y)
    gp_parts = model_parts(opts, std)
    batch = opts["batch_size"] if opts["batch_size"] is not None and opts["batch_size"] < len(X) else None
    engine_options = {} if opts["step_size"] is None else {"step_size": opts["step_size"]}
    start = time.perf_counter()
    fit = fit_sgpmc(
        X,
        y,
        kernel=gp_parts["kernel"],
        likelihood=gp_parts["likelihood"],
        Z=gp_parts["Z"],
        key=jax.random.PRNGKey(opts["seed"]),
        priors=default_priors(gp_parts["kernel"], gp_parts["likelihood"], opts["prior"]),
        num_latent=ds.num_outputs,
        svi_steps=opts["steps"],
        fixed_z_steps=min(200, opts["steps"] // 10),
        learning_rate=opts["lr"],
        batch_size=batch,
        num_warmup=opts["warmup"],
        num_samples=opts["samples"],
        num_chains=opts["chains"],
        thinning=opts["thinning"],
        engine=opts["engine"],
        engine_options=engine_options,
        chunk_size=opts["chunk"],
        checkpoint=out / "mcmc.ckpt",
        progress=not (opts["no_progress"] or opts["quiet"]),
        fingerprint=settings,
    )
    if fit.mcmc.interrupted:
        raise KeyboardInterrupt
    seconds = time.perf_counter() - start
    idata = diagnostics.from_mcmc(fit.mcmc, fit.model, X, y)

    has_test = ds.y_test is not None
    X_eval = (std.X_test if has_test else std.X_train).astype(dtype)
    y_eval = ds.y_test if has_test else ds.y_train
    y_eval_std = (std.y_test if has_test else std.y_train).astype(dtype)
    draws = fit.mcmc.flat_samples()
    pred = posterior_predictive(fit.model, draws, X_eval)
    logp = log_predictive_density(fit.model, draws, X_eval, y_eval_std)
    scores, mean, var = evaluate((pred.y_mean, pred.y_var, logp), y_eval, scaler, ds.task)

    hyper = [v for v in idata.posterior.data_vars if v != "u"]
    stats = fit.mcmc.extra_fields
    record = {
        "method": "sgpmc",
        "engine": opts["engine"],
        "data": ds.name,
        "split": opts["split"],
        "task": ds.task,
        "n_train": int(len(X)),
        "n_eval": int(len(X_eval)),
        "input_dim": int(X.shape[1]),
        "evaluated_on": "test" if has_test else "train",
        "metrics": scores,
        "options": opts,
        "argv": list(argv),
        "draws_per_chain": fit.mcmc.num_draws,
        "chains": fit.mcmc.num_chains,
        "divergences": int(np.sum(stats["diverging"])) if "diverging" in stats else None,
        "max_rhat": float(max(float(az.rhat(idata, var_names=hyper)[v].max()) for v in hyper)),
        "min_ess_bulk": float(min(float(az.ess(idata, var_names=hyper)[v].min()) for v in hyper)),
        "svi_final_loss": float(fit.svi.losses[-1]),
        "warmup_seconds": fit.mcmc.warmup_seconds,
        "sample_seconds": fit.mcmc.sample_seconds,
        "total_seconds": seconds,
        "backend": jax.default_backend(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "files": {"posterior": "posterior.nc", "figure": "fit.png", "checkpoint": "mcmc.ckpt"},
    }
    figure = plot_fit(fit.svi.losses, ds.task, "test" if has_test else "train", y_eval, mean, var)
    try:
        outputs = {"posterior.nc": diagnostics.netcdf_file(idata), "fit.png": results.figure_file(figure)}
        results.write_output_set(out, {**outputs, "results.json": results.json_file(record)})
    finally:
        plt.close(figure)
    return record


def summary_line(record: dict[str, Any], out: Path) -> str:
    """What ``fit sgpmc`` prints on success."""
    m = record["metrics"]
    if record["task"] == "regression":
        scores = f"RMSE {m['rmse']:.4g}  NLPD {m['nlpd']:.4g} (original units)"
    else:
        scores = f"accuracy {m['accuracy']:.4f}  NLL {m['nll']:.4f}"
    divergences = "" if record["divergences"] is None else f", {record['divergences']} divergences"
    return "\n".join(
        [
            f"sgpmc ({record['engine']}) on {record['data']} (split {record['split']}; N = {record['n_train']}, "
            f"D = {record['input_dim']}, M = {record['options']['inducing']})",
            f"  {record['chains']} chains x {record['draws_per_chain']} draws in {record['sample_seconds']:.1f} s "
            f"(+ {record['warmup_seconds']:.1f} s warmup){divergences}; hyperparameters: max R-hat "
            f"{record['max_rhat']:.3f}, min bulk ESS {record['min_ess_bulk']:.0f}",
            f"  {record['evaluated_on']} {scores}",
            f"  wrote {out / 'results.json'}, posterior.nc, fit.png",
        ]
    )


def add_diagnose_parser(commands: Any) -> None:
    diagnose = commands.add_parser(
        "diagnose",
        help="print the ArviZ summary of a run's posterior and write trace and rank plots",
        description="Load RUN_DIR/posterior.nc (written by fit sgpmc), print az.summary and write RUN_DIR/trace.png "
        "and RUN_DIR/rank.png.",
    )
    diagnose.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="output folder of a fit sgpmc run")
    diagnose.add_argument(
        "--all", action="store_true", help="summarise every variable, inducing outputs u included (default: not u)"
    )


def run_diagnose(run_dir: Path, include_all: bool = False) -> str:
    """The summary table as text; writes ``trace.png`` and ``rank.png`` into ``run_dir``.

    Raises:
        ValueError: ``run_dir`` has no ``posterior.nc``.
    """
    path = Path(run_dir) / "posterior.nc"
    if not path.is_file():
        raise ValueError(f"RUN_DIR: no posterior.nc in {run_dir} (expected the output folder of `fit sgpmc`)")
    idata = diagnostics.load(path)
    names = None if include_all else [v for v in idata.posterior.data_vars if v != "u"]
    table = diagnostics.summary(idata, var_names=names)
    figures = {}
    try:
        for name, plot in (("trace.png", az.plot_trace), ("rank.png", az.plot_rank)):
            axes = plot(idata, var_names=names or [v for v in idata.posterior.data_vars if v != "u"])
            figures[name] = np.asarray(axes).ravel()[0].figure
        results.write_output_set(run_dir, {name: results.figure_file(f) for name, f in figures.items()})
    finally:
        for figure in figures.values():
            plt.close(figure)
    return table.to_string()
