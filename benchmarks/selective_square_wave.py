"""Probabilistic selection of inducing points in a 3-layer deep GP on a square wave (Uhrenholt et al. 2021, §5.2 (a),
Fig. 5; spec 000 §5.5 (a) and check B5).

Run (from the repository root)::

    .venv/bin/python benchmarks/selective_square_wave.py                # seeds 0 1 2 (finished seeds are skipped)
    .venv/bin/python benchmarks/selective_square_wave.py --seeds 0      # one seed
    .venv/bin/python benchmarks/selective_square_wave.py --quick        # a few steps, written to results/..._runs/
    .venv/bin/python benchmarks/selective_square_wave.py --pre-steps 3000   # a longer joint phase, written to
                                                     # results/selective_square_wave_pre3000.json

Claim (B5; the paper's Fig. 5 is qualitative, the numbers are the released notebook's output, not the paper's):
after selection and pruning, layer 1 keeps more inducing points than layers 2 and 3 (M1 > M2, M1 > M3; the notebook:
21 / 9 / 8 of 80), and the pruned, post-trained model's RMSE is within 5 % of the unpruned one's (0.273 -> 0.278).

Protocol (the released notebook ``02_DeepGaussianProcess`` and demo ``03_regression_deep_gp_1d``; ours marked):

* data: x = linspace(0, 20, 200), y = round(0.5 sin x + 0.5) (the released ``SquareWave`` generator, noise-free);
  a random half is the test set (the notebook's ``test_size=0.5``), the permutation seeded by ``--seeds``; neither x
  nor y standardised (the demo's ``scale_X=False, scale_Y=False``).
* model: :func:`ppl_sparsegp.recipes.selective.fit_selective_deep`, 3 layers of width 1, zero mean, no input added,
  RBF kernels, unwhitened q(u), Gaussian likelihood (initial noise variance 1), one propagated sample per bound,
  relative jitter 1e-3 on K(Z, Z) (GPyTorch's ``add_jitter`` default in the released code; with the library's 1e-8
  the 80 close inducing inputs of a layer make the unwhitened q(u) blow up under Adam); full batch, float64.
* candidates: 80 per layer; layer 1's on linspace(-5, 25, 80) (the notebook's), layers 2 and 3 started by the
  layer-wise pre-training at the propagated means of 80 random training inputs (the released ``fit_layerwise``).
* schedule: layer-wise pre-training 500 Adam steps per layer (``pretraining="layerwise"``; the demo's 500 epochs,
  one step per epoch at full batch; ours trains only the added layer and the likelihood in its phase, the released
  code every layer present), then 500 joint steps (the demo's), Adam 0.01 (ours; the released code 0.02, and 0.005 /
  0.01 after pruning); selection 1000 steps with the GP frozen, α = 0.5 per layer, λ₀ = 0.2, S = 8 draws, Adam 0.3
  on λ (the notebook's); one joint subset drawn, pruned, post-trained 500 steps.
* RMSE: the notebook's: 50 draws y ~ N(μ_s, σ²_s + σ²_noise) of the predictive at the test inputs, each from one
  propagated pass, RMSE over all draws and points; also the RMSE of the predictive mixture's mean and the NLPD
  (50 draws). "Before pruning" is the pre-trained model on all 80 candidates per layer (the selection leaves the GP
  frozen), "after" the pruned, post-trained one.

Output: ``benchmarks/results/selective_square_wave.json``, rewritten atomically after every seed; each seed
checkpoints its phases to ``results/selective_square_wave_runs/seed<seed>/`` (``--quick``: ``.../quick/seed0/``,
``--pre-steps N``: ``.../preN/seed<seed>/``), so the same command resumes a killed seed (delete that folder after
changing a setting). A results file written with other settings is refused.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from svgp_uci import _loadavg, environment, write_json_atomic  # noqa: E402

from ppl_sparsegp import metrics  # noqa: E402
from ppl_sparsegp.models.numpyro.deep_svgp import DeepSVGP  # noqa: E402
from ppl_sparsegp.recipes.selective import fit_selective_deep  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "selective_square_wave.json"
RUNS = ROOT / "results" / "selective_square_wave_runs"

NUM_POINTS, TEST_FRACTION, CANDIDATES, LAYERS = 200, 0.5, 80, 3
CANDIDATE_RANGE = (-5.0, 25.0)
SCHEDULE = {"layerwise_steps": 500, "pre_steps": 500, "selection_steps": 1000, "post_steps": 500}
QUICK_SCHEDULE = {"layerwise_steps": 20, "pre_steps": 10, "selection_steps": 10, "post_steps": 10}
SETTINGS = {
    "num_layers": LAYERS,
    "inner_mean": "zero",
    "add_input": False,
    "alpha": 0.5,
    "initial_inclusion": 0.2,
    "num_particles": 8,
    "selection_learning_rate": 0.3,
    "learning_rate": 0.01,
    "batch_size": None,
    "selection_batch_size": None,
    "jitter": 1e-3,
    "pretraining": "layerwise",
}
PREDICT_DRAWS = 50
PAPER = {"counts": [21, 9, 8], "rmse_before": 0.273, "rmse_after": 0.278}


def square_wave(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The released ``SquareWave(n_observations=200, test_size=0.5)``: X_train [100, 1], y_train [100], X_test, y_test
    (the split's permutation from ``numpy.random.default_rng(seed)``; both halves sorted by x)."""
    X = np.linspace(0.0, 20.0, NUM_POINTS)[:, None]
    y = np.round(0.5 * np.sin(X[:, 0]) + 0.5)
    order = np.random.default_rng(seed).permutation(NUM_POINTS)
    n_test = int(NUM_POINTS * TEST_FRACTION)
    test, train = np.sort(order[:n_test]), np.sort(order[n_test:])
    return X[train], y[train], X[test], y[test]


def evaluate(model: DeepSVGP, params: dict, X: np.ndarray, y: np.ndarray, seed: int) -> dict:
    """The notebook's sample RMSE, the predictive mean's RMSE and the NLPD at the test inputs (module docstring)."""
    key = jax.random.PRNGKey(10_000 + seed)
    mean_f, var_f = (np.asarray(a) for a in model.predict_f(params, X, key=key, num_samples=PREDICT_DRAWS))
    noise = float(np.asarray(params["likelihood.variance"]))
    draws = mean_f + np.sqrt(var_f + noise) * np.random.default_rng(seed).standard_normal(mean_f.shape)
    mean_y, _ = model.predict_y(params, X, key=key, num_samples=PREDICT_DRAWS)
    logp = model.predict_log_density(params, X, y, key=key, num_samples=PREDICT_DRAWS)
    return {
        "rmse_samples": float(np.sqrt(np.mean((draws - y[None]) ** 2))),
        "rmse_mean": metrics.rmse(y, np.asarray(mean_y)),
        "nlpd": float(-np.mean(np.asarray(logp))),
        "noise_variance": noise,
        "counts": model.num_inducing,
    }


def run_seed(seed: int, schedule: dict, checkpoints: Path) -> dict:
    X, y, X_test, y_test = square_wave(seed)
    candidates = [np.linspace(*CANDIDATE_RANGE, CANDIDATES)[:, None]] * LAYERS
    load = _loadavg()
    t0 = time.perf_counter()
    fit = fit_selective_deep(
        X, y, candidates=candidates, **SETTINGS, **schedule, key=seed, progress=False,
        checkpoint_dir=checkpoints / f"seed{seed}",
    )  # fmt: skip
    seconds = time.perf_counter() - t0
    before = evaluate(fit.selective.ordinary, fit.pretrained_params, X_test, y_test, seed)
    after = evaluate(fit.model, fit.params, X_test, y_test, seed)
    counts = fit.selected_counts
    return {
        "seed": seed,
        "selected_counts": counts,
        "expected_counts": fit.expected_counts,
        "before": before,
        "after": after,
        "rmse_change": after["rmse_samples"] / before["rmse_samples"] - 1.0,
        "claims": {
            "M1 > M2 and M1 > M3": bool(counts[0] > counts[1] and counts[0] > counts[2]),
            "sample RMSE within 5 %": bool(abs(after["rmse_samples"] / before["rmse_samples"] - 1.0) <= 0.05),
        },
        "seconds": {"total": seconds, **fit.seconds},
        "final_losses": {phase: float(trace[-1]) for phase, trace in fit.losses.items() if len(trace)},
        "loadavg_1min": load,
    }


def markdown_table(cells: dict) -> str:
    lines = [
        "| seed | M1 / M2 / M3 kept (of 80) | E\\|S\\| per layer | sample RMSE before → after | mean RMSE before → "
        "after | NLPD before → after | train s |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in sorted(cells.values(), key=lambda c: c["seed"]):
        b, a = c["before"], c["after"]
        lines.append(
            f"| {c['seed']} | {' / '.join(map(str, c['selected_counts']))} | "
            f"{' / '.join(f'{e:.1f}' for e in c['expected_counts'])} | {b['rmse_samples']:.3f} → "
            f"{a['rmse_samples']:.3f} ({100 * c['rmse_change']:+.1f} %) | "
            f"{b['rmse_mean']:.3f} → {a['rmse_mean']:.3f} | "
            f"{b['nlpd']:.3f} → {a['nlpd']:.3f} | {c['seconds']['total']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="a few steps, seed 0, output in the runs folder")
    parser.add_argument(
        "--pre-steps", type=int, default=SCHEDULE["pre_steps"], help="joint pre-training steps after the layer-wise"
    )
    parser.add_argument("--output", type=Path, help=f"results JSON (default {RESULTS.relative_to(ROOT.parent)})")
    args = parser.parse_args(argv)
    if any(s < 0 for s in args.seeds):
        parser.error(f"--seeds: expected non-negative integers, got {args.seeds}")
    if args.pre_steps < 0:
        parser.error(f"--pre-steps: expected a non-negative integer, got {args.pre_steps}")
    longer = not args.quick and args.pre_steps != SCHEDULE["pre_steps"]
    schedule = QUICK_SCHEDULE if args.quick else SCHEDULE | {"pre_steps": args.pre_steps}
    seeds = args.seeds[:1] if args.quick else args.seeds
    tag = "quick" if args.quick else (f"pre{args.pre_steps}" if longer else "")
    default_output = RESULTS.with_name(f"{RESULTS.stem}_{tag}.json") if longer else RESULTS
    output = args.output or (RUNS / "quick.json" if args.quick else default_output)
    command = " ".join(
        ["python", "benchmarks/selective_square_wave.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
    )
    config = {
        "num_points": NUM_POINTS,
        "test_fraction": TEST_FRACTION,
        "candidates": CANDIDATES,
        "candidate_range_layer1": CANDIDATE_RANGE,
        "schedule": schedule,
        "settings": SETTINGS,
        "predict_draws": PREDICT_DRAWS,
    }
    cells = {}
    if output.exists():  # resume: keep the finished seeds of a run with the same settings
        saved = json.loads(output.read_text())
        if saved.get("config") != json.loads(json.dumps(config)):
            parser.error(f"{output} holds seeds run with other settings; move it aside")
        cells = saved["cells"]

    def save() -> None:
        write_json_atomic(
            output,
            {
                "command": command,
                "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                "environment": environment(),
                "config": config,
                "paper": PAPER,
                "cells": cells,
                "table": markdown_table(cells),
            },
        )

    for seed in seeds:
        if f"seed{seed}" in cells:
            continue
        cells[f"seed{seed}"] = run_seed(seed, schedule, RUNS / tag)
        save()
        print(json.dumps(cells[f"seed{seed}"]), flush=True)
    save()
    print(markdown_table(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
