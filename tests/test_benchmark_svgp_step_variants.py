"""benchmarks/svgp_step_variants.py: its variants, and one small run of each kind through ``main``."""

import json

import pytest

from ppl_sparsegp.backends import jax_blocked


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("svgp_step_variants")


def test_variants_put_the_baseline_first(bench):
    four = bench.variants(None)
    assert [v[1:3] for v in four] == [("0", "numpyro"), ("0", "constant-index"), ("1", "numpyro"),
                                      ("1", "constant-index")]  # fmt: skip
    assert bench.variants([128, 0]) == [
        ("LAPACK", "0", "constant-index", None),
        ("blocked, block=128", "1", "constant-index", 128),
        ("blocked, block=block_size(M)", "1", "constant-index", None),
    ]


def test_block_sizes_give_the_same_loss_and_restore_the_library(bench, monkeypatch, tmp_path):
    monkeypatch.setattr(jax_blocked, "MIN_ORDER", 8)  # M = 16 takes the blocked path: 2 blocks of 8, or 1
    monkeypatch.setenv(jax_blocked.ENV_SWITCH, "1")
    library = jax_blocked.block_size
    out = tmp_path / "variants.json"
    assert (
        bench.main(["--dtype", "float64", "--M", "16", "--calls", "2", "--blocks", "8", "0", "--output", str(out)]) == 0
    )
    assert jax_blocked.block_size is library
    rows = json.loads(out.read_text())["rows"]
    assert [r["variant"] for r in rows] == ["LAPACK", "blocked, block=8", "blocked, block=block_size(M)"]
    assert rows[0]["speedup_over_before_median_of_pairs"] == 1.0
    for row in rows[1:]:
        assert row["first_loss"] == pytest.approx(rows[0]["first_loss"], rel=1e-12)
    with pytest.raises(SystemExit):
        bench.main(["--M", "16", "--blocks", "-1"])
