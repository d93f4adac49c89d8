"""The SVGP step at large M with each combination of the linear-algebra path and q(u)'s lower-Cholesky bijection,
compiled in one process and timed call by call in turn (so that a busy machine slows every variant alike).

Variants: ``PPL_SPARSEGP_BLOCKED_LINALG`` 0 / 1 (LAPACK / ``backends/jax_blocked``) x NumPyro's
``constraints.lower_cholesky`` / ``ppl_sparsegp.numpyro.distributions.lower_cholesky``; "0 + numpyro" is the code
before both. With ``--blocks b1 b2 ...`` instead: LAPACK, then the blocked path with each block size (0: the
library's ``jax_blocked.block_size(M)``), all with the library's bijection. Problem: N = 20,000, D = 8, B = 256,
Z = M random rows of X, RBF, Gaussian likelihood, whitened, full-rank q(u) at its initial value, Adam; one
``SVI.update`` per call; OpenBLAS on one thread as in ``fit_svi``.

    python benchmarks/svgp_step_variants.py --dtype float32 --M 1024 --calls 15 --output results/....json
    python benchmarks/svgp_step_variants.py --dtype float32 --M 4096 --calls 5 --blocks 128 0
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time

import numpy as np


def problem(dtype: str, M: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The benchmark's data: X [20000, 8] standard normal, y = sin(sum of X's columns) [20000], Z = M rows of X."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20000, 8)).astype(dt)
    y = np.sin(X.sum(axis=1)).astype(dt)
    return X, y, X[rng.choice(X.shape[0], M, replace=False)]


def compiled_update(X: np.ndarray, y: np.ndarray, Z: np.ndarray):
    """(program, state, compile seconds): one ``SVI.update`` of the whitened SVGP (RBF, Gaussian, B = 256, Adam 0.01,
    ``TraceMeanField_ELBO``) compiled ahead of time for (state, X, y), at the linear algebra and bijection that the
    environment and ``ppl_sparsegp.numpyro.sites`` hold when it is called."""
    import jax
    import optax
    from numpyro.infer import SVI, TraceMeanField_ELBO

    from ppl_sparsegp.core import kernels, likelihoods
    from ppl_sparsegp.models.numpyro.svgp import SVGP

    gp = SVGP(
        kernel=kernels.RBF(variance=1.0, lengthscale=np.ones(X.shape[1], X.dtype)),
        likelihood=likelihoods.Gaussian(variance=0.1),
        Z=Z,
        batch_size=256,
        whiten=True,
    )
    svi = SVI(gp.model, gp.guide, optax.adam(0.01), TraceMeanField_ELBO())
    state = jax.jit(svi.init)(jax.random.PRNGKey(0), X, y)  # eagerly, the blocked path's many small ops take minutes
    t = time.perf_counter()
    program = jax.jit(lambda s, X, y: svi.update(s, X, y)).lower(state, X, y).compile()
    return program, state, time.perf_counter() - t


def write_record(path: str, benchmark: str, config: dict, load: list[float], results: dict) -> None:
    """Write ``results`` under the record's header (benchmark, date, command, machine with the 1-minute loads,
    versions, config) as JSON at ``path``, atomically (a temporary file renamed over it)."""
    import jax

    payload = {
        "benchmark": benchmark,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable.split("/")[-1], *sys.argv]),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "loadavg_1min": load},
        "versions": {"jax": jax.__version__, "python": platform.python_version()},
        "config": config,
        **results,
    }
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(payload, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)


def variants(blocks: list[int] | None) -> list[tuple[str, str, str, int | None]]:
    """(name, ``PPL_SPARSEGP_BLOCKED_LINALG``, bijection, block size) of every variant, the baseline first: the four
    linear-algebra x bijection pairs, or, given ``blocks``, LAPACK and the blocked path at each block size (0: the
    library's choice, None in the tuple) with the library's bijection."""
    if blocks is None:
        return [
            (f"blocked={blocked}, lower_cholesky={bijection}", blocked, bijection, None)
            for blocked in ("0", "1")
            for bijection in ("numpyro", "constant-index")
        ]
    chosen = [(f"blocked, block={b or 'block_size(M)'}", "1", "constant-index", b or None) for b in blocks]
    return [("LAPACK", "0", "constant-index", None), *chosen]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--M", type=int, default=1024)
    p.add_argument("--calls", type=int, default=15, help="timed calls of every variant")
    p.add_argument("--blocks", type=int, nargs="+", default=None, help="LAPACK against these block sizes (0: default)")
    p.add_argument("--output", default=None)
    a = p.parse_args(argv)
    if a.blocks is not None and min(a.blocks) < 0:
        p.error(f"--blocks: expected block sizes >= 0 (0: the library's choice), got {a.blocks}")

    import jax

    jax.config.update("jax_enable_x64", a.dtype == "float64")
    from numpyro.distributions import constraints

    from ppl_sparsegp.backends import jax_blocked
    from ppl_sparsegp.core import ops
    from ppl_sparsegp.numpyro import distributions as transforms
    from ppl_sparsegp.numpyro import sites

    X, y, Z = problem(a.dtype, a.M)
    programs, states, compile_s = {}, {}, {}
    library_block_size = jax_blocked.block_size
    for name, blocked, bijection, block in variants(a.blocks):
        os.environ[jax_blocked.ENV_SWITCH] = blocked  # read when the step is traced, as the block size
        sites.lower_cholesky = constraints.lower_cholesky if bijection == "numpyro" else transforms.lower_cholesky
        jax_blocked.block_size = library_block_size if block is None else (lambda n, b=block: b)
        programs[name], states[name], compile_s[name] = compiled_update(X, y, Z)
    sites.lower_cholesky = transforms.lower_cholesky
    jax_blocked.block_size = library_block_size
    times = {name: [] for name in programs}
    losses = {}
    load = [os.getloadavg()[0]]
    with ops.blas_threads(1):
        for name, f in programs.items():
            losses[name] = float(jax.block_until_ready(f(states[name], X, y)[1]))
        for _ in range(a.calls):
            for name, f in programs.items():
                t = time.perf_counter()
                jax.block_until_ready(f(states[name], X, y)[1])
                times[name].append(time.perf_counter() - t)
    load.append(os.getloadavg()[0])
    before = np.asarray(times[next(iter(programs))])
    rows = []
    for name in programs:
        t = np.asarray(times[name])
        rows.append(
            {
                "variant": name,
                "median_ms": 1e3 * float(np.median(t)),
                "min_ms": 1e3 * float(t.min()),
                "steps_per_s": float(1 / np.median(t)),
                "speedup_over_before_median_of_pairs": float(np.median(before / t)),
                "compile_s": compile_s[name],
                "first_loss": losses[name],
            }
        )
        print(
            f"{a.dtype} M={a.M} {name:40s} {rows[-1]['median_ms']:7.1f} ms ({rows[-1]['steps_per_s']:.2f} steps/s) "
            f"x{rows[-1]['speedup_over_before_median_of_pairs']:.2f}  compile {compile_s[name]:.1f} s  "
            f"loss {losses[name]!r}"
        )
    if a.output:
        write_record(a.output, "svgp_step_variants", vars(a), load, {"rows": rows, "times_s": times})
    return 0


if __name__ == "__main__":
    sys.exit(main())
