"""torch's random generators as data, for checkpoints: what draws a Pyro run's minibatches, samples and proposals.

The state is the CPU generator's (``"torch"``) and, once CUDA has been initialised in the process, every CUDA
device's (``"cuda<i>"``): a run on a GPU draws from the CUDA generator of the device its tensors live on, so a
checkpoint resumes it to the same draws only with those states restored.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch


def generator_state() -> dict[str, np.ndarray]:
    """The generators' states, name -> uint8 array: ``"torch"`` and, with CUDA initialised, ``"cuda0"``, ...."""
    states = {"torch": torch.get_rng_state().numpy()}
    if torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            states[f"cuda{i}"] = state.numpy()
    return states


def set_generator_state(states: Mapping[str, np.ndarray]) -> None:
    """Restore what :func:`generator_state` returned (a state for a CUDA device this process lacks is refused).

    Raises:
        ValueError: a CUDA generator state saved on a machine with more CUDA devices than this one has.
    """
    torch.set_rng_state(torch.as_tensor(np.asarray(states["torch"]), dtype=torch.uint8, device="cpu"))
    devices = sorted(int(name[4:]) for name in states if name.startswith("cuda"))
    if devices and (not torch.cuda.is_available() or devices[-1] >= torch.cuda.device_count()):
        raise ValueError(
            f"checkpoint: it holds the random state of CUDA device(s) {devices}, which this machine does not have"
        )
    for i in devices:
        torch.cuda.set_rng_state(torch.as_tensor(np.asarray(states[f"cuda{i}"]), dtype=torch.uint8, device="cpu"), i)
