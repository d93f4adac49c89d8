"""Test configuration: float64 everywhere (oracle comparisons), CPU only, a shared random generator, and a
compilation cache private to the test session. The tests run on every core they are given, as users do: the
guard in ``ppl_sparsegp.backends.jax_lapack`` keeps jaxlib's batched LAPACK kernels from hanging there
(``tests/test_no_hang.py``)."""

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Speed, not correctness: the fit loops already run OpenBLAS on one thread (ppl_sparsegp.core.ops.blas_threads, where
# its spin-waiting pool is measured); this does the same for the tests that call jax's Cholesky and solves outside
# them, and keeps the pytest-xdist workers (one per core) from oversubscribing the cores. Unpinned, XLA runs
# factorisations side by side: two small batched ones took 2.6-185 ms per call with OpenBLAS's default threads against
# 0.65-1.06 ms with one (2 cores, load 6-8).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import ppl_sparsegp  # noqa: E402, F401  (before jax computes: it takes XLA's YNN reduction fusions off, see xla_flags)

jax.config.update("jax_enable_x64", True)

# Many tests run the same program more than once (a killed run and its resumption, the same fit in another test),
# each time through fresh jit wrappers that miss JAX's in-memory caches. JAX's persistent compilation cache, keyed
# on the compiled program, lets those repeats load the executable instead of compiling it again. The folder is new
# for every session and removed at exit, so nothing carries over between runs: each session compiles everything
# once, as a user's process would.
_COMPILATION_CACHE = tempfile.mkdtemp(prefix="ppl-sparsegp-test-jax-cache-")
atexit.register(shutil.rmtree, _COMPILATION_CACHE, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _COMPILATION_CACHE)
# The processes that tests start (the command line, notebooks) use it too, rather than the user's cache folder.
os.environ.setdefault("PPL_SPARSEGP_COMPILATION_CACHE", _COMPILATION_CACHE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``starts_first`` (each a minute or so of a worker's time) move to the front of the run, in their
    collection order. pytest-xdist hands tests out in collection order, so a long test collected late (the README's,
    in ``tests/test_readme.py``) would otherwise start when the other worker has little left and hold the run's end
    for most of its length."""
    items.sort(key=lambda item: item.get_closest_marker("starts_first") is None)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
BENCHMARK_THREAD_VARIABLES = ("XLA_FLAGS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@pytest.fixture
def load_benchmark(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """``load_benchmark("bsgp_uci")``: the script ``benchmarks/bsgp_uci.py`` imported as a module, for this test only:
    the benchmarks folder on ``sys.path`` (the scripts import each other), the module in ``sys.modules`` (their
    dataclasses look it up there), and the thread settings the scripts set by default (XLA's, BLAS's) restored after."""

    def load(name: str) -> ModuleType:
        monkeypatch.syspath_prepend(str(BENCHMARKS))
        for var in BENCHMARK_THREAD_VARIABLES:
            monkeypatch.setenv(var, os.environ.get(var, ""))
        spec = importlib.util.spec_from_file_location(f"{name}_benchmark", BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
        return module

    return load


TORCH_FOLDERS = ("pyro", "parity")
"""Test folders of the Pyro twins: their tests compute with torch in float64, as JAX does here, on one thread, and
from an empty Pyro param store (global, so a param fitted by an earlier test in the same worker would otherwise be
read where a model asks for its initial value). One thread: the matrices are small, and torch's thread pool only adds
contention on a loaded machine (the diabetes fit took 80 s with it on 2 busy cores, 11 s without; Pyro NUTS on a
25-point SGPMC, 18.7 s against 2.8 s)."""


@pytest.fixture(autouse=True)
def torch_float64_one_thread_empty_param_store(request):
    if request.path.parent.name not in TORCH_FOLDERS:
        yield
        return
    import pyro
    import torch

    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    pyro.clear_param_store()  # a param another test fitted would stand in for the initial value a model asks for
    yield
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)
