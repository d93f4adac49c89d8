"""Data parallelism over a 1-D device mesh: the minibatch sharded over the devices, everything else replicated.

One job: turn ``devices=N`` into a :class:`jax.sharding.Mesh` with one axis, ``"data"``, and give the engines
(:func:`ppl_sparsegp.infer.svi.fit_svi`, :func:`ppl_sparsegp.infer.mcmc.run_mcmc`) the few hooks that put their
compiled step on it. No scheduler of our own: XLA's SPMD partitioner splits the work and inserts the collectives.

**How a minibatch is split.** The models here draw their minibatch inside the model, from a ``numpyro.plate`` with
``subsample_size=B`` over the full data passed as arguments (:func:`ppl_sparsegp.numpyro.sites.data_plate`). The
handler :class:`shard_subsample` constrains the plate's subsample indices [B] to be sharded over ``"data"``
(``with_sharding_constraint``), so each of the P devices gathers and evaluates B/P rows; the gradient of the summed
data term with respect to the replicated parameters becomes a partial sum per device plus one all-reduce, which XLA
inserts. The data (X, y) are replicated on every device, so the gather is local (measured: with X sharded by rows
instead, XLA all-gathers or all-reduces the gathered rows every step; see docs/scaling.md). The parameters and the
optimiser state are replicated and constrained to stay so inside the compiled chunk; the random key is replicated,
and the indices drawn from it are the same on one device or many (JAX's partitionable threefry), so a sharded run
takes the same steps as a single-device one, up to the order of floating-point sums.

**Chains across devices.** For NUTS and HMC (no minibatch), :func:`over_chains` runs the vectorised chains of a
chunk under ``shard_map``: each device steps its C/P chains, with no communication between devices.

**Several processes.** :func:`initialize` calls ``jax.distributed.initialize`` (CPU: collectives through gloo);
afterwards the mesh spans every process's devices, and :meth:`DataParallel.put` builds global arrays from the
values every process holds (``jax.make_array_from_callback``). Every process gets the whole result: the replicated
parameters and SG-MCMC draws are on each already, and NUTS/HMC chains split over the processes are gathered to
each of them (:meth:`ChainParallel.fetch`), as a single-process NumPyro user would expect from ``mcmc.get_samples``.

Every check of ``devices`` and of the batch size raises a ``ValueError`` naming the argument before anything is
compiled.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from numpyro.primitives import Messenger

Array = Any
DATA_AXIS = "data"
"""The one mesh axis: the minibatch (or, for NUTS, the chains) is split over it."""


def count_devices(devices: int | str | None) -> int | None:
    """The number of devices ``devices`` asks for: None (one device, no mesh), a positive int, or ``"all"`` (every
    device of every process); a ``ValueError`` naming ``devices`` otherwise, or when more are asked for than exist."""
    if devices is None:
        return None
    available = jax.device_count()
    if isinstance(devices, str):
        if devices.strip().lower() == "all":
            return available
        try:
            devices = int(devices)
        except ValueError:
            raise ValueError(f"devices: expected a positive integer or 'all', got {devices!r}") from None
    if isinstance(devices, bool) or not isinstance(devices, int | np.integer):
        raise ValueError(f"devices: expected a positive integer or 'all', got {devices!r}")
    if devices < 1:
        raise ValueError(f"devices: expected a positive integer or 'all', got {devices}")
    if devices > available:
        platform = jax.default_backend()
        raise ValueError(
            f"devices: asked for {devices}, but only {available} {platform} device(s) are available "
            "(on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N before jax is imported gives N)"
        )
    return int(devices)


def data_mesh(devices: int | str | None) -> Mesh | None:
    """A 1-D mesh ``("data",)`` over the first ``devices`` devices (``jax.devices()`` order, every process's),
    or None for ``devices=None``; see :func:`count_devices`."""
    n = count_devices(devices)
    if n is None:
        return None
    if n % jax.process_count():
        raise ValueError(
            f"devices: {n} devices cannot be split evenly over {jax.process_count()} processes; use 'all' or a "
            "multiple of the process count"
        )
    if jax.process_count() > 1:  # the same number from every process, so each holds a part of the mesh
        per_process = n // jax.process_count()
        chosen = [d for p in range(jax.process_count()) for d in _process_devices(p)[:per_process]]
    else:
        chosen = jax.devices()[:n]
    return Mesh(np.asarray(chosen), (DATA_AXIS,), axis_types=(AxisType.Auto,))


def _process_devices(process: int) -> list:
    return [d for d in jax.devices() if d.process_index == process]


def check_divisible(count: int | None, mesh: Mesh | None, name: str = "batch_size") -> None:
    """Refuse a minibatch (or chain count) that the devices of ``mesh`` cannot split evenly, naming ``name``."""
    if mesh is None or count is None:
        return
    size = mesh.shape[DATA_AXIS]
    if count % size:
        raise ValueError(f"{name}: {count} is not a multiple of devices={size}; each device takes {name}/devices")


class shard_subsample(Messenger):
    """NumPyro handler: every subsampled ``plate`` (``subsample_size < size``) has its indices [B] constrained to be
    sharded over the mesh's ``"data"`` axis, so the rows gathered with them and the work done on them are split
    over the devices. A plate whose B is not a multiple of the device count raises a ``ValueError`` when the model is
    traced (before it compiles). Plates without subsampling are left alone."""

    def __init__(self, fn: Callable | None = None, mesh: Mesh | None = None):
        if mesh is None:
            raise ValueError("mesh: shard_subsample needs a mesh (see data_mesh)")
        self.mesh = mesh
        self.sharding = NamedSharding(mesh, P(DATA_AXIS))
        super().__init__(fn)

    def postprocess_message(self, msg: dict) -> None:
        if msg["type"] != "plate" or msg["value"] is None:
            return
        size, subsample_size = msg["args"]
        if subsample_size is None or subsample_size >= size:
            return
        devices = self.mesh.shape[DATA_AXIS]
        if subsample_size % devices:
            raise ValueError(
                f"batch_size: the minibatch of plate {msg['name']!r} has {subsample_size} rows, not a multiple of "
                f"devices={devices}; each device takes batch_size/devices rows"
            )
        msg["value"] = jax.lax.with_sharding_constraint(msg["value"], self.sharding)


@dataclass(frozen=True)
class DataParallel:
    """The engines' hooks for one mesh; every method is the identity when ``mesh`` is None (one device).

    Attributes:
        mesh: the 1-D ``("data",)`` mesh, or None.
    """

    mesh: Mesh | None = None

    @classmethod
    def create(cls, devices: int | str | None) -> DataParallel:
        """From ``devices`` (None, a positive int or ``"all"``), checked eagerly (:func:`count_devices`)."""
        return cls(data_mesh(devices))

    @property
    def size(self) -> int:
        """The number of devices (1 without a mesh)."""
        return 1 if self.mesh is None else self.mesh.shape[DATA_AXIS]

    @property
    def replicated(self) -> NamedSharding | None:
        return None if self.mesh is None else NamedSharding(self.mesh, P())

    def wrap(self, fn: Callable) -> Callable:
        """``fn`` (a model or guide) under :class:`shard_subsample`."""
        return fn if self.mesh is None else shard_subsample(fn, self.mesh)

    def put(self, tree: Any, spec: P | None = None) -> Any:
        """Every array leaf of ``tree`` placed on the mesh, replicated (or split by ``spec``): from the host values,
        which every process must hold alike when there are several; non-array leaves are kept."""
        if self.mesh is None:
            return tree
        sharding = NamedSharding(self.mesh, P() if spec is None else spec)
        return jax.tree.map(lambda x: _place(x, sharding), tree)

    def constrain(self, tree: Any) -> Any:
        """Inside a traced step: every array leaf constrained to stay replicated (parameters, optimiser state)."""
        if self.mesh is None:
            return tree
        return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, self.replicated), tree)

    def check(self, count: int | None, name: str = "batch_size") -> None:
        """:func:`check_divisible` with this mesh."""
        check_divisible(count, self.mesh, name)

    @cached_property
    def serial(self) -> bool:
        """Whether a step must finish before the next is dispatched: when the mesh holds several CPU devices.

        XLA's CPU client runs each device's share of a step on one pool, with as many threads as the devices (or
        cores, if more), and a collective blocks its thread until every device's share arrives. Steps dispatched
        ahead take pool threads too, so the share that the blocked ones wait for can find none free: a deadlock,
        which XLA ends by aborting the process after 40 s (measured on 4 forced host devices: every run of
        one-step-per-dispatch SVGP hung between steps 75 and 100). Across processes (collectives through gloo) the
        steps wait too: not shown to hang there, but waiting costs little on a CPU."""
        return self.size > 1 and self.mesh.devices.flat[0].platform == "cpu"

    def settle(self, tree: Any) -> Any:
        """``tree`` (a step's outputs), waited for when the mesh is :attr:`serial`; as it is otherwise."""
        return jax.block_until_ready(tree) if self.serial else tree


@dataclass(frozen=True)
class ChainParallel:
    """The hooks of :func:`ppl_sparsegp.infer.mcmc.run_mcmc` for one mesh: either the chains are split over the
    devices (``over_chains``: NUTS and HMC, whose state has a leading chain axis of vectorised chains) or the
    minibatch of every step is (the SG-MCMC kernels, through :class:`shard_subsample` while the steps are traced);
    the identity without a mesh."""

    mesh: Mesh | None = None
    over_chains: bool = False

    @classmethod
    def create(cls, devices: int | str | None, *, over_chains: bool, num_chains: int, chain_method: str):
        """From ``devices``, checked eagerly: ``over_chains`` needs vectorised chains, as many as a multiple of the
        devices."""
        mesh = data_mesh(devices)
        if mesh is not None and over_chains:
            if chain_method != "vectorized":
                raise ValueError(
                    f"chain_method: devices= splits vectorized chains over the devices, got {chain_method!r}"
                )
            check_divisible(num_chains, mesh, "num_chains")
        return cls(mesh, over_chains and mesh is not None)

    def tracing(self) -> Any:
        """A context in which the kernel's steps are traced: the model's subsampled plates split over the mesh."""
        if self.mesh is None or self.over_chains:
            return contextlib.nullcontext()
        return shard_subsample(mesh=self.mesh)

    def put(self, tree: Any) -> Any:
        """The model's data: replicated on the mesh."""
        return DataParallel(self.mesh).put(tree)

    def put_state(self, state: Any) -> Any:
        """The kernel state: split by its leading chain axis (``over_chains``) or replicated."""
        return DataParallel(self.mesh).put(state, P(DATA_AXIS) if self.over_chains else None)

    def fetch(self, tree: Any) -> Any:
        """Every array leaf of ``tree`` (e.g. a chunk's draws [C, S, ...] or the kernel state) as a whole host
        array on every process. Chains split over the devices of several processes are gathered from all of them
        (``process_allgather``, a collective: every process calls it in the same order); ``jax.device_get`` for the
        others."""
        return jax.tree.map(_whole, tree)

    def step(self, fn: Callable, num_shared: int) -> Callable:
        """``fn(state, *shared) -> (state, collected)`` on the mesh: under ``shard_map`` over the chains, or with
        its outputs constrained to stay replicated (so that a compiled chunk takes back what it returns)."""
        if self.mesh is None:
            return fn
        if self.over_chains:
            return over_chains(fn, self.mesh, num_shared)
        parallel = DataParallel(self.mesh)
        return lambda *args: parallel.constrain(fn(*args))


def _place(x: Any, sharding: NamedSharding) -> Any:
    if isinstance(x, jax.Array):
        if x.sharding == sharding:
            return x
        if jax.process_count() == 1 or x.is_fully_addressable:
            if jax.process_count() == 1:
                return jax.device_put(x, sharding)
            x = np.asarray(x)
        else:  # a global array already: let XLA move it
            return jax.jit(lambda a: a, out_shardings=sharding)(x)
    if isinstance(x, np.ndarray | np.generic | float | int) and not isinstance(x, bool):
        x = np.asarray(x)
        if jax.process_count() == 1:
            return jax.device_put(x, sharding)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])
    return x


def _whole(x: Any) -> Any:
    if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
        return multihost_utils.process_allgather(x, tiled=True)
    return jax.device_get(x)


def over_chains(fn: Callable, mesh: Mesh, num_shared: int) -> Callable:
    """``fn(state, *shared)`` with a leading chain axis on ``state`` (and on every output), run under ``shard_map``
    so that each device steps its own block of chains; the ``num_shared`` other arguments are replicated."""
    in_specs = (P(DATA_AXIS), *([P()] * num_shared))
    return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=P(DATA_AXIS), check_vma=False)


# ---- several processes ------------------------------------------------------------------------------------------
ENVIRONMENT = {
    "coordinator": "PPL_SPARSEGP_COORDINATOR",
    "num_processes": "PPL_SPARSEGP_NUM_PROCESSES",
    "process_id": "PPL_SPARSEGP_PROCESS_ID",
}
"""The environment variables :func:`initialize` reads for an argument left as None."""


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Join a multi-process run through ``jax.distributed.initialize``, before any other JAX call.

    Each argument left None is read from the environment (:data:`ENVIRONMENT`); with no coordinator at all, nothing
    happens and False is returned (one process). On CPU, cross-process collectives go through gloo
    (``jax_cpu_collectives_implementation``). Afterwards ``jax.devices()`` lists every process's devices and
    ``devices="all"`` spans them.

    Args:
        coordinator: ``host:port`` of process 0's coordination service.
        num_processes: the number of processes (>= 1).
        process_id: this process's rank, in [0, num_processes).

    Returns:
        True if ``jax.distributed.initialize`` was called.
    """
    env = os.environ if environ is None else environ
    coordinator = coordinator or env.get(ENVIRONMENT["coordinator"])
    num_processes = num_processes if num_processes is not None else _int_env(env, "num_processes")
    process_id = process_id if process_id is not None else _int_env(env, "process_id")
    if coordinator is None:
        if num_processes not in (None, 1) or process_id not in (None, 0):
            raise ValueError("coordinator: --num-processes and --process-id need --coordinator host:port")
        return False
    if num_processes is None or num_processes < 1:
        raise ValueError(f"num_processes: expected a positive integer with a coordinator, got {num_processes!r}")
    if process_id is None or not 0 <= process_id < num_processes:
        raise ValueError(f"process_id: expected an integer in [0, {num_processes}), got {process_id!r}")
    # Only the CPU client reads it; set before the backends start (asking for the backend here would start them).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator, num_processes=num_processes, process_id=process_id)
    return True


def _int_env(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(ENVIRONMENT[name])
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: {ENVIRONMENT[name]}={text!r} is not an integer") from None
