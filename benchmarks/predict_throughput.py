"""Prediction throughput and memory of a loaded run: ``psg.load_run(folder).predict(X, chunk_size=C)`` on 10^6 points.

Run (from the repository root)::

    .venv/bin/python benchmarks/predict_throughput.py            # 10^6 points, chunks 10^3, 10^4, 10^5, 10^6
    .venv/bin/python benchmarks/predict_throughput.py --quick    # 10^5 points, a smoke test

Two runs are fitted first with the command line on kin8nm split 0 (N = 7,373, D = 8), 300 Adam steps each (the
fit's quality is beside the point): ``svgp`` and ``sgpr``, M = 256 inducing points, float64. Every cell then runs in
a fresh process (so that its peak memory is its own): it loads the run, predicts ``--points`` inputs (training rows
plus noise, original units) in chunks of C rows, and records the seconds of the first chunk (compiling included),
the points per second over the others and over all of them, and the growth of the process's peak resident memory
(``VmHWM``) during prediction. The SGPR cell runs twice: as :meth:`Run.predict` does it (the optimal q*(u) computed
once, the SGPR seen as its SVGP, :meth:`SGPR.as_svgp`) and, for the ratio, recomputing q*(u) from the training data
in every chunk (``sgpr-recomputed``). Writes ``benchmarks/results/predict_throughput.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
FIT = {"svgp": ["--inducing", "256", "--steps", "300"], "sgpr": ["--inducing", "256", "--steps", "300"]}
CELLS = (("svgp", False), ("sgpr", False), ("sgpr", True))
"""(method, recompute q*(u) in every chunk)."""


def memory_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (``VmRSS``: resident memory now, ``VmHWM``: its peak so far)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def test_inputs(run, points: int) -> np.ndarray:
    """``points`` inputs in original units: rows of the run's training inputs (seeded) plus N(0, 0.1²) noise in
    standardised units."""
    X_train, _ = run.stored.training()
    rng = np.random.default_rng(0)
    X_std = X_train[rng.integers(0, len(X_train), points)] + 0.1 * rng.standard_normal((points, X_train.shape[1]))
    return run.scaler.x_mean + X_std * run.scaler.x_scale


def measure(predict, X_new: np.ndarray, chunk: int) -> tuple[dict, tuple[np.ndarray, np.ndarray]]:
    """Predict ``X_new`` in chunks of ``chunk`` rows with ``predict(X) -> (mean, var)``, in this process: the
    seconds of the first chunk, the points/s over the others and over all, and the growth of the peak resident
    memory. Returns those figures and the first chunk's (mean, var)."""
    points = len(X_new)
    rss_before = memory_kib("VmRSS")
    start = time.perf_counter()
    first = predict(X_new[:chunk])
    first_seconds = time.perf_counter() - start
    start = time.perf_counter()
    rest = [predict(X_new[i : i + chunk]) for i in range(chunk, points, chunk)]
    rest_seconds = time.perf_counter() - start
    grown = (memory_kib("VmHWM") - rss_before) / 1024
    mean = np.concatenate([first[0], *(r[0] for r in rest)])
    assert mean.shape == (points,) and np.all(np.isfinite(mean))
    figures = {
        "first_chunk_seconds": first_seconds,
        "points_per_second": (points - chunk) / rest_seconds if chunk < points else None,
        "total_seconds": first_seconds + rest_seconds,
        "points_per_second_overall": points / (first_seconds + rest_seconds),
        "peak_memory_growth_mib": grown,
    }
    return figures, first


def child(folder: str, points: int, chunk: int, recompute: bool) -> dict:
    """One cell, in this process: load, predict in chunks, time and measure."""
    import jax
    import jax.numpy as jnp

    from ppl_sparsegp.runs import load_run

    run = load_run(folder)
    X_new = test_inputs(run, points)
    if recompute:
        training = dict(zip(("X", "y"), run.stored.training(), strict=True))
        jax.config.update("jax_enable_x64", True)
        naive = jax.jit(lambda p, X: run.model.predict_y(p, X, **training))
        predict = lambda X: tuple(np.asarray(a) for a in naive(run.params, jnp.asarray(run.scaler.transform_x(X))))  # noqa: E731
    else:
        predict = lambda X: run.predict(X, chunk_size=chunk)  # noqa: E731
    return measure(predict, X_new, chunk)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--quick", action="store_true", help="10^5 points, chunks 10^3 and 10^4")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "predict_throughput.json")
    parser.add_argument("--child", nargs=4, metavar=("FOLDER", "POINTS", "CHUNK", "RECOMPUTE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        folder, points, chunk, recompute = args.child
        print(json.dumps(child(folder, int(points), int(chunk), recompute == "1")))
        return
    points, chunks = (100_000, [1_000, 10_000]) if args.quick else (args.points, args.chunks)
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for method, options in FIT.items():
            command = [sys.executable, "-m", "ppl_sparsegp.cli", "fit", method, "--data", "kin8nm", *options,
                       "--out", f"{tmp}/{method}", "--quiet"]  # fmt: skip
            subprocess.run(command, check=True)
        for method, recompute in CELLS:
            for chunk in chunks:
                if recompute and chunk > 10_000:  # the recomputing path is the slow baseline: two chunk sizes suffice
                    continue
                cell = (f"{tmp}/{method}", str(points), str(chunk), str(int(recompute)))
                argv = [sys.executable, __file__, "--child", *cell]
                found = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
                name = f"{method}-recomputed" if recompute else method
                cells.append({"method": name, "chunk_size": chunk, "points": points, **found})
                overall, first = found["points_per_second_overall"], found["first_chunk_seconds"]
                grown = found["peak_memory_growth_mib"]
                print(f"{name:17s} chunk {chunk:>9,d}: {overall:>10,.0f} points/s in all, first chunk {first:.2f} s, "
                      f"peak memory +{grown:.0f} MiB")  # fmt: skip
    import jax

    from ppl_sparsegp import results

    record = {
        "benchmark": "predict_throughput", "data": "uci/kin8nm split 0", "inducing": 256, "dtype": "float64",
        "cells": cells, "argv": sys.argv[1:], "cpu_count": os.cpu_count(), "jax_backend": jax.default_backend(),
        **results.provenance(),
    }  # fmt: skip
    results.write_json(args.output, record)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
