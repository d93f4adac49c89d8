"""THE floating dtype of the Pyro models, the twin of :mod:`ppl_sparsegp.numpyro.dtype`.

Parameters, latent sites and data are tensors of torch's default floating dtype (``torch.get_default_dtype()``:
float32 unless the caller sets float64 with ``torch.set_default_dtype``), as NumPyro's models follow JAX's default
float dtype. The models convert the arrays they are given (numpy, torch, pandas already taken as numpy) with
:func:`as_tensor` once, where they enter.
"""

from __future__ import annotations

from collections.abc import Iterator
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
