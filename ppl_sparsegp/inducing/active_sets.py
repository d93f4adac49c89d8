"""The active-set sampler of stochastic active sets (SAS-GP, Moreno-Muñoz et al. 2022, Algorithms 1-2; spec 004
§1.5): at every step a batch of B distinct points is split uniformly at random into an active set of A points and
B − A held-out points, so that every point rotates between the two roles from step to step. Traced (JAX): one
permutation per step, drawn from the step's key; the estimate itself is :mod:`ppl_sparsegp.core.active_sets`'s.
"""

from __future__ import annotations

from typing import Any

import jax

Array = Any


def split_active(key: Array, batch_size: int, num_active: int) -> tuple[Array, Array]:
    """A uniformly random split of the positions 0..B−1 of a batch: active [A] and held-out [B − A] (disjoint,
    together every position once). ``batch_size`` and ``num_active`` are static (0 < A < B)."""
    order = jax.random.permutation(key, int(batch_size))
    return order[: int(num_active)], order[int(num_active) :]
