"""The selective side of the ``ppl-sparsegp`` command line: ``fit selective``.

``ppl-sparsegp fit selective --data kin8nm --candidates 100 --alpha 0.1 ...`` runs the probabilistic selection of
inducing points (Uhrenholt, Charvet & Jensen, UAI 2021) with :func:`models.selective_fit.fit_selective`: pre-train a
sparse GP on K candidate inputs drawn from the training inputs, learn their inclusion probabilities λ under the
prior p(S) ∝ exp(−α |S|²), draw one subset from q_λ, prune the unselected candidates and post-train the pruned model
(an ordinary SGPR for ``--bound collapsed``, an unwhitened SVGP for ``--bound uncollapsed``).

Data load and are standardised as for svgp (X and y with training statistics); metrics are in original units.

Options (see ``ppl-sparsegp fit --help``): ``--candidates`` (100, at most N), ``--alpha`` (0.1), ``--bound``
(collapsed; needs a Gaussian likelihood), ``--selection`` (frozen), ``--particles`` (4), ``--initial-inclusion``
(0.5), ``--pre-steps`` (2500), ``--selection-steps`` (1500), ``--post-steps`` (1000), ``--selection-lr`` (0.2), and
the shared ``--lr`` (0.01), ``--init`` (random or kmeans; default random), ``--kernel``, ``--kernel-variance``,
``--lengthscale``, ``--noise-variance`` (default 1.0, the paper's), ``--likelihood`` and ``--batch-size``
(uncollapsed only), ``--seed``, ``--dtype``, ``--checkpoint-every``. ``--steps``, ``--inducing``, ``--whiten`` and
``--q-diag`` are errors with selective, as are the MCMC and bsgp options, and the selective options with any other
method; every check happens before anything is loaded or compiled, and a problem is one line ``error: ...``, exit
code 2. Each phase checkpoints its SVI state to ``OUT/selective_<phase>.npz`` (every ``--checkpoint-every`` steps
and on Ctrl-C) with a fingerprint of every option but the output ones and the step counts, and of the data;
re-running the same command (the step counts may be raised) resumes where it stopped, a run with any other option or
data is refused before any work, naming what differs, and ``--restart`` discards the three files.

Outputs in ``--out`` (default ``runs/selective-<data>-<split>``), written as one set
(:func:`ppl_sparsegp.results.write_output_set`):

* ``params.npz``: the pruned model's fitted parameters in standardised units (as for sgpr / svgp: ``Z`` holds the
  |S| kept inducing inputs), plus the standardisation statistics;
* ``selection.npz``: ``inclusion_probs`` λ [K], ``mask`` [K] (the drawn subset), ``candidates`` Z* [K, D]
  (standardised, after the selection phase) and ``selected`` (the kept indices);
* ``fit.png``: the loss traces of the three phases, the inclusion probabilities (against the candidate location for
  1-D inputs, sorted otherwise) and the predictive picture;
* ``results.json`` (last): test metrics in original units, K, the selected count and E|S|, Var|S| under q_λ, the
  settings, per-phase steps, losses and seconds, and versions.
"""

from __future__ import annotations

import argparse
import datetime
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ppl_sparsegp import results, validation
from ppl_sparsegp.cli_checks import (
    check_counts,
    fingerprint_settings,
    prepare_checkpoints,
    refuse_inapplicable,
    refuse_options_of,
)
from ppl_sparsegp.data import Dataset, Standardizer
from ppl_sparsegp.models._base import to_numpy_params
from ppl_sparsegp.recipes.phases import PHASES, phase_checkpoint
from ppl_sparsegp.recipes.selective import BOUNDS, INITIALISATIONS, SELECTION_MODES, SelectiveFit, fit_selective
from ppl_sparsegp.reporting import evaluate, plot_fit, plt

SELECTIVE_DEFAULTS = {
    "candidates": 100,
    "alpha": 0.1,
    "bound": "collapsed",
    "selection": "frozen",
    "particles": 4,
    "initial_inclusion": 0.5,
    "pre_steps": 2500,
    "selection_steps": 1500,
    "post_steps": 1000,
    "selection_lr": 0.2,
    "init": "random",
    "noise_variance": 1.0,
}
SELECTIVE_ONLY = (
    "candidates",
    "alpha",
    "bound",
    "selection",
    "particles",
    "initial_inclusion",
    "pre_steps",
    "selection_steps",
    "post_steps",
    "selection_lr",
)
"""Options of selective alone (default ``None`` in the parser, so that giving one to another method is an error)."""
NOT_FOR_SELECTIVE = {
    "steps": "it trains in three phases: use --pre-steps, --selection-steps and --post-steps",
    "inducing": "the number of inducing points is learned; --candidates sets how many it chooses from",
    "whiten": "selective's q(u) is unwhitened, so that a subset of it is a marginal of u",
    "q_diag": "selective's q(u) has a full covariance",
}


# --------------------------------------------------------------------------------------------------------
# Command-line syntax and checks


def add_selective_arguments(fit: argparse.ArgumentParser) -> None:
    """The selective-only options of ``fit`` (defaults ``None``, so that giving one to another method is an error)."""
    d = SELECTIVE_DEFAULTS
    group = fit.add_argument_group(
        "selective (selective only)",
        description="selective chooses the inducing points from K candidates drawn from the training inputs "
        "(probabilistic selection, Uhrenholt et al. 2021): pre-train a sparse GP on all K, learn inclusion "
        "probabilities under the prior p(S) ∝ exp(-alpha |S|^2), draw one subset, prune and post-train. It also "
        f"takes --lr (GP learning rate; default: 0.01), --init random|kmeans (candidates; default: {d['init']}), "
        "--kernel, --kernel-variance, --lengthscale, --noise-variance (default: "
        f"{d['noise_variance']}), --likelihood and --batch-size (both with --bound uncollapsed), --seed, --dtype. "
        "--checkpoint-every. Not --steps, --inducing, --whiten, --q-diag, nor the MCMC or BSGP options. Writes "
        "params.npz (the pruned model), selection.npz (inclusion probabilities and mask), fit.png, results.json and "
        "one checkpoint per phase (OUT/selective_<phase>.npz; the same command resumes from them).",
    )
    group.add_argument(
        "--candidates",
        type=int,
        default=None,
        metavar="K",
        help=f"candidate inducing inputs, 1 <= K <= N (default: {d['candidates']})",
    )
    group.add_argument(
        "--alpha",
        type=float,
        default=None,
        help=f"prior strength alpha >= 0 of p(S) ∝ exp(-alpha |S|^2); larger keeps fewer (default: {d['alpha']})",
    )
    group.add_argument(
        "--bound",
        default=None,
        metavar="{" + ",".join(BOUNDS) + "}",
        help="collapsed (Titsias, SGPR; Gaussian likelihood, full batch) or uncollapsed (unwhitened SVGP; any "
        f"likelihood, minibatches) (default: {d['bound']})",
    )
    group.add_argument(
        "--selection",
        default=None,
        metavar="{" + ",".join(SELECTION_MODES) + "}",
        help="frozen (only the inclusion probabilities learn while selecting, as the released code) or joint (the "
        f"GP parameters learn too) (default: {d['selection']})",
    )
    group.add_argument(
        "--particles",
        type=int,
        default=None,
        metavar="S",
        help=f"subsets drawn per selection step by the score-function estimator (default: {d['particles']})",
    )
    group.add_argument(
        "--initial-inclusion",
        type=float,
        default=None,
        metavar="P",
        help=f"initial inclusion probability of every candidate, in (0, 1) (default: {d['initial_inclusion']})",
    )
    group.add_argument(
        "--pre-steps",
        type=int,
        default=None,
        metavar="STEPS",
        help=f"Adam steps pre-training on all K candidates, >= 0 (default: {d['pre_steps']})",
    )
    group.add_argument(
        "--selection-steps",
        type=int,
        default=None,
        metavar="STEPS",
        help=f"Adam steps learning the inclusion probabilities, >= 1 (default: {d['selection_steps']})",
    )
    group.add_argument(
        "--post-steps",
        type=int,
        default=None,
        metavar="STEPS",
        help=f"Adam steps post-training the pruned model, >= 0 (default: {d['post_steps']})",
    )
    group.add_argument(
        "--selection-lr",
        type=float,
        default=None,
        metavar="LR",
        help=f"Adam learning rate of the inclusion probabilities (as logits) (default: {d['selection_lr']})",
    )


def resolve_selective_options(opts: dict[str, Any]) -> dict[str, Any]:
    """Check the selective options for ``fit``; fill in selective's defaults.

    For another method, only checks that no selective-only option was given. The checks that involve the likelihood
    are in :func:`check_bound` (after ``cli.resolve_options`` has checked its name), those that need the dataset in
    :func:`check_dataset`.

    Raises:
        ValueError: an option given to the wrong method, or a bad value, naming the option.
    """
    refuse_options_of("selective", opts, SELECTIVE_ONLY)
    if opts["method"] != "selective":
        return opts
    refuse_inapplicable(opts, NOT_FOR_SELECTIVE)
    fill = (*SELECTIVE_ONLY, "init")  # the default noise variance depends on the dataset: cli._settle_likelihood
    opts = {**opts, **{k: SELECTIVE_DEFAULTS[k] if opts.get(k) is None else opts[k] for k in fill}}
    for name, choices in (("bound", BOUNDS), ("selection", SELECTION_MODES), ("init", INITIALISATIONS)):
        if opts[name] not in choices:
            raise ValueError(f"--{name} {opts[name]}: selective takes {' or '.join(choices)}")
    check_counts(
        opts, positive=("candidates", "particles", "selection_steps"), non_negative=("pre_steps", "post_steps")
    )
    if not (math.isfinite(opts["alpha"]) and opts["alpha"] >= 0):
        raise ValueError(f"--alpha must be finite and >= 0, got {opts['alpha']}")
    if not 0.0 < opts["initial_inclusion"] < 1.0:
        raise ValueError(f"--initial-inclusion must be a probability in (0, 1), got {opts['initial_inclusion']}")
    validation.check_positive("--selection-lr", opts["selection_lr"])
    return opts


def check_bound(opts: dict[str, Any]) -> None:
    """The collapsed bound needs a Gaussian likelihood and the full batch (``opts`` from ``cli.resolve_options``)."""
    if opts["bound"] != "collapsed":
        return
    if opts["likelihood"] not in (None, "gaussian"):
        raise ValueError(
            f"--likelihood {opts['likelihood']} needs --bound uncollapsed (the collapsed bound is for a Gaussian "
            "likelihood)"
        )
    if opts["batch_size"] is not None:
        raise ValueError("--batch-size needs --bound uncollapsed (the collapsed bound uses the full batch)")


def check_dataset(opts: dict[str, Any], ds: Dataset) -> None:
    """selective's checks that need the dataset (the shared ones are in ``cli._check_dataset``)."""
    validation.check_inducing_count(opts["candidates"], ds.X_train.shape[0], name="--candidates")


# --------------------------------------------------------------------------------------------------------
# The picture


def _plot_losses(ax: Any, losses: dict[str, np.ndarray]) -> None:
    """The three phases' loss traces one after the other, separated by dotted lines."""
    start, every = 0, []
    for phase in PHASES:
        trace = np.asarray(losses.get(phase, np.zeros(0)))
        if len(trace):
            ax.plot(start + np.arange(1, len(trace) + 1), trace, lw=0.8, label=f"{phase} ({len(trace)} steps)")
            if start:
                ax.axvline(start + 0.5, color="k", ls=":", lw=0.8)
            every.append(trace)
        start += len(trace)
    if every and np.all(np.concatenate(every) > 0):
        ax.set_yscale("log")
    ax.set(xlabel="step", ylabel="loss (negative bound, standardised units)", title="training loss by phase")
    ax.legend(loc="best", fontsize=8)


def _plot_inclusion(ax: Any, fit: SelectiveFit, candidates: np.ndarray, scaler: Standardizer) -> None:
    """λ of every candidate: against its location (original units) for 1-D inputs, sorted otherwise."""
    probs, kept = fit.inclusion_probs, fit.mask.astype(bool)
    if candidates.shape[1] == 1:
        x = candidates[:, 0] * scaler.x_scale[0] + scaler.x_mean[0]
        ax.plot(x[kept], probs[kept], "o", ms=5, label="kept")
        ax.plot(x[~kept], probs[~kept], "o", ms=5, mfc="none", label="pruned")
        ax.set_xlabel("candidate location x")
    else:
        order = np.argsort(-probs, kind="stable")
        rank = np.arange(1, len(probs) + 1)
        ax.bar(rank[kept[order]], probs[order][kept[order]], width=1.0, label="kept")
        ax.bar(rank[~kept[order]], probs[order][~kept[order]], width=1.0, alpha=0.5, label="pruned")
        ax.set_xlabel("candidate, sorted by inclusion probability")
    ax.set(
        ylim=(-0.02, 1.02),
        ylabel="inclusion probability λ",
        title=f"kept {fit.selected_count} of {len(probs)} (E|S| = {fit.expected_count:.1f})",
    )
    ax.legend(loc="best", fontsize=8)


def _figure(fit: SelectiveFit, candidates: np.ndarray, scaler: Standardizer, *picture: Any) -> Any:
    """Loss traces, inclusion probabilities and plot_fit's predictive picture (``picture``: its arguments)."""
    figure = plot_fit(np.zeros(0), *picture)
    ax_loss, ax_fit = figure.axes
    figure.set_size_inches(16.5, 4.2)
    grid = figure.add_gridspec(1, 3)
    ax_loss.set_subplotspec(grid[0])
    ax_fit.set_subplotspec(grid[2])
    ax_loss.clear()
    _plot_losses(ax_loss, fit.losses)
    _plot_inclusion(figure.add_subplot(grid[1]), fit, candidates, scaler)
    figure.tight_layout()
    return figure


# --------------------------------------------------------------------------------------------------------
# The run


def run_selective(
    opts: dict[str, Any],
    model_parts: Callable[[dict[str, Any], Dataset], dict[str, Any]],
    ds: Dataset,
    std: Dataset,
    scaler: Standardizer,
    argv: Sequence[str],
    *,
    predictor: Callable[[Any], Callable[..., tuple[Any, Any, Any]]],
    curve_1d: Callable[..., dict[str, np.ndarray] | None],
    versions: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Fit selective on the standardised data ``std``; write params.npz, selection.npz, fit.png and results.json.

    ``opts`` come from ``cli.resolve_options`` (likelihood settled); ``model_parts(opts, std)`` (the CLI's) builds the
    initial ``kernel`` and ``likelihood``, once the checkpoints in ``--out`` have been checked (or discarded by
    ``--restart``); ``ds`` is the dataset in original units and ``scaler`` its standardisation.
    ``predictor`` and ``curve_1d`` are the CLI's ``compiled_predictor`` and ``_curve_1d`` (prediction and the 1-D
    picture, shared with the other SVI methods).
    """
    out = Path(opts["out"])
    dtype = np.dtype(opts["dtype"])
    X, y = std.X_train.astype(dtype), std.y_train.astype(dtype)
    batch = opts["batch_size"] if opts["batch_size"] is not None and opts["batch_size"] < len(X) else None
    settings = fingerprint_settings(opts, resumable=("pre_steps", "selection_steps", "post_steps"))
    prepare_checkpoints(opts, [phase_checkpoint(out, phase) for phase in PHASES], settings, X, y)
    parts = model_parts(opts, std)
    start = time.perf_counter()
    fit = fit_selective(
        X,
        y,
        candidates=opts["candidates"],
        alpha=opts["alpha"],
        bound=opts["bound"],
        likelihood=parts["likelihood"],
        kernel=parts["kernel"],
        init=opts["init"],
        initial_inclusion=opts["initial_inclusion"],
        num_particles=opts["particles"],
        selection=opts["selection"],
        pre_steps=opts["pre_steps"],
        selection_steps=opts["selection_steps"],
        post_steps=opts["post_steps"],
        learning_rate=opts["lr"],
        selection_learning_rate=opts["selection_lr"],
        batch_size=batch,
        key=opts["seed"],
        progress=not (opts["no_progress"] or opts["quiet"]),
        checkpoint_dir=out,
        checkpoint_every=opts["checkpoint_every"],
        fingerprint=settings,
    )
    fit_seconds = time.perf_counter() - start

    has_test = ds.y_test is not None
    evaluated_on = "test" if has_test else "train"
    X_eval = (std.X_test if has_test else std.X_train).astype(dtype)
    y_eval = ds.y_test if has_test else ds.y_train
    y_eval_std = (std.y_test if has_test else std.y_train).astype(dtype)
    start = time.perf_counter()
    predict = predictor(fit.model)
    scores, mean, var = evaluate(predict(fit.params, X, y, X_eval, y_eval_std), y_eval, scaler, ds.task)
    predict_seconds = time.perf_counter() - start

    params = to_numpy_params(fit.params)
    params.update({f"standardizer.{k}": np.asarray(v) for k, v in vars(scaler).items()})
    candidates = np.asarray(fit.selective_params.get("Z", fit.selective.Z))
    selection = {
        "inclusion_probs": fit.inclusion_probs,
        "mask": fit.mask.astype(np.int8),
        "candidates": candidates,
        "selected": np.flatnonzero(fit.mask),
    }
    curve = curve_1d(predict, fit.params, (X, y), ds, scaler)

    steps = {phase: int(len(fit.losses.get(phase, ()))) for phase in PHASES}
    record = {
        "method": "selective",
        "bound": opts["bound"],
        "selection": opts["selection"],
        "likelihood": opts["likelihood"],
        "data": ds.name,
        "split": opts["split"],
        "task": ds.task,
        "n_train": int(X.shape[0]),
        "n_eval": int(X_eval.shape[0]),
        "input_dim": int(X.shape[1]),
        "num_outputs": ds.num_outputs,
        "evaluated_on": evaluated_on,
        "metrics": scores,
        "candidates": int(len(fit.mask)),
        "selected_count": fit.selected_count,
        "expected_count": fit.expected_count,
        "count_variance": fit.count_variance,
        "options": opts,
        "argv": list(argv),
        "steps": steps,
        "final_loss": {p: float(fit.losses[p][-1]) if steps[p] else None for p in PHASES},
        "seconds": {p: float(fit.seconds.get(p, 0.0)) for p in PHASES},
        "fit_seconds": fit_seconds,
        "predict_seconds": predict_seconds,
        "backend": jax.default_backend(),
        "versions": dict(versions or {}),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "files": {
            "params": "params.npz",
            "selection": "selection.npz",
            "figure": "fit.png",
            "checkpoints": [phase_checkpoint(out, p).name for p in PHASES],
        },
    }
    if not has_test:
        record["note"] = f"{ds.name} has no test targets; the metrics are on the training data"
    figure = _figure(fit, candidates, scaler, ds.task, evaluated_on, y_eval, mean, var, curve)
    try:
        outputs = {"params.npz": results.npz_file(params), "selection.npz": results.npz_file(selection)}
        outputs["fit.png"] = results.figure_file(figure)
        results.write_output_set(out, {**outputs, "results.json": results.json_file(record)})
    finally:
        plt.close(figure)
    return record


def summary_line(record: dict[str, Any], out: Path) -> str:
    """What ``fit selective`` prints on success."""
    m, steps, seconds = record["metrics"], record["steps"], record["seconds"]
    where = record["evaluated_on"]
    if record["task"] == "regression":
        scores = f"{where} RMSE {m['rmse']:.4g}, MAE {m['mae']:.4g}, NLPD {m['nlpd']:.4g} (original units)"
    else:
        scores = f"{where} accuracy {m['accuracy']:.4f}, NLL {m['nll']:.4f}, ECE {m['ece']:.4f}, AUC {m['auc']:.4f}"
    schedule = " + ".join(str(steps[p]) for p in PHASES)
    timing = " + ".join(f"{seconds[p]:.1f}" for p in PHASES)
    return "\n".join(
        [
            f"selective on {record['data']} split {record['split']}: kept {record['selected_count']} of "
            f"{record['candidates']} candidates (E|S| = {record['expected_count']:.1f}), {scores}",
            f"  {record['bound']} bound, {record['selection']} selection, alpha = {record['options']['alpha']:g}; "
            f"N = {record['n_train']}, D = {record['input_dim']}; pre + selection + post steps {schedule} in "
            f"{timing} s",
            f"  wrote {out / 'results.json'}, params.npz, selection.npz, fit.png",
        ]
    )
