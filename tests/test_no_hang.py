"""The README's selective deep GP and GP-LVM fits finish on every core the machine has (issue 27: "never hang").

With jaxlib 0.10 each of them used to hang for good on a 2-core machine unless pinned to one core: two batched
LAPACK calls in flight at once each blocked an XLA pool thread waiting for work that only the other thread could run
(see ``ppl_sparsegp.backends.jax_lapack``). Each fit runs here in a fresh interpreter that first resets its CPU
affinity to all cores (the test process may be pinned), at the README's settings with fewer steps, which hung
every time on a 2-core machine before the fix. A run that outlives its time limit fails the test, with its CPU use
over the last second: about 0 for a hang, about 1 core or more for a run that is merely slow. Both take a minute on
2 cores, so they are marked slow: CI runs them in `make test-slow`; the default run's README test runs the same
fits, shorter, on every core.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_sparsegp.backends.jax_lapack import inline_batched_lapack
from ppl_sparsegp.core import ops
from ppl_sparsegp.data import ENV_VAR, data_dir

TIME_LIMIT = 300
"""Seconds a reduced fit may take. Each needs 25-40 CPU-seconds, mostly compilation (about 100 s of wall time on a
2-core machine at load 8); before the fix each hung within its first minute, in 3 runs of 3 and the test's own."""

_PRELUDE = """
import os
os.sched_setaffinity(0, range(os.cpu_count()))
print("cores", len(os.sched_getaffinity(0)), flush=True)
if len(os.sched_getaffinity(0)) < 2:
    raise SystemExit(0)
import jax
jax.config.update("jax_enable_x64", True)
"""


def _all_cores_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    for name in ("PJRT_NPROC", "NPROC"):  # XLA's pool size override: the child must get one thread per core
        env.pop(name, None)
    return env


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run_unpinned(script: str) -> str:
    """Run ``script`` in a fresh interpreter on all cores; fail if it has not finished within ``TIME_LIMIT``."""
    process = subprocess.Popen(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_all_cores_env(),
    )
    try:
        output, _ = process.communicate(timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        cpu = _cpu_seconds(process.pid)
        time.sleep(1.0)
        busy = _cpu_seconds(process.pid) - cpu
        process.kill()
        output, _ = process.communicate()
        pytest.fail(
            f"no result after {TIME_LIMIT} s on {os.cpu_count()} cores; {busy:.2f} CPU-seconds in its last second "
            f"({'a hang' if busy < 0.1 else 'busy: slow rather than hung'}). Output:\n{output[-3000:]}"
        )
    assert process.returncode == 0, output[-3000:]
    if "cores 1\n" in output:
        pytest.skip("only one core available: jaxlib runs every batch inline there")
    return output


def _multi_core() -> bool:
    return hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1


pytestmark = pytest.mark.skipif(not _multi_core(), reason="needs more than one core and sched_setaffinity")


@pytest.mark.slow  # about 50 s; `make test-slow` runs it in CI, unpinned as a user runs it
def test_selective_deep_readme_fit_finishes_unpinned():
    output = _run_unpinned(
        """
        from ppl_sparsegp.data import load_dataset, standardize
        from ppl_sparsegp.recipes.selective import fit_selective_deep

        ds, _ = standardize(load_dataset("diabetes"))
        fit = fit_selective_deep(ds.X_train, ds.y_train, candidates=150, alpha=0.05, alpha_per_output=True,
                                 add_input=True, inner_mean="zero", batch_size=1000,
                                 pre_steps=10, selection_steps=30, post_steps=10)
        print("selected", fit.selected_counts, flush=True)
        """
    )
    assert "selected" in output


@pytest.mark.slow  # about 30 s; `make test-slow` runs it in CI, unpinned as a user runs it
def test_selective_gplvm_readme_fit_finishes_unpinned():
    if not os.path.isdir(os.path.join(data_dir(), "oilflow")):
        pytest.skip(f"oil-flow data not found under {data_dir()} (set {ENV_VAR})")
    output = _run_unpinned(
        """
        from ppl_sparsegp.data import load_dataset
        from ppl_sparsegp.recipes.selective import fit_selective_gplvm

        Y = load_dataset("oilflow").X_train
        Y_std = (Y - Y.mean(0)) / Y.std(0)
        fit = fit_selective_gplvm(Y_std, latent_dim=2, grid_size=15, alpha=3.0, steps=5, prune=True)
        print("expected", fit.expected_count, flush=True)
        """
    )
    assert "expected" in output


def test_concurrent_batched_factorisations_finish_unpinned():
    # The mechanism alone: two independent batched Cholesky factorisations and solves in one program, which XLA may
    # run at once. Before the fix this hung within its first 150 calls on 2 cores, in each of 6 runs.
    output = _run_unpinned(
        """
        import jax.numpy as jnp
        from ppl_sparsegp.core import ops

        A = jnp.eye(64) + 0.01 * jnp.ones((8, 64, 64))
        R = jnp.ones((8, 64, 32))

        @jax.jit
        def f(A, R):
            L1, L2 = ops.cholesky(A), ops.cholesky(A + jnp.eye(64))
            return jnp.sum(ops.solve_triangular(L1, R)) + jnp.sum(ops.solve_triangular(L2, R))

        for i in range(1000):
            f(A + i, R).block_until_ready()
        print("finished", flush=True)
        """
    )
    assert "finished" in output


def _lapack_batches(f, *args) -> dict[str, set[int]]:
    """The batch sizes of the LAPACK calls in the compiled program of ``f``, by kernel."""
    batches: dict[str, set[int]] = {}
    for line in jax.jit(f).lower(*args).compile().as_text().splitlines():
        call = re.search(r'= \(?f64\[([\d,]+)\].*custom_call_target="(lapack_\w+)"', line)
        if call:
            batches.setdefault(call[2], set()).add(math.prod(int(d) for d in call[1].split(",")[:-2]))
    return batches


@pytest.mark.skipif(not inline_batched_lapack(), reason="only jaxlib 0.10 splits batched LAPACK calls")
def test_batched_lapack_calls_are_lowered_in_inline_chunks():
    # jaxlib 0.10 splits a batch of B matrices of c FLOPs each over its thread pool when (B - 1) c >= 200000; such
    # batches are lowered as loops over chunks it runs inline: of 2 for 64 x 64 Cholesky factors (c = 64³ / 3), of
    # 1 for 64 x 64 solves against 64 columns (c = 64³), of 6 against 8 columns. A batch of 2 factors is unchanged.
    A = jnp.asarray(np.eye(64) + 0.01 * np.random.default_rng(0).standard_normal((48, 64, 64)))
    A = A @ jnp.swapaxes(A, -1, -2)
    chol = partial(ops.cholesky, jitter=0.0)
    assert _lapack_batches(chol, A) == {"lapack_dpotrf_ffi": {2}}
    assert _lapack_batches(chol, A[:2]) == {"lapack_dpotrf_ffi": {2}}
    assert _lapack_batches(ops.solve_triangular, A, A) == {"lapack_dtrsm_ffi": {1}}
    assert _lapack_batches(ops.solve_triangular, A, A[..., :8]) == {"lapack_dtrsm_ffi": {6}}
    # Each matrix goes through the same LAPACK routine as on its own: the results are bitwise those of single calls.
    L = jax.jit(chol)(A)
    np.testing.assert_array_equal(L, jnp.stack([jax.jit(chol)(a) for a in A]))
    X = jax.jit(ops.solve_triangular)(L, A)
    np.testing.assert_array_equal(
        X, jnp.stack([jax.jit(ops.solve_triangular)(l, a) for l, a in zip(L, A, strict=True)])
    )
