"""Recording the StableHLO of the programs a run compiles, and counting the constants in them that hold values:
a program that closes over data or initial values holds them as such constants, which XLA may fold at compile
time."""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np

DENSE_CONSTANT = re.compile(r"stablehlo\.constant dense<([\"\[])[^>]*>\s*:\s*tensor<([0-9x]+)x[a-z]+[0-9]*>")
"""A constant of the StableHLO text that holds its values (a splat, ``dense<0.0>``, has no ``"`` or ``[``), and its
shape ``AxBx...``."""


def dense_constant_sizes(stablehlo: str) -> list[int]:
    """The element counts of the constants with values of their own in a StableHLO module's text."""
    return [int(np.prod([int(n) for n in shape.split("x")])) for _, shape in DENSE_CONSTANT.findall(stablehlo)]


class LoweredPrograms:
    """``jax.jit`` that also keeps the StableHLO text of every program it lowers or runs on concrete arguments."""

    def __init__(self, jit: Any) -> None:
        self.jit, self.texts = jit, []

    def __call__(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return Recording(self.jit(fn, *args, **kwargs), self.texts)


class Recording:
    def __init__(self, jitted: Any, texts: list[str]) -> None:
        self.jitted, self.texts = jitted, texts

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        lowered = self.jitted.lower(*args, **kwargs)
        self.texts.append(lowered.as_text())
        return lowered

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs))):
            self.lower(*args, **kwargs)
        return self.jitted(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jitted, name)
