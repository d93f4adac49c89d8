"""Run by tests/infer/test_sharding.py: ``python _multiprocess.py MODE COORDINATOR NUM_PROCESSES PROCESS_ID OUT.npz``
joins a multi-process run (``ppl_sparsegp.infer.sharding.initialize``; gloo collectives on CPU), runs MODE with
``devices="all"`` over every process's devices, and writes its numbers with the device and process counts; with
NUM_PROCESSES 0 it runs MODE on one device in one process instead, the reference. Every process writes its OUT.

MODE is one of ``svgp`` (100 Adam steps of ``_on_devices.svgp_problem``: the losses and params), ``SGHMC`` or
``AdaptiveSGHMC`` (the draws of ``_on_devices.sghmc_draws`` by that kernel, the minibatch split over the processes),
``HMC`` or ``NUTS`` (``_on_devices.nuts_chains`` by that kernel, the 4 chains split over the processes), or
``HMC-resumed`` / ``svgp-resumed`` (the HMC chains or the SVGP fit checkpointed every 50 draws or steps into one file
that every process writes, killed after the first 50 and run again to resume; the reference runs uninterrupted).
"""

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from ppl_sparsegp.infer import sharding

mode, coordinator, num_processes, process_id, out = sys.argv[1:]
num_processes = int(num_processes)
if num_processes:
    assert sharding.initialize(coordinator, num_processes, int(process_id))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _on_devices import nuts_chains, sghmc_draws, svgp_problem  # noqa: E402

from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402

jax.config.update("jax_enable_x64", True)
devices = "all" if num_processes else None


def svgp(**options: Any) -> dict[str, np.ndarray]:
    gp, X, y = svgp_problem()
    res = fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=100, key=3, progress=False,
                  steps_per_dispatch=50, devices=devices, **options)  # fmt: skip
    return {"losses": res.losses, **{f"params/{k}": np.asarray(v) for k, v in res.params.items()}}


class Killed(Exception):
    """Stands for the process being killed: nothing after the last checkpoint survives."""


def resumed(run: Callable[..., dict], reached: Callable[..., bool], **options: Any) -> dict[str, np.ndarray]:
    """``run(**options, checkpoint=...)`` killed when ``reached(*callback arguments)`` and run again to resume, with
    one checkpoint file that every process writes; ``run()`` uninterrupted as the reference (one process)."""
    if not num_processes:
        return run()
    shared = Path(out).with_name("shared.ckpt")  # one file on a file system every process sees

    def kill(*progress: Any) -> None:
        if reached(*progress):
            raise Killed

    try:
        run(**options, checkpoint=shared, callback=kill)
    except Killed:
        pass
    else:
        raise AssertionError("the run was not interrupted")
    return run(**options, checkpoint=shared)


MODES = {
    "svgp": svgp,
    "SGHMC": lambda: sghmc_draws(devices, "SGHMC"),
    "AdaptiveSGHMC": lambda: sghmc_draws(devices, "AdaptiveSGHMC"),
    "HMC": lambda: nuts_chains(devices, "HMC"),
    "NUTS": lambda: nuts_chains(devices, "NUTS"),
    "HMC-resumed": lambda: resumed(
        partial(nuts_chains, devices, "HMC"), lambda result: result.num_draws == 50, chunk_size=50
    ),  # the checkpoint after the first 50 draws survives
    "svgp-resumed": lambda: resumed(
        svgp, lambda done, losses, params: done == 100, checkpoint_every=50
    ),  # the callback runs before its step's checkpoint: the one of step 50 survives
}
numbers = MODES[mode]()
np.savez(out, devices=jax.device_count(), processes=jax.process_count(), **numbers)
