"""Which inputs a BSGP chain keeps relevant, against its test MNLL: the ARD lengthscales of recorded runs.

Run (from the repository root)::

    .venv/bin/python benchmarks/bsgp_relevance.py --dataset naval
    .venv/bin/python benchmarks/bsgp_relevance.py --dataset naval --results benchmarks/results/bsgp_uci.json \\
        benchmarks/results/bsgp_naval.json --output /tmp/relevance.json

For every one-layer run of ``--dataset`` in the ``--results`` files, the median over the kept draws of each input's
lengthscale ℓ_d (RBF-ARD on standardised inputs), and the inputs it keeps *relevant*: ℓ_d below ``--threshold``
(default 100, where a unit change of the input moves the kernel by a factor exp(−1/(2·100²)) ≈ 1 − 5e-5). Inputs
that are constant on the training set (standardised to 0: NAVAL's columns 8 and 11) are left out of the count.

Two file layouts are read:

* ``benchmarks/bsgp_uci.py``'s (``"cells"``): a cell's ``lengthscale_median`` when it has one (cells recorded since
  the field was added), else the kept draws in the cell's chain checkpoint in ``benchmarks/results/bsgp_uci_runs/``
  (:func:`bsgp_uci.checkpoint_name`), when that folder still holds it. Methods whose lengthscales are optimised, not
  sampled (``sghmc-dgp``, ``z-optimised``), have none and are left out.
* ``benchmarks/bsgp_naval.py``'s (``"runs"``, NAVAL only): each run's ``lengthscale_median``.

Output: a JSON (default ``benchmarks/results/bsgp_relevance_<dataset>.json``, written atomically) with one entry
per run: its key, test MNLL, test RMSE where recorded, ℓ_d, the relevant inputs and their number; runs without
lengthscales are listed under ``"not_found"``, each with the reason. A markdown table is printed.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import warnings
from pathlib import Path

import bsgp_uci
import numpy as np
from svgp_uci import environment, write_json_atomic

from ppl_sparsegp import data
from ppl_sparsegp.infer import checkpoint

LENGTHSCALE = "kernel.lengthscale"
THRESHOLD = 100.0


def constant_inputs(dataset: str, fold: int) -> list[int]:
    """The input columns constant on ``fold``'s training set (standardised to 0 by :mod:`ppl_sparsegp.data`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ENERGY's one-output warning
        ds, _ = data.standardize(data.load_bsgp_uci(dataset, fold))
    return np.flatnonzero(np.ptp(np.asarray(ds.X_train), axis=0) == 0).tolist()


def relevant_inputs(lengthscale: np.ndarray, constant: list[int], threshold: float) -> list[int]:
    """Indices d of ``lengthscale`` [D] with ℓ_d < ``threshold``, the ``constant`` columns left out."""
    return [d for d in np.flatnonzero(np.asarray(lengthscale) < threshold).tolist() if d not in constant]


def cell_lengthscale(cell: dict, runs: Path) -> np.ndarray | str:
    """The median lengthscale [D] over a ``bsgp_uci.py`` cell's kept draws: its record's, else its checkpoint's;
    else why there is none. A checkpoint counts as the cell's only when its recorded warmup seconds are the cell's
    to the last digit (a later run of the same settings, e.g. into another results file, replaces the file)."""
    recorded = cell.get("lengthscale_median", {}).get(LENGTHSCALE)
    if recorded is not None:
        return np.asarray(recorded)
    path = runs / bsgp_uci.checkpoint_name(cell)
    if not path.exists():
        return f"no record and no checkpoint {path.name}"
    saved = checkpoint.read(path)
    if saved.metadata.get("warmup_seconds") != cell.get("warmup_seconds"):
        return f"checkpoint {path.name} is another run's"
    draws = saved.groups.get("samples", {}).get(LENGTHSCALE)
    if draws is None:
        return f"checkpoint {path.name} holds no {LENGTHSCALE} draws"
    return np.median(draws.reshape(-1, draws.shape[-1]), axis=0)


def collect(paths: list[Path], dataset: str, runs: Path) -> tuple[list[dict], list[str]]:
    """(key, fold, test MNLL, test RMSE, ℓ [D]) of every one-layer run of ``dataset`` in ``paths`` that has
    lengthscales, and "key: why" for those that have none."""
    found, missing = [], []
    for path in paths:
        results = json.loads(path.read_text())
        if "cells" in results:
            for key, cell in results["cells"].items():
                if cell.get("dataset") != dataset or cell.get("layers") != 1 or "test_mnll" not in cell:
                    continue
                ell = cell_lengthscale(cell, runs)
                if isinstance(ell, str):
                    missing.append(f"{path.name}:{key}: {ell}")
                    continue
                found.append({"run": f"{path.name}:{key}", "fold": cell["fold"], "test_mnll": cell["test_mnll"],
                              "test_rmse": cell.get("test_rmse"), "lengthscale": ell})  # fmt: skip
        elif dataset == "naval":
            for label, run in results.get("runs", {}).items():
                if run.get("lengthscale_median") is None or "test_mnll" not in run:
                    missing.append(f"{path.name}:{label}: no lengthscale_median or test_mnll")
                    continue
                found.append({"run": f"{path.name}:{label}", "fold": run["fold"], "test_mnll": run["test_mnll"],
                              "test_rmse": None, "lengthscale": np.asarray(run["lengthscale_median"])})  # fmt: skip
    return found, missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, choices=bsgp_uci.DATASETS)
    parser.add_argument(
        "--results", nargs="+", type=Path,
        default=[bsgp_uci.RESULTS, bsgp_uci.ROOT / "results" / "bsgp_naval.json"],
        help="result files of bsgp_uci.py (cells) or bsgp_naval.py (runs)",
    )  # fmt: skip
    parser.add_argument("--runs-folder", type=Path, default=bsgp_uci.RUNS, help="bsgp_uci.py's checkpoints")
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="ℓ_d below it: input d is relevant")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    absent = [str(p) for p in args.results if not p.is_file()]
    if absent:
        parser.error(f"--results: no such file: {', '.join(absent)}")
    if not args.threshold > 0:
        parser.error(f"--threshold must be a positive number of standardised input units, got {args.threshold}")
    found, missing = collect(args.results, args.dataset, args.runs_folder)
    constant = {fold: constant_inputs(args.dataset, fold) for fold in sorted({r["fold"] for r in found})}
    entries = []
    for r in sorted(found, key=lambda r: r["test_mnll"]):
        relevant = relevant_inputs(r["lengthscale"], constant[r["fold"]], args.threshold)
        entries.append({**r, "lengthscale": r["lengthscale"].tolist(), "constant_inputs": constant[r["fold"]],
                        "relevant_inputs": relevant, "num_relevant": len(relevant)})  # fmt: skip
    output = args.output or bsgp_uci.ROOT / "results" / f"bsgp_relevance_{args.dataset}.json"
    command = " ".join(["python", "benchmarks/bsgp_relevance.py", *(sys.argv[1:] if argv is None else argv)])
    write_json_atomic(
        output,
        {"benchmark": f"BSGP on {args.dataset}: relevant inputs (median ARD lengthscale < {args.threshold:g}) of "
         "each recorded run, against its test MNLL", "date": _dt.date.today().isoformat(), "command": command,
         "environment": environment(), "threshold": args.threshold, "runs": entries, "not_found": missing},
    )  # fmt: skip
    print("| run | fold | test MNLL | relevant inputs (ℓ_d) |\n|---|---:|---:|---|")
    for e in entries:
        kept = ", ".join(f"{d} ({e['lengthscale'][d]:.2g})" for d in e["relevant_inputs"])
        print(f"| {e['run']} | {e['fold']} | {e['test_mnll']:.3f} | {kept} |")
    print(f"not found: {len(missing)} runs; written {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
