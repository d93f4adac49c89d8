"""torch computes in float64 in these tests, as JAX does under the test session's ``jax_enable_x64``, and on one
thread: the matrices are small, and torch's thread pool only adds contention on a loaded machine (the diabetes fit
took 80 s with it on 2 busy cores, 11 s without)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def torch_float64_one_thread():
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(1)
    yield
    torch.set_default_dtype(dtype)
    torch.set_num_threads(threads)
