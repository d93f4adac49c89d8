"""The linear (dot-product) kernel."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ppl_sparsegp.core.kernels.base import Kernel, _cast, _check_hyperparameter

Array = Any


class Linear(Kernel):
    """Linear (dot-product) kernel: ``k(x, x') = sum_d sigma_d^2 x_d x'_d``.

    Args:
        variance: ``sigma^2``, a scalar or a vector [D] (ARD), > 0.
        active_dims: input columns used (see :class:`Kernel`).

    Shapes: X [N, D], X2 [M, D] -> [N, M].
    """

    __slots__ = ("variance",)
    param_names = ("variance",)
    ard_names = ("variance",)

    def __init__(self, variance: Any = 1.0, active_dims: Iterable[int] | None = None) -> None:
        super().__init__(active_dims)
        object.__setattr__(self, "variance", _check_hyperparameter("Linear", "variance", variance, 1))

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        return (X * _cast(xp, self.variance, X)) @ (X if X2 is None else X2).T

    def _diag(self, xp, X: Array) -> Array:
        return xp.sum(X * X * _cast(xp, self.variance, X), axis=1)
