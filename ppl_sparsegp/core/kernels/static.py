"""Kernels that ignore where the inputs are: white noise and a constant offset."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import array_api_compat

from ppl_sparsegp.core.kernels.base import Kernel, _cast, _check_hyperparameter, _ones

Array = Any


class Static(Kernel):
    """A kernel whose value does not depend on where the inputs are, with one scalar ``variance`` sigma^2 > 0 that
    is also its diagonal: ``diag -> [N]`` of sigma^2. Subclasses give ``_K``."""

    __slots__ = ("variance",)
    param_names = ("variance",)

    def __init__(self, variance: Any = 1.0, active_dims: Iterable[int] | None = None) -> None:
        super().__init__(active_dims)
        object.__setattr__(self, "variance", _check_hyperparameter(type(self).__name__, "variance", variance, 0))

    def _diag(self, xp, X: Array) -> Array:
        return _cast(xp, self.variance, X) * _ones(xp, X.shape[0], X)


class White(Static):
    """White noise: ``K(X) = sigma^2 I``; ``K(X, X2) = 0`` for any given ``X2`` (distinct inputs).

    Only ``X2 is None`` counts as "the same inputs": ``K(X, X)`` with an explicit second argument
    is zero.

    Args:
        variance: ``sigma^2``, scalar > 0.

    Shapes: X [N, D] -> [N, N]; X [N, D], X2 [M, D] -> [N, M] zeros; diag -> [N] of ``sigma^2``.
    """

    __slots__ = ()

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        device = array_api_compat.device(X)
        if X2 is None:
            eye = xp.eye(X.shape[0], dtype=X.dtype, device=device)
            return _cast(xp, self.variance, X) * eye
        return xp.zeros((X.shape[0], X2.shape[0]), dtype=X.dtype, device=device)


class Constant(Static):
    """Constant kernel: ``k(x, x') = sigma^2`` (a random offset shared by all inputs).

    Args:
        variance: ``sigma^2``, scalar > 0.

    Shapes: X [N, D], X2 [M, D] -> [N, M].
    """

    __slots__ = ()

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        m = X.shape[0] if X2 is None else X2.shape[0]
        ones = xp.ones((X.shape[0], m), dtype=X.dtype, device=array_api_compat.device(X))
        return _cast(xp, self.variance, X) * ones
