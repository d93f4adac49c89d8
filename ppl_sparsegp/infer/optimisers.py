"""What ``fit_svi`` offers beyond an optax transformation: full-batch L-BFGS, and keeping sites frozen for a while.

* :class:`LBFGS`: optax's L-BFGS with its zoom line search. It needs the loss as a function of the parameters
  (the line search evaluates it at trial points), which ``fit_svi`` builds from the SVI loss at the current
  unconstrained parameters; the loss must be deterministic (a full batch and an analytic data term).
* :func:`frozen_for`: hold the named params at their initial values for the first ``k`` steps (the thesis'
  hyperparameter freeze: fit q(u) and Z first), as one fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax

from ppl_sparsegp.validation import check_count

Array = Any


@dataclass(frozen=True)
class LBFGS:
    """L-BFGS for a deterministic (full-batch) loss: ``fit_svi(..., optimizer=LBFGS())``.

    Args:
        memory_size: the number of past steps whose curvature it keeps.
        max_linesearch_steps: the zoom line search's evaluations per step at most.
    """

    memory_size: int = 10
    max_linesearch_steps: int = 15

    def __post_init__(self) -> None:
        check_count("memory_size", self.memory_size, minimum=1)
        check_count("max_linesearch_steps", self.max_linesearch_steps, minimum=1)

    def transformation(self) -> optax.GradientTransformationExtraArgs:
        """optax's L-BFGS with these settings."""
        search = optax.scale_by_zoom_linesearch(max_linesearch_steps=self.max_linesearch_steps)
        return optax.lbfgs(memory_size=self.memory_size, linesearch=search)


def check_freeze(freeze: Mapping[str, int]) -> dict[str, int]:
    """``freeze`` (param name -> steps it stays at its initial value) checked: names as strings, counts >= 0."""
    if not isinstance(freeze, Mapping) or not all(isinstance(name, str) for name in freeze):
        raise ValueError(f"freeze: expected a mapping of param names to step counts, got {freeze!r}")
    return {name: check_count(f"freeze[{name!r}]", steps, minimum=0) for name, steps in freeze.items()}


def _zero_before(steps: int) -> optax.GradientTransformation:
    """Updates set to zero for the first ``steps`` calls, passed on unchanged after."""

    def init(params: Any) -> Array:
        return jnp.zeros([], jnp.int32)

    def update(updates: Any, count: Array, params: Any = None) -> tuple[Any, Array]:
        keep = count >= steps
        return jax.tree_util.tree_map(lambda u: jnp.where(keep, u, jnp.zeros_like(u)), updates), count + 1

    return optax.GradientTransformation(init, update)


def frozen_for(optimizer: optax.GradientTransformation, freeze: Mapping[str, int]) -> optax.GradientTransformation:
    """``optimizer`` with the params named in ``freeze`` held for their number of steps (their gradients zeroed
    before ``optimizer`` sees them, so Adam's moments start when they thaw)."""
    if not freeze:
        return optimizer
    groups = {f"frozen {steps}": optax.chain(_zero_before(steps), optimizer) for steps in set(freeze.values())}

    def labels(params: dict[str, Array]) -> dict[str, str]:
        return {name: f"frozen {freeze[name]}" if name in freeze else "free" for name in params}

    return optax.multi_transform({**groups, "free": optimizer}, labels)


def masked_gradient(grad: dict[str, Array], freeze: Mapping[str, int], step: Array) -> dict[str, Array]:
    """``grad`` with the frozen params' entries zero while ``step`` is below their count (the L-BFGS path)."""
    return {name: jnp.where(step >= freeze[name], g, jnp.zeros_like(g)) if name in freeze else g
            for name, g in grad.items()}  # fmt: skip
