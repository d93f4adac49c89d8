"""torch computes in float64 in these tests, as JAX does under the test session's ``jax_enable_x64``."""

import pytest
import torch


@pytest.fixture(autouse=True)
def torch_float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)
