"""The informativeness experiment on UCI data (Uhrenholt et al. 2021, Fig. 4 and Table 1; spec 000 §5.4).

Run (from the repository root)::

    .venv/bin/python benchmarks/selective_uci.py --datasets concrete energy --splits 1 2 3 4 5
    .venv/bin/python benchmarks/selective_uci.py --datasets kin8nm --splits 1      # resumes: finished cells skipped
    .venv/bin/python benchmarks/selective_uci.py --datasets kin8nm --noise-levels 0.0 0.4 --baseline-m 10 50 100
    .venv/bin/python benchmarks/selective_uci.py --quick                           # smoke test, to results/..._runs/

Claims to reproduce (the paper gives only Fig. 4, no numbers):

1. the more noise is added to the training targets, the fewer inducing points the point process selects, on every
   data set;
2. the selected models lie on (or above) the curve of training ELBO against M traced by fixed-M baselines, i.e.
   the method finds a point of the capacity / complexity trade-off without a search over M.

Protocol (paper App. C.3.2, Table 1; where the paper is silent, the released code):

* data: :func:`ppl_sparsegp.data.load_bsgp_uci` with ``fold = split`` (a random 80/20 split seeded by the split
  number; the code seeds 1..5), X standardised. The **training** targets are corrupted, ŷ = y + ε σ̂(y) v with
  ε ~ N(0, 1), σ̂(y) the training std and v the noise level, then standardised with their own training mean and
  std. Table 1: concrete α = 0.01, v ∈ {0, 0.2, 0.3, 0.4}; energy α = 0.05, v ∈ {0, 0.05, 0.1, 0.15}; kin8nm
  α = 0.1, v ∈ {0, 0.2, 0.3, 0.4}; protein α = 0.2, v ∈ {0, 0.3, 0.5, 0.7}.
* adaptive: :func:`recipes.selective.fit_selective` with the collapsed bound, K = 100 candidates drawn from the
  training inputs at random (the paper's choice; its K for real data is not stated, the code's grid tops at 100),
  RBF-ARD kernel with unit initial values, Gaussian noise variance 1, λ₀ = 0.5, S = 4, Adam 0.01 (GP) and 0.2
  (λ), the GP frozen while selecting; 2500 pre-training, 1500 selection and 1000 post-training steps (paper).
* baselines: SGPR with fixed M ∈ {10, 20, ..., 100} inducing inputs drawn at random from the training inputs
  (the same seeds as the candidates), 5000 Adam steps at 0.01 (paper), same initial values.
* metric: the training ELBO (collapsed bound, nats, on the corrupted, standardised targets) after training; for
  the adaptive fit E|S| = Σλ, sd|S|, and the sampled and post-trained subset's |S| and ELBO. The frontier gap is
  the selected model's ELBO minus the baseline curve linearly interpolated at its |S| (≥ 0: on or above).

Output: ``benchmarks/results/selective_uci.json``, rewritten atomically after every (dataset, split, noise) cell;
cells already in it are skipped when the script runs again. Several runs may share the file: each adds its cells
under a lock to what is on disk (``svgp_uci.locked_json``). Within a cell every fit checkpoints every 250 steps
under ``benchmarks/results/selective_uci_runs/checkpoints/<dataset>_split<s>_v<v>/`` (removed once the cell is
recorded), so a stopped protein cell resumes where it was.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
# One compiled program per (data set, M) serves every split and noise level once it is in this cache.
jax.config.update("jax_compilation_cache_dir", os.path.join(tempfile.gettempdir(), "ppl_sparsegp_bench_jax_cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

import numpy as np  # noqa: E402
import optax  # noqa: E402
from svgp_uci import _loadavg, add_cell, has_cell, locked_json  # noqa: E402

from ppl_sparsegp import data  # noqa: E402
from ppl_sparsegp.core import kernels, likelihoods  # noqa: E402
from ppl_sparsegp.inducing.initialise import random_subset  # noqa: E402
from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402
from ppl_sparsegp.models.numpyro.sgpr import SGPR  # noqa: E402
from ppl_sparsegp.recipes.selective import fit_selective  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "selective_uci.json"
QUICK_RESULTS = ROOT / "results" / "selective_uci_runs" / "quick.json"
CHECKPOINTS = ROOT / "results" / "selective_uci_runs" / "checkpoints"
CHECKPOINT_EVERY = 250

# Paper Table 1: noise levels v and prior strength α per data set.
TABLE_1 = {
    "concrete": {"noise_levels": (0.0, 0.2, 0.3, 0.4), "alpha": 0.01},
    "energy": {"noise_levels": (0.0, 0.05, 0.1, 0.15), "alpha": 0.05},
    "kin8nm": {"noise_levels": (0.0, 0.2, 0.3, 0.4), "alpha": 0.1},
    "protein": {"noise_levels": (0.0, 0.3, 0.5, 0.7), "alpha": 0.2},
}
K = 100
SCHEDULE = {"pre_steps": 2500, "selection_steps": 1500, "post_steps": 1000}
BASELINE_M = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
BASELINE_STEPS = 5000
LEARNING_RATE = 0.01


def corrupted_data(name: str, split: int, noise_level: float) -> tuple[np.ndarray, np.ndarray]:
    """(X [N, D], y [N]): the training split with ŷ = y + ε σ̂(y) v, then standardised (spec §5.4)."""
    dataset = data.load_bsgp_uci(name, split)
    y = np.asarray(dataset.y_train, dtype=float)
    rng = np.random.default_rng([split, int(round(1000 * noise_level))])
    y = y + rng.normal(size=y.shape) * y.std() * noise_level
    return np.asarray(dataset.X_train, dtype=float), (y - y.mean()) / y.std()


def _kernel(D: int) -> kernels.RBF:
    return kernels.RBF(variance=1.0, lengthscale=np.ones(D))


def baseline_bound(X: np.ndarray, y: np.ndarray, M: int, seed: int, steps: int, checkpoint: Path) -> float:
    """Training ELBO of an SGPR with M random inducing inputs after ``steps`` Adam steps (resumes ``checkpoint``)."""
    gp = SGPR(kernel=_kernel(X.shape[1]), likelihood=likelihoods.Gaussian(1.0), Z=random_subset(X, M, seed=seed))
    fit = fit_svi(
        gp.model, gp.guide, X, y, optimizer=optax.adam(LEARNING_RATE), num_steps=steps, key=seed, progress=False,
        checkpoint=checkpoint, checkpoint_every=CHECKPOINT_EVERY, validate=gp.check_data,
    )  # fmt: skip
    return float(gp.elbo(fit.params, X, y))


def run_cell(
    name: str, split: int, noise_level: float, schedule: dict, baseline_m: tuple, baseline_steps: int, folder: Path
) -> dict:
    """One (data set, split, noise level) cell; its fits checkpoint in ``folder`` (removed once it is recorded)."""
    X, y = corrupted_data(name, split, noise_level)
    t0 = time.perf_counter()
    fit = fit_selective(
        X, y, candidates=K, alpha=TABLE_1[name]["alpha"], init="random", kernel=_kernel(X.shape[1]),
        likelihood=likelihoods.Gaussian(1.0), learning_rate=LEARNING_RATE, key=split, checkpoint_dir=folder,
        checkpoint_every=CHECKPOINT_EVERY, **schedule,
    )  # fmt: skip
    adaptive_seconds = time.perf_counter() - t0
    record = {
        "dataset": name,
        "split": split,
        "noise_level": noise_level,
        "alpha": TABLE_1[name]["alpha"],
        "N": int(X.shape[0]),
        "expected_count": fit.expected_count,
        "count_sd": float(np.sqrt(fit.count_variance)),
        "selected_count": fit.selected_count,
        "selected_elbo": float(fit.model.elbo(fit.params, X, y)),
        "pre_trained_elbo_all_candidates": -float(fit.losses["pre"][-1]) if len(fit.losses["pre"]) else None,
        "noise_variance": float(fit.params["likelihood.variance"]),
        "seconds": {**fit.seconds, "adaptive_total": adaptive_seconds},
        "loadavg": _loadavg(),
    }
    t0 = time.perf_counter()
    record["baseline_elbo"] = {
        str(M): baseline_bound(X, y, M, split, baseline_steps, folder / f"baseline_M{M}.npz") for M in baseline_m
    }
    record["seconds"]["baselines"] = time.perf_counter() - t0
    record["frontier_gap"] = frontier_gap(record)
    return record


def frontier_gap(record: dict) -> float | None:
    """Selected ELBO minus the baseline ELBO curve linearly interpolated at the selected |S| (nats)."""
    curve = sorted((int(M), v) for M, v in record["baseline_elbo"].items())
    Ms = [M for M, _ in curve]
    if not Ms or not (Ms[0] <= record["selected_count"] <= Ms[-1]):
        return None
    return record["selected_elbo"] - float(np.interp(record["selected_count"], Ms, [v for _, v in curve]))


def envelope_gap(record: dict) -> float | None:
    """Selected ELBO minus the best baseline ELBO with M <= the selected |S| (nats; robust to a stalled fixed-M run,
    which makes the interpolated curve dip)."""
    below = [v for M, v in record["baseline_elbo"].items() if int(M) <= record["selected_count"]]
    return record["selected_elbo"] - max(below) if below else None


def summarise(cells: dict) -> dict:
    """Per data set and noise level: means over splits; per data set: whether E|S| falls with the noise."""
    out = {}
    for name, table in TABLE_1.items():
        rows = []
        for v in table["noise_levels"]:
            found = [c for c in cells.values() if c["dataset"] == name and c["noise_level"] == v]
            if not found:
                continue
            gaps = [c["frontier_gap"] for c in found if c["frontier_gap"] is not None]
            envelope = [g for g in map(envelope_gap, found) if g is not None]
            shared_M = sorted(set.intersection(*(set(c["baseline_elbo"]) for c in found)), key=int)
            curves = np.array([[c["baseline_elbo"][M] for M in shared_M] for c in found]).reshape(len(found), -1)
            rows.append(
                {
                    "noise_level": v,
                    "splits": len(found),
                    "expected_count": float(np.mean([c["expected_count"] for c in found])),
                    "count_sd": float(np.mean([c["count_sd"] for c in found])),
                    "selected_count": float(np.mean([c["selected_count"] for c in found])),
                    "selected_elbo": float(np.mean([c["selected_elbo"] for c in found])),
                    "frontier_gap": float(np.mean(gaps)) if gaps else None,
                    "frontier_gap_min": float(np.min(gaps)) if gaps else None,
                    "envelope_gap_min": float(np.min(envelope)) if envelope else None,
                    "baseline_M": [int(M) for M in shared_M],
                    "baseline_elbo_mean": curves.mean(axis=0).tolist(),
                    "baseline_elbo_sd": curves.std(axis=0).tolist(),
                }
            )
        if rows:
            counts = [r["expected_count"] for r in rows]
            increases = [b - a for a, b in zip(counts, counts[1:], strict=False) if b > a]
            out[name] = {
                "alpha": table["alpha"],
                "rows": rows,
                "adjacent_increases": len(increases),
                "largest_increase": max(increases, default=0.0),
            }
    return out


def markdown_tables(summary: dict) -> str:
    head = (
        "| data set (α) | noise v | splits | E\\|S\\| | sd\\|S\\| | sampled \\|S\\| | ELBO selected | "
        "frontier gap (mean / min) | gap to best M <= \\|S\\| (min) |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for name, block in summary.items():
        for r in block["rows"]:
            gap = "n/a" if r["frontier_gap"] is None else f"{r['frontier_gap']:+.1f} / {r['frontier_gap_min']:+.1f}"
            envelope = "n/a" if r["envelope_gap_min"] is None else f"{r['envelope_gap_min']:+.1f}"
            lines.append(
                f"| {name} ({block['alpha']}) | {r['noise_level']} | {r['splits']} | {r['expected_count']:.1f} | "
                f"{r['count_sd']:.1f} | {r['selected_count']:.1f} | {r['selected_elbo']:.1f} | {gap} | {envelope} |"
            )
    lines += ["", "Baseline ELBO by M (mean over splits):", ""]
    for name, block in summary.items():
        Ms = sorted({M for r in block["rows"] for M in r["baseline_M"]})
        lines.append(f"| {name}: v \\ M | " + " | ".join(str(M) for M in Ms) + " |")
        lines.append("|---" * (len(Ms) + 1) + "|")
        for r in block["rows"]:
            elbo = dict(zip(r["baseline_M"], r["baseline_elbo_mean"], strict=True))
            cells = " | ".join(f"{elbo[M]:.0f}" if M in elbo else "" for M in Ms)
            lines.append(f"| {r['noise_level']} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", choices=list(TABLE_1), default=list(TABLE_1))
    parser.add_argument("--splits", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--baseline-m", nargs="+", type=int, default=list(BASELINE_M))
    parser.add_argument("--noise-levels", nargs="+", type=float, help="a subset of Table 1's levels (default: all)")
    parser.add_argument("--quick", action="store_true", help="20x shorter schedule, written to the runs folder")
    args = parser.parse_args(argv)
    bad = [M for M in args.baseline_m if not 1 <= M <= K]
    if bad:
        parser.error(f"--baseline-m: expected sizes between 1 and {K}, got {bad}")
    for name in args.datasets:
        unknown = set(args.noise_levels or ()) - set(TABLE_1[name]["noise_levels"])
        if unknown:
            parser.error(f"--noise-levels: {name} has levels {TABLE_1[name]['noise_levels']}, got {sorted(unknown)}")
    path = QUICK_RESULTS if args.quick else RESULTS
    schedule = {k: v // 20 for k, v in SCHEDULE.items()} if args.quick else SCHEDULE
    baseline_steps = BASELINE_STEPS // 20 if args.quick else BASELINE_STEPS
    settings = {"K": K, **schedule, "baseline_steps": baseline_steps, "table_1": TABLE_1}
    for name in args.datasets:
        for split in args.splits:
            for v in args.noise_levels or TABLE_1[name]["noise_levels"]:
                key = f"{name}/{split}/{v}"
                if has_cell(path, key):
                    continue
                folder = CHECKPOINTS / ("quick" if args.quick else "") / f"{name}_split{split}_v{v}"
                record = run_cell(name, split, v, schedule, tuple(args.baseline_m), baseline_steps, folder)
                shown = ("expected_count", "selected_count", "selected_elbo", "frontier_gap")
                print(key, {k: record[k] for k in shown}, flush=True)
                add_cell(path, key, record, settings, summarise=summarise)  # other runs may have added cells
                shutil.rmtree(folder)
    if not path.exists():
        return 0
    with locked_json(path) as document:  # the summary of every stored cell, whichever run added it
        document["summary"] = summarise(document["cells"])
    print(markdown_tables(document["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
