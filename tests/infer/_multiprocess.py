"""Run by tests/infer/test_sharding.py: ``python _multiprocess.py COORDINATOR NUM_PROCESSES PROCESS_ID OUT.npz``
joins a multi-process run (``ppl_sparsegp.infer.sharding.initialize``; gloo collectives on CPU), fits the SVGP of
``_on_devices.svgp_problem`` for 100 Adam steps over every process's devices, and (process 0) writes the losses
and params; with NUM_PROCESSES 0 it fits on one device in one process instead, the reference."""

import sys
from pathlib import Path

from ppl_sparsegp.infer import sharding

coordinator, num_processes, process_id, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if num_processes:
    assert sharding.initialize(coordinator, num_processes, process_id)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _on_devices import svgp_problem  # noqa: E402

from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402

jax.config.update("jax_enable_x64", True)
gp, X, y = svgp_problem()
devices = "all" if num_processes else None
res = fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=100, key=3, progress=False,
              steps_per_dispatch=50, devices=devices)  # fmt: skip
if jax.process_index() == 0:
    arrays = {f"params/{k}": np.asarray(v) for k, v in res.params.items()}
    np.savez(out, losses=res.losses, devices=jax.device_count(), processes=jax.process_count(), **arrays)
