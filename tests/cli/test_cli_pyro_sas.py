"""``ppl-sparsegp fit sas --backend pyro``: the Pyro twin fitted by the Pyro recipe writes the outputs a NumPyro run
writes (the same params.npz arrays) and scores alike; its checkpoint resumes to the steps of an uninterrupted run; a
NumPyro run's checkpoint is refused naming ``--backend``; like a NumPyro sas run, it cannot be loaded to predict."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli_outputs import QUIET

from ppl_sparsegp.cli import main
from ppl_sparsegp.runs import load_run

SMALL = ("sas", "--data", "diabetes", "--active", "20", "--batch", "60", "--hidden", "8", "--lr", "0.01",
         "--checkpoint-every", "4")  # fmt: skip
PYRO = ("--backend", "pyro")


def _fit(folder, *options: str) -> dict:
    assert main(["fit", *options, "--out", str(folder), *QUIET]) == 0
    return json.loads((folder / "results.json").read_text())


@pytest.mark.slow
def test_a_pyro_run_writes_the_numpyro_runs_outputs_and_scores_alike(tmp_path):
    pyro_run = _fit(tmp_path / "pyro", *SMALL, "--epochs", "4", *PYRO)
    numpyro_run = _fit(tmp_path / "numpyro", *SMALL, "--epochs", "4")

    assert pyro_run["options"]["backend"] == "pyro" and numpyro_run["options"]["backend"] == "numpyro"
    assert sorted(p.name for p in (tmp_path / "pyro").iterdir()) == sorted(
        p.name for p in (tmp_path / "numpyro").iterdir()
    )
    assert pyro_run.keys() == numpyro_run.keys() and pyro_run["metrics"].keys() == numpyro_run["metrics"].keys()
    with np.load(tmp_path / "pyro" / "params.npz") as p, np.load(tmp_path / "numpyro" / "params.npz") as n:
        assert sorted(p) == sorted(n) and any(k.startswith("encoder$params") for k in p)
        assert all(p[k].shape == n[k].shape and p[k].dtype == n[k].dtype for k in p)
    assert pyro_run["steps"] == 24 and pyro_run["steps_per_epoch"] == 6 and np.isfinite(pyro_run["final_loss"])
    # other batches and active sets (torch's draws), the same objective from the same weights
    for name in ("rmse", "mae", "nlpd"):
        assert pyro_run["metrics"][name] == pytest.approx(numpyro_run["metrics"][name], rel=0.05), name
    with pytest.raises(ValueError, match="a sas run cannot be loaded to predict"):
        load_run(tmp_path / "pyro")


@pytest.mark.slow
def test_a_resumed_pyro_run_takes_the_steps_of_an_uninterrupted_one(tmp_path):
    straight = _fit(tmp_path / "straight", *SMALL, "--epochs", "2", "--bayesian", *PYRO)
    first = _fit(tmp_path / "resumed", *SMALL, "--epochs", "1", "--bayesian", *PYRO)
    resumed = _fit(tmp_path / "resumed", *SMALL, "--epochs", "2", "--bayesian", *PYRO)

    assert first["steps"] == 6 and resumed["resumed_from_step"] == 6 and resumed["steps"] == 12
    assert resumed["final_loss"] == straight["final_loss"]
    assert resumed["metrics"] == straight["metrics"]


@pytest.mark.slow
def test_the_other_backends_checkpoint_is_refused_naming_backend(tmp_path, capsys):
    _fit(tmp_path, *SMALL, "--epochs", "1")
    capsys.readouterr()
    assert main(["fit", *SMALL, "--epochs", "1", *PYRO, "--out", str(tmp_path), *QUIET]) == 2
    assert "--backend 'numpyro' -> 'pyro'" in capsys.readouterr().err
