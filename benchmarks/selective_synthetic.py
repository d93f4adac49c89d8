"""The informativeness experiment on synthetic 1-D data (Uhrenholt et al. 2021, Fig. 3; spec 000 §5.3).

Run (from the repository root)::

    .venv/bin/python benchmarks/selective_synthetic.py                  # 3 conditions x 5 intensities x 3 seeds
    .venv/bin/python benchmarks/selective_synthetic.py --seeds 0        # one seed (resumes: finished cells skipped)
    .venv/bin/python benchmarks/selective_synthetic.py --quick          # smoke test, written to results/..._runs/
    .venv/bin/python benchmarks/selective_synthetic.py --conditions noise --lengthscale-starts given spacing \
        --baseline-seeds --output benchmarks/results/selective_synthetic_noise_starts.json  # pre-training restarts

Claim to reproduce: the number of inducing points the point process selects **decreases monotonically** as the
points become less informative, through (i) more observation noise σ, (ii) a smoother function (longer lengthscale
γ), (iii) more clustered inputs (concentration β), and the selected models' gap to the exact GP is comparable to
that of fixed-M baselines at the same M (the paper gives no numbers, only Fig. 3).

Protocol (paper App. C.3.1; intensity grids from the released code, which the paper does not state):

* data: N = 500, x ~ U[0, 100] (noise, smoothness) or an equal mixture of 5 normals N(μ_j, 1/β) with μ_j = 10, 30,
  50, 70, 90 (clustering); f ~ GP(0, RBF(variance 1, lengthscale γ)); y = f + N(0, σ²). Defaults σ = 0.1, γ = 1
  (paper). Grids: σ ∈ {0.300, 0.405, 0.548, 0.740, 1.000}, γ ∈ {0.800, 1.064, 1.414, 1.880, 2.500},
  β ∈ {0.030, 0.061, 0.122, 0.248, 0.500}. x and y are standardised.
* method: :func:`recipes.selective.fit_selective`, collapsed bound, K = 80 k-means candidates (as the code),
  α = 0.05, λ₀ = 0.5, S = 4, Adam 0.01 (GP) / 0.2 (λ), frozen GP while selecting, then one subset sampled, pruned
  and post-trained. Schedule: 1000 pre-training steps (the paper's 200 do not bring the lengthscale from its
  initial 1 down to ~0.035 in standardised units at this learning rate), 600 selection and 200 post-training steps.
  ``--lengthscale-starts given spacing`` pre-trains from the unit lengthscale and from the candidates' spacing and
  goes on from the higher bound (``SelectiveConfig.lengthscale_starts``); default: the unit start only.
* baseline: SGPR with fixed M ∈ {20, 40, 80} k-means inducing inputs, 1200 Adam steps (one seed).
* metric: E|S| = Σλ and Var|S| after selection, |S| of the sampled subset, and the gap log p*(y) − ELBO in nats,
  where log p*(y) is the log marginal likelihood of an exact GP fitted by Adam (300 steps at 0.05).

Output: ``benchmarks/results/selective_synthetic.json``, rewritten atomically after every cell; cells already in
it are skipped when the script runs again.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import optax  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402
from svgp_uci import _loadavg, add_cell, has_cell, locked_json  # noqa: E402

from ppl_sparsegp.core import kernels, likelihoods  # noqa: E402
from ppl_sparsegp.inducing.initialise import kmeans  # noqa: E402
from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402
from ppl_sparsegp.models.numpyro.gpr import GPR  # noqa: E402
from ppl_sparsegp.models.numpyro.sgpr import SGPR  # noqa: E402
from ppl_sparsegp.recipes.selective import LENGTHSCALE_STARTS, fit_selective  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "selective_synthetic.json"
QUICK_RESULTS = ROOT / "results" / "selective_synthetic_runs" / "quick.json"

GRIDS = {
    "noise": (0.300, 0.405, 0.548, 0.740, 1.000),
    "lengthscale": (0.800, 1.064, 1.414, 1.880, 2.500),
    "clustering": (0.030, 0.061, 0.122, 0.248, 0.500),
}
DEFAULT_NOISE, DEFAULT_LENGTHSCALE = 0.1, 1.0
CLUSTER_MEANS = (10.0, 30.0, 50.0, 70.0, 90.0)
N, K, ALPHA = 500, 80, 0.05
SCHEDULE = {"pre_steps": 1000, "selection_steps": 600, "post_steps": 200}
BASELINE_M = (20, 40, 80)
BASELINE_STEPS = 1200


def synthetic_data(condition: str, intensity: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(x [N, 1], y [N]) for one condition at one intensity, both standardised."""
    rng = np.random.default_rng([seed, list(GRIDS).index(condition), GRIDS[condition].index(intensity)])
    noise = intensity if condition == "noise" else DEFAULT_NOISE
    lengthscale = intensity if condition == "lengthscale" else DEFAULT_LENGTHSCALE
    if condition == "clustering":
        centre = rng.choice(CLUSTER_MEANS, size=N)
        x = centre + rng.normal(size=N) / np.sqrt(intensity)
    else:
        x = rng.uniform(0.0, 100.0, size=N)
    x = np.sort(x)
    Kxx = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2 / lengthscale**2)
    f = np.linalg.cholesky(Kxx + 1e-8 * np.eye(N)) @ rng.normal(size=N)
    y = f + noise * rng.normal(size=N)
    return ((x - x.mean()) / x.std())[:, None], (y - y.mean()) / y.std()


def _kernel() -> kernels.RBF:
    return kernels.RBF(variance=1.0, lengthscale=np.ones(1))


def exact_log_marginal(X: np.ndarray, y: np.ndarray, seed: int) -> float:
    gp = GPR(kernel=_kernel(), likelihood=likelihoods.Gaussian(1.0))
    fit = fit_svi(
        gp.model,
        gp.guide,
        X,
        y,
        optimizer=optax.adam(0.05),
        num_steps=300,
        key=seed,
        progress=False,
        validate=gp.check_data,
    )
    return float(gp.log_marginal_likelihood(fit.params, X, y))


def baseline_bound(X: np.ndarray, y: np.ndarray, M: int, seed: int) -> float:
    gp = SGPR(kernel=_kernel(), likelihood=likelihoods.Gaussian(1.0), Z=kmeans(X, M, seed=seed))
    fit = fit_svi(
        gp.model,
        gp.guide,
        X,
        y,
        optimizer=optax.adam(0.01),
        num_steps=BASELINE_STEPS,
        key=seed,
        progress=False,
        validate=gp.check_data,
    )
    return float(gp.elbo(fit.params, X, y))


def run_cell(
    condition: str, intensity: float, seed: int, schedule: dict, baseline: bool, starts: tuple[str, ...] = ("given",)
) -> dict:
    X, y = synthetic_data(condition, intensity, seed)
    t0 = time.perf_counter()
    log_marginal = exact_log_marginal(X, y, seed)
    fit = fit_selective(
        X, y, candidates=K, alpha=ALPHA, init="kmeans", kernel=_kernel(), likelihood=likelihoods.Gaussian(1.0),
        key=seed, lengthscale_starts=starts, **schedule,
    )  # fmt: skip
    post_bound = float(fit.model.elbo(fit.params, X, y))
    record = {
        "condition": condition,
        "intensity": intensity,
        "seed": seed,
        "expected_count": fit.expected_count,
        "count_sd": float(np.sqrt(fit.count_variance)),
        "selected_count": fit.selected_count,
        "log_marginal_exact": log_marginal,
        "post_trained_elbo": post_bound,
        "gap_nats": log_marginal - post_bound,
        "lengthscale": float(np.asarray(fit.params["kernel.lengthscale"])[0]),
        "noise_variance": float(fit.params["likelihood.variance"]),
        "pre_start": fit.pre_start,
        "pre_start_final_loss": {name: float(trace[-1]) for name, trace in fit.pre_start_losses.items()},
        "seconds": {**fit.seconds, "total": time.perf_counter() - t0},
        "loadavg": _loadavg(),
    }
    if baseline:
        record["baseline_gap_nats"] = {str(M): log_marginal - baseline_bound(X, y, M, seed) for M in BASELINE_M}
    return record


NOISE_ONLY_VARIANCE = 0.9
"""A fit whose noise variance (standardised y) ends above this explains the data as noise: flagged in the summary."""


def _trend(intensities: list[float], counts: list[float]) -> tuple[float, int]:
    """(Spearman ρ between intensity and count, number of adjacent increases of the count)."""
    return float(spearmanr(intensities, counts).statistic), sum(b > a for a, b in zip(counts, counts[1:], strict=False))


def _per_seed(cells: dict, condition: str, grid: tuple[float, ...]) -> dict:
    """Seed -> E|S| at each intensity of ``grid`` (low to high) and its Spearman ρ, for each seed that has them all."""
    out = {}
    for seed in sorted({c["seed"] for c in cells.values() if c["condition"] == condition}):
        found = {c["intensity"]: c["expected_count"] for c in cells.values()
                 if c["condition"] == condition and c["seed"] == seed}  # fmt: skip
        if set(found) == set(grid):
            counts = [found[i] for i in grid]
            out[str(seed)] = {"expected_counts": counts, "spearman_rho": _trend(list(grid), counts)[0]}
    return out


def summarise(cells: dict) -> dict:
    """Per condition: mean and median E|S| over seeds at each intensity, Spearman ρ(intensity, E|S|) and adjacent
    inversions of each; ``noise_only_cells`` lists the fits that ended explaining the data as noise."""
    out = {}
    for condition, grid in GRIDS.items():
        rows = []
        for intensity in grid:
            found = [c for c in cells.values() if c["condition"] == condition and c["intensity"] == intensity]
            if found:
                rows.append(
                    {
                        "intensity": intensity,
                        "seeds": len(found),
                        "expected_count": float(np.mean([c["expected_count"] for c in found])),
                        "median_expected_count": float(np.median([c["expected_count"] for c in found])),
                        "count_sd": float(np.mean([c["count_sd"] for c in found])),
                        "selected_count": float(np.mean([c["selected_count"] for c in found])),
                        "gap_nats": float(np.mean([c["gap_nats"] for c in found])),
                    }
                )
        if len(rows) >= 2:
            intensities = [r["intensity"] for r in rows]
            rho, inversions = _trend(intensities, [r["expected_count"] for r in rows])
            rho_median, inversions_median = _trend(intensities, [r["median_expected_count"] for r in rows])
            out[condition] = {
                "rows": rows,
                "spearman_rho": rho,
                "adjacent_inversions": inversions,
                "spearman_rho_median": rho_median,
                "adjacent_inversions_median": inversions_median,
                "per_seed": _per_seed(cells, condition, grid),
            }
    out["noise_only_cells"] = sorted(k for k, c in cells.items() if c["noise_variance"] > NOISE_ONLY_VARIANCE)
    return out


def markdown_table(summary: dict) -> str:
    lines = [
        "| condition | intensity | E\\|S\\| (mean over seeds) | median | sd\\|S\\| | sampled \\|S\\| | gap (nats) |"
    ]
    lines.append("|---|---|---|---|---|---|---|")
    for condition in GRIDS:
        if condition not in summary:
            continue
        block = summary[condition]
        for r in block["rows"]:
            lines.append(
                f"| {condition} | {r['intensity']:.3f} | {r['expected_count']:.1f} | "
                f"{r['median_expected_count']:.1f} | {r['count_sd']:.1f} | {r['selected_count']:.1f} | "
                f"{r['gap_nats']:.1f} |"
            )
        lines.append(f"| {condition}: Spearman ρ = {block['spearman_rho']:.2f} (median: "
                     f"{block['spearman_rho_median']:.2f}), adjacent inversions = {block['adjacent_inversions']} "
                     f"(median: {block['adjacent_inversions_median']}) | | | | | | |")  # fmt: skip
    lines.append(f"\nFits that explain the data as noise (σ² > {NOISE_ONLY_VARIANCE}): {summary['noise_only_cells']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conditions", nargs="+", choices=list(GRIDS), default=list(GRIDS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--baseline-seeds", nargs="*", type=int, default=[0], help="seeds that also fit baselines (none: give no seed)"
    )
    parser.add_argument(
        "--lengthscale-starts", nargs="+", choices=LENGTHSCALE_STARTS, default=["given"],
        help="pre-training lengthscale starts, the best bound going on (default: given, the unit start)",
    )  # fmt: skip
    parser.add_argument("--output", type=Path, help=f"results file (default {RESULTS.relative_to(ROOT.parent)})")
    parser.add_argument("--quick", action="store_true", help="10x shorter schedule, written to the runs folder")
    args = parser.parse_args(argv)
    path = QUICK_RESULTS if args.quick else (args.output or RESULTS)
    schedule = {k: v // 10 for k, v in SCHEDULE.items()} if args.quick else SCHEDULE
    starts = tuple(args.lengthscale_starts)
    settings = {"N": N, "K": K, "alpha": ALPHA, **schedule, "baseline_M": BASELINE_M}
    if starts != ("given",):  # recorded when not the default, as runs from before the option have none
        settings["lengthscale_starts"] = list(starts)
    for seed in args.seeds:
        for condition in args.conditions:
            for intensity in GRIDS[condition]:
                key = f"{condition}/{intensity}/{seed}"
                if has_cell(path, key):
                    continue
                record = run_cell(condition, intensity, seed, schedule, seed in args.baseline_seeds, starts)
                print(key, {k: record[k] for k in ("expected_count", "selected_count", "gap_nats")}, flush=True)
                add_cell(path, key, record, settings)  # other runs may have added cells since this one started
    if not path.exists():
        return 0
    with locked_json(path) as document:  # the summary of every stored cell, whichever run added it
        document["summary"] = summarise(document["cells"])
    print(markdown_table(document["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
