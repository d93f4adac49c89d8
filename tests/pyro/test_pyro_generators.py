"""torch's generator states as checkpoint data (ppl_sparsegp.pyro.generators): a restored state gives the draws that
followed the saved one, and a CUDA state this machine cannot hold is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ppl_sparsegp.pyro.generators import generator_state, set_generator_state


def test_a_restored_state_gives_the_draws_that_followed_the_saved_one():
    torch.manual_seed(3)
    torch.randn(5)
    saved = generator_state()
    assert saved["torch"].dtype == np.uint8 and set(saved) >= {"torch"}
    following = torch.randn(4)
    assert not torch.equal(torch.randn(4), following)  # the stream moved on
    set_generator_state(saved)
    assert torch.equal(torch.randn(4), following)


@pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.device_count() > 7, reason="a machine with 8 GPUs")
def test_a_cuda_state_for_a_device_this_machine_lacks_is_refused():
    states = {**generator_state(), "cuda7": generator_state()["torch"]}
    with pytest.raises(ValueError, match=r"CUDA device\(s\) \[7\], which this machine does not have"):
        set_generator_state(states)
