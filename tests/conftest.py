"""Test configuration: float64 everywhere (oracle comparisons), CPU only, a shared random generator."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see ppl_sparsegp.ops.blas_threads

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
