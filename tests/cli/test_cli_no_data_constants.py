"""``fit``'s compiled programs take the data as arguments: none of them embeds a dataset-sized array as a constant,
which XLA would try to fold at compile time (issue 26 §1: "Constant folding an instruction is taking > 1s" while
idsgp wrote posterior.nc, its per-draw program closing over X and the network's weights)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _lowered_programs import LoweredPrograms, dense_constant_sizes
from test_cli_outputs import QUIET

from ppl_sparsegp import data
from ppl_sparsegp.cli import main

RUNS = {
    "idsgp": ("idsgp", "--inducing", "3", "--hidden", "6", "--epochs", "1", "--batch-size", "64"),
    "svgp": ("svgp", "--inducing", "3", "--steps", "20"),
    "sgpmc": ("sgpmc", "--inducing", "3", "--steps", "20", "--warmup", "5", "--samples", "5", "--chains", "1"),
}


def test_dense_constant_sizes_reads_value_constants_and_skips_splats():
    x = np.arange(12.0).reshape(3, 4)
    text = jax.jit(lambda a: a + x + np.zeros((5, 1, 1)) + 1.0).lower(np.ones(4)).as_text()
    assert dense_constant_sizes(text) == [12]


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
