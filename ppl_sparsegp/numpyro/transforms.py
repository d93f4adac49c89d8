"""q(u)'s lower-triangular square root as a NumPyro constraint whose bijection indexes with constants.

NumPyro's ``biject_to(constraints.lower_cholesky)`` (``LowerCholeskyTransform``) maps an unconstrained vector
[..., n(n+1)/2] to L [..., n, n]: the first n(n-1)/2 entries fill the strict lower triangle row by row, the last n
are the log-diagonal. It finds the positions with ``jnp.tril_indices(n)``, which jax computes *inside the compiled
program* (a ``nonzero`` over an n x n mask: a cumulative sum over n² integers and a scatter), on every step, in the
forward pass and again for the gradient. At n = M = 1024 that index arithmetic was ~15-20 % of an SVGP step here
(see benchmarks/README.md, "Blocked Cholesky").

:data:`lower_cholesky` is the same constraint (same check, same unconstrained layout, so the same parameters, optimiser
states and checkpoints) whose registered bijection, :class:`ConstantIndexLowerCholeskyTransform`, uses the positions
from ``numpy.tril_indices`` at trace time: constants in the program. Its values are NumPyro's exactly (the entries
are copied, the diagonal is ``exp``); only the index arithmetic leaves the step.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import jax.numpy as jnp
import numpy as np
from numpyro.distributions import constraints
from numpyro.distributions.transforms import LowerCholeskyTransform, biject_to

Array = Any


class _LowerCholesky(constraints._LowerCholesky):
    """``constraints.lower_cholesky`` with its own bijection (:class:`ConstantIndexLowerCholeskyTransform`)."""


lower_cholesky = _LowerCholesky()
"""Lower-triangular matrices with a positive diagonal [..., n, n] (NumPyro's ``constraints.lower_cholesky``)."""


@lru_cache(maxsize=32)
def _strict_lower_positions(n: int) -> np.ndarray:
    """Flat positions ``i * n + j`` [n(n-1)/2] of the strict lower triangle of an n x n matrix, row by row (the
    order of ``jnp.tril_indices(n, -1)``, which NumPyro's transform uses)."""
    i, j = np.tril_indices(n, -1)
    return (i * n + j).astype(np.int32)


def _order(size: int) -> int:
    """n for an unconstrained vector of n(n+1)/2 entries."""
    return round((math.sqrt(1 + 8 * size) - 1) / 2)


class ConstantIndexLowerCholeskyTransform(LowerCholeskyTransform):
    """NumPyro's ``LowerCholeskyTransform`` with the strict-lower positions as program constants.

    Forward: x [..., n(n+1)/2] -> L [..., n, n], ``L[strict lower] = x[:-n]`` (row by row), ``diag L = exp(x[-n:])``.
    Inverse: L -> ``concat(L[strict lower], log diag L)``. ``log_abs_det_jacobian`` is NumPyro's (``sum x[-n:]``).
    """

    codomain = lower_cholesky

    def __call__(self, x: Array) -> Array:
        n = _order(x.shape[-1])
        positions = _strict_lower_positions(n)
        flat = jnp.zeros((*x.shape[:-1], n * n), dtype=x.dtype)
        flat = flat.at[..., positions].set(x[..., :-n], indices_are_sorted=True, unique_indices=True)
        flat = flat.at[..., :: n + 1].set(jnp.exp(x[..., -n:]), indices_are_sorted=True, unique_indices=True)
        return flat.reshape((*x.shape[:-1], n, n))

    def _inverse(self, y: Array) -> Array:
        n = y.shape[-1]
        flat = y.reshape((*y.shape[:-2], n * n))
        return jnp.concatenate([flat[..., _strict_lower_positions(n)], jnp.log(flat[..., :: n + 1])], axis=-1)


@biject_to.register(_LowerCholesky)
def _transform_to_lower_cholesky(constraint: _LowerCholesky) -> ConstantIndexLowerCholeskyTransform:
    return ConstantIndexLowerCholeskyTransform()
