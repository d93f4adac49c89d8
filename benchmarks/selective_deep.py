"""Probabilistic selection of inducing points in a 2-layer deep GP on kin8nm (Uhrenholt et al. 2021, Fig. 6).

Run (from the repository root)::

    .venv/bin/python benchmarks/selective_deep.py                 # split 0, every cell (resumes finished cells)
    .venv/bin/python benchmarks/selective_deep.py --splits 0 1    # more splits
    .venv/bin/python benchmarks/selective_deep.py --schedule paper --baselines 10x10 10x50 50x10 25x25 50x50 \
        25x100 100x25 50x100 100x50 100x100   # the paper's 1000 / 500 / 1500 steps, results/selective_deep_paper.json
    .venv/bin/python benchmarks/selective_deep.py --quick         # smoke test, written to results/..._runs/

Claims (paper §5.2, spec 000 §5.5): the selected deep GPs lie on the frontier of accuracy against prediction time
of fixed-size deep GPs, and the selection keeps more points in the second (last) layer. The paper gives no numbers.

Protocol (paper App. C.4, scaled to a shared 2-core CPU; our choices are marked):

* data: :func:`ppl_sparsegp.data.load_bsgp_uci` -- random 80/20 split seeded by the split index (6553 / 1639
  points), X standardised, y standardised with training statistics; metrics in original units.
* model: :class:`models.numpyro.deep_svgp.DeepSVGP`, 2 layers, RBF-ARD kernels, zero inner mean with the observed input
  added to the second layer's input (layer 1 maps R^8 -> R^8), unwhitened q(u), Gaussian likelihood (initial
  noise variance 1), one propagated sample per step; inner kernel variance 0.1 and inner q(u) scale 1e-3 at the
  start (the released code's layer-wise start; we do not pre-train layer-wise).
* selection: :func:`ppl_sparsegp.recipes.selective.fit_selective_deep`, 150 random training inputs as candidates per
  layer, α_ℓ = w × D_out^ℓ (``alpha_per_output``, as the released code) for prior weights w in ``WEIGHTS`` (the
  paper does not give its four α), λ₀ = 0.5, S = 4 joint mask draws, Adam 0.2 on λ with the GP frozen and the
  bound on minibatches of 1000 (``SELECTION_BATCH``; the released code uses the full training set per draw, which
  costs ~7x more per step here); one pre-training shared by the α values. Schedule: ``SCHEDULES`` -- the paper's
  1000 / 500 / 1500 steps (``--schedule paper``) or a reduced 500 / 100 / 500 (the default, to fit a session on a
  shared 2-core CPU).
* baselines: fixed-size deep GPs with M1 / M2 random training inputs (``--baselines``, default ``BASELINES``),
  trained for pre + post steps.
* GP training: Adam 0.01, minibatch 1000 (plate subsampling, N/B scaling), float64.
* metrics: test RMSE of the predictive mixture mean and test NLPD = −mean log (1/S) Σ_s N(y; μ_s, σ²_s) with
  S = 16 propagated draws, original units; prediction time = mean wall time of 200 calls of a compiled
  single-point ``predict_y`` with one propagated draw (the released code's protocol uses one draw, 1000 calls),
  the fastest of ``TIMING_REPEATS`` = 5 such runs (all five are recorded; results written before this rule,
  with ``timing_repeats`` absent from their config, timed one run).

Output: ``benchmarks/results/selective_deep.json`` (``selective_deep_paper.json`` for the paper's schedule),
rewritten atomically after every cell; finished cells are skipped when the script runs again (the shared
pre-training is cached in ``results/selective_deep_runs/``). A file written with other per-cell settings (schedule,
candidates, batch sizes, ...) is never overwritten: the script stops and names it. Prior weights and baselines may
grow between runs, since each cell records its own.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="selective-deep-jax-cache-"))

import numpy as np  # noqa: E402
import optax  # noqa: E402
from svgp_uci import _loadavg, environment, write_json_atomic  # noqa: E402

from ppl_sparsegp import data, likelihoods, metrics  # noqa: E402
from ppl_sparsegp.inducing.initialise import random_subset  # noqa: E402
from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402
from ppl_sparsegp.models.numpyro.deep_svgp import DeepSVGP, deep_svgp  # noqa: E402
from ppl_sparsegp.recipes.selective import fit_selective_deep  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = {"reduced": ROOT / "results" / "selective_deep.json", "paper": ROOT / "results" / "selective_deep_paper.json"}
RUNS = ROOT / "results" / "selective_deep_runs"

CANDIDATES = 150
WEIGHTS = (0.01, 0.05, 0.2)
BASELINES = ((10, 10), (25, 25), (50, 50), (100, 100), (10, 50), (50, 10))
SCHEDULES = {
    "reduced": {"pre_steps": 500, "selection_steps": 100, "post_steps": 500},
    "paper": {"pre_steps": 1000, "selection_steps": 500, "post_steps": 1500},
}
QUICK_SCHEDULE = {"pre_steps": 100, "selection_steps": 20, "post_steps": 100}
BATCH, SELECTION_BATCH, LEARNING_RATE = 1000, 1000, 0.01
PREDICT_SAMPLES, TIMING_CALLS, TIMING_REPEATS = 16, 200, 5
ARCHITECTURE = {"num_layers": 2, "add_input": True, "inner_mean": "zero"}


def evaluate(model: DeepSVGP, params: dict, ds, scaler, key: jax.Array) -> dict:
    """Test RMSE / NLPD in original units and the mean time of one compiled single-point prediction."""
    Xs, ys = np.asarray(ds.X_test), np.asarray(ds.y_test)
    mean, _ = model.predict_y(params, Xs, key=key, num_samples=PREDICT_SAMPLES)
    logp = model.predict_log_density(params, Xs, ys, key=key, num_samples=PREDICT_SAMPLES)
    predict = jax.jit(lambda x: model.predict_y(params, x, key=key, num_samples=1))
    jax.block_until_ready(predict(Xs[:1]))
    repeats = []
    for _ in range(TIMING_REPEATS):
        t0 = time.perf_counter()
        for i in range(TIMING_CALLS):
            jax.block_until_ready(predict(Xs[i : i + 1]))
        repeats.append((time.perf_counter() - t0) / TIMING_CALLS)
    y_orig = scaler.inverse_mean(ys)
    return {
        "test_rmse": metrics.rmse(y_orig, scaler.inverse_mean(np.asarray(mean))),
        "test_nlpd": float(-np.mean(scaler.log_density_to_original(np.asarray(logp)))),
        "predict_ms": 1e3 * min(repeats),
        "predict_ms_repeats": [1e3 * r for r in repeats],
        "counts": model.num_inducing,
    }


def _fixed(X, y, counts: tuple[int, int], steps: int, split: int) -> tuple[DeepSVGP, dict, float]:
    Z = [random_subset(X, m, seed=100 * split + i) for i, m in enumerate(counts)]
    model = deep_svgp(X, 1, likelihoods.Gaussian(1.0), Z=Z, **ARCHITECTURE, batch_size=BATCH)
    t0 = time.perf_counter()
    res = fit_svi(
        model.model, model.guide, X, y, optimizer=optax.adam(LEARNING_RATE), num_steps=steps, key=split, progress=False
    )
    return model, res.params, time.perf_counter() - t0


def _pretrained(X, y, split: int, schedule: dict, tag: str) -> tuple[dict, float]:
    """The shared pre-training on all candidates (cached on disk for resumed runs)."""
    path = RUNS / f"pretrained_{tag}_split{split}_steps{schedule['pre_steps']}.npz"
    if path.exists():
        with np.load(path) as saved:
            return {k: saved[k] for k in saved.files if k != "__seconds__"}, float(saved["__seconds__"])
    fit = fit_selective_deep(
        X,
        y,
        candidates=CANDIDATES,
        **ARCHITECTURE,
        **schedule | {"post_steps": 0, "selection_steps": 1},
        batch_size=BATCH,
        selection_batch_size=SELECTION_BATCH,
        key=split,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {k: np.asarray(v) for k, v in fit.pretrained_params.items()}
    np.savez(path, __seconds__=fit.seconds["pre"], **arrays)
    return arrays, fit.seconds["pre"]


def _counts(text: str) -> tuple[int, int]:
    try:
        first, second = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected M1xM2 such as 50x50, got {text!r}") from None
    if min(first, second) < 1:
        raise argparse.ArgumentTypeError(f"M1 and M2 must be >= 1, got {text!r}")
    return first, second


def run_split(
    split: int,
    schedule: dict,
    weights: tuple[float, ...],
    baselines: tuple[tuple[int, int], ...],
    cells: dict,
    save,
    tag: str,
) -> None:
    raw = data.load_bsgp_uci("kin8nm", split)
    ds, scaler = data.standardize(raw)
    X, y = np.asarray(ds.X_train, np.float64), np.asarray(ds.y_train, np.float64)
    key = jax.random.PRNGKey(1000 + split)
    pending = [w for w in weights if f"split{split}/selective_w{w}" not in cells]
    pretrained, pre_seconds = _pretrained(X, y, split, schedule, tag) if pending else (None, 0.0)
    for weight in pending:
        name = f"split{split}/selective_w{weight}"
        load = _loadavg()
        fit = fit_selective_deep(
            X,
            y,
            candidates=CANDIDATES,
            **ARCHITECTURE,
            alpha=weight,
            alpha_per_output=True,
            **schedule | {"pre_steps": 0},
            batch_size=BATCH,
            selection_batch_size=SELECTION_BATCH,
            init_params=pretrained,
            key=split,
        )
        cells[name] = {"split": split, "method": "selective", "prior_weight": weight}
        cells[name] |= evaluate(fit.model, fit.params, ds, scaler, key)
        cells[name] |= {
            "alpha_per_layer": fit.selective.alphas,
            "expected_counts": fit.expected_counts,
            "train_seconds": pre_seconds + fit.seconds["selection"] + fit.seconds["post"],
            "seconds": {"pre": pre_seconds, **{k: v for k, v in fit.seconds.items() if k != "pre"}},
            "loadavg_1min": load,
        }
        save()
        print(name, cells[name], flush=True)
    for counts in baselines:
        name = f"split{split}/fixed_{counts[0]}_{counts[1]}"
        if name in cells:
            continue
        load = _loadavg()
        model, params, seconds = _fixed(X, y, counts, schedule["pre_steps"] + schedule["post_steps"], split)
        cells[name] = {"split": split, "method": "fixed", **evaluate(model, params, ds, scaler, key)}
        cells[name] |= {"train_seconds": seconds, "loadavg_1min": load}
        save()
        print(name, cells[name], flush=True)


def markdown_table(cells: dict) -> str:
    lines = [
        "| split | method | M1 / M2 (selected) | E\\|S\\| per layer | test RMSE | test NLPD | predict ms / point | "
        "train s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in sorted(cells.values(), key=lambda c: (c["split"], c["method"], c["counts"])):
        method = "fixed" if c["method"] == "fixed" else f"selective, w = {c['prior_weight']}"
        expected = " / ".join(f"{e:.1f}" for e in c["expected_counts"]) if "expected_counts" in c else "-"
        lines.append(
            f"| {c['split']} | {method} | {c['counts'][0]} / {c['counts'][1]} | {expected} | {c['test_rmse']:.4f} | "
            f"{c['test_nlpd']:.3f} | {c['predict_ms']:.3f} | {c['train_seconds']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", nargs="+", type=int, default=[0])
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="reduced", help="pre / select / post steps")
    parser.add_argument("--weights", nargs="+", type=float, default=list(WEIGHTS), help="prior weights w")
    parser.add_argument("--baselines", nargs="+", type=_counts, default=list(BASELINES), help="fixed sizes, M1xM2")
    parser.add_argument("--quick", action="store_true", help="a few steps, split 0, output in the runs folder")
    parser.add_argument("--output", type=Path, help="results JSON (default: by schedule, see the module docstring)")
    args = parser.parse_args(argv)
    if any(w <= 0 for w in args.weights):
        parser.error(f"--weights: expected positive prior weights, got {args.weights}")
    schedule = QUICK_SCHEDULE if args.quick else SCHEDULES[args.schedule]
    splits = args.splits[:1] if args.quick else args.splits
    output = args.output or (RUNS / "quick.json" if args.quick else RESULTS[args.schedule])
    tag = "quick" if args.quick else ("full" if args.schedule == "reduced" else args.schedule)
    command = " ".join(
        ["python", "benchmarks/selective_deep.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
    )
    config = {
        "schedule": schedule,
        "candidates": CANDIDATES,
        "batch_size": BATCH,
        "selection_batch_size": SELECTION_BATCH,
        "learning_rate": LEARNING_RATE,
        "architecture": ARCHITECTURE,
        "predict_samples": PREDICT_SAMPLES,
        "timing_calls": TIMING_CALLS,
        "timing_repeats": TIMING_REPEATS,
    }
    cells = {}
    if output.exists():  # resume: keep the finished cells of a run with the same per-cell settings
        saved = json.loads(output.read_text())
        stored = {k: v for k, v in saved.get("config", {}).items() if k not in ("prior_weights", "baselines")}
        if stored != json.loads(json.dumps(config)):
            parser.error(f"{output} holds cells run with other settings ({stored}); move it aside or pick --schedule")
        cells = saved["cells"]
    config |= {
        "prior_weights": sorted({c["prior_weight"] for c in cells.values() if "prior_weight" in c} | set(args.weights)),
        "baselines": sorted(
            {tuple(c["counts"]) for c in cells.values() if c["method"] == "fixed"} | set(args.baselines)
        ),
    }

    def save() -> None:
        write_json_atomic(
            output,
            {
                "command": command,
                "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "environment": environment(),
                "config": config,
                "cells": cells,
                "table": markdown_table(cells),
            },
        )

    for split in splits:
        run_split(split, schedule, tuple(args.weights), tuple(args.baselines), cells, save, tag)
    save()
    print(markdown_table(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
