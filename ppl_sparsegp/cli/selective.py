"""selective: probabilistic selection of the inducing points among K candidates (Uhrenholt et al. 2021).

:func:`ppl_sparsegp.recipes.selective.fit_selective`: pre-train a sparse GP on K candidates drawn from the training
inputs, learn their inclusion probabilities under p(S) ∝ exp(-alpha |S|^2), draw one subset, prune, post-train.
Writes params.npz (the pruned model), selection.npz (inclusion probabilities, mask, candidates, selected indices),
fit.png (the phases' losses, the inclusion probabilities, the predictive picture) and results.json; each phase
checkpoints to OUT/selective_<phase>.npz and the same command (the step counts may be raised) resumes. With
``--backend pyro`` the Pyro twins and engine run the same phases (:mod:`ppl_sparsegp.recipes.selective_pyro`: λ by
the Pyro twin of the NumPyro run's ScoreFunctionELBO, torch's randomness seeded by --seed, the candidates those of the
NumPyro run) and the pruned model is evaluated and stored as a NumPyro run's (:mod:`ppl_sparsegp.cli.pyro_backend`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ppl_sparsegp import results, validation
from ppl_sparsegp.cli import run as shared
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.recipes.phases import PHASES, phase_checkpoint
from ppl_sparsegp.recipes.selective import BOUNDS, INITIALISATIONS, SELECTION_MODES, SelectiveConfig, fit_selective
from ppl_sparsegp.runs import store

CHECKPOINT = "selective_<phase>.npz"
CONFIG = SelectiveConfig()
NOISE_VARIANCE = CONFIG.noise_variance
METHOD_DEFAULTS = {"noise_variance": NOISE_VARIANCE, "init": CONFIG.init}
OPTIONS = {
    "candidates": ("candidates", int, "K", "candidate inducing inputs, 1 <= K <= N"),
    "alpha": ("alpha", float, None, "prior strength alpha >= 0 of p(S) ∝ exp(-alpha |S|^2); larger keeps fewer"),
    "bound": ("bound", str, "{" + ",".join(BOUNDS) + "}", "collapsed (SGPR; Gaussian, full batch) or uncollapsed"),
    "selection": ("selection", str, "{" + ",".join(SELECTION_MODES) + "}", "frozen (only λ learns) or joint"),
    "particles": ("num_particles", int, "S", "subsets drawn per selection step"),
    "initial_inclusion": ("initial_inclusion", float, "P", "initial inclusion probability, in (0, 1)"),
    "pre_steps": ("pre_steps", int, "STEPS", "Adam steps pre-training on all K candidates, >= 0"),
    "selection_steps": ("selection_steps", int, "STEPS", "Adam steps learning the inclusion probabilities, >= 1"),
    "post_steps": ("post_steps", int, "STEPS", "Adam steps post-training the pruned model, >= 0"),
    "selection_lr": ("selection_learning_rate", float, "LR", "Adam learning rate of the inclusion probabilities"),
}
"""option -> (field of SelectiveConfig, type, metavar, help)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c = CONFIG
    shared.add_common_arguments(parser, "selective")
    shared.add_options(parser, (*shared.KERNEL_OPTIONS, "noise_variance", "likelihood"), noise_variance=NOISE_VARIANCE)
    init = "{" + ",".join(INITIALISATIONS) + "}"
    shared.add(parser, "init", c.init, "how the candidates are drawn from the training inputs", metavar=init)
    shared.add_options(
        parser, ("lr", "checkpoint_every", "batch_size", "backend"), " (--bound uncollapsed)",
        lr=c.learning_rate, checkpoint_every=c.checkpoint_every, batch_size=c.batch_size,
    )  # fmt: skip
    group = parser.add_argument_group(
        "selective (selective only)", "pre-train, select, prune, post-train; writes selection.npz beside params.npz"
    )
    for option, (name, kind, metavar, help_) in OPTIONS.items():
        default = getattr(c, name)
        group.add_argument(shared.flag(option), type=kind, default=default, metavar=metavar, help=f"{help_} "
                           f"(default: {default})")  # fmt: skip


def _check(opts: dict[str, Any]) -> None:
    """selective's options, before anything is loaded."""
    for name, choices in (("bound", BOUNDS), ("selection", SELECTION_MODES), ("init", INITIALISATIONS)):
        if opts[name] not in choices:
            raise ValueError(f"--{name} {opts[name]}: selective takes {' or '.join(choices)}")
    positive, non_negative = ("candidates", "particles", "selection_steps"), ("pre_steps", "post_steps")
    shared.check_options(opts, positive=positive, non_negative=non_negative)
    if not (math.isfinite(opts["alpha"]) and opts["alpha"] >= 0):
        raise ValueError(f"--alpha must be finite and >= 0, got {opts['alpha']}")
    if not 0.0 < opts["initial_inclusion"] < 1.0:
        raise ValueError(f"--initial-inclusion must be a probability in (0, 1), got {opts['initial_inclusion']}")
    validation.check_positive("--selection-lr", opts["selection_lr"])
    if opts["bound"] == "collapsed" and opts["likelihood"] not in (None, "gaussian"):
        raise ValueError(
            f"--likelihood {opts['likelihood']} needs --bound uncollapsed (the collapsed bound is for a Gaussian "
            "likelihood)"
        )
    if opts["bound"] == "collapsed" and opts["batch_size"] is not None:
        raise ValueError("--batch-size needs --bound uncollapsed (the collapsed bound uses the full batch)")


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    why = "selective --bound collapsed needs regression data (use --bound uncollapsed)"
    opts, d = shared.start(args, _check, NOISE_VARIANCE, None, why if args.bound == "collapsed" else None)
    validation.check_inducing_count(opts["candidates"], d.X.shape[0], name="--candidates")
    out, resumable = opts["out"], ("pre_steps", "selection_steps", "post_steps")
    settings, _ = shared.checkpoints(opts, (d.X, d.y), [phase_checkpoint(out, phase) for phase in PHASES], resumable)
    config = SelectiveConfig(
        **{name: opts[option] for option, (name, *_) in OPTIONS.items()}, init=opts["init"],
        learning_rate=opts["lr"], batch_size=shared.batch(opts, d.X.shape[0]),
    )  # fmt: skip
    recipe = {
        "likelihood": d.likelihood, "kernel": shared.initial_kernel(opts, d.X.shape[1], opts["lengthscale"]),
        "progress": shared.progress(opts), "checkpoint_dir": out, "fingerprint": settings,
        "checkpoint_every": opts["checkpoint_every"],
    }  # fmt: skip
    if opts["backend"] == "pyro":
        from ppl_sparsegp.cli import pyro_backend

        fit, fit_seconds = shared.timed(pyro_backend.fit_selective, d.X, d.y, config, opts, **recipe)
    else:
        fit, fit_seconds = shared.timed(fit_selective, d.X, d.y, config, key=opts["seed"], **recipe)
    (m, mean, var, curve), predict_seconds = shared.timed(shared.predict_gp, fit.model, fit.params, d)
    candidates = np.asarray(fit.selective_params.get("Z", fit.selective.ordinary.Z))
    selection = {"inclusion_probs": fit.inclusion_probs, "mask": fit.mask.astype(np.int8), "candidates": candidates}
    selection["selected"] = np.flatnonzero(fit.mask)
    steps = {phase: int(len(fit.losses.get(phase, ()))) for phase in PHASES}
    seconds = {p: float(fit.seconds.get(p, 0.0)) for p in PHASES}
    record = {
        "bound": opts["bound"], "selection": opts["selection"], "likelihood": opts["likelihood"], "metrics": m,
        "candidates": int(len(fit.mask)), "selected_count": fit.selected_count, "expected_count": fit.expected_count,
        "count_variance": fit.count_variance, "steps": steps,
        "final_loss": {p: float(fit.losses[p][-1]) if steps[p] else None for p in PHASES},
        "seconds": seconds, "fit_seconds": fit_seconds, "predict_seconds": predict_seconds,
        "files": {"params": "params.npz", "selection": "selection.npz", "figure": "fit.png",
                  "checkpoints": [phase_checkpoint(out, p).name for p in PHASES]},
    }  # fmt: skip
    figure = d.plot(np.zeros(0), mean, var, curve)
    x = candidates[:, 0] * d.scaler.x_scale[0] + d.scaler.x_mean[0] if candidates.shape[1] == 1 else None
    title = f"kept {fit.selected_count} of {len(fit.mask)} (E|S| = {fit.expected_count:.1f})"
    losses = {phase: fit.losses.get(phase, np.zeros(0)) for phase in PHASES}
    results.plot_selection(figure, losses, fit.inclusion_probs, fit.mask.astype(bool), x, title)
    scored = shared.scores(m, d, ("rmse", "mae", "nlpd"), ("accuracy", "nll", "ece", "auc"), ", ")
    summary = [
        f"selective on {d.ds.name} split {opts['split']}: kept {fit.selected_count} of {len(fit.mask)} candidates "
        f"(E|S| = {fit.expected_count:.1f}), {scored}",
        f"  {opts['bound']} bound, {opts['selection']} selection, alpha = {opts['alpha']:g}; {shared.size(opts, d)}; "
        f"pre + selection + post steps {' + '.join(str(steps[p]) for p in PHASES)} in "
        f"{' + '.join(f'{seconds[p]:.1f}' for p in PHASES)} s",
    ]
    files = {
        "params.npz": results.npz_file(store.params_arrays(fit.params, d.scaler)),
        "selection.npz": results.npz_file(selection),
    }
    files["posterior.nc"] = diagnostics.netcdf_file(store.svi_posterior(fit.model, fit.params, d.X, d.y))
    record["files"]["posterior"] = "posterior.nc"
    return shared.finish(opts, d, argv, record, files, figure, summary)
