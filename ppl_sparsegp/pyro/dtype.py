"""THE floating dtype of the Pyro models, the twin of :mod:`ppl_sparsegp.numpyro.dtype`.

Parameters, latent sites and data are tensors of torch's default floating dtype (``torch.get_default_dtype()``:
float32 unless the caller sets float64 with ``torch.set_default_dtype``), as NumPyro's models follow JAX's default
float dtype. The models convert the arrays they are given (numpy, torch, pandas already taken as numpy) with
:func:`as_tensor` once, where they enter.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

Array = Any


def float_dtype() -> torch.dtype:
    """torch's default floating dtype now."""
    return torch.get_default_dtype()


def as_tensor(x: Array) -> Array:
    """A floating array (numpy or torch, any shape) as a torch tensor of :func:`float_dtype`; integer and boolean
    arrays (labels, masks) as tensors of their own dtype; None stays None; a torch tensor of the right dtype is
    returned as it is (gradients flow through it)."""
    if x is None:
        return None
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    return t.to(float_dtype()) if t.is_floating_point() else t


@contextmanager
def default_dtype(dtype: str | np.dtype | torch.dtype) -> Iterator[torch.dtype]:
    """Within the block, torch's default floating dtype is ``dtype`` (``"float64"``, ``np.float32``,
    ``torch.float64``, ...); the previous one is restored after it."""
    wanted = dtype if isinstance(dtype, torch.dtype) else getattr(torch, np.dtype(dtype).name)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(wanted)
    try:
        yield wanted
    finally:
        torch.set_default_dtype(previous)


def as_data(value: Any) -> Any:
    """A model's argument as the engines pass it on: an array (numpy or torch) through :func:`as_tensor`, anything
    else (None, a number, a string) as it is."""
    return as_tensor(value) if isinstance(value, torch.Tensor | np.ndarray) else value


def to_host(values: Any) -> Any:
    """Tensors in ``values`` (a tensor, or a tuple or dict of them) as numpy arrays, e.g. to hash the data."""
    if isinstance(values, dict):
        return {k: to_host(v) for k, v in values.items()}
    if isinstance(values, tuple):
        return tuple(to_host(v) for v in values)
    return values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else values


@contextmanager
def intra_op_threads(threads: int | None) -> Iterator[None]:
    """Within the block torch runs on ``threads`` intra-op threads (``torch.set_num_threads``; None: as it is); the
    previous count is restored after it. The Pyro engines run on one by default: a sparse GP step is many small
    operations, between which torch's pool spin-waits (an SVGP step on diabetes, M = 64, B = 128, on 2 busy cores
    ran at 10 steps/s with two threads and 76-101 with one; Pyro NUTS on a 25-point SGPMC took 18.7 s against 2.8 s)."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


AUTO_THREADS_ENTRIES = 512 * 512
"""The size, in entries, of the largest param from which ``threads="auto"`` uses torch's own thread count."""


def auto_threads(params: Iterable[torch.Tensor], own: int) -> int:
    """Intra-op threads for a fit whose params are ``params`` (``threads="auto"``): torch's own count ``own`` when a
    param has at least :data:`AUTO_THREADS_ENTRIES` entries, else 1.

    A param that large (the M x M factor of q(u) from M = 512 inducing points) means a step of a few large
    factorisations and products, which threads share; below, a step of many small operations, between which the
    pool's threads wait. Measured here (SVGP, N = 20000, B = 256, 2 cores; one : two threads, steps/s, float32 and
    float64): M = 256 53 : 34 and 40 : 30 (OMP_WAIT_POLICY=PASSIVE); M = 512 20 : 28 and 12 : 16, M = 1024 5.3 : 8.0
    and 2.5 : 4.7 (OMP_WAIT_POLICY unset).
    """
    return own if any(p.numel() >= AUTO_THREADS_ENTRIES for p in params) else 1
