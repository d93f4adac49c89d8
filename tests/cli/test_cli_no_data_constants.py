"""``fit``'s compiled programs take the data as arguments: none of them embeds a dataset-sized array as a constant,
which XLA would try to fold at compile time (issue 26 §1: "Constant folding an instruction is taking > 1s" while
idsgp wrote posterior.nc, its per-draw program closing over X and the network's weights)."""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
import pytest
from test_cli_outputs import QUIET

from ppl_sparsegp import data
from ppl_sparsegp.cli import main

DENSE_CONSTANT = re.compile(r"stablehlo\.constant dense<([\"\[])[^>]*>\s*:\s*tensor<([0-9x]+)x[a-z]+[0-9]*>")
"""A constant of the StableHLO text that holds its values (a splat, ``dense<0.0>``, has no ``"`` or ``[``), and its
shape ``AxBx...``."""
RUNS = {
    "idsgp": ("idsgp", "--inducing", "3", "--hidden", "6", "--epochs", "1", "--batch-size", "64"),
    "svgp": ("svgp", "--inducing", "3", "--steps", "20"),
    "sgpmc": ("sgpmc", "--inducing", "3", "--steps", "20", "--warmup", "5", "--samples", "5", "--chains", "1"),
}


def dense_constant_sizes(stablehlo: str) -> list[int]:
    """The element counts of the constants with values of their own in a StableHLO module's text."""
    return [int(np.prod([int(n) for n in shape.split("x")])) for _, shape in DENSE_CONSTANT.findall(stablehlo)]


def test_dense_constant_sizes_reads_value_constants_and_skips_splats():
    x = np.arange(12.0).reshape(3, 4)
    text = jax.jit(lambda a: a + x + np.zeros((5, 1, 1)) + 1.0).lower(np.ones(4)).as_text()
    assert dense_constant_sizes(text) == [12]


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


@pytest.mark.slow  # three short fits: about 25 to 45 s each on a loaded 2-core machine
@pytest.mark.parametrize("method", sorted(RUNS))
def test_no_program_of_fit_embeds_a_data_sized_constant(method, tmp_path, monkeypatch):
    ds = data.load_dataset("diabetes", 0)
    rows = len(ds.y_train)  # X [353, 10], y [353], X_eval [89, 10]; the largest weights of these runs: 6 x 39 (idsgp)
    programs = LoweredPrograms(jax.jit)
    monkeypatch.setattr(jax, "jit", programs)
    assert main(["fit", *RUNS[method], "--data", "diabetes", "--out", str(tmp_path / "out"), *QUIET]) == 0
    assert (tmp_path / "out" / "posterior.nc").exists()
    assert len(programs.texts) >= 3  # training, posterior.nc and the predictions at least
    largest = max((max(dense_constant_sizes(t), default=0) for t in programs.texts), default=0)
    assert largest < rows, (
        f"a program of fit {method} embeds a constant of {largest} elements (data: {rows} training rows)"
    )
