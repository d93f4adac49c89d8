"""svgp: a sparse variational GP (any likelihood, minibatches), fitted by SVI with Adam, full-batch L-BFGS or
natural gradients for q(u) alternated with Adam (``--optimizer``), the kernel and likelihood hyperparameters held
for the first ``--freeze-steps`` steps if asked (the thesis' hyperparameter freeze, Ch 4).

Writes params.npz (fitted parameters in standardised units and the standardisation), fit.png and results.json;
the SVI state is checkpointed to OUT/checkpoint.npz, from which the same command (``--steps`` may be raised)
resumes. With ``--data-npy X.npy Y.npy`` the training data are streamed from the two files, never loaded
(:func:`fit_streamed_svgp`). :func:`fit_by_svi` is the run of every SVI method (svgp, sgpr, gpr), by NumPyro's SVI
or, with ``--backend pyro``, by Pyro's (:mod:`ppl_sparsegp.cli.pyro_backend`, Adam only).

The optimisers (:func:`ppl_sparsegp.infer.svi.fit_svi`):

* ``adam``: ``optax.adam(--lr)`` on every param.
* ``lbfgs``: :class:`ppl_sparsegp.infer.optimisers.LBFGS` (optax's L-BFGS, memory 10, zoom line search), one
  iteration per step; full batch only (the line search needs one deterministic loss), ``--lr`` unused.
* ``natgrad``: each step a natural-gradient step of size ``--natgrad-step`` on q(u) (its natural parameters,
  :class:`ppl_sparsegp.infer.natural_gradients.NaturalGradient`), then Adam at ``--lr`` on the hyperparameters and
  Z. With the Gaussian likelihood and the full batch, a step of 1 lands on Titsias' optimal q*(u) for the current
  hyperparameters and Z (the ELBO then equals SGPR's collapsed bound, thesis §4.3); the default step is 1 there and
  0.1 for the other likelihoods. Robust-max is refused: its expected log-likelihood is not concave in the latent
  variances and a natural step leaves the positive-definite cone.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import optax

from ppl_sparsegp import results
from ppl_sparsegp.cli import npy_stream
from ppl_sparsegp.cli import run as shared
from ppl_sparsegp.cli.run import DEFAULTS, Data
from ppl_sparsegp.inducing import initialise
from ppl_sparsegp.infer.natural_gradients import NaturalGradient
from ppl_sparsegp.infer.optimisers import LBFGS
from ppl_sparsegp.infer.streaming import fit_streamed
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.runs import store
from ppl_sparsegp.runs.rebuild import svgp_model
from ppl_sparsegp.validation import POSITIVE_TRANSFORMS

CHECKPOINT = "checkpoint.npz"
NOISE_VARIANCE = DEFAULTS.noise_variance
METHOD_DEFAULTS = {"noise_variance": NOISE_VARIANCE, "inducing": DEFAULTS.inducing, "init": DEFAULTS.init}
"""The defaults that differ between methods (``fit --help`` groups the methods by them)."""
MODEL = {f.name: f.default for f in fields(SVGP)}
"""SVGP's own defaults (``whiten``, ``q_diag``)."""
OPTIMIZERS = ("adam", "lbfgs", "natgrad")
"""The choices of ``--optimizer`` (module docstring)."""
NATGRAD_STEP = {"gaussian": 1.0}
"""``--natgrad-step``'s default by likelihood; :data:`NATGRAD_STEP_OTHERS` for the rest."""
NATGRAD_STEP_OTHERS = NaturalGradient.step_size
NOT_NATURAL = {
    "robustmax": "its expected log-likelihood is not concave in the latent variances, and a natural step leaves the "
    "positive-definite cone (ppl_sparsegp.infer.natural_gradients); use --optimizer adam or lbfgs",
}
"""The likelihoods that ``--optimizer natgrad`` refuses, and why."""


def add_arguments(parser: argparse.ArgumentParser, method: str = "svgp") -> None:
    """The options of every SVI method: svgp's (likelihood, q(u), minibatches) and, for gpr and sgpr, fewer."""
    shared.add_common_arguments(parser, method)
    likelihood = ("likelihood",) if method == "svgp" else ()
    inducing = ("inducing", "init") if method != "gpr" else ()
    names = (*shared.KERNEL_OPTIONS, "noise_variance", *likelihood, *inducing, "steps", "lr", "checkpoint_every",
             "backend")  # fmt: skip
    shared.add_options(parser, names)
    parser.add_argument(
        "--positive-transform", choices=POSITIVE_TRANSFORMS, default="exp",
        help="how the positive parameters (the kernel's and the likelihood's, --q-diag's scales) live on the real "
        "line while the optimiser moves them: exp (NumPyro's) or softplus (GPflow's and GPyTorch's), under which a "
        "parameter the loss barely sees drifts by at most --lr a step instead of growing geometrically (a long "
        "float32 robustmax fit needs it) (default: exp)",
    )  # fmt: skip
    if method == "svgp":
        parser.add_argument(
            "--whiten", action=argparse.BooleanOptionalAction, default=MODEL["whiten"],
            help="parameterise q(u) in whitened coordinates v = L^-1 u (default: --whiten)",
        )  # fmt: skip
        parser.add_argument("--q-diag", action="store_true", default=MODEL["q_diag"], help="mean-field (diagonal) "
                            "q(u) (default: full)")  # fmt: skip
        shared.add_options(parser, ("batch_size",))
        data_npy = npy_stream.DATA_NPY_OPTION
        parser.add_argument("--data-npy", **{**data_npy, "help": data_npy["help"].format(fitted="fitted with Adam")})
        add_optimizer_arguments(parser)
        shared.add_device_options(parser)


def add_optimizer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--optimizer``, ``--natgrad-step`` and ``--freeze-steps`` (svgp)."""
    group = parser.add_argument_group("optimiser")
    group.add_argument(
        "--optimizer", choices=OPTIMIZERS, default="adam",
        help="adam: Adam at --lr on every parameter; lbfgs: full-batch L-BFGS (optax's, memory 10, zoom line search; "
        "one iteration per step; no --batch-size; --lr unused); natgrad: a natural-gradient step of size "
        "--natgrad-step on q(u), then Adam at --lr on the hyperparameters and Z, every step (not for robustmax) "
        "(default: adam)",
    )  # fmt: skip
    step = ", ".join(f"{value:g} for {name}" for name, value in NATGRAD_STEP.items())
    group.add_argument(
        "--natgrad-step", type=float, default=None, metavar="GAMMA",
        help="--optimizer natgrad: the natural step's size, in (0, 1]; with the Gaussian likelihood and the full "
        "batch, 1 puts q(u) at its optimum for the current hyperparameters (SGPR's bound) at every step; with "
        "--batch-size, a smaller step averages the minibatches' noise "
        f"(default: {step}, {NATGRAD_STEP_OTHERS:g} for the other likelihoods)",
    )  # fmt: skip
    group.add_argument(
        "--freeze-steps", type=int, default=0, metavar="K",
        help="hold the kernel and likelihood hyperparameters at their initial values for the first K steps while "
        "q(u) and Z move (the thesis' hyperparameter freeze; every --optimizer) (default: 0, no freeze)",
    )  # fmt: skip


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    if args.data_npy is not None:
        return fit_streamed_svgp(args, argv)

    def build(opts: dict[str, Any], d: Data, parts: dict[str, Any]) -> SVGP:
        return svgp_model(opts, parts, d.ds.num_outputs, shared.batch(opts, d.X.shape[0]))

    return fit_by_svi(args, argv, build)


def check_options(opts: dict[str, Any]) -> None:
    """:func:`ppl_sparsegp.cli.run.check_options` and the optimiser's options (those that need no data):
    ``--natgrad-step`` in (0, 1] and only with natgrad, ``--freeze-steps`` >= 0, and only Adam
    without a freeze with ``--backend pyro``."""
    shared.check_options(opts, non_negative=("freeze_steps",))
    name = opts.get("optimizer", "adam")
    step = opts.get("natgrad_step")
    if step is not None:
        if name != "natgrad":
            raise ValueError(f"--natgrad-step: the step size of --optimizer natgrad; this run's is {name}")
        if not (math.isfinite(step) and 0 < step <= 1):
            raise ValueError(f"--natgrad-step: expected a step size in (0, 1], got {step}")
    if opts["backend"] == "pyro" and (name != "adam" or opts.get("freeze_steps")):
        given = f"--optimizer {name}" if name != "adam" else f"--freeze-steps {opts['freeze_steps']}"
        raise ValueError(f"--backend pyro fits with Adam alone (no L-BFGS, natural gradients or freeze); {given} "
                         "needs --backend numpyro")  # fmt: skip


def check_optimizer_data(opts: dict[str, Any], d: Data) -> None:
    """The optimiser's checks that need the data (``ValueError`` naming the flag, before anything compiles):
    L-BFGS refuses minibatches and natural gradients a likelihood of :data:`NOT_NATURAL`."""
    name = opts.get("optimizer", "adam")
    if name == "lbfgs" and shared.batch(opts, d.X.shape[0]) is not None:
        raise ValueError(
            f"--batch-size {opts['batch_size']}: --optimizer lbfgs is full batch (its line search needs one "
            f"deterministic loss); drop --batch-size (N = {d.X.shape[0]}) or use --optimizer adam or natgrad"
        )
    if name == "natgrad" and opts["likelihood"] in NOT_NATURAL:
        raise ValueError(f"--optimizer natgrad: not for --likelihood {opts['likelihood']}: "
                         f"{NOT_NATURAL[opts['likelihood']]}")  # fmt: skip


def optimizer_settings(opts: dict[str, Any], gp: Any) -> dict[str, Any]:
    """The run's optimiser for ``gp`` (results.json's ``"optimizer"``): ``name``, Adam's ``lr`` (None for lbfgs),
    ``natgrad_step`` (natgrad; ``--natgrad-step`` or its default for ``--likelihood``), L-BFGS's ``memory_size`` and
    ``max_linesearch_steps`` (lbfgs), ``freeze_steps`` and the ``frozen`` params (the kernel's and the
    likelihood's)."""
    name = opts.get("optimizer", "adam")
    record: dict[str, Any] = {"name": name, "lr": None if name == "lbfgs" else opts["lr"]}
    if name == "natgrad":
        default = NATGRAD_STEP.get(opts["likelihood"], NATGRAD_STEP_OTHERS)
        record["natgrad_step"] = default if opts.get("natgrad_step") is None else opts["natgrad_step"]
    if name == "lbfgs":
        record.update(dataclasses.asdict(LBFGS()))
    steps = opts.get("freeze_steps") or 0
    frozen = [
        f"{site}_map" if site in gp.priors else site for site in gp.hyperparameter_sites() if site not in gp.fixed
    ]
    return {**record, "freeze_steps": steps, "frozen": sorted(frozen) if steps else []}


def engine_optimizer(settings: dict[str, Any], gp: Any) -> dict[str, Any]:
    """:func:`ppl_sparsegp.infer.svi.fit_svi`'s ``optimizer``, ``natural_gradient`` and ``freeze`` of the run's
    ``settings`` (:func:`optimizer_settings`) for ``gp`` (q(u)'s params: ``u_loc`` and ``u_scale_tril``, or
    ``u_scale`` with ``q_diag``)."""
    natural = None
    if settings["name"] == "natgrad":
        diagonal = bool(getattr(gp, "q_diag", False))
        natural = NaturalGradient(scale="u_scale" if diagonal else "u_scale_tril", diagonal=diagonal,
                                  step_size=settings["natgrad_step"])  # fmt: skip
    optimizer = LBFGS() if settings["name"] == "lbfgs" else optax.adam(settings["lr"])
    freeze = {name: settings["freeze_steps"] for name in settings["frozen"]}
    return {"optimizer": optimizer, "natural_gradient": natural, "freeze": freeze or None}


def describe(settings: dict[str, Any]) -> str:
    """The summary's words for the optimiser ``settings`` (:func:`optimizer_settings`), e.g.
    ``"natgrad (step 1) + Adam (lr 0.01); hyperparameters frozen for 50 steps"``."""
    if settings["name"] == "lbfgs":
        text = "L-BFGS (full batch)"
    else:
        natural = f"natgrad (step {settings['natgrad_step']:g}) on q(u) + " if settings["name"] == "natgrad" else ""
        text = f"{natural}Adam (lr {settings['lr']:g})"
    steps = settings["freeze_steps"]
    return text + (f"; hyperparameters frozen for {steps} step{'s' * (steps != 1)}" if steps else "")


def fit_by_svi(args: argparse.Namespace, argv: Sequence[str], build: Callable[..., Any], regression_only=None) -> dict:
    """Check, load, ``build(opts, data, parts)`` the GP from its initial ``kernel``, ``likelihood`` (and ``Z``),
    fit it by SVI with the ``--optimizer`` (Adam for the methods without one; checkpointed, resumable), evaluate,
    write the outputs and print the summary."""
    opts, d = shared.start(args, check_options, NOISE_VARIANCE, None, regression_only)
    check_optimizer_data(opts, d)
    checkpoint = opts["out"] / CHECKPOINT
    settings, counters = shared.checkpoints(opts, (d.X, d.y), [checkpoint], resumable=("steps",))
    resumed_from = counters.get("step", 0)
    parts = {"likelihood": d.likelihood, "kernel": shared.initial_kernel(opts, d.X.shape[1], opts["lengthscale"])}
    if "inducing" in opts:
        parts["Z"] = initialise.by_name(opts["init"], d.X, opts["inducing"], parts["kernel"], seed=opts["seed"])
    gp = build(opts, d, parts)
    optimizer = optimizer_settings(opts, gp)
    shared.check_devices(opts, getattr(gp, "batch_size", None))
    engine = {"num_steps": opts["steps"], "progress": shared.progress(opts), "checkpoint": checkpoint,
              "checkpoint_every": opts["checkpoint_every"], "fingerprint": settings,
              "positive_transform": opts["positive_transform"]}  # fmt: skip
    if opts["backend"] == "pyro":
        from ppl_sparsegp.cli import pyro_backend

        fit, train_seconds = shared.timed(pyro_backend.fit_svi, gp, d.X, d.y, opts, **engine)
    else:
        fit, train_seconds = shared.timed(
            fit_svi, gp.model, gp.guide, d.X, d.y, key=opts["seed"], validate=gp.check_data,
            devices=opts.get("devices"), **engine_optimizer(optimizer, gp), **engine,
        )  # fmt: skip
    return finish_svi(opts, d, argv, gp, fit, train_seconds, resumed_from, optimizer=optimizer)


def finish_svi(opts: dict[str, Any], d: Data, argv: Sequence[str], gp: Any, fit: Any, train_seconds: float,
               resumed_from: int, stream: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """Evaluate ``gp`` fitted by SVI (``fit``: a :class:`ppl_sparsegp.infer.svi.SVIResult`), then write the outputs
    and print the summary (:func:`ppl_sparsegp.cli.run.finish`); ``extra`` joins the method's record (an
    ``optimizer``, :func:`optimizer_settings`, is named in the summary too). ``stream``: the ``--data-npy`` run's
    facts (``num_data`` N, ``files``, ``batch_size``, ``sample_rows``), recorded as ``"stream"`` with ``n_train`` N."""
    (m, mean, var, curve), predict_seconds = shared.timed(shared.predict_gp, gp, fit.params, d)
    steps = int(len(fit.losses))
    record = {
        "metrics": m, "steps": steps, "steps_this_run": steps - resumed_from, "resumed_from_step": resumed_from,
        "final_loss": float(fit.losses[-1]), "stopped_early": fit.stopped_early, "train_seconds": train_seconds,
        "compile_seconds": fit.compile_seconds, "run_seconds": fit.run_seconds,
        "steps_per_second": fit.steps_per_second, "predict_seconds": predict_seconds, **extra,
        "files": {"params": "params.npz", "figure": "fit.png", "checkpoint": CHECKPOINT},
    }  # fmt: skip
    size = shared.size(opts, d)
    if stream is not None:
        npy_stream.record_stream(record, stream)
        size = npy_stream.stream_size(opts, d, stream)
    posterior = diagnostics.netcdf_file(store.svi_posterior(gp, fit.params, d.X, d.y))
    files = {"params.npz": results.npz_file(store.params_arrays(fit.params, d.scaler)), "posterior.nc": posterior}
    record["files"]["posterior"] = "posterior.nc"
    resumed = f", resumed from step {resumed_from}" if resumed_from else ""
    scored = shared.scores(m, d, ("rmse", "mae", "nlpd"), ("accuracy", "nll", "ece", "auc"), units="")
    if d.ds.task == "regression":
        scored += f"  (original units; predicting the training mean gives RMSE {m['rmse_of_training_mean']:.4g})"
    summary = [
        f"{opts['method']} on {d.ds.name} ({size if stream else 'split ' + str(opts['split']) + '; ' + size})",
        f"  {steps - resumed_from} steps in {fit.run_seconds:.1f} s (+ {fit.compile_seconds:.1f} s compiling{resumed});"
        f" final loss {record['final_loss']:.4g}",
        *([f"  optimiser: {describe(extra['optimizer'])}"] if "optimizer" in extra else []),
        f"  {scored}",
    ]  # fmt: skip
    figure = d.plot(fit.losses, mean, var, curve)
    return shared.finish(opts, d, argv, record, files, figure, summary)


def check_stream_optimizer(opts: dict[str, Any]) -> None:
    """``--data-npy`` with svgp: Adam alone (``ValueError`` naming the flag)."""
    name = opts.get("optimizer", "adam")
    if name != "adam" or opts.get("freeze_steps"):
        given = f"--optimizer {name}" if name != "adam" else f"--freeze-steps {opts['freeze_steps']}"
        raise ValueError(f"--data-npy streams with Adam alone; {given} needs the data in memory (--data)")


def fit_streamed_svgp(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """``fit svgp --data-npy X.npy Y.npy``: SVGP (``num_data`` N) fitted by Adam on minibatches streamed from the
    files (:func:`ppl_sparsegp.infer.streaming.fit_streamed`: memory-mapped, prefetched, checkpointed to
    OUT/checkpoint.npz and resumed from it); each batch standardised on the device with the files' statistics; Z
    placed by ``--init`` on a random sample of the rows, on which the fit is evaluated. Writes what
    :func:`fit_by_svi` writes."""
    opts = dict(vars(args))
    check_options(opts)
    npy_stream.check_stream_options(opts)
    check_stream_optimizer(opts)
    batches = npy_stream.open_stream(opts, argv)
    d, stream = npy_stream.stream_data(opts, batches, NOISE_VARIANCE)
    checkpoint = opts["out"] / CHECKPOINT
    # the data are named by the stream's identity, which fit_streamed records and checks (its rows hash included)
    settings, counters = shared.checkpoints(opts, (), [checkpoint], resumable=("steps",))
    kernel = shared.initial_kernel(opts, d.X.shape[1], opts["lengthscale"])
    Z = initialise.by_name(opts["init"], d.X, opts["inducing"], kernel, seed=opts["seed"])
    gp = svgp_model(opts, {"likelihood": d.likelihood, "kernel": kernel, "Z": Z}, d.ds.num_outputs)
    gp = dataclasses.replace(gp, num_data=batches.num_data)
    model, guide = (npy_stream.standardised(program, d.scaler, d.X.dtype) for program in (gp.model, gp.guide))
    fit, train_seconds = shared.timed(
        fit_streamed, model, guide, batches, optimizer=optax.adam(opts["lr"]),
        num_steps=opts["steps"], key=opts["seed"], checkpoint=checkpoint, checkpoint_every=opts["checkpoint_every"],
        fingerprint=settings, progress=shared.progress(opts), positive_transform=opts["positive_transform"],
    )  # fmt: skip
    resumed_from = counters.get("step", 0)
    return finish_svi(opts, d, argv, gp, fit, train_seconds, resumed_from, stream=stream,
                      optimizer=optimizer_settings(opts, gp))  # fmt: skip
