"""SGHMC updates per second of BSGP against the paper's Table 2 (gradient evaluations per second on a CPU).

Run (from the repository root, with nothing else running)::

    .venv/bin/python benchmarks/bsgp_speed.py                    # NAVAL shallow and KIN8NM 2-layer, as Table 2
    .venv/bin/python benchmarks/bsgp_speed.py --iterations 20    # shorter

Setting (spec §3.7): M = 100 inducing points per layer, minibatch 1000, float64, the released sampler (every update
is one minibatch gradient of the potential over all sampled variables and, every 21 updates, one Adam step on the
noise at a window state). Each case compiles first (not timed), then runs ``--iterations`` × 21 warmup updates
twice and reports the faster repeat. The paper's figures (38.0 for NAVAL, 21.4 for KIN8NM DGP-2) come from an
8-core cloud instance; ours from this 2-core machine, so the ratio is indicative only. The authors' released code
runs on this machine at about our rate (``benchmarks/bsgp_released_code.py``, benchmarks/README.md section "BSGP's
update rate against the released code on this machine"), so Table 2's unit is most likely one released iteration of
21 updates and ``ratio_to_paper`` is no speed-up over the authors' code.

Output: ``benchmarks/results/bsgp_speed.json`` (written atomically).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shlex
import sys
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
from ppl_sparsegp.recipes.bsgp import fit_bsgp  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "bsgp_speed.json"
CASES = (("naval", 1, 38.0), ("kin8nm", 2, 21.4))  # dataset, layers, paper's gradient evaluations per second


def time_case(name: str, layers: int, iterations: int) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds, _ = data.standardize(data.load_bsgp_uci(name, 0))
    X, y = np.asarray(ds.X_train, np.float64), np.asarray(ds.y_train, np.float64)
    Z = kmeans(X, 100, seed=0)
    updates = 21 * iterations
    rates = []
    for repeat in range(2):
        fit = fit_bsgp(
            X, y, key=jax.random.PRNGKey(repeat), num_layers=layers, Z=Z, num_warmup=updates, num_samples=1, thinning=1
        )
        rates.append(updates / fit.mcmc.warmup_seconds)  # the compiled warmup only
    return {
        "dataset": name,
        "layers": layers,
        "num_inducing": 100,
        "batch_size": min(1000, X.shape[0]),
        "updates_timed": updates,
        "updates_per_second": max(rates),
        "updates_per_second_repeats": rates,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=50, help="warmup iterations (21 updates each) per repeat")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON file to write")
    args = parser.parse_args(argv)
    command = " ".join(
        ["python", "benchmarks/bsgp_speed.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
    )
    rows = []
    for name, layers, paper in CASES:
        load = _loadavg()
        row = time_case(name, layers, args.iterations)
        row.update({"paper_gradients_per_second": paper, "loadavg_1min_before": load, "loadavg_1min_after": _loadavg()})
        row["ratio_to_paper"] = row["updates_per_second"] / paper
        rows.append(row)
        print(f"{name} L={layers}: {row['updates_per_second']:.1f} updates/s (paper {paper}), load {load}", flush=True)
    write_json_atomic(
        args.output,
        {
            "benchmark": "BSGP SGHMC updates per second vs the paper's Table 2",
            "date": _dt.date.today().isoformat(),
            "command": command,
            "environment": environment(),
            "rows": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
