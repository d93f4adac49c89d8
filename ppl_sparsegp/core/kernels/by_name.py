"""Kernels from names such as ``"rbf"`` or ``"rbf+linear"``, as the command line and the recipes give them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ppl_sparsegp.core.kernels.base import Kernel, Sum
from ppl_sparsegp.core.kernels.linear import Linear
from ppl_sparsegp.core.kernels.stationary import RBF, Matern12, Matern32, Matern52, Periodic


def _default(input_dim: int, ard: bool) -> Any:
    return np.ones(input_dim) if ard else 1.0


_BY_NAME: dict[str, Callable[[int, bool], Kernel]] = {
    "rbf": lambda d, ard: RBF(1.0, _default(d, ard)),
    "matern12": lambda d, ard: Matern12(1.0, _default(d, ard)),
    "matern32": lambda d, ard: Matern32(1.0, _default(d, ard)),
    "matern52": lambda d, ard: Matern52(1.0, _default(d, ard)),
    "linear": lambda d, ard: Linear(_default(d, ard)),
    "periodic": lambda d, ard: Periodic(1.0, _default(d, ard), _default(d, ard)),
}


def kernel_from_name(name: str, input_dim: int, ard: bool = True) -> Kernel:
    """A kernel with default initial hyperparameters from a name like ``"rbf"`` or ``"rbf+linear"``.

    Defaults: variances 1.0; lengthscales (and periods) ``ones(input_dim)`` when ``ard`` else 1.0;
    the linear kernel's variance is ``ones(input_dim)`` when ``ard`` else 1.0.

    Args:
        name: one of ``"rbf"``, ``"matern12"``, ``"matern32"``, ``"matern52"``, ``"linear"``,
            ``"periodic"`` (case-insensitive), or several joined by ``"+"`` for their :class:`Sum`.
        input_dim: D, the number of input columns.
        ard: one lengthscale per input dimension (vectors [D]) rather than a shared scalar.

    Raises:
        ValueError: an unknown name (the message lists the valid ones) or ``input_dim < 1``.
    """
    if int(input_dim) < 1:
        raise ValueError(f"input_dim must be a positive integer, got {input_dim!r}")
    parts = [part.strip().lower() for part in name.split("+")]
    for part in parts:
        if part not in _BY_NAME:
            raise ValueError(
                f"unknown kernel {part!r} in {name!r}; valid names are {sorted(_BY_NAME)} "
                "and '+'-joined combinations such as 'rbf+linear'"
            )
    kernels = [_BY_NAME[part](int(input_dim), ard) for part in parts]
    return kernels[0] if len(kernels) == 1 else Sum(kernels)
