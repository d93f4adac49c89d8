"""Four BSGP chains with a point-estimated noise, vectorized against sequential, and R-hat of the test predictive means.

Run (from the repository root)::

    .venv/bin/python benchmarks/bsgp_chains.py                        # boston split 0, 100 iterations, 32 kept
    .venv/bin/python benchmarks/bsgp_chains.py --iterations 200 --kept 64

Setting: ``fit_bsgp`` on ``bsgp/boston`` split 0 (the BSGP UCI protocol, y standardised with training statistics),
M = 100 inducing points from k-means (seed 0), the released sampler (ε = 0.01, minibatch min(1000, N) = N = 404, the
noise optimised by Adam every 21 updates on window states), float64, 4 chains, the same key for both runs. The
vectorized run steps the 4 chains in one vmapped program; the sequential run steps them one after another
(``lax.map``) in one program. The pair runs ``--rounds`` times, alternating (vectorized, sequential, vectorized, ...):
the first round compiles inside the timed call, later ones find the programs in the persistent compilation cache.
The warmup runs in pieces of ``--piece`` iterations; the steady-state rate counts the pieces after the first.

Reported per chain method: seconds of the whole ``fit_bsgp`` call (compilation included), warmup and sampling
seconds, the steady-state warmup rate (chain-updates per second, all chains together). Then the largest difference
of the two runs' unconstrained states after every warmup piece (from one rounding unit after the first steps, it
grows with the number of updates, as the dynamics amplify the rounding differences of a vmapped and an unbatched
program) and of their draws. Then, for the vectorized run, R-hat of the per-draw predictive means at the 102 test
points across the 4 chains (ArviZ's rank-normalised split R-hat, point by point): max, mean ± SD and the fraction
below 1.1; the paper reports R-hat = 1.02 ± 0.045 over 4 chains on AIRLINE (10,000 burn-in iterations, 200 draws
1000 updates apart), a far longer run than this one.

Output: ``benchmarks/results/bsgp_chains.json`` (written atomically).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shlex
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from svgp_uci import _loadavg, environment, write_json_atomic  # noqa: E402

from ppl_sparsegp import data  # noqa: E402
from ppl_sparsegp.inducing.initialise import kmeans  # noqa: E402
from ppl_sparsegp.recipes.bsgp import UPDATES_PER_ITERATION, BSGPFit, fit_bsgp  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bsgp_chains.json"
CHAINS = 4
PAPER_RHAT = {"mean": 1.02, "sd": 0.045, "dataset": "AIRLINE", "chains": 4, "draws_per_chain": 200}


def run(method: str, X: np.ndarray, y: np.ndarray, Z: np.ndarray, args: argparse.Namespace) -> tuple[BSGPFit, dict]:
    """One ``fit_bsgp`` call with ``chain_method=method``; its timings."""
    piece_ends: list[tuple[int, float]] = []  # (warmup updates done, seconds since the call began)
    states: list[dict[str, np.ndarray]] = []  # the unconstrained state of every chain after each warmup piece

    def on_piece(fit: BSGPFit) -> None:
        if fit.mcmc.num_draws == 0:
            piece_ends.append((fit.mcmc.warmup_done, time.perf_counter() - start))
            states.append({k: np.asarray(v) for k, v in fit.mcmc.last_state.z.items()})

    start = time.perf_counter()
    fit = fit_bsgp(
        X, y, key=jax.random.PRNGKey(0), Z=Z, num_chains=CHAINS, chain_method=method, num_iterations=args.iterations,
        num_kept=args.kept, warmup_chunk_size=UPDATES_PER_ITERATION * args.piece, callback=on_piece, progress=False,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    (first_done, first_end), (last_done, last_end) = piece_ends[0], piece_ends[-1]
    steady = CHAINS * (last_done - first_done) / (last_end - first_end) if last_done > first_done else None
    return fit, {
        "chain_method": method,
        "fit_seconds": seconds,
        "warmup_seconds": fit.mcmc.warmup_seconds,
        "sample_seconds": fit.mcmc.sample_seconds,
        "first_piece_seconds": first_end,
        "steady_warmup_chain_updates_per_second": steady,
        "warmup_done": [done for done, _ in piece_ends],
        "states": states,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100, help="warmup iterations of 21 updates")
    parser.add_argument("--kept", type=int, default=32, help="draws kept per chain, 32 updates apart")
    parser.add_argument("--piece", type=int, default=5, help="warmup iterations per piece (resolution of the timing "
                        "and of the differences between the runs)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="runs of each chain method, alternating")
    args = parser.parse_args(argv)
    command = " ".join(
        ["python", "benchmarks/bsgp_chains.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds, _ = data.standardize(data.load_bsgp_uci("boston", 0))
    X, y = np.asarray(ds.X_train, np.float64), np.asarray(ds.y_train, np.float64)
    X_test = np.asarray(ds.X_test, np.float64)
    Z = kmeans(X, 100, seed=0)
    load_before = _loadavg()
    fits, rows = {}, []
    for round_ in range(1, args.rounds + 1):
        for method in ("vectorized", "sequential"):
            fits[method], row = run(method, X, y, Z, args)
            rows.append({"round": round_, **row})
            rate = row["steady_warmup_chain_updates_per_second"]
            print(f"round {round_}, {method}: {row['fit_seconds']:.1f} s ({rate:.0f} chain-updates/s in warmup after "
                  "the first piece)", flush=True)  # fmt: skip
    vectorized, sequential = (fits[m].mcmc.samples for m in ("vectorized", "sequential"))
    differences = {site: float(np.max(np.abs(vectorized[site] - sequential[site]))) for site in vectorized}
    v_states, s_states = rows[-2].pop("states"), rows[-1].pop("states")
    for row in rows:
        row.pop("states", None)
    growth = [  # the largest |difference| of the unconstrained state, every chain and site, after each warmup piece
        {"warmup_updates": done, "max_abs_difference": max(float(np.max(np.abs(a[k] - b[k]))) for k in a)}
        for done, a, b in zip(rows[-2]["warmup_done"], v_states, s_states, strict=True)
    ]
    noise = vectorized["likelihood.variance"][:, 0]
    rhat = {m: fits[m].predictive_rhat(X_test) for m in fits}
    summary = rhat["vectorized"].summary()
    print("largest |difference| of the state after each warmup piece:", flush=True)
    print("\n".join(f"  {g['warmup_updates']:6d} {g['max_abs_difference']:.2e}" for g in growth))
    print(f"largest |difference| of the draws: {max(differences.values()):.2e}; noise per chain {noise} (vectorized),"
          f" {sequential['likelihood.variance'][:, 0]} (sequential)")  # fmt: skip
    print(f"R-hat of the {X_test.shape[0]} test predictive means: max {summary['max']:.3f}, mean "
          f"{summary['mean']:.3f} ± {summary['sd']:.3f}, {summary['fraction_below']:.0%} below 1.1 (paper, AIRLINE: "
          "1.02 ± 0.045)")  # fmt: skip
    write_json_atomic(
        RESULTS,
        {
            "benchmark": "BSGP: 4 chains with a point-estimated noise, vectorized vs sequential; R-hat of the test "
            "predictive means",
            "date": _dt.date.today().isoformat(),
            "command": command,
            "environment": environment(),
            "dataset": "bsgp/boston split 0",
            "n_train": int(X.shape[0]),
            "n_test": int(X_test.shape[0]),
            "num_inducing": 100,
            "chains": CHAINS,
            "warmup_updates": UPDATES_PER_ITERATION * args.iterations,
            "sample_updates": 32 * args.kept,
            "rows": rows,
            "sequential_over_vectorized_fit_seconds_last_round": rows[-1]["fit_seconds"] / rows[-2]["fit_seconds"],
            "max_abs_difference_of_draws": differences,
            "max_abs_difference_of_state_after_each_warmup_piece": growth,
            "noise_per_chain": noise.tolist(),
            "noise_per_chain_sequential": sequential["likelihood.variance"][:, 0].tolist(),
            "predictive_rhat": summary,
            "predictive_rhat_sequential": rhat["sequential"].summary(),
            "paper_predictive_rhat": PAPER_RHAT,
            "loadavg_1min_before": load_before,
            "loadavg_1min_after": _loadavg(),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
