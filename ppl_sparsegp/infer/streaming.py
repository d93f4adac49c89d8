"""Data larger than memory: minibatches read from memory-mapped ``.npy`` files, prefetched onto the devices.

:class:`NpyBatches` draws B row indices i.i.d. (with replacement, the law of the ``"data"`` plate's minibatches)
from a seeded ``numpy`` generator (or, ``stratified=True``, B/P from each device's own contiguous N/P rows, so that
a host reads only its devices' part of the file), reads those rows of X [N, D] and y [N] (or [N, P]) from their
``.npy`` files, and places them on the devices: split over the ``"data"`` mesh axis when a mesh is given (each
process reads only the rows of its own devices, :func:`jax.make_array_from_process_local_data`), else on the
default device. A background thread keeps ``prefetch`` batches read and in flight to the devices ahead of the
consumer.

Memory: each batch maps the files, copies its B rows (sorted, so the reads go forward through the file) and unmaps
them, so the process holds the pages of one batch at a time, never the file; the operating system's page cache
keeps what it likes, outside the process's resident set.

The model takes such a batch with ``num_data=N`` (:func:`ppl_sparsegp.numpyro.sites.data_plate`: the plate covers
the B rows given and scales the data term by N/B); :func:`fit_streamed` runs SVI over the stream.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ppl_sparsegp.infer.sharding import DATA_AXIS, check_divisible
from ppl_sparsegp.validation import check_count

Array = Any


class NpyBatches:
    """An endless iterator of minibatches (X_b [B, D], y_b [B, ...]) drawn i.i.d. from rows of ``.npy`` files.

    Args:
        X_path, y_path: ``.npy`` files of the inputs [N, D] and the targets [N] or [N, P] (same N; any dtype numpy
            reads; not loaded, mapped per batch).
        batch_size: B, rows per batch (a multiple of the mesh's devices).
        seed: seed of the row draws; every process must give the same one.
        mesh: a 1-D ``("data",)`` mesh (:func:`ppl_sparsegp.infer.sharding.data_mesh`) over which each batch is split;
            None: one device.
        prefetch: batches read and sent ahead of the consumer (>= 1).
        dtype: cast the rows to this dtype (None: keep the files').
        stratified: device j of the P on the mesh draws its B/P rows from rows [j N/P, (j+1) N/P) only (N a
            multiple of P): a stratified minibatch, as unbiased under the same N/B scale as the i.i.d. one and of no
            larger variance, whose reads stay in each host's own part of the file.
    """

    def __init__(
        self,
        X_path: str | os.PathLike,
        y_path: str | os.PathLike,
        batch_size: int,
        *,
        seed: int = 0,
        mesh: Mesh | None = None,
        prefetch: int = 2,
        dtype: Any = None,
        stratified: bool = False,
    ):
        self.paths = (Path(X_path), Path(y_path))
        for name, path in zip(("X_path", "y_path"), self.paths, strict=True):
            if not path.is_file():
                raise ValueError(f"{name}: no such file {str(path)!r}")
        X, y = (np.load(path, mmap_mode="r") for path in self.paths)
        if X.ndim != 2 or y.ndim not in (1, 2) or X.shape[0] != y.shape[0]:
            raise ValueError(f"X_path, y_path: expected X [N, D] and y [N] or [N, P], got {X.shape} and {y.shape}")
        self.num_data, self.shapes = X.shape[0], (X.shape[1:], y.shape[1:])
        self.dtypes = (X.dtype, y.dtype) if dtype is None else (np.dtype(dtype), np.dtype(dtype))
        del X, y
        self.batch_size = check_count("batch_size", batch_size, minimum=1)
        check_divisible(self.batch_size, mesh, "batch_size")
        self.prefetch = check_count("prefetch", prefetch, minimum=1)
        self.mesh, self.seed, self.stratified = mesh, seed, bool(stratified)
        self.num_devices = 1 if mesh is None else mesh.devices.size
        if self.stratified and self.num_data % self.num_devices:
            raise ValueError(
                f"stratified: the {self.num_data} rows do not split into {self.num_devices} equal strata, one per "
                "device; use a row count that the devices divide, or stratified=False"
            )

    def _local_rows(self) -> slice:
        """The rows of the global batch that this process's devices hold."""
        if self.mesh is None or jax.process_count() == 1:
            return slice(0, self.batch_size)
        devices = list(self.mesh.devices.flat)
        per_device = self.batch_size // len(devices)
        mine = [i for i, d in enumerate(devices) if d.process_index == jax.process_index()]
        return slice(mine[0] * per_device, (mine[-1] + 1) * per_device)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """The global batch's row indices [B] (every process draws the same): i.i.d. over all N rows, or with
        ``stratified`` B/P per device from its own N/P rows, device by device."""
        if not self.stratified:
            return rng.integers(0, self.num_data, self.batch_size)
        per_device, stratum = self.batch_size // self.num_devices, self.num_data // self.num_devices
        offsets = np.repeat(np.arange(self.num_devices) * stratum, per_device)
        return offsets + rng.integers(0, stratum, self.batch_size)

    def read(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows ``index`` [K] of X and y, read in file order from freshly mapped files, returned in ``index``'s."""
        order = np.argsort(index, kind="stable")
        out = []
        for path, dtype in zip(self.paths, self.dtypes, strict=True):
            mapped = np.load(path, mmap_mode="r")
            rows = np.empty((len(index), *mapped.shape[1:]), dtype)
            rows[order] = mapped[index[order]]
            del mapped  # unmapped: its pages leave this process's resident set
            out.append(rows)
        return out[0], out[1]

    def _place(self, rows: np.ndarray) -> Array:
        if self.mesh is None:
            return jax.device_put(rows)
        sharding = NamedSharding(self.mesh, P(DATA_AXIS))
        if jax.process_count() == 1:
            return jax.device_put(rows, sharding)
        return jax.make_array_from_process_local_data(sharding, rows, (self.batch_size, *rows.shape[1:]))

    def batches(self) -> Iterator[tuple[Array, Array]]:
        """Batches on the devices, read and sent ``prefetch`` ahead by a background thread."""
        rng = np.random.default_rng(self.seed)
        local = self._local_rows()
        ready: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def produce() -> None:
            try:
                while not stop.is_set():
                    index = self.draw(rng)[local]  # every process draws alike and reads its own rows
                    item = tuple(self._place(rows) for rows in self.read(index))
                    while not stop.is_set():
                        try:
                            ready.put(item, timeout=0.1)
                            break
                        except queue.Full:
                            continue
            except BaseException as err:  # handed to the consumer
                ready.put(err)

        thread = threading.Thread(target=produce, name="NpyBatches", daemon=True)
        thread.start()
        try:
            while True:
                item = ready.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join()

    def __iter__(self) -> Iterator[tuple[Array, Array]]:
        return self.batches()


def fit_streamed(
    model: Callable,
    guide: Callable,
    batches: NpyBatches,
    *,
    optimizer: Any,
    num_steps: int,
    key: int = 0,
    loss: Any = None,
) -> tuple[dict[str, Array], np.ndarray]:
    """SVI over a stream: one compiled step per batch, ``model(X_b, y_b)`` with the model's ``num_data`` set to N.

    The parameters and optimiser state are replicated over ``batches.mesh`` (if any) and each batch arrives split
    over it, so XLA sums the per-device gradients; the next batches are read while a step runs.

    Returns:
        (params, losses [num_steps]).
    """
    from numpyro.infer import SVI, TraceMeanField_ELBO
    from numpyro.optim import optax_to_numpyro

    from ppl_sparsegp.infer.sharding import DataParallel

    num_steps = check_count("num_steps", num_steps, minimum=1)
    parallel = DataParallel(batches.mesh)
    svi = SVI(model, guide, optax_to_numpyro(optimizer), loss or TraceMeanField_ELBO())
    stream = iter(batches)
    Xb, yb = next(stream)
    state = parallel.put(jax.jit(svi.init)(jax.random.PRNGKey(key), Xb, yb))
    step = jax.jit(lambda s, X, y: parallel.constrain(svi.update(s, X, y)), donate_argnums=0)
    losses = []
    for i in range(num_steps):
        if i:
            Xb, yb = next(stream)
        state, value = step(state, Xb, yb)
        losses.append(value)
    stream.close()
    return svi.get_params(state), np.asarray(jax.device_get(losses))
