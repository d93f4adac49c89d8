"""Test configuration: float64 everywhere (oracle comparisons), CPU only and on one core, a shared random generator,
and a compilation cache private to the test session."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see ppl_sparsegp.core.ops.blas_threads
# One core per process, before JAX starts: on a 2-core machine (CI's) jaxlib 0.10's batched LAPACK kernels
# (triangular solves over outputs x particles, as in the deep and GP-LVM selection tests) can each wait on the
# 2-thread intra-op pool for work only the other can run, and hang for good; with one core the pool has one thread
# and they run through. Under pytest-xdist (`make test` runs `-n auto`) worker gw<i> takes the i-th of the cores
# the run started with, so the workers share the machine without sharing a core. The controller records those
# cores before it pins itself, since the workers it starts inherit its affinity. The notebook kernels the tests
# start inherit their worker's core.
_CORES_VARIABLE = "PPL_SPARSEGP_TEST_CORES"
if hasattr(os, "sched_setaffinity"):
    os.environ.setdefault(_CORES_VARIABLE, ",".join(map(str, sorted(os.sched_getaffinity(0)))))
    _cores = [int(core) for core in os.environ[_CORES_VARIABLE].split(",")]
    _worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    os.sched_setaffinity(0, {_cores[int(_worker.removeprefix("gw")) % len(_cores)]})

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)

# Many tests run the same program more than once (a killed run and its resumption, the same fit in another test),
# each time through fresh jit wrappers that miss JAX's in-memory caches. JAX's persistent compilation cache, keyed
# on the compiled program, lets those repeats load the executable instead of compiling it again. The folder is new
# for every session and removed at exit, so nothing carries over between runs: each session compiles everything
# once, as a user's process would.
_COMPILATION_CACHE = tempfile.mkdtemp(prefix="ppl-sparsegp-test-jax-cache-")
atexit.register(shutil.rmtree, _COMPILATION_CACHE, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _COMPILATION_CACHE)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
