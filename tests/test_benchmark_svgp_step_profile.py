"""The SVGP step profile (benchmarks/svgp_step_profile.py, issue 26 §3): operation names sort into their kinds, and a
short profiled run writes a record whose kinds hold the step's factorisation and products."""

import json

import pytest


@pytest.fixture
def bench(load_benchmark, monkeypatch):
    monkeypatch.setenv("PPL_SPARSEGP_BLOCKED_LINALG", "0")  # restored after: main sets it for the step
    return load_benchmark("svgp_step_profile")


def test_operation_names_sort_into_kinds(bench):
    assert bench.kind_of("triangular_solve.7") == bench.kind_of("cholesky.0") == "lapack"
    assert bench.kind_of("ynn_fusion.12") == bench.kind_of("dot_general.22") == "product"
    assert bench.kind_of("copy_bitcast_fusion.1") == bench.kind_of("transpose_copy_fusion") == "layout"
    assert bench.kind_of("multiply_exponential_fusion.1") == "other"


def test_a_short_profile_writes_its_record(bench, tmp_path):
    out = tmp_path / "profile.json"
    args = ["--dtype", "float64", "--M", "16", "--calls", "2", "--profiled", "2", "--top", "5", "--output", str(out)]
    assert bench.main(args) == 0
    record = json.loads(out.read_text())
    assert record["step_ms_median"] > 0 and record["compile_s"] > 0
    kinds = record["ms_per_step_by_kind"]
    assert kinds["lapack"] > 0 and kinds["product"] > 0  # K(Z, Z)'s factorisation and the products were seen
    assert 0 < len(record["ms_per_step_by_operation"]) <= 5 < record["operations"]
    assert sum(kinds.values()) >= max(record["ms_per_step_by_operation"].values())
    with pytest.raises(SystemExit):
        bench.main(["--calls", "0"])
