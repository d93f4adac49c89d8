"""SVGP training speed of two checkouts of ppl_sparsegp, measured in one interleaved run (issue 20's acceptance:
the restructured library must be within 5 % of the old commit's steps/s at M = 256).

Run from the repository root, with the old commit checked out beside it::

    git worktree add /tmp/ppl-old 4b99ba6
    .venv/bin/python benchmarks/restructure_speed.py --old /tmp/ppl-old --new . --repeats 5

Each cell runs in a fresh interpreter that imports ``ppl_sparsegp`` (and ``ppl_sparsegp.models``, which the
package maps to ``models/``) from the given checkout, so both commits run on the same installed jax. The problem
is ``speed_svgp.py``'s: N = 10,000 points, D = 8, ``f(x) = sin(a.x) + 0.5 cos(2 b.x) + 0.3 tanh(c.x)`` plus noise,
y standardised; SVGP with M inducing inputs (a seeded random subset of X), RBF-ARD, Gaussian likelihood, whitened
full-covariance q(u), minibatches of 256, Adam 0.01. ``fit_svi`` runs ``--warmup`` steps (compilation included)
and then ``--steps`` more from that state; steps/s is the second call's ``steps_per_second`` (compilation
excluded). Cells alternate old, new, old, new, ... so that machine load hits both alike; the table reports the
median steps/s of each and the median of the per-pair ratios new/old.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "restructure_speed.json"

CELL = r"""
import importlib, importlib.util, json, sys, time
from pathlib import Path

root = Path(sys.argv[1]).resolve()
M, warmup, steps, seed = (int(a) for a in sys.argv[2:6])
sys.path.insert(0, str(root))
import ppl_sparsegp  # noqa: E402  (from root)
assert Path(ppl_sparsegp.__file__).resolve().is_relative_to(root), ppl_sparsegp.__file__
spec = importlib.util.spec_from_file_location(
    "ppl_sparsegp.models", root / "models" / "__init__.py", submodule_search_locations=[str(root / "models")]
)
models = importlib.util.module_from_spec(spec)
sys.modules["ppl_sparsegp.models"] = models
spec.loader.exec_module(models)

import jax  # noqa: E402
jax.config.update("jax_enable_x64", True)
import numpy as np  # noqa: E402
import optax  # noqa: E402

def first(*names):
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            pass
    raise ImportError(names)

kernels = first("ppl_sparsegp.core.kernels", "ppl_sparsegp.kernels")
likelihoods = first("ppl_sparsegp.core.likelihoods", "ppl_sparsegp.likelihoods")
from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402
SVGP = first("ppl_sparsegp.models.numpyro.svgp", "ppl_sparsegp.models.svgp").SVGP  # new layout, then the old

rng = np.random.default_rng(seed)
N, D = 10_000, 8
X = rng.standard_normal((N, D))
decay = 0.7 ** np.arange(D)
a, b, c = (rng.standard_normal(D) * decay for _ in range(3))
y = np.sin(X @ a) + 0.5 * np.cos(2 * X @ b) + 0.3 * np.tanh(X @ c) + 0.1 * rng.standard_normal(N)
y = (y - y.mean()) / y.std()
Z = X[rng.choice(N, M, replace=False)]
gp = SVGP(kernel=kernels.RBF(variance=1.0, lengthscale=np.ones(D)), likelihood=likelihoods.Gaussian(variance=0.1),
          Z=Z, batch_size=256)
first_call = fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=warmup,
                     key=jax.random.PRNGKey(seed))
timed = fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=steps, key=jax.random.PRNGKey(seed),
                init_state=first_call.state)
print(json.dumps({"steps_per_second": timed.steps_per_second, "final_loss": float(timed.losses[-1])}))
"""


def _commit(root: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _cell(root: Path, args: argparse.Namespace, repeat: int) -> dict:
    command = [
        sys.executable,
        "-c",
        CELL,
        str(root),
        str(args.inducing),
        str(args.warmup),
        str(args.steps),
        str(args.seed + repeat),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=os.environ.copy())
    if done.returncode != 0:
        raise RuntimeError(f"cell for {root} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="checkout of the old commit")
    parser.add_argument("--new", type=Path, default=Path("."), help="checkout of the new commit (default: .)")
    parser.add_argument("--inducing", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    cells = {"old": [], "new": []}
    for repeat in range(args.repeats):
        for which in ("old", "new"):
            cell = _cell(getattr(args, which), args, repeat)
            cells[which].append(cell)
            print(f"repeat {repeat} {which}: {cell['steps_per_second']:.1f} steps/s", flush=True)
    ratios = [n["steps_per_second"] / o["steps_per_second"] for o, n in zip(cells["old"], cells["new"], strict=True)]
    import jax

    record = {
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "versions": {"python": platform.python_version(), "jax": jax.__version__},
        "commits": {"old": _commit(args.old), "new": _commit(args.new)},
        "settings": {k: getattr(args, k) for k in ("inducing", "warmup", "steps", "repeats", "seed")},
        "cells": cells,
        "median_steps_per_second": {k: statistics.median(c["steps_per_second"] for c in v) for k, v in cells.items()},
        "ratios_new_over_old": ratios,
        "median_ratio_new_over_old": statistics.median(ratios),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(args.output)
    print(
        f"median steps/s old {record['median_steps_per_second']['old']:.1f}, "
        f"new {record['median_steps_per_second']['new']:.1f}, median ratio {record['median_ratio_new_over_old']:.3f}"
    )


if __name__ == "__main__":
    main()
