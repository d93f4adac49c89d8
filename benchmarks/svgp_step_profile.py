"""Where the SVGP step's time goes: one compiled ``SVI.update`` (the problem of ``svgp_step_variants.py``) timed, then
traced by ``jax.profiler`` and its XLA operations summed per step, by name and by kind.

Kinds, from the names XLA gives the operations of the compiled program: ``lapack`` (``cholesky``,
``triangular_solve``: jaxlib's LAPACK calls), ``product`` (``dot*`` and the ``ynn_fusion`` matrix products),
``layout`` (operations whose name holds ``copy``, ``transpose``, ``concatenate``, ``slice`` or ``broadcast``: moving
data, e.g. the transposes into and out of LAPACK's column-major operands), ``other`` (the element-wise and reduction
fusions, scatters, gathers). The profiler's own wrappers (``ThunkExecutor``, thread-pool waits) and the Python
thread are left out, so the kinds add up to the time the operations ran, which is near the step's time on one core
and above it where XLA runs operations side by side.

    python benchmarks/svgp_step_profile.py --dtype float32 --M 1024 --blocked 0 --output benchmarks/results/....json
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

import numpy as np
from svgp_step_variants import compiled_update, problem, write_record

KINDS = (
    ("lapack", re.compile(r"^(cholesky|triangular_solve)")),
    ("product", re.compile(r"^(dot|ynn_fusion)")),
    ("layout", re.compile(r"copy|transpose|concatenate|slice|broadcast")),
)
"""Operation kinds, the first whose pattern matches the operation's name; ``other`` when none does."""
WRAPPERS = re.compile(r"ThunkExecutor|Await|^end: ")
"""Profiler events that wrap or mark operations rather than run one."""


def kind_of(name: str) -> str:
    """The kind of the XLA operation called ``name`` (see :data:`KINDS`)."""
    return next((kind for kind, pattern in KINDS if pattern.search(name)), "other")


def operation_times(trace: dict, steps: int) -> dict[str, float]:
    """Milliseconds per step of every XLA operation in a perfetto ``trace`` of ``steps`` calls, by operation name."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    totals: dict[str, float] = collections.defaultdict(float)
    for e in events:
        if e.get("ph") != "X" or WRAPPERS.search(e["name"]):
            continue
        if "python" in threads.get((e["pid"], e["tid"]), "").lower():
            continue
        totals[e["name"]] += e["dur"] / 1e3 / steps
    return dict(totals)


def profile(program, state, X, y, steps: int) -> dict[str, float]:
    """:func:`operation_times` of ``steps`` calls of ``program(state, X, y)`` traced by ``jax.profiler``."""
    import jax

    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder, create_perfetto_trace=True):
            for _ in range(steps):
                jax.block_until_ready(program(state, X, y)[1])
        (path,) = glob.glob(os.path.join(folder, "plugins", "profile", "*", "perfetto_trace.json.gz"))
        with gzip.open(path) as fh:
            return operation_times(json.load(fh), steps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--M", type=int, default=1024)
    p.add_argument("--blocked", choices=["0", "1"], default="0", help="PPL_SPARSEGP_BLOCKED_LINALG for the step")
    p.add_argument("--calls", type=int, default=15, help="timed calls")
    p.add_argument("--profiled", type=int, default=5, help="profiled calls")
    p.add_argument("--top", type=int, default=25, help="operations listed by name")
    p.add_argument("--output", default=None)
    a = p.parse_args(argv)
    for name in ("calls", "profiled", "top", "M"):
        if getattr(a, name) < 1:
            p.error(f"--{name}: expected a positive integer, got {getattr(a, name)}")

    os.environ["PPL_SPARSEGP_BLOCKED_LINALG"] = a.blocked
    import jax

    jax.config.update("jax_enable_x64", a.dtype == "float64")
    from ppl_sparsegp.core import ops

    X, y, Z = problem(a.dtype, a.M)
    X, y = jax.device_put(X), jax.device_put(y)
    program, state, compile_s = compiled_update(X, y, Z)
    load = [os.getloadavg()[0]]
    with ops.blas_threads(1):
        first_loss = float(jax.block_until_ready(program(state, X, y)[1]))
        times = []
        for _ in range(a.calls):
            t = time.perf_counter()
            jax.block_until_ready(program(state, X, y)[1])
            times.append(time.perf_counter() - t)
        per_operation = profile(program, state, X, y, a.profiled)
    load.append(os.getloadavg()[0])
    by_kind = collections.Counter()
    for name, ms in per_operation.items():
        by_kind[kind_of(name)] += ms
    top = sorted(per_operation.items(), key=lambda item: -item[1])[: a.top]
    step_ms = 1e3 * float(np.median(times))
    label = f"{a.dtype} M={a.M} blocked={a.blocked}"
    print(f"{label}: {step_ms:.1f} ms per step (median of {a.calls}), compile {compile_s:.1f} s")
    print("by kind (ms per step, profiled): " + ", ".join(f"{k} {v:.1f}" for k, v in by_kind.most_common()))
    for name, ms in top:
        print(f"  {ms:7.2f} ms  {kind_of(name):8s} {name}")
    if a.output:
        results = {
            "step_ms_median": step_ms,
            "step_ms_min": 1e3 * float(np.min(times)),
            "compile_s": compile_s,
            "first_loss": first_loss,
            "ms_per_step_by_kind": dict(by_kind),
            "ms_per_step_by_operation": dict(top),
            "operations": len(per_operation),
        }
        write_record(a.output, "svgp_step_profile", vars(a), load, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
