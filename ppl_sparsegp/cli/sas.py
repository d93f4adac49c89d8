"""sas: a GP-LVM decoder trained with stochastic active sets (SAS-GP, Moreno-Muñoz et al. 2022), deterministic or
Bayesian (--bayesian), with an amortised encoder.

:func:`ppl_sparsegp.recipes.sas_gplvm.fit_sas` on the training inputs of --data (MNIST by default: pixels in [0, 1],
not standardised, as in the paper; the labels only colour the plot and score the 1-nearest-neighbour probe). Writes
params.npz (the encoder's weights, one array per leaf, and the hyperparameters), fit.png (the test rows' latents
coloured by label, the loss against training time) and results.json (reconstruction RMSE, MAE and NLPD per entry of
the test rows, conditioned on --conditioning encoded training rows; the 1-NN accuracy of the latents; seconds per
epoch). The SVI state is checkpointed to OUT/checkpoint.npz, from which the same command (--epochs may be raised)
resumes. With ``--backend pyro`` the Pyro twin runs the same recipe (:mod:`ppl_sparsegp.recipes.sas_gplvm_pyro`,
from the same initial weights, torch drawing the batches and splits) and the NumPyro model evaluates and stores the
fit (:mod:`ppl_sparsegp.cli.pyro_backend`), so the outputs have the same form; its figure plots the loss against the
steps (the Pyro loop reports no timed chunks).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ppl_sparsegp import data, results
from ppl_sparsegp.cli import run as shared
from ppl_sparsegp.recipes.sas_gplvm import SASConfig, encode_rows, evaluate_sas, fit_sas
from ppl_sparsegp.runs import store

CHECKPOINT = "checkpoint.npz"
CONFIG = SASConfig()
METHOD_DEFAULTS = {"noise_variance": CONFIG.noise_variance}
OPTIONS = {
    "active": ("num_active", int, "A", "active-set size per step"),
    "batch_size": ("batch_size", int, "B", "rows per step, B > A (also --batch)"),
    "latent_dim": ("latent_dim", int, "Q", "latent dimensions"),
    "hidden": ("hidden", int, "W", "the encoder's hidden widths"),
    "activation": ("activation", str, None, "the encoder's activation"),
    "weight": ("weight", str, None, "weight of the held-out sum: unbiased (N-A)/(B-A), batch 1, repo (B-A)/N"),
    "kernel_variance": ("kernel_variance", float, "V", "initial RBF variance"),
    "lengthscale": ("lengthscale", float, "L", "initial RBF lengthscales"),
    "noise_variance": ("noise_variance", float, "V", "initial noise variance"),
    "lr": ("learning_rate", float, None, "Adam learning rate"),
    "epochs": ("num_epochs", int, None, "epochs of ceil(N / B) steps"),
}
"""option -> (field of SASConfig, type, metavar, help)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    shared.add_common_arguments(parser, "sas", data="mnist")
    shared.add_options(parser, ("backend",))
    group = parser.add_argument_group("SAS-GP (sas only)")
    for option, (name, kind, metavar, help_) in OPTIONS.items():
        default = getattr(CONFIG, name)
        flags = ["--batch-size", "--batch"] if option == "batch_size" else [shared.flag(option)]
        many = {"nargs": "*", "default": list(default)} if option == "hidden" else {"default": default}
        group.add_argument(*flags, type=kind, metavar=metavar, help=f"{help_} (default: {default})", **many)
    group.add_argument("--bayesian", action="store_true", help="Bayesian SAS: q(x | y) and the latent prior")
    shared.add(group, "conditioning", 5000, "training rows the test reconstructions are conditioned on", type=int)
    shared.add(group, "checkpoint_every", shared.DEFAULTS.checkpoint_every, "SVI steps between checkpoints", type=int)


def _config(opts: dict[str, Any]) -> SASConfig:
    """The recipe's settings of the options (its checks name the field; the message names the flag)."""
    fields = {name: opts[option] for option, (name, *_) in OPTIONS.items()}
    try:
        return SASConfig(**{**fields, "hidden": tuple(fields["hidden"])}, bayesian=opts["bayesian"])
    except ValueError as err:
        field = str(err).split(":")[0]
        option = next((o for o, (name, *_) in OPTIONS.items() if name == field), field)
        raise ValueError(f"{shared.flag(option)}: {str(err).split(': ', 1)[-1]}") from None


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    opts = dict(vars(args))
    config = _config(opts)
    shared.check_options(opts, positive=("conditioning",))
    try:
        ds = data.load_dataset(opts["data"], opts["split"], opts["target"])
    except ValueError as err:
        raise ValueError(f"--data {opts['data']!r} (--split {opts['split']}): {err}") from None
    dtype = np.dtype(opts["dtype"])
    Y, Y_test = ds.X_train.astype(dtype), ds.X_test.astype(dtype)
    evaluated_on = "test" if len(Y_test) else "train"
    Y_eval, labels_eval = (Y_test, ds.y_test) if len(Y_test) else (Y, ds.y_train)
    if Y.shape[0] <= config.num_active:
        raise ValueError(f"--active: {ds.name} has N = {Y.shape[0]} training rows; the active set needs fewer")
    checkpoint = opts["out"] / CHECKPOINT
    settings, counters = shared.checkpoints(opts, (Y,), [checkpoint], resumable=("epochs", "conditioning"))
    resumed_from = counters.get("step", 0)
    clock: list[tuple[int, float]] = [(resumed_from, time.perf_counter())]

    def tick(step: int, *_: Any) -> None:
        clock.append((step, time.perf_counter()))

    recipe = {"checkpoint": str(checkpoint), "checkpoint_every": opts["checkpoint_every"],
              "progress": shared.progress(opts), "fingerprint": settings}  # fmt: skip
    if opts["backend"] == "pyro":
        from ppl_sparsegp.cli import pyro_backend

        fit = pyro_backend.fit_sas(Y, config, opts, **recipe)
    else:
        fit = fit_sas(Y, config, seed=opts["seed"], callback=tick, **recipe)
    labels = ds.y_train if ds.task != "regression" else None
    m, evaluate_seconds = shared.timed(
        evaluate_sas, fit.model, fit.params, Y, Y_eval, labels, labels_eval if labels is not None else None,
        num_conditioning=opts["conditioning"], seed=opts["seed"],
    )  # fmt: skip
    steps = int(len(fit.svi.losses))
    record = {
        "method": "sas", "data": ds.name, "split": opts["split"], "task": ds.task, "n_train": int(Y.shape[0]),
        "n_eval": int(Y_eval.shape[0]), "input_dim": int(Y.shape[1]), "evaluated_on": evaluated_on, "metrics": m,
        "bayesian": config.bayesian, "num_active": config.num_active, "batch_size": min(config.batch_size, len(Y)),
        "steps": steps, "steps_per_epoch": fit.steps_per_epoch, "resumed_from_step": resumed_from,
        "final_loss": float(fit.svi.losses[-1]), "seconds_per_epoch": fit.seconds_per_epoch,
        "compile_seconds": fit.svi.compile_seconds, "run_seconds": fit.svi.run_seconds,
        "evaluate_seconds": evaluate_seconds, "options": opts, "argv": list(argv), **results.provenance(),
        "files": {"params": "params.npz", "figure": "fit.png", "checkpoint": CHECKPOINT},
    }  # fmt: skip
    latents = encode_rows(fit.model, fit.params, Y_eval[:5000])
    times = np.array([[step, seconds - clock[0][1]] for step, seconds in clock[1:]])
    shown = None if labels_eval is None else labels_eval[:5000]
    figure = results.plot_latents_and_loss(latents, shown, np.asarray(fit.svi.losses), times)
    try:
        files = {"params.npz": results.npz_file(store.flat_params(fit.params)), "fit.png": results.figure_file(figure),
                 "results.json": results.json_file(record)}  # fmt: skip
        results.write_output_set(opts["out"], files)
    finally:
        results.close_figure(figure)
    if not opts["quiet"]:
        kind = "Bayesian SAS" if config.bayesian else "SAS"
        accuracy = f", 1-NN accuracy {m['nearest_neighbour_accuracy']:.3f}" if "nearest_neighbour_accuracy" in m else ""
        print(f"sas ({kind}, A = {config.num_active}) on {ds.name}: N = {len(Y)}, D = {Y.shape[1]}\n"
              f"  {steps - resumed_from} steps in {fit.svi.run_seconds:.1f} s ({fit.seconds_per_epoch or 0:.2f} s per "
              f"epoch); final loss {record['final_loss']:.6g}\n"
              f"  {evaluated_on} RMSE {m['rmse']:.4f}  MAE {m['mae']:.4f}  NLPD {m['nlpd']:.4f}{accuracy}\n"
              f"  wrote {opts['out'] / 'results.json'}, params.npz, fit.png")  # fmt: skip
    return record
