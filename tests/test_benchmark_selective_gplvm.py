"""The ``--backend`` option of the selective GP-LVM benchmark (benchmarks/selective_gplvm.py, issue 24): a short run
through ``main`` (a small curve in 3-D for oil flow, a 4 × 4 grid, 6 epochs recorded every 2, the early epoch at 2)
writes a record with every number finite and the backend in it and in the file's settings; (slow) both backends'
records have the same fields and each refuses the other's file; a results file of one backend (NumPyro when it
names none) is refused to the other before anything runs."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from _selective_problems import curve_in_3d


@pytest.fixture
def bench(load_benchmark, monkeypatch, tmp_path):
    """The benchmark module on a small problem, its checkpoints under ``tmp_path``."""
    module = load_benchmark("selective_gplvm")
    Y = curve_in_3d(40, 2)
    labels = (Y[:, 0] > 0).astype(int) + (Y[:, 1] > 0).astype(int)
    monkeypatch.setattr(module, "standardised_oilflow", lambda: (Y, labels))
    monkeypatch.setattr(module, "CHECKPOINTS", tmp_path / "checkpoints")
    monkeypatch.setattr(module, "EARLY_EPOCH", 2)
    monkeypatch.setattr(module, "RECORD_EVERY", 2)
    monkeypatch.setattr(module, "ELBO_DRAWS", 2)
    monkeypatch.setitem(module.SETTINGS, "grid_size", 4)
    return module


def _numbers(value):
    """Every number in a record's value (nested lists and dicts included); None counts as no number."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [value] if isinstance(value, int | float) and not isinstance(value, bool) else []


def _run(bench, path: Path, backend: str, seed: int = 0) -> dict:
    """The record of ``seed`` that ``main`` writes to ``path`` with ``backend`` (6 epochs), checked: the backend is
    in it and in the file's settings, and every number in it is finite."""
    assert bench.main(["--seeds", str(seed), "--epochs", "6", "--backend", backend, "--output", str(path)]) == 0
    stored = json.loads(path.read_text())
    assert stored["settings"]["backend"] == backend
    record = stored["runs"][str(seed)]
    assert record["backend"] == backend and record["num_candidates"] == 16
    assert list(record["expected_count_trace"]) == ["0", "2", "4", "6"]
    numbers = _numbers({k: v for k, v in record.items() if k not in ("versions", "loadavg")})
    assert numbers and all(math.isfinite(n) for n in numbers)
    return record


def test_the_pyro_backend_runs_on_the_pyro_side(bench, tmp_path):
    record = _run(bench, tmp_path / "pyro.json", "pyro")
    assert set(record["versions"]) == {"torch", "pyro-ppl"}
    assert set(record["seconds"]) == {"selective", "all_grid"}
    assert record["expected_count_trace"]["0"] == 8.0  # λ₀ = 0.5 on 16 grid points


@pytest.mark.slow  # about 25 s (2 cores, shared), most of it compiling the NumPyro programs
def test_both_backends_write_records_of_the_same_fields_and_refuse_each_others_file(bench, tmp_path):
    records = {backend: _run(bench, tmp_path / f"{backend}.json", backend) for backend in ("numpyro", "pyro")}
    assert records["numpyro"].keys() == records["pyro"].keys()
    assert set(records["numpyro"]["versions"]) == {"jax", "numpyro", "optax"}
    # the same grid, latents and initial λ on both engines; the fits themselves draw from different generators
    assert records["numpyro"]["expected_count_trace"]["0"] == records["pyro"]["expected_count_trace"]["0"] == 8.0
    assert records["numpyro"]["nn_error_pca_init"] == records["pyro"]["nn_error_pca_init"]
    assert np.isclose(records["numpyro"]["grid_spacing"], records["pyro"]["grid_spacing"], rtol=1e-12)
    for backend, other in (("numpyro", "pyro"), ("pyro", "numpyro")):
        path = tmp_path / f"{other}.json"
        before = path.read_text()
        with pytest.raises(SystemExit):
            bench.main(["--seeds", "1", "--epochs", "6", "--backend", backend, "--output", str(path)])
        assert path.read_text() == before


@pytest.mark.parametrize(
    ("stored", "backend"),
    [("numpyro", "pyro"), ("pyro", "numpyro"), (None, "pyro")],
    ids=["numpyro file", "pyro file", "file from before the option"],
)
def test_a_results_file_of_the_other_backend_is_refused_before_anything_runs(bench, tmp_path, capsys, monkeypatch,
                                                                             stored, backend):  # fmt: skip
    """A file's backend is its settings' (NumPyro when they name none: written before the option existed); another
    backend's run is refused, naming both, before any fit and leaving the file as it was; its own backend's run
    goes on (here it skips the finished seed)."""
    path = tmp_path / "runs.json"
    settings = {**bench.SETTINGS, "epochs": 6, "pre_steps": 0, "batch_size": None, "N": 40}
    if stored is not None:
        settings["backend"] = stored
    path.write_text(json.dumps({"settings": settings, "runs": {"0": {}}}))
    monkeypatch.setattr(bench, "run_seed", lambda *args: pytest.fail("a seed ran"))
    with pytest.raises(SystemExit):
        bench.main(["--seeds", "1", "--epochs", "6", "--backend", backend, "--output", str(path)])
    assert f"holds runs of the {stored or 'numpyro'} backend, not {backend}" in capsys.readouterr().err
    assert json.loads(path.read_text())["runs"] == {"0": {}}
    assert bench.main(["--seeds", "0", "--epochs", "6", "--backend", stored or "numpyro", "--output", str(path)]) == 0
