"""svgp: a sparse variational GP (any likelihood, minibatches), fitted by SVI with Adam.

Writes params.npz (fitted parameters in standardised units and the standardisation), fit.png and results.json;
the SVI state is checkpointed to OUT/checkpoint.npz, from which the same command (``--steps`` may be raised)
resumes. :func:`fit_by_svi` is the run of every SVI method (svgp, sgpr, gpr), by NumPyro's SVI or, with
``--backend pyro``, by Pyro's (:mod:`ppl_sparsegp.cli.pyro_backend`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import optax

from ppl_sparsegp import results
from ppl_sparsegp.cli import run as shared
from ppl_sparsegp.cli.run import DEFAULTS, Data
from ppl_sparsegp.inducing import initialise
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.runs import store
from ppl_sparsegp.runs.rebuild import svgp_model

CHECKPOINT = "checkpoint.npz"
NOISE_VARIANCE = DEFAULTS.noise_variance
METHOD_DEFAULTS = {"noise_variance": NOISE_VARIANCE, "inducing": DEFAULTS.inducing, "init": DEFAULTS.init}
"""The defaults that differ between methods (``fit --help`` groups the methods by them)."""
MODEL = {f.name: f.default for f in fields(SVGP)}
"""SVGP's own defaults (``whiten``, ``q_diag``)."""


def add_arguments(parser: argparse.ArgumentParser, method: str = "svgp") -> None:
    """The options of every SVI method: svgp's (likelihood, q(u), minibatches) and, for gpr and sgpr, fewer."""
    shared.add_common_arguments(parser, method)
    likelihood = ("likelihood",) if method == "svgp" else ()
    inducing = ("inducing", "init") if method != "gpr" else ()
    names = (*shared.KERNEL_OPTIONS, "noise_variance", *likelihood, *inducing, "steps", "lr", "checkpoint_every",
             "backend")  # fmt: skip
    shared.add_options(parser, names)
    if method == "svgp":
        parser.add_argument(
            "--whiten", action=argparse.BooleanOptionalAction, default=MODEL["whiten"],
            help="parameterise q(u) in whitened coordinates v = L^-1 u (default: --whiten)",
        )  # fmt: skip
        parser.add_argument("--q-diag", action="store_true", default=MODEL["q_diag"], help="mean-field (diagonal) "
                            "q(u) (default: full)")  # fmt: skip
        shared.add_options(parser, ("batch_size",))
        shared.add_device_options(parser)


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    def build(opts: dict[str, Any], d: Data, parts: dict[str, Any]) -> SVGP:
        return svgp_model(opts, parts, d.ds.num_outputs, shared.batch(opts, d.X.shape[0]))

    return fit_by_svi(args, argv, build)


def fit_by_svi(args: argparse.Namespace, argv: Sequence[str], build: Callable[..., Any], regression_only=None) -> dict:
    """Check, load, ``build(opts, data, parts)`` the GP from its initial ``kernel``, ``likelihood`` (and ``Z``),
    fit it by SVI with Adam (checkpointed, resumable), evaluate, write the outputs and print the summary."""
    opts, d = shared.start(args, shared.check_options, NOISE_VARIANCE, None, regression_only)
    checkpoint = opts["out"] / CHECKPOINT
    settings, counters = shared.checkpoints(opts, (d.X, d.y), [checkpoint], resumable=("steps",))
    resumed_from = counters.get("step", 0)
    parts = {"likelihood": d.likelihood, "kernel": shared.initial_kernel(opts, d.X.shape[1], opts["lengthscale"])}
    if "inducing" in opts:
        parts["Z"] = initialise.by_name(opts["init"], d.X, opts["inducing"], parts["kernel"], seed=opts["seed"])
    gp = build(opts, d, parts)
    shared.check_devices(opts, getattr(gp, "batch_size", None))
    engine = {"num_steps": opts["steps"], "progress": shared.progress(opts), "checkpoint": checkpoint,
              "checkpoint_every": opts["checkpoint_every"], "fingerprint": settings}  # fmt: skip
    if opts["backend"] == "pyro":
        from ppl_sparsegp.cli import pyro_backend

        fit, train_seconds = shared.timed(pyro_backend.fit_svi, gp, d.X, d.y, opts, **engine)
    else:
        fit, train_seconds = shared.timed(
            fit_svi, gp.model, gp.guide, d.X, d.y, optimizer=optax.adam(opts["lr"]), key=opts["seed"],
            validate=gp.check_data, devices=opts.get("devices"), **engine,
        )  # fmt: skip
    return finish_svi(opts, d, argv, gp, fit, train_seconds, resumed_from)


def finish_svi(opts: dict[str, Any], d: Data, argv: Sequence[str], gp: Any, fit: Any, train_seconds: float,
               resumed_from: int, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """Evaluate ``gp`` fitted by SVI (``fit``: a :class:`ppl_sparsegp.infer.svi.SVIResult`), then write the outputs
    and print the summary (:func:`ppl_sparsegp.cli.run.finish`); ``extra`` joins the method's record."""
    (m, mean, var, curve), predict_seconds = shared.timed(shared.predict_gp, gp, fit.params, d)
    steps = int(len(fit.losses))
    record = {
        "metrics": m, "steps": steps, "steps_this_run": steps - resumed_from, "resumed_from_step": resumed_from,
        "final_loss": float(fit.losses[-1]), "stopped_early": fit.stopped_early, "train_seconds": train_seconds,
        "compile_seconds": fit.compile_seconds, "run_seconds": fit.run_seconds,
        "steps_per_second": fit.steps_per_second, "predict_seconds": predict_seconds, **extra,
        "files": {"params": "params.npz", "figure": "fit.png", "checkpoint": CHECKPOINT},
    }  # fmt: skip
    posterior = diagnostics.netcdf_file(store.svi_posterior(gp, fit.params, d.X, d.y))
    files = {"params.npz": results.npz_file(store.params_arrays(fit.params, d.scaler)), "posterior.nc": posterior}
    record["files"]["posterior"] = "posterior.nc"
    resumed = f", resumed from step {resumed_from}" if resumed_from else ""
    scored = shared.scores(m, d, ("rmse", "mae", "nlpd"), ("accuracy", "nll", "ece", "auc"), units="")
    if d.ds.task == "regression":
        scored += f"  (original units; predicting the training mean gives RMSE {m['rmse_of_training_mean']:.4g})"
    summary = [
        f"{opts['method']} on {d.ds.name} (split {opts['split']}; {shared.size(opts, d)})",
        f"  {steps - resumed_from} steps in {fit.run_seconds:.1f} s (+ {fit.compile_seconds:.1f} s compiling{resumed});"
        f" final loss {record['final_loss']:.4g}",
        f"  {scored}",
    ]  # fmt: skip
    figure = d.plot(fit.losses, mean, var, curve)
    return shared.finish(opts, d, argv, record, files, figure, summary)
