"""``fit idsgp --dropout RATE``: a rate outside [0, 1) is one clear error before any work; a run with dropout records
the rate, trains with it (other steps than without) and its stored run loads and predicts."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli_outputs import QUIET, one_line_error, trap_work

from ppl_sparsegp import data, metrics
from ppl_sparsegp.cli import main
from ppl_sparsegp.runs import load_run

SMALL = ("idsgp", "--inducing", "3", "--hidden", "6", "--epochs", "2", "--batch-size", "64")


@pytest.mark.parametrize("rate", ["1", "-0.1", "1.5", "nan"])
def test_a_rate_outside_zero_to_one_is_refused_before_any_work(rate, tmp_path, capsys, monkeypatch):
    trap_work(monkeypatch)
    assert main(["fit", *SMALL, "--dropout", rate, "--out", str(tmp_path / "out"), *QUIET]) == 2
    assert "--dropout must be in [0, 1) (0: no dropout)" in one_line_error(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_dropout_run_records_the_rate_trains_with_it_and_loads(tmp_path):
    records = {}
    for rate in ("0", "0.5"):
        assert main(["fit", *SMALL, "--dropout", rate, "--out", str(tmp_path / rate), *QUIET]) == 0
        records[rate] = json.loads((tmp_path / rate / "results.json").read_text())
    assert records["0.5"]["options"]["dropout"] == 0.5 and records["0"]["options"]["dropout"] == 0.0
    assert records["0.5"]["metrics"] != records["0"]["metrics"]
    run = load_run(tmp_path / "0.5")
    assert run.model.dropout == 0.5
    record = records["0.5"]
    ds = data.load_dataset(record["data"], record["split"], record["options"]["target"])
    mean, var = run.predict(ds.X_test)  # no dropout when predicting: the run's own evaluation again
    assert np.all(var > 0)
    assert metrics.rmse(ds.y_test, mean) == pytest.approx(record["metrics"]["rmse"], rel=1e-9)
