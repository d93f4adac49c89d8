"""``ppl-sparsegp fit idsgp --backend pyro``: the Pyro twin fitted by the Pyro recipe writes the outputs a NumPyro run
writes (the same params.npz arrays) and, full batch from the same initial weights, takes the same steps and scores
alike; its checkpoint resumes to the steps of an uninterrupted run; a NumPyro run's checkpoint is refused naming
``--backend``; a loaded Pyro run predicts as the run did."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli_outputs import QUIET

from ppl_sparsegp import data, metrics
from ppl_sparsegp.cli import main
from ppl_sparsegp.runs import load_run

SMALL = ("idsgp", "--inducing", "4", "--hidden", "8", "--lr", "0.02")
MINIBATCH = (*SMALL, "--batch-size", "128", "--checkpoint-every", "2")
PYRO = ("--backend", "pyro")


def _fit(folder, *options: str) -> dict:
    assert main(["fit", *options, "--out", str(folder), *QUIET]) == 0
    return json.loads((folder / "results.json").read_text())


@pytest.mark.slow
def test_a_pyro_run_writes_the_numpyro_runs_outputs_and_scores_alike(tmp_path):
    full_batch = (*SMALL, "--batch-size", "400", "--epochs", "8")  # diabetes has N = 353: one step an epoch
    pyro_run = _fit(tmp_path / "pyro", *full_batch, *PYRO)
    numpyro_run = _fit(tmp_path / "numpyro", *full_batch)

    assert pyro_run["options"]["backend"] == "pyro" and numpyro_run["options"]["backend"] == "numpyro"
    assert {"torch", "pyro"} <= set(pyro_run["versions"])
    assert sorted(p.name for p in (tmp_path / "pyro").iterdir()) == sorted(
        p.name for p in (tmp_path / "numpyro").iterdir()
    )
    with np.load(tmp_path / "pyro" / "params.npz") as p, np.load(tmp_path / "numpyro" / "params.npz") as n:
        assert sorted(p) == sorted(n) and any(k.startswith("network$params") for k in p)
        assert all(p[k].shape == n[k].shape and p[k].dtype == n[k].dtype for k in p)
    assert pyro_run["steps"] == 8 and pyro_run["steps_per_epoch"] == 1
    # the same full-batch objective from the same weights, by Adam in torch and in optax
    assert pyro_run["final_loss"] == pytest.approx(numpyro_run["final_loss"], rel=1e-6)
    assert pyro_run["metrics"]["nlpd"] == pytest.approx(numpyro_run["metrics"]["nlpd"], rel=1e-6)
    assert pyro_run["metrics"]["rmse"] < pyro_run["metrics"]["rmse_of_training_mean"]


@pytest.mark.slow
def test_a_resumed_pyro_run_takes_the_steps_of_an_uninterrupted_one(tmp_path):
    straight = _fit(tmp_path / "straight", *MINIBATCH, "--epochs", "2", *PYRO)
    first = _fit(tmp_path / "resumed", *MINIBATCH, "--epochs", "1", *PYRO)
    resumed = _fit(tmp_path / "resumed", *MINIBATCH, "--epochs", "2", *PYRO)

    assert first["steps"] == 3 and resumed["resumed_from_step"] == 3 and resumed["steps_this_run"] == 3
    assert resumed["final_loss"] == straight["final_loss"]
    assert resumed["metrics"] == straight["metrics"]


@pytest.mark.slow
def test_the_other_backends_checkpoint_is_refused_naming_backend(tmp_path, capsys):
    _fit(tmp_path, *MINIBATCH, "--epochs", "1")
    capsys.readouterr()
    assert main(["fit", *MINIBATCH, "--epochs", "1", *PYRO, "--out", str(tmp_path), *QUIET]) == 2
    assert "--backend 'numpyro' -> 'pyro'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_loaded_pyro_run_predicts_as_the_run_did(tmp_path):
    record = _fit(tmp_path, *MINIBATCH, "--epochs", "1", *PYRO)
    ds = data.load_dataset(record["data"], record["split"], record["options"]["target"])
    run = load_run(tmp_path)
    assert run.method == "idsgp"
    mean, var = run.predict(ds.X_test)
    assert mean.shape == var.shape == ds.y_test.shape
    assert metrics.rmse(ds.y_test, mean) == pytest.approx(record["metrics"]["rmse"], rel=1e-9)
