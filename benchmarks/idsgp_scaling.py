"""How an IDSGP step's cost grows with the batch B and the inducing points per input M (spec 002 §6b, T7).

Run (from the repository root)::

    .venv/bin/python benchmarks/idsgp_scaling.py

One SVI step (the loss and its gradient) on kin40k's first 4,000 standardised rows, float64, the default network
(one hidden layer of 50): B in {50, 100, 200, 400} at M = 50, and M in {16, 32, 64, 128} at B = 100. Each time is
the median over 3 fits of 200 steps by :func:`ppl_sparsegp.infer.svi.fit_svi` (compiling excluded). The log-log
slopes say how the cost grows: about 1 in B (every input has its own M x M Cholesky) and above 1.5 in M, tending to
3 when the Choleskys dominate. Writes ``benchmarks/results/idsgp_scaling.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import optax  # noqa: E402

from ppl_sparsegp import data, results  # noqa: E402
from ppl_sparsegp.core.likelihoods import Gaussian  # noqa: E402
from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402
from ppl_sparsegp.recipes.idsgp import IDSGPConfig, build_idsgp  # noqa: E402

ROOT = Path(__file__).resolve().parent
BATCHES, INDUCING = (50, 100, 200, 400), (16, 32, 64, 128)
STEPS, REPEATS = 200, 3


def seconds_per_step(X: np.ndarray, y: np.ndarray, batch: int, inducing: int) -> float:
    """The median over REPEATS fits of STEPS steps of the run time per step (:func:`fit_svi`, compiling excluded, as a
    user's fit runs: BLAS threads as ``fit_svi`` sets them)."""
    model = build_idsgp(IDSGPConfig(num_inducing=inducing, batch_size=batch), X, Gaussian(0.1))
    times = []
    for repeat in range(REPEATS):
        fit = fit_svi(model.model, model.guide, X, y, optimizer=optax.adam(0.01), num_steps=STEPS, key=repeat,
                      progress=False)  # fmt: skip
        times.append(fit.run_seconds / fit.steps_run)
    return float(np.median(times))


def slope(sizes: tuple[int, ...], seconds: list[float]) -> float:
    return float(np.polyfit(np.log(sizes), np.log(seconds), 1)[0])


def main() -> int:
    std, _ = data.standardize(data.load_dataset("wilson/kin40k", 0))
    X, y = std.X_train[:4000], std.y_train[:4000]
    by_batch = [seconds_per_step(X, y, b, 50) for b in BATCHES]
    by_inducing = [seconds_per_step(X, y, 100, m) for m in INDUCING]
    record = {
        "command": "python benchmarks/idsgp_scaling.py",
        "batch": {"sizes": BATCHES, "inducing": 50, "seconds_per_step": by_batch, "slope": slope(BATCHES, by_batch)},
        "inducing": {"sizes": INDUCING, "batch": 100, "seconds_per_step": by_inducing,
                     "slope": slope(INDUCING, by_inducing)},
        **results.provenance(),
    }  # fmt: skip
    results.write_json(ROOT / "results" / "idsgp_scaling.json", record)
    print(f"slope in B {record['batch']['slope']:.2f}; slope in M {record['inducing']['slope']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
