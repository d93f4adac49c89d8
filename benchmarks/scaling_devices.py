"""SVGP steps/s against the minibatch B and the inducing points M, on one device and split over P devices.

Run (from the repository root; P host devices are forced in a subprocess per P, as XLA_FLAGS must be set before jax
is imported)::

    .venv/bin/python benchmarks/scaling_devices.py                    # the grid below, ~10 min on 2 busy cores
    .venv/bin/python benchmarks/scaling_devices.py --quick            # two cells per curve

Problem: N = 20 000, D = 8, X ~ N(0, I), y = sin(a.x) + 0.1 noise; SVGP (RBF-ARD, Gaussian, whitened full q(u)),
Adam 0.01, in ``--dtype`` (float32 by default, as the issue's peer figures). Each cell runs ``fit_svi`` for
``--steps`` steps in chunks of 100 and reports ``SVIResult.steps_per_second`` (compilation excluded) and the compile
time; the 1-minute load average is recorded beside every cell. On a CPU, P forced host devices share the same cores,
so P > 1 shows the cost of the partitioned program (collectives, smaller per-device matmuls), not a speed-up: that
needs P real devices (docs/scaling.md).

Writes ``benchmarks/results/scaling_devices.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

B_GRID = (64, 256, 1024, 4096)
M_GRID = (32, 64, 128, 256, 512, 1024)
B_AT = 256  # the B of the M curve
M_AT = 128  # the M of the B curve


def cell(B: int, M: int, devices: int | None, steps: int, dtype: str) -> dict:
    import jax
    import numpy as np
    import optax

    from ppl_sparsegp.core import kernels, likelihoods
    from ppl_sparsegp.infer.svi import fit_svi
    from ppl_sparsegp.models.numpyro.svgp import SVGP

    jax.config.update("jax_enable_x64", dtype == "float64")
    rng = np.random.default_rng(0)
    N, D = 20_000, 8
    X = rng.standard_normal((N, D)).astype(dtype)
    y = (np.sin(X @ rng.standard_normal(D) / np.sqrt(D)) + 0.1 * rng.standard_normal(N)).astype(dtype)
    Z = X[rng.choice(N, M, replace=False)].copy()
    kernel = kernels.RBF(variance=1.0, lengthscale=np.ones(D, dtype))
    gp = SVGP(kernel=kernel, likelihood=likelihoods.Gaussian(0.1), Z=Z, batch_size=B)
    load = os.getloadavg()[0]
    res = fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=steps, progress=False,
                  steps_per_dispatch=100, devices=devices)  # fmt: skip
    return {
        "B": B, "M": M, "devices": devices or 1, "steps": steps, "dtype": dtype,
        "steps_per_second": res.steps_per_second, "compile_seconds": res.compile_seconds,
        "final_loss": float(res.losses[-1]), "loadavg_1min_before": load, "loadavg_1min_after": os.getloadavg()[0],
    }  # fmt: skip


def worker(args: argparse.Namespace) -> None:
    """One process per device count: every cell of the grid, as JSON lines on stdout."""
    import jax

    devices = jax.device_count() if args.devices[0] > 1 else None
    for B, M in json.loads(args.cells):
        print(json.dumps(cell(B, M, devices, args.steps, args.dtype)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2], help="device counts P (default: 1 2)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=Path("benchmarks/results/scaling_devices.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cells", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    b_grid, m_grid = ((64, 1024), (32, 256)) if args.quick else (B_GRID, M_GRID)
    cells = sorted({*((b, M_AT) for b in b_grid), *((B_AT, m) for m in m_grid)})
    rows = []
    for p in args.devices:
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={p}"}
        command = [sys.executable, __file__, "--worker", "--devices", str(p), "--steps", str(args.steps),
                   "--dtype", args.dtype, "--cells", json.dumps(cells)]  # fmt: skip
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        for row in rows[-len(cells) :]:
            print(f"P={p} B={row['B']:5d} M={row['M']:5d}  {row['steps_per_second']:8.1f} steps/s  "
                  f"compile {row['compile_seconds']:.1f} s  load {row['loadavg_1min_before']:.1f}")  # fmt: skip
    result = {
        "command": " ".join(["python", *sys.argv]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{os.cpu_count()} CPU cores (shared with other work); P forced host devices on them",
        "N": 20_000, "D": 8, "B_at": B_AT, "M_at": M_AT, "rows": rows,
    }  # fmt: skip
    args.output.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
