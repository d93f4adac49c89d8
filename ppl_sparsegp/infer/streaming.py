"""Data larger than memory: minibatches read from memory-mapped ``.npy`` files, prefetched onto the devices.

:class:`NpyBatches` draws B row indices i.i.d. (with replacement, the law of the ``"data"`` plate's minibatches)
(or, ``stratified=True``, B/P from each device's own contiguous N/P rows, so that a host reads only its devices'
part of the file), reads those rows of X [N, D] and y [N] (or [N, P]) from their ``.npy`` files, and places them
on the devices: split over the ``"data"`` mesh axis when a mesh is given (each process reads only the rows of its
own devices, :func:`jax.make_array_from_process_local_data`), else on the default device. A background thread keeps
``prefetch`` batches read and in flight to the devices ahead of the consumer.

**Position.** Batch i is drawn by its own generator, ``numpy.random.default_rng(SeedSequence(seed,
spawn_key=(i,)))`` (:meth:`NpyBatches.generator`), so the stream's whole state is ``(seed, i)``: a stream opened at
``start=i`` (:meth:`NpyBatches.batches`) yields exactly the batches an uninterrupted one yields from its i-th on,
with nothing replayed. The engines below store i in their checkpoints.

Memory: each batch reads its B rows with one ``preadv`` per row (sorted, so the reads go forward through the file)
into its own buffer, so the process holds the batches in flight, never the file; the operating system's page cache
keeps what it likes, outside the process's resident set. (Not a memory map: a fault on a mapped file also maps the
cached pages around it, and B random rows then put up to B x 64 KiB of the file in the resident set;
:meth:`NpyBatches.read`.)

The model takes such a batch with ``num_data=N`` (:func:`ppl_sparsegp.numpyro.sites.data_plate`: the plate covers
the B rows given and scales the data term by N/B). Two engines run over a stream, one compiled step per batch:

* :func:`fit_streamed`: SVI (returns a :class:`ppl_sparsegp.infer.svi.SVIResult`);
* :func:`sample_streamed`: the SG-MCMC kernels of :mod:`ppl_sparsegp.infer.sghmc` (SGLD, SGHMC, the adaptive
  SGHMC of BSGP; returns a :class:`ppl_sparsegp.infer.mcmc.MCMCResult`). The kernel's initial gradient is taken on
  batch 0 and step k (0-based, warmup included) on batch k + 1, exactly what the kernel's own ``init`` and
  ``sample`` compute when given these batches in memory one after another.

**Checkpoints** (both engines; :mod:`ppl_sparsegp.infer.checkpoint`: atomic ``.npz``, no pickle): written every
``checkpoint_every`` steps, at the end and on KeyboardInterrupt, with the engine's state (its random key included),
the steps done, the stream's position (counter ``stream_position``), the losses (SVI) or the draws (SG-MCMC), and a
fingerprint: the caller's settings, the stream's identity (:meth:`NpyBatches.identity`: N, shapes, dtypes, batch
size, seed, strata, and a sha256 of 64 evenly spaced rows standing in for the data, since hashing a file larger than
memory on every start would cost a pass over it), the key and the schedule. A run started on an existing checkpoint
resumes from it and reproduces the uninterrupted run bit for bit (the same compiled step on the same state and the
same batches); a checkpoint of another run is refused, naming every difference, before anything compiles.
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from numpyro.infer import SVI, TraceMeanField_ELBO
from tqdm.auto import tqdm

from ppl_sparsegp.core import ops
from ppl_sparsegp.infer import checkpoint as checkpoints
from ppl_sparsegp.infer import compilation_cache, hot_path
from ppl_sparsegp.infer import progress as progress_bars
from ppl_sparsegp.infer.mcmc import (
    DivergingChainError,
    MCMCResult,
    _any_nonfinite,
    _append,
    _concat,
    _constrain,
    _first_nonfinite,
    _init_state,
    _leading_shape,
    default_extra_fields,
)
from ppl_sparsegp.infer.sghmc import SGMCMCKernel
from ppl_sparsegp.infer.sharding import DATA_AXIS, DataParallel, check_divisible
from ppl_sparsegp.infer.svi import (
    NonFiniteLossError,
    SVIResult,
    _as_key,
    _as_numpyro_optim,
    with_positive_transform,
)
from ppl_sparsegp.validation import check_count

Array = Any
IDENTITY_ROWS = 64
"""Rows of each file hashed into a stream's identity (:meth:`NpyBatches.identity`), evenly spaced, first and last
included."""


def _check_dtype(name: str, path: Path, dtype: np.dtype) -> None:
    """Refuse a file whose dtype is not a real number (bool, integer or floating), naming ``name``."""
    if dtype.kind not in "buif":
        raise ValueError(
            f"{name}: {str(path)!r} holds {dtype} values; expected real numbers (a floating, integer or bool dtype)"
        )


class NpyBatches:
    """An endless iterator of minibatches (X_b [B, D], y_b [B, ...]) drawn i.i.d. from rows of ``.npy`` files.

    Args:
        X_path, y_path: ``.npy`` files of the inputs [N, D] and the targets [N] or [N, P] (same N; real numbers:
            a floating, integer or bool dtype; not loaded, mapped per batch).
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
        X, y = (self._open(name, path) for name, path in zip(("X_path", "y_path"), self.paths, strict=True))
        if X.ndim != 2 or y.ndim not in (1, 2) or X.shape[0] != y.shape[0]:
            raise ValueError(f"X_path, y_path: expected X [N, D] and y [N] or [N, P], got {X.shape} and {y.shape}")
        for name, path, array in zip(("X_path", "y_path"), self.paths, (X, y), strict=True):
            _check_dtype(name, path, array.dtype)
            if array.ndim == 2 and array.shape[1] > 1 and not array.flags.c_contiguous:
                raise ValueError(f"{name}: {str(path)!r} is stored in Fortran order, so its rows are not contiguous; "
                                 "save it with np.save(path, np.ascontiguousarray(array))")  # fmt: skip
        self.offsets = (X.offset, y.offset)  # the bytes of each file's .npy header
        self.num_data, self.shapes = X.shape[0], (X.shape[1:], y.shape[1:])
        self.file_dtypes = (X.dtype, y.dtype)
        self.dtypes = self.file_dtypes if dtype is None else (np.dtype(dtype), np.dtype(dtype))
        del X, y
        self.batch_size = check_count("batch_size", batch_size, minimum=1)
        check_divisible(self.batch_size, mesh, "batch_size")
        self.prefetch = check_count("prefetch", prefetch, minimum=1)
        self.seed = check_count("seed", seed)
        self.mesh, self.stratified = mesh, bool(stratified)
        self.num_devices = 1 if mesh is None else mesh.devices.size
        if self.stratified and self.num_data % self.num_devices:
            raise ValueError(
                f"stratified: the {self.num_data} rows do not split into {self.num_devices} equal strata, one per "
                "device; use a row count that the devices divide, or stratified=False"
            )

    @staticmethod
    def _open(name: str, path: Path) -> np.ndarray:
        try:
            return np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError as err:  # not an .npy file, or an object array (which needs pickle)
            raise ValueError(f"{name}: {str(path)!r} is not a readable .npy array of numbers ({err})") from None

    def _local_rows(self) -> slice:
        """The rows of the global batch that this process's devices hold."""
        if self.mesh is None or jax.process_count() == 1:
            return slice(0, self.batch_size)
        devices = list(self.mesh.devices.flat)
        per_device = self.batch_size // len(devices)
        mine = [i for i, d in enumerate(devices) if d.process_index == jax.process_index()]
        return slice(mine[0] * per_device, (mine[-1] + 1) * per_device)

    def generator(self, position: int) -> np.random.Generator:
        """The generator of batch ``position`` (0-based): independent streams for distinct positions, the same one for
        the same ``(seed, position)`` in every process and every run."""
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(position,)))

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        """The global batch's row indices [B] (every process draws the same): i.i.d. over all N rows, or with
        ``stratified`` B/P per device from its own N/P rows, device by device."""
        if not self.stratified:
            return rng.integers(0, self.num_data, self.batch_size)
        per_device, stratum = self.batch_size // self.num_devices, self.num_data // self.num_devices
        offsets = np.repeat(np.arange(self.num_devices) * stratum, per_device)
        return offsets + rng.integers(0, stratum, self.batch_size)

    def read(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows ``index`` [K] of X and y, read in file order, one ``preadv`` per row into the batch's own
        buffer, returned in ``index``'s order and cast to the stream's dtypes.

        Not through a memory map: a page fault on a mapped file maps the cached pages around it too (Linux's fault-
        around, 64 KiB), so B random rows put up to B x 64 KiB of the file in the resident set (measured: 4096 rows
        of a 488 MiB file cached by the page cache raised the peak by 380 MiB, ``madvise(MADV_RANDOM)`` or not;
        read with ``preadv``, by 11 MiB)."""
        order = np.argsort(index, kind="stable")
        rows_in_order = index[order]
        out = []
        for path, offset, file_dtype, shape, dtype in zip(
            self.paths, self.offsets, self.file_dtypes, self.shapes, self.dtypes, strict=True
        ):
            raw = np.empty((len(index), *shape), file_dtype)
            row_bytes = raw[:1].nbytes
            buffer = memoryview(raw.view(np.uint8).reshape(-1))
            fd = os.open(path, os.O_RDONLY)
            try:
                for j, row in enumerate(rows_in_order.tolist()):
                    got = os.preadv(fd, [buffer[j * row_bytes : (j + 1) * row_bytes]], offset + row * row_bytes)
                    if got != row_bytes:
                        raise OSError(
                            f"{path}: row {row} is cut short ({got} of {row_bytes} bytes); is the file truncated?"
                        )
            finally:
                os.close(fd)
            rows = np.empty(raw.shape, dtype)
            rows[order] = raw
            out.append(rows)
        return out[0], out[1]

    def identity(self) -> dict[str, Any]:
        """What decides the stream's batches, for a checkpoint's fingerprint: N, the files' trailing shapes and
        dtypes, the cast dtype, B, the seed, the strata, and ``rows_sha256``, a sha256 of the files' sizes and of
        :data:`IDENTITY_ROWS` evenly spaced rows of X and y (a stand-in for the data: reading the whole file to hash it
        would cost a pass over data larger than memory)."""
        index = np.unique(np.linspace(0, self.num_data - 1, IDENTITY_ROWS).astype(np.int64))
        digest = hashlib.sha256()
        for path, rows in zip(self.paths, self.read(index), strict=True):
            digest.update(f"{path.stat().st_size}|{rows.dtype.str}{rows.shape}|".encode())
            digest.update(np.ascontiguousarray(rows).tobytes())
        return {
            "num_data": self.num_data,
            "shapes": [list(shape) for shape in self.shapes],
            "file_dtypes": [d.str for d in self.file_dtypes],
            "dtypes": [d.str for d in self.dtypes],
            "batch_size": self.batch_size,
            "seed": self.seed,
            "strata": self.num_devices if self.stratified else 1,
            "rows_sha256": digest.hexdigest(),
        }

    def statistics(self, chunk: int = 65_536) -> dict[str, np.ndarray]:
        """One pass over both files, ``chunk`` rows at a time (the process holds one chunk, never the file).

        Returns:
            ``x_mean``, ``x_std`` [D] and ``y_mean``, ``y_std`` ([] or [P]): column means and ddof-0 standard
            deviations in float64 (the chunks' moments merged by Chan, Golub & LeVeque's pairwise update); ``y_min``,
            ``y_max``, and ``y_integral`` (every y a whole number).

        Raises:
            ValueError: naming ``X_path`` or ``y_path`` and the first row holding a NaN or infinite value.
        """
        chunk = check_count("chunk", chunk, minimum=1)
        moments: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}
        y_min, y_max, integral = np.inf, -np.inf, True
        for start in range(0, self.num_data, chunk):
            stop = min(start + chunk, self.num_data)
            for name, path in zip(("x", "y"), self.paths, strict=True):
                mapped = np.load(path, mmap_mode="r")
                rows = np.asarray(mapped[start:stop], dtype=np.float64)
                del mapped
                finite = np.isfinite(rows).reshape(len(rows), -1).all(axis=1)
                if not finite.all():
                    row = start + int(np.argmin(finite))
                    raise ValueError(f"{name.upper()}_path: {str(path)!r} holds a NaN or infinite value in row {row}")
                if name == "y":
                    y_min, y_max = min(y_min, float(rows.min())), max(y_max, float(rows.max()))
                    integral = integral and bool(np.all(rows == np.round(rows)))
                n_b, mean_b = len(rows), rows.mean(axis=0)
                m2_b = ((rows - mean_b) ** 2).sum(axis=0)
                if name not in moments:
                    moments[name] = (n_b, mean_b, m2_b)
                    continue
                n_a, mean_a, m2_a = moments[name]
                n, delta = n_a + n_b, mean_b - mean_a
                moments[name] = (n, mean_a + delta * n_b / n, m2_a + m2_b + delta**2 * n_a * n_b / n)
        out = {}
        for name, (n, mean, m2) in moments.items():
            out[f"{name}_mean"], out[f"{name}_std"] = mean, np.sqrt(m2 / n)
        return {**out, "y_min": np.float64(y_min), "y_max": np.float64(y_max), "y_integral": np.bool_(integral)}

    def sample(self, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``min(count, N)`` distinct rows of X and y drawn uniformly by ``seed`` (in file order), in memory."""
        count = min(check_count("count", count, minimum=1), self.num_data)
        index = np.sort(np.random.default_rng(seed).choice(self.num_data, count, replace=False))
        return self.read(index)

    def _place(self, rows: np.ndarray) -> Array:
        if self.mesh is None:
            return jax.device_put(rows)
        sharding = NamedSharding(self.mesh, P(DATA_AXIS))
        if jax.process_count() == 1:
            return jax.device_put(rows, sharding)
        return jax.make_array_from_process_local_data(sharding, rows, (self.batch_size, *rows.shape[1:]))

    def batches(self, start: int = 0) -> Iterator[tuple[Array, Array]]:
        """Batches ``start``, ``start + 1``, ... on the devices, read and sent ``prefetch`` ahead by a background
        thread (an exception there, KeyboardInterrupt included, is raised to the consumer in its place)."""
        start = check_count("start", start)
        local = self._local_rows()
        ready: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()

        def offer(item: Any) -> None:
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue

        # The reader thread places the batches as the consumer's thread would: jax.enable_x64 is a context local to
        # a thread (the command line runs inside one), and without it a float64 batch would be placed as float32.
        x64 = bool(jax.config.jax_enable_x64)

        def produce() -> None:
            position = start
            try:
                with jax.enable_x64(x64):
                    while not stop.is_set():
                        # every process draws alike and reads its own rows
                        index = self.draw(self.generator(position))[local]
                        offer(tuple(self._place(rows) for rows in self.read(index)))
                        position += 1
            except BaseException as err:  # handed to the consumer
                offer(err)

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

    def batch(self, position: int) -> tuple[Array, Array]:
        """Batch ``position`` read now and placed on the devices (not prefetched): the template the engines
        initialise their state with."""
        index = self.draw(self.generator(check_count("position", position)))[self._local_rows()]
        X, y = self.read(index)
        return self._place(X), self._place(y)


def _check_batches(batches: Any) -> NpyBatches:
    if not isinstance(batches, NpyBatches):
        raise ValueError(f"batches: expected an NpyBatches, got {type(batches).__name__}")
    return batches


def _resume(
    checkpoint: str | os.PathLike | None, settings: Mapping[str, Any] | None, batches: NpyBatches, run: dict
) -> tuple[dict | None, Any]:
    """(the fingerprint of this run, the checkpoint it resumes from or None): the stored fingerprint must match,
    the stream's identity entry by entry (``stream_<name>``); read and compared before anything compiles."""
    if checkpoint is None:
        return None, None
    run = {**run, **{f"stream_{name}": value for name, value in batches.identity().items()}}
    expected = checkpoints.make_fingerprint(settings, run=run)
    saved = checkpoints.read(checkpoint, fingerprint=expected) if Path(checkpoint).exists() else None
    return expected, saved


def fit_streamed(
    model: Callable,
    guide: Callable,
    batches: NpyBatches,
    *,
    optimizer: Any,
    num_steps: int,
    key: int | Array = 0,
    loss: Any = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 1000,
    fingerprint: Mapping[str, Any] | None = None,
    progress: bool | None = None,
    label: str = "SVI (streamed)",
    matmul_precision: str = hot_path.MATMUL_PRECISION,
    blas_threads: int | None = ops.BLAS_THREADS,
    positive_transform: str = "exp",
) -> SVIResult:
    """SVI over a stream: one compiled step per batch, ``model(X_b, y_b)`` with the model's ``num_data`` set to N.

    Step k (0-based) takes batch k of ``batches``. The parameters and optimiser state are replicated over
    ``batches.mesh`` (if any) and each batch arrives split over it, so XLA sums the per-device gradients; the next
    batches are read while a step runs. On a mesh of CPU devices each step is waited for before the next is
    dispatched (:attr:`ppl_sparsegp.infer.sharding.DataParallel.serial`). Every ``checkpoint_every`` steps (and at
    the end) the losses are fetched and checked, and the checkpoint, if any, is written (module docstring).

    Args:
        model, guide: NumPyro programs called as ``model(X_b, y_b)`` (X_b [B, D], y_b [B] or [B, P]).
        batches: the stream (:class:`NpyBatches`).
        optimizer: an optax ``GradientTransformation`` or a ``numpyro.optim`` optimiser.
        num_steps: SVI steps in all (counting those of a checkpoint resumed from).
        key: integer seed or JAX PRNG key of the SVI state.
        loss: the ELBO (default ``TraceMeanField_ELBO()``).
        checkpoint: path of an ``.npz`` checkpoint to resume from and write to.
        checkpoint_every: steps between loss checks and checkpoint writes.
        fingerprint: the caller's settings that affect the result (name -> JSON-able), recorded in the checkpoint
            with the stream's identity and the key; a checkpoint that differs in any of them is refused.
        progress: a progress bar (None: shown in a terminal or notebook).
        label: the progress bar's label.
        matmul_precision: float32 matrix products on an accelerator (:mod:`ppl_sparsegp.infer.hot_path`).
        blas_threads: BLAS/LAPACK threads while fitting (:func:`ppl_sparsegp.core.ops.blas_threads`).
        positive_transform: ``"exp"`` or ``"softplus"``, as :func:`ppl_sparsegp.infer.svi.fit_svi`'s; part of the
            checkpoint's fingerprint.

    Returns:
        A :class:`ppl_sparsegp.infer.svi.SVIResult` (losses [num_steps], the checkpoint's included).

    Raises:
        ppl_sparsegp.infer.svi.NonFiniteLossError: a loss went NaN or inf; it carries the parameters at the last
            check whose losses were finite.
        ppl_sparsegp.infer.checkpoint.CheckpointError: as :func:`ppl_sparsegp.infer.svi.fit_svi`.
    """
    compilation_cache.enable()
    batches = _check_batches(batches)
    num_steps = check_count("num_steps", num_steps, minimum=1)
    checkpoint_every = check_count("checkpoint_every", checkpoint_every, minimum=1)
    precision = hot_path.check_precision(matmul_precision)
    model, guide = (with_positive_transform(fn, positive_transform) for fn in (model, guide))
    svi = SVI(model, guide, _as_numpyro_optim(optimizer), loss or TraceMeanField_ELBO())
    run = {"engine": "svi", "key": checkpoints.key_data(key), "positive_transform": positive_transform}
    expected, saved = _resume(checkpoint, fingerprint, batches, run)
    if saved is not None and saved.counters.get("step", 0) > num_steps:
        raise checkpoints.CheckpointError(
            checkpoint, f"holds {saved.counters['step']} steps, more than the {num_steps} asked for"
        )
    parallel = DataParallel(batches.mesh)
    X0, y0 = batches.batch(0)
    with hot_path.precision_scope(precision):
        state = parallel.put(jax.jit(svi.init)(_as_key(key), X0, y0))
    done, position, history = 0, 0, [np.zeros(0)]
    if saved is not None:
        state, done = parallel.put(saved.restore(state)), saved.counters["step"]
        position, history = saved.counters["stream_position"], [saved.arrays["losses"]]
    first, good = done, jax.device_get(state)
    t0 = time.perf_counter()
    with hot_path.precision_scope(precision):
        step = jax.jit(lambda s, X, y: parallel.constrain(svi.update(s, X, y)), donate_argnums=0)
        step = step.lower(state, X0, y0).compile()
    compile_seconds, run_seconds = time.perf_counter() - t0, 0.0
    pending: list[Array] = []

    def sync() -> None:
        nonlocal good
        chunk = np.asarray(jax.device_get(pending), dtype=np.float64).reshape(-1)
        pending.clear()
        history.append(chunk)
        if not np.all(np.isfinite(chunk)):
            bad = done - len(chunk) + int(np.argmin(np.isfinite(chunk)))
            raise NonFiniteLossError(
                f"the loss became non-finite at step {bad}; the returned error carries the parameters at step "
                f"{done - len(chunk)} (lower the learning rate or check the data)",
                step=bad,
                params=svi.get_params(good),
            )
        good = jax.device_get(state)
        if checkpoint is not None:
            counters = {"step": done, "stream_position": done}
            arrays = {"losses": np.concatenate(history)}
            checkpoints.save(checkpoint, state, counters=counters, arrays=arrays, fingerprint=expected)

    bar = tqdm(total=num_steps, initial=done, disable=not progress_bars.shown(progress), desc=label, leave=False)
    stream = batches.batches(start=position)  # step k takes batch k: the position is the step count
    try:
        with ops.blas_threads(blas_threads):
            start = time.perf_counter()
            while done < num_steps:
                Xb, yb = next(stream)
                state, value = parallel.settle(step(state, Xb, yb))
                pending.append(value)
                done += 1
                bar.update(1)
                if done % checkpoint_every == 0 or done == num_steps:
                    sync()
                    bar.set_postfix(loss=f"{history[-1][-1]:.4g}")
            run_seconds = time.perf_counter() - start
    except KeyboardInterrupt:
        if pending:  # else the last sync saved this state
            sync()
        raise
    finally:
        stream.close()
        bar.close()
    return SVIResult(
        params=jax.jit(svi.get_params)(state),
        losses=np.concatenate(history),
        state=state,
        stopped_early=False,
        compile_seconds=compile_seconds,
        run_seconds=run_seconds,
        steps_run=done - first,
        resumed_from=first,
    )


def sample_streamed(
    kernel: SGMCMCKernel,
    batches: NpyBatches,
    *,
    num_warmup: int,
    num_samples: int,
    key: Array,
    num_chains: int = 1,
    thinning: int = 1,
    init_params: Mapping[str, Array] | None = None,
    extra_fields: Sequence[str] | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 1000,
    fingerprint: Mapping[str, Any] | None = None,
    progress: bool | None = None,
    matmul_precision: str = hot_path.MATMUL_PRECISION,
    blas_threads: int | None = ops.BLAS_THREADS,
) -> MCMCResult:
    """An SG-MCMC kernel over a stream: its initial gradient on batch 0, then one compiled ``kernel.sample`` per
    batch, step k (0-based, warmup included) on batch k + 1; ``model(X_b, y_b)`` with the model's ``num_data`` N.

    The same arguments and result as :func:`ppl_sparsegp.infer.mcmc.run_mcmc`, whose chunks hold the data fixed,
    where here every step reads a new batch: the kernel state is replicated over ``batches.mesh`` (if any) and each
    batch arrives split over it (on a mesh of CPU devices each step is waited for, as in :func:`fit_streamed`).
    Chains (``num_chains`` > 1) are vectorised and share each batch. Every
    ``checkpoint_every`` steps (and at the end, and on KeyboardInterrupt, which returns the draws so far with
    ``interrupted``) the draws are fetched, constrained and checked, and the checkpoint, if any, is written (module
    docstring). Deterministic sites are evaluated on batch 0.

    Args:
        kernel: an :class:`ppl_sparsegp.infer.sghmc.SGMCMCKernel` (SGLD, SGHMC, AdaptiveSGHMC) built on a model;
            NUTS and HMC are refused (their Metropolis test needs one fixed target).
        batches: the stream (:class:`NpyBatches`).
        num_warmup, num_samples, key, num_chains, thinning, init_params, extra_fields: as ``run_mcmc`` (the
            field ``nonfinite`` is always kept).
        checkpoint: path of the checkpoint (an ``.npz``) to resume from and write to.
        checkpoint_every: steps between fetches of the draws and checkpoint writes.
        fingerprint: the caller's settings that affect the draws, recorded with the stream's identity, the key, a
            hash of ``init_params`` and the schedule; a checkpoint that differs is refused.
        progress: a progress bar over all steps (None: shown in a terminal or notebook).
        matmul_precision, blas_threads: as :func:`fit_streamed`.

    Raises:
        ppl_sparsegp.infer.mcmc.DivergingChainError: a chain reached a non-finite state (the error carries the draws
            before it).
        ValueError: bad arguments, or a checkpoint that is damaged or another run's (before anything compiles).
    """
    compilation_cache.enable()
    batches = _check_batches(batches)
    if not isinstance(kernel, SGMCMCKernel) or kernel.model is None:
        raise ValueError(
            f"kernel: expected a stochastic-gradient kernel on a model (SGLD, SGHMC, AdaptiveSGHMC), got "
            f"{type(kernel).__name__}; NUTS and HMC need one fixed target, not a new minibatch every step"
        )
    num_warmup = check_count("num_warmup", num_warmup)
    num_samples = check_count("num_samples", num_samples, minimum=1)
    num_chains = check_count("num_chains", num_chains, minimum=1)
    thinning = check_count("thinning", thinning, minimum=1)
    if num_samples % thinning:
        raise ValueError(f"num_samples: expected a multiple of thinning={thinning}, got {num_samples}")
    checkpoint_every = check_count("checkpoint_every", checkpoint_every, minimum=1)
    precision = hot_path.check_precision(matmul_precision)
    fields = tuple(default_extra_fields(kernel) if extra_fields is None else extra_fields)
    fields += () if "nonfinite" in fields else ("nonfinite",)
    name, total = type(kernel).__name__, num_warmup + num_samples
    key = _as_key(key)
    run = {
        "engine": "sgmcmc",
        "kernel": name,
        "num_warmup": num_warmup,
        "num_samples": num_samples,
        "num_chains": num_chains,
        "thinning": thinning,
        "extra_fields": list(fields),
        "key": checkpoints.key_data(key),
        "init_params_sha256": None if init_params is None else checkpoints.tree_sha256(dict(init_params)),
    }
    expected, saved = _resume(checkpoint, fingerprint, batches, run)
    parallel = DataParallel(batches.mesh)
    first_batch = batches.batch(0)
    batch_data, static = hot_path.split_static(first_batch, {})
    with hot_path.precision_scope(precision):
        state = _init_state(kernel, key, num_warmup, init_params, batch_data, static, num_chains, "vectorized")
    state = parallel.put(state)
    done, position, draws, extras, seconds = 0, 1, {}, {}, {"warmup": 0.0, "sample": 0.0}
    if saved is not None:
        state = parallel.put(saved.restore(state))
        done, position = saved.counters["steps"], saved.counters["stream_position"]
        draws, extras = ({k: [v] for k, v in saved.groups[g].items()} for g in ("samples", "extra_fields"))
        seconds.update(saved.metadata.get("seconds") or {})
    constrain = _constrain(kernel, batch_data, static, num_chains)
    with hot_path.precision_scope(precision):
        step = jax.jit(lambda s, X, y: parallel.constrain(kernel.sample(s, (X, y), {})))
        step = step.lower(state, *first_batch).compile()
    recorded: list[dict[str, Array]] = []
    getters = {f: attrgetter(f) for f in (kernel.sample_field, *fields)}

    def result(interrupted: bool) -> MCMCResult:
        return MCMCResult(
            samples=_concat(draws),
            extra_fields=_concat(extras),
            last_state=state,
            kernel_name=name,
            num_warmup=num_warmup,
            thinning=thinning,
            warmup_seconds=seconds["warmup"],
            sample_seconds=seconds["sample"],
            interrupted=interrupted,
            warmup_done=min(done, num_warmup),
        )

    def sync() -> None:
        """Fetch, constrain and check the draws recorded since the last sync, then write the checkpoint."""
        if recorded:
            host = jax.device_get(recorded)
            recorded.clear()
            axis = 1 if num_chains > 1 else 0  # [S, C, ...] -> [C, S, ...]; one chain: [S, ...]
            stacked = jax.tree.map(lambda *draws: np.moveaxis(np.stack(draws), 0, axis), *host)
            new_draws = constrain(stacked.pop(kernel.sample_field))
            new_extras = {f: v if num_chains > 1 else v[None] for f, v in stacked.items()}
            bad = _first_nonfinite(new_extras)
            kept = slice(None) if bad is None else slice(0, bad)
            _append(draws, {k: v[:, kept] for k, v in new_draws.items()})
            _append(extras, {k: v[:, kept] for k, v in new_extras.items()})
            if bad is not None:
                raise DivergingChainError(
                    f"a chain reached a non-finite state after {_leading_shape(_concat(draws))[1]} kept draws; the "
                    "error's `result` holds them. Lower the step size or check the model and the data.",
                    result(False),
                )
        if _any_nonfinite(state):
            raise DivergingChainError(
                f"a chain reached a non-finite state during warmup (step {done}), before any draw was kept; lower "
                "the step size or check the model and the data",
                result(False),
            )
        if checkpoint is not None:
            checkpoints.save(
                checkpoint,
                state,
                counters={"steps": done, "stream_position": position},
                groups={"samples": _concat(draws), "extra_fields": _concat(extras)},
                metadata={"seconds": seconds},
                fingerprint=expected,
            )

    shown = progress_bars.shown(progress)
    bar = tqdm(total=total, initial=done, desc=f"{name} (streamed)", disable=not shown, leave=False)
    stream = batches.batches(start=position)
    try:
        with ops.blas_threads(blas_threads):
            clock = time.perf_counter()
            while done < total:
                state = parallel.settle(step(state, *next(stream)))
                done, position = done + 1, position + 1
                if done > num_warmup and (done - num_warmup) % thinning == 0:
                    recorded.append({f: get(state) for f, get in getters.items()})
                bar.update(1)
                if done % checkpoint_every == 0 or done in (num_warmup, total):
                    jax.block_until_ready(state)
                    now = time.perf_counter()
                    seconds["warmup" if done <= num_warmup else "sample"] += now - clock
                    clock = now
                    sync()
    except KeyboardInterrupt:
        sync()
        return result(True)
    finally:
        stream.close()
        bar.close()
    return result(False)
