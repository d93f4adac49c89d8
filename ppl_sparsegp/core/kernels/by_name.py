"""Kernels from names such as ``"rbf"`` or ``"rbf+linear"``, as the command line and the recipes give them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ppl_sparsegp.core.kernels.base import Kernel, Sum
from ppl_sparsegp.core.kernels.linear import Linear
from ppl_sparsegp.core.kernels.stationary import RBF, Cosine, Matern12, Matern32, Matern52, Periodic

_BY_NAME: dict[str, Callable[[Callable[..., Any], float, float], Kernel]] = {
    "rbf": lambda fill, v, ls: RBF(fill(v, ()), fill(ls)),
    "matern12": lambda fill, v, ls: Matern12(fill(v, ()), fill(ls)),
    "matern32": lambda fill, v, ls: Matern32(fill(v, ()), fill(ls)),
    "matern52": lambda fill, v, ls: Matern52(fill(v, ()), fill(ls)),
    "linear": lambda fill, v, ls: Linear(fill(v)),
    "periodic": lambda fill, v, ls: Periodic(fill(v, ()), fill(ls), fill(1.0)),
    "cosine": lambda fill, v, ls: Cosine(fill(v, ()), fill(ls)),
}
"""name -> the kernel from ``fill(value, shape=per input)`` of its variance ``v`` and lengthscale ``ls``."""


def kernel_from_name(
    name: str,
    input_dim: int,
    ard: bool = True,
    *,
    variance: float = 1.0,
    lengthscale: float = 1.0,
    dtype: Any = None,
) -> Kernel:
    """A kernel with initial hyperparameters from a name like ``"rbf"`` or ``"rbf+linear"``.

    Every part gets variance ``variance`` and lengthscale ``lengthscale`` (periodic: period 1.0); the
    lengthscales, periods and the linear kernel's variances are vectors [D] filled with the value when ``ard``,
    else scalars; with ``dtype`` every value is a numpy array of that dtype, else the scalars are Python floats.

    Args:
        name: one of ``"rbf"``, ``"matern12"``, ``"matern32"``, ``"matern52"``, ``"linear"``,
            ``"periodic"``, ``"cosine"`` (case-insensitive), or several joined by ``"+"`` for their :class:`Sum`.
        input_dim: D, the number of input columns.
        ard: one lengthscale per input dimension (vectors [D]) rather than a shared scalar.
        variance, lengthscale: the initial values of every part.
        dtype: the numpy dtype of the values (default: float64 vectors and Python float scalars).

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
    per_input = (int(input_dim),) if ard else ()

    def fill(value: float, shape: tuple[int, ...] = per_input) -> Any:
        return float(value) if dtype is None and not shape else np.full(shape, value, dtype=dtype or np.float64)

    kernels = [_BY_NAME[part](fill, variance, lengthscale) for part in parts]
    return kernels[0] if len(kernels) == 1 else Sum(kernels)
