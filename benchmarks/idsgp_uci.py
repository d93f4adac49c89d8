"""IDSGP against the paper's UCI tables (Jafrasteh et al. 2022, Tables 1-6; spec 002 §3.2), with our SVGP at
M = 1024 on the same splits in the same run.

Run (from the repository root)::

    .venv/bin/python benchmarks/idsgp_uci.py                                  # 4 regression sets + magic, splits 0-2
    .venv/bin/python benchmarks/idsgp_uci.py --datasets kin40k --splits 0 --svgp-epochs 10
    .venv/bin/python benchmarks/idsgp_uci.py --quick                          # smoke test: 1 epoch, 2,000 rows
    .venv/bin/python benchmarks/idsgp_uci.py --datasets magic --splits 0 --methods idsgp --dropout 0.5 \
        --out benchmarks/results/idsgp_uci_dropout.json                       # the launchers' output dropout

Protocol (spec 002 §2, §3.2): the Wilson-suite file (``uci_wilson/<name>``; protein from ``uci/protein``, whose
targets are in the original units the paper reports, where the Wilson file's are rescaled; magic from
``uci_classification``) pooled and split at random 80/20 with ``numpy.random.default_rng(split)``
(:func:`ppl_sparsegp.data.random_split`), X and y standardised with training statistics; metrics in original units.
IDSGP: :func:`fit_idsgp` with its defaults (Matérn-3/2 ARD plus the authors' learned white term, M = 50, one hidden
layer of 50 sigmoid units, Adam 0.01, batch 100, 100 epochs, float64; Gaussian likelihood with noise variance 0.1,
probit for magic); ``--white-floor`` adds the authors' fixed 1e-3 beside the learned white term, ``--dropout RATE``
sets :attr:`IDSGPConfig.dropout` (the authors' UCI launchers use 0.5; IDSGP's checkpoints then carry the rate in
their name). SVGP: M = 1024
k-means inducing inputs, the same kernel without the white term, whitened full q(u), Adam 0.01, batch 100.

Recorded per (dataset, split, method): test NLL, RMSE (accuracy for magic), training seconds per epoch (compiling
excluded), prediction seconds per epoch (one compiled pass over the test set, after a warm-up pass), the test NLL
after every epoch against training seconds (and every test metric after every epoch), and the training seconds to
come within 0.05 of the final NLL. ``benchmarks/results/idsgp_uci.json`` (or ``--out``) is rewritten atomically
after every finished cell; finished cells with the same settings are skipped when the script runs again, and each
cell's SVI state is checkpointed in
``benchmarks/results/idsgp_uci_runs/`` (gitignored), from which a killed cell resumes, beside its curve so far
(``<cell>.json``, rewritten after every epoch; a resumed cell's curve starts at the resume).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import optax  # noqa: E402

from ppl_sparsegp import data, results  # noqa: E402
from ppl_sparsegp.core import kernels, likelihoods  # noqa: E402
from ppl_sparsegp.inducing.initialise import kmeans  # noqa: E402
from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402
from ppl_sparsegp.models.numpyro.svgp import SVGP  # noqa: E402
from ppl_sparsegp.recipes.idsgp import IDSGPConfig, build_idsgp, fit_idsgp  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "idsgp_uci.json"
RUNS = ROOT / "results" / "idsgp_uci_runs"
SOURCES = {"kin40k": "wilson/kin40k", "protein": "uci/protein", "keggdirected": "wilson/keggdirected",
           "keggundirected": "wilson/keggundirected", "magic": "uci_classification/magic"}  # fmt: skip
PAPER = {  # Tables 1, 2, 4, 6: IDSGP NLL, VSGP (M = 1024) NLL, IDSGP RMSE or accuracy
    "kin40k": {"idsgp_nll": -1.461, "vsgp_nll": -0.047, "idsgp_rmse": 0.050},
    "protein": {"idsgp_nll": 2.775, "vsgp_nll": 2.848, "idsgp_rmse": 3.756},
    "keggdirected": {"idsgp_nll": -2.410, "vsgp_nll": -1.955, "idsgp_rmse": 0.022},
    "keggundirected": {"idsgp_nll": -2.908, "vsgp_nll": -2.344, "idsgp_rmse": 0.014},
    "magic": {"idsgp_nll": 0.311, "vsgp_nll": 0.308, "idsgp_accuracy": 0.877},
}
WITHIN = 0.05


def _split(name: str, split: int, quick: bool) -> tuple[data.Dataset, data.Dataset, data.Standardizer]:
    """The split in original units, standardised, and the standardisation (--quick: its first 2,000 and 500 rows)."""
    ds = data.random_split(data.load_dataset(SOURCES[name], 0), 0.2, seed=split)
    if quick:
        ds = data.Dataset(ds.X_train[:2000], ds.y_train[:2000], ds.X_test[:500], ds.y_test[:500], ds.name, ds.task)
    return (ds, *data.standardize(ds))


class Trajectory:
    """The fit_svi callback: the test NLL after every epoch against the seconds since the fit started, compiling
    included and evaluating not; the curve so far is rewritten to ``progress`` (a JSON file) after every epoch."""

    def __init__(self, predictor, steps_per_epoch: int, progress: Path) -> None:
        self.predictor, self.steps_per_epoch, self.progress = predictor, steps_per_epoch, progress
        self.points: list[tuple[float, float]] = []
        self.metrics: list[dict[str, float]] = []
        self.start, self.evaluating = time.perf_counter(), 0.0

    def __call__(self, step: int, losses: np.ndarray, params: dict) -> None:
        if step % self.steps_per_epoch < len(losses):  # an epoch ended inside this chunk
            t0 = time.perf_counter()
            metrics = self.predictor(params)[0]
            self.points.append((t0 - self.start - self.evaluating, metrics["nll"]))
            self.metrics.append(metrics)
            results.write_json(self.progress, {"step": step, "nll_trajectory": self.points, "metrics": self.metrics})
            self.evaluating += time.perf_counter() - t0

    def seconds_to_final(self) -> float | None:
        """Training seconds until the NLL first comes within WITHIN of its final value."""
        if not self.points:
            return None
        final = self.points[-1][1]
        return next(t for t, nll in self.points if nll <= final + WITHIN)


def _predictor(model: Any, std: data.Dataset, ds: data.Dataset, scaler: data.Standardizer):
    """params -> (metrics in original units, seconds of one compiled pass over the test set)."""

    @jax.jit
    def predict(params, X, y):
        mean, var = model.predict_y(params, X)
        return mean, var, model.predict_log_density(params, X, y)

    def run(params):
        t0 = time.perf_counter()
        out = jax.block_until_ready(predict(params, std.X_test, std.y_test))
        seconds = time.perf_counter() - t0
        m, _, _ = results.evaluate(out, ds.y_test, scaler, ds.task)
        return {"nll": m["nlpd"] if ds.task == "regression" else m["nll"], **m}, seconds

    return run


def _likelihood(task: str) -> likelihoods.Likelihood:
    return likelihoods.Gaussian(0.1) if task == "regression" else likelihoods.Bernoulli()


def _cell(name: str, split: int, method: str, args: argparse.Namespace) -> dict[str, Any]:
    ds, std, scaler = _split(name, split, args.quick)
    N, D = std.X_train.shape
    config = IDSGPConfig(num_epochs=args.epochs, white_floor=args.white_floor, dropout=args.dropout)
    steps_per_epoch = config.steps_per_epoch(N)
    rate = f"-dropout{args.dropout:g}" if method == "idsgp" and args.dropout else ""
    checkpoint = RUNS / f"{'quick-' if args.quick else ''}{name}-{split}-{method}{rate}.npz"
    if method == "idsgp":
        model = build_idsgp(config, std.X_train, _likelihood(ds.task), seed=split)
        trajectory = Trajectory(_predictor(model, std, ds, scaler), steps_per_epoch, checkpoint.with_suffix(".json"))
        fit = fit_idsgp(std.X_train, std.y_train, config, likelihood=_likelihood(ds.task), seed=split,
                        checkpoint=str(checkpoint), progress=not args.quiet, callback=trajectory)  # fmt: skip
        svi, epochs = fit.svi, args.epochs
    else:
        epochs = args.svgp_epochs or args.epochs
        kernel = kernels.kernel_from_name(config.kernel, D)
        Z = kmeans(std.X_train, min(args.svgp_inducing, N), seed=split)
        batch = config.batch_size if config.batch_size < N else None
        model = SVGP(kernel, _likelihood(ds.task), Z=Z, batch_size=batch)
        trajectory = Trajectory(_predictor(model, std, ds, scaler), steps_per_epoch, checkpoint.with_suffix(".json"))
        svi = fit_svi(model.model, model.guide, std.X_train, std.y_train, optimizer=optax.adam(config.learning_rate),
                      num_steps=epochs * steps_per_epoch, key=split, checkpoint=str(checkpoint),
                      progress=not args.quiet, callback=trajectory, validate=model.check_data)  # fmt: skip
    predictor = _predictor(model, std, ds, scaler)
    predictor(svi.params)  # compiles
    scores, predict_seconds = predictor(svi.params)
    return {
        "dataset": name, "source": SOURCES[name], "split": split, "method": method, "n_train": N,
        "n_test": int(std.X_test.shape[0]),
        "input_dim": D, "epochs": epochs, "steps_per_epoch": steps_per_epoch, "metrics": scores,
        "train_seconds_per_epoch": svi.run_seconds * steps_per_epoch / svi.steps_run if svi.steps_run else None,
        "compile_seconds": svi.compile_seconds, "predict_seconds_per_epoch": predict_seconds,
        "nll_trajectory": trajectory.points, "metrics_by_epoch": trajectory.metrics,
        "seconds_to_within_0.05_of_final": trajectory.seconds_to_final(),
        "resumed_from_step": svi.resumed_from,
        "settings": {"inducing": 50 if method == "idsgp" else int(min(args.svgp_inducing, N)), "batch": 100,
                     "learning_rate": config.learning_rate,
                     "white_floor": args.white_floor if method == "idsgp" else None,
                     "dropout": args.dropout if method == "idsgp" else None},
    }  # fmt: skip


def _key(cell: dict[str, Any]) -> tuple:
    return cell["dataset"], cell["split"], cell["method"], cell["epochs"]


def _read(out: Path) -> dict[str, Any]:
    return json.loads(out.read_text()) if out.exists() else {"cells": []}


def _save(out: Path, cell: dict[str, Any]) -> None:
    """Add ``cell`` to the results file (replacing an older run of the same dataset, split and method), re-read
    under a lock so that several processes can run cells side by side."""
    with open(out.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _read(out)
        record["cells"] = [c for c in record["cells"] if _key(c)[:3] != _key(cell)[:3]] + [cell]
        results.write_json(out, {**record, "paper": PAPER})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(SOURCES), choices=list(SOURCES))
    parser.add_argument("--splits", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--methods", nargs="+", default=["idsgp", "svgp"], choices=["idsgp", "svgp"])
    parser.add_argument("--epochs", type=int, default=IDSGPConfig().num_epochs)
    parser.add_argument("--svgp-epochs", type=int, default=None, help="SVGP's epochs (default: --epochs)")
    parser.add_argument("--svgp-inducing", type=int, default=1024)
    parser.add_argument("--white-floor", type=float, default=None, help="IDSGPConfig.white_floor (default: none)")
    parser.add_argument("--dropout", type=float, default=0.0, help="IDSGPConfig.dropout, in [0, 1) (default: 0)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"the results file (default: {RESULTS})")
    parser.add_argument(
        "--quick", action="store_true", help="1 epoch on 2,000 training rows; writes to the runs folder"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if not 0.0 <= args.dropout < 1.0:
        parser.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.quick:
        args.epochs, args.svgp_epochs, args.svgp_inducing = 1, 1, 64
    out = RUNS / "quick.json" if args.quick else args.out
    RUNS.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/idsgp_uci.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    for name in args.datasets:
        for split in args.splits:
            for method in args.methods:
                epochs = args.epochs if method == "idsgp" else args.svgp_epochs or args.epochs
                if (name, split, method, epochs) in {_key(c) for c in _read(out)["cells"]}:
                    continue
                cell = {**_cell(name, split, method, args), "command": command, **results.provenance()}
                _save(out, cell)
                m = cell["metrics"]
                print(
                    f"{name} split {split} {method}: NLL {m['nll']:.3f}, {cell['train_seconds_per_epoch']:.1f} s/epoch"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
