"""How an IDSGP step's cost grows with the batch B and the inducing points per input M (spec 002 §6b, T7).

Run (from the repository root)::

    .venv/bin/python benchmarks/idsgp_scaling.py

One SVI step (the loss and its gradient, compiled) on kin40k's first 4,000 standardised rows, float64, the default
network (one hidden layer of 50): B in {50, 100, 200, 400} at M = 50, and M in {16, 32, 64, 128} at B = 100. Each
time is the median over 5 repeats of 20 steps, after a compiled warm-up. The log-log slopes say how the cost grows:
about 1 in B (every input has its own M x M Cholesky) and above 1.5 in M, tending to 3 when the Choleskys
dominate. Writes ``benchmarks/results/idsgp_scaling.json``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import optax  # noqa: E402
from numpyro.infer import SVI, TraceMeanField_ELBO  # noqa: E402
from numpyro.optim import optax_to_numpyro  # noqa: E402

from ppl_sparsegp import data, results  # noqa: E402
from ppl_sparsegp.core.likelihoods import Gaussian  # noqa: E402
from ppl_sparsegp.recipes.idsgp import IDSGPConfig, build_idsgp  # noqa: E402

ROOT = Path(__file__).resolve().parent
BATCHES, INDUCING = (50, 100, 200, 400), (16, 32, 64, 128)
STEPS, REPEATS = 20, 5


def seconds_per_step(X: np.ndarray, y: np.ndarray, batch: int, inducing: int) -> float:
    model = build_idsgp(IDSGPConfig(num_inducing=inducing, batch_size=batch), X, Gaussian(0.1))
    svi = SVI(model.model, model.guide, optax_to_numpyro(optax.adam(0.01)), TraceMeanField_ELBO())
    state = svi.init(jax.random.PRNGKey(0), X, y)

    @jax.jit
    def run(state):
        return jax.lax.fori_loop(0, STEPS, lambda _, s: svi.update(s, X, y)[0], state)

    state = jax.block_until_ready(run(state))
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        state = jax.block_until_ready(run(state))
        times.append((time.perf_counter() - start) / STEPS)
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
