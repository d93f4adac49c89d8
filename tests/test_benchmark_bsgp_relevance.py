"""benchmarks/bsgp_relevance.py (issue 24, BSGP item 2): the relevant inputs of recorded BSGP runs, read from a cell's
record, from its own chain checkpoint (never from a later run's that replaced it), or from bsgp_naval.py's runs,
with the inputs constant on the training set left out, and bad arguments refused by name."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from ppl_sparsegp.infer import checkpoint

DATA_DIR = Path(os.environ.get("PPL_SPARSEGP_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))
NAVAL_CONSTANT = [8, 11]  # NAVAL's compressor inlet air temperature and pressure: one value in every row


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("bsgp_relevance")


def test_relevant_inputs_are_those_below_the_threshold_less_the_constant_ones(bench):
    lengthscale = np.array([0.5, 1e4, 99.0, 100.0, 3.0])
    assert bench.relevant_inputs(lengthscale, [4], 100.0) == [0, 2]
    assert bench.relevant_inputs(lengthscale, [], 10.0) == [0, 4]


def _cell(fold: int, mnll: float, warmup_seconds: float, **extra) -> dict:
    return {"method": "bsgp", "dataset": "naval", "layers": 1, "z_prior": "normal", "fold": fold,
            "iterations": 20, "kept": 4, "test_mnll": mnll, "test_rmse": 0.1, "warmup_seconds": warmup_seconds,
            **extra}  # fmt: skip


def _save_draws(path: Path, lengthscale_draws: np.ndarray, warmup_seconds: float) -> None:
    checkpoint.save(
        path, {"step": np.int32(0)}, counters={"warmup_done": 20},
        groups={"samples": {"kernel.lengthscale": lengthscale_draws}}, metadata={"warmup_seconds": warmup_seconds},
    )  # fmt: skip


@pytest.mark.skipif(
    not (DATA_DIR / "uci" / "naval-propulsion-plant").exists(), reason="the shared UCI data is not beside the checkout"
)
def test_runs_are_read_from_records_their_own_checkpoints_and_naval_runs(bench, load_benchmark, tmp_path, monkeypatch):
    monkeypatch.setenv("PPL_SPARSEGP_DATA_DIR", str(DATA_DIR))
    uci = load_benchmark("bsgp_uci")
    runs = tmp_path / "runs"
    recorded = _cell(0, -8.0, 10.0, lengthscale_median={"kernel.lengthscale": [1.0] * 4 + [1e4] * 12})
    own = _cell(1, -7.0, 11.5)
    replaced = _cell(2, -6.0, 12.0)
    no_file = _cell(0, -5.0, 13.0, iterations=40)
    draws = np.full((1, 4, 16), 1e4)
    draws[0, :, [4, 8, 11]] = [[0.9, 1.1, 1.0, 1.2], [0.5] * 4, [0.5] * 4]  # input 4 (median 1.05), two constant ones
    _save_draws(runs / uci.checkpoint_name(own), draws, 11.5)
    _save_draws(runs / uci.checkpoint_name(replaced), draws, 99.0)  # a later run of the same settings wrote it
    cells = {uci.cell_key(c): c for c in (recorded, own, replaced, no_file)}
    (tmp_path / "uci.json").write_text(json.dumps({"cells": cells}))
    naval_runs = {"runs": {"seed": {"fold": 0, "test_mnll": -7.5, "lengthscale_median": [1e4] * 15 + [2.0]}}}
    (tmp_path / "naval.json").write_text(json.dumps(naval_runs))
    output = tmp_path / "relevance.json"
    argv = ["--dataset", "naval", "--results", str(tmp_path / "uci.json"), str(tmp_path / "naval.json"),
            "--runs-folder", str(runs), "--output", str(output)]  # fmt: skip
    assert bench.main(argv) == 0
    written = json.loads(output.read_text())
    got = [(e["run"].split(":")[1], e["relevant_inputs"]) for e in written["runs"]]
    assert got == [
        ("naval/L1/normal/it20/kept4/fold0", [0, 1, 2, 3]),
        ("seed", [15]),
        ("naval/L1/normal/it20/kept4/fold1", [4]),
    ]
    assert all(e["constant_inputs"] == NAVAL_CONSTANT for e in written["runs"])
    assert written["runs"][2]["lengthscale"][4] == pytest.approx(1.05)
    reasons = sorted(m.split(": ", 1)[1] for m in written["not_found"])
    assert reasons == [
        "checkpoint naval_L1_normal_fold2_it20_kept4.ckpt is another run's",
        "no record and no checkpoint naval_L1_normal_fold0_it40_kept4.ckpt",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset", "naval", "--results", "/nonexistent/cells.json"], "--results: no such file"),
        (["--dataset", "naval", "--threshold", "0"], "--threshold must be a positive"),
        (["--dataset", "mnist"], "--dataset"),
    ],
)
def test_bad_arguments_are_refused_by_name_before_anything_is_read(bench, argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.main([*argv, "--output", "/nonexistent/never-written.json"])
    assert message in capsys.readouterr().err
