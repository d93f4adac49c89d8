"""``ppl-sparsegp fit selective --backend pyro``: the Pyro recipe's pruned model, evaluated and stored through the
NumPyro SGPR, writes the files and results.json keys of a NumPyro run, from the NumPyro run's candidates and with its
deterministic pre-training (final loss to 1e-6), and scores alike on diabetes; a run interrupted in the selection
phase resumes to the uninterrupted run; the other backend's checkpoint is refused naming ``--backend``; a loaded Pyro
run predicts as the run did.

Each run compiles the NumPyro predictive (the NumPyro run its three phases too), so the file makes three full runs
(Pyro, NumPyro, the resumed Pyro) and one interrupted one."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from test_cli_outputs import QUIET

from ppl_sparsegp import data, metrics
from ppl_sparsegp.cli import main
from ppl_sparsegp.pyro.score_function import ScoreFunctionELBO
from ppl_sparsegp.runs import load_run

TINY = ("--candidates", "12", "--pre-steps", "30", "--selection-steps", "10", "--post-steps", "10",
        "--checkpoint-every", "5")  # fmt: skip
PYRO = (*TINY, "--backend", "pyro")


def _fit(folder, *options: str) -> dict:
    assert main(["fit", "selective", *options, "--out", str(folder), *QUIET]) == 0
    return json.loads((folder / "results.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The Pyro run and the NumPyro run of TINY: (folder, results.json) each."""
    folder = tmp_path_factory.mktemp("selective")
    return {
        name: (folder / name, _fit(folder / name, *options)) for name, options in (("pyro", PYRO), ("numpyro", TINY))
    }


def test_a_pyro_run_writes_the_numpyro_runs_outputs_and_scores_alike(runs):
    (pyro_folder, by_pyro), (numpyro_folder, by_numpyro) = runs["pyro"], runs["numpyro"]
    assert by_pyro["options"]["backend"] == "pyro" and by_numpyro["options"]["backend"] == "numpyro"
    assert {"torch", "pyro"} <= set(by_pyro["versions"])
    assert sorted(p.name for p in pyro_folder.iterdir()) == sorted(p.name for p in numpyro_folder.iterdir())
    assert set(by_pyro) == set(by_numpyro) and set(by_pyro["metrics"]) == set(by_numpyro["metrics"])
    assert by_pyro["steps"] == by_numpyro["steps"] == {"pre": 30, "selection": 10, "post": 10}
    # the same candidates and the same deterministic pre-training, by Adam in torch and in optax
    assert by_pyro["final_loss"]["pre"] == pytest.approx(by_numpyro["final_loss"]["pre"], rel=1e-6)
    for name in ("params.npz", "selection.npz"):
        with np.load(pyro_folder / name) as a, np.load(numpyro_folder / name) as b:
            assert sorted(a.files) == sorted(b.files), name
    with np.load(pyro_folder / "selection.npz") as a, np.load(numpyro_folder / "selection.npz") as b:
        # the same candidates, pre-trained alike (then held by the frozen selection)
        np.testing.assert_allclose(a["candidates"], b["candidates"], rtol=0, atol=1e-8)
        np.testing.assert_array_equal(a["selected"], np.flatnonzero(a["mask"]))
        assert np.all((a["inclusion_probs"] > 0) & (a["inclusion_probs"] < 1))
    with np.load(pyro_folder / "params.npz") as params:
        assert params["Z"].shape == (by_pyro["selected_count"], 10)
    assert by_pyro["expected_count"] == pytest.approx(by_numpyro["expected_count"], abs=2.0)
    m = by_pyro["metrics"]
    assert m["rmse"] < m["rmse_of_training_mean"] and np.isfinite(m["nlpd"])
    assert m["rmse"] == pytest.approx(by_numpyro["metrics"]["rmse"], rel=0.1)


@pytest.mark.slow
def test_a_run_interrupted_in_the_selection_resumes_to_the_uninterrupted_run(runs, tmp_path, monkeypatch):
    steps = []
    step = ScoreFunctionELBO.loss_and_grads

    def killed(elbo, *args, **kwargs):
        steps.append(1)
        if len(steps) == 8:  # after the selection's checkpoint at step 5
            raise KeyboardInterrupt
        return step(elbo, *args, **kwargs)

    monkeypatch.setattr(ScoreFunctionELBO, "loss_and_grads", killed)
    assert main(["fit", "selective", *PYRO, "--out", str(tmp_path), *QUIET]) != 0
    monkeypatch.setattr(ScoreFunctionELBO, "loss_and_grads", step)
    assert {p.name for p in tmp_path.iterdir()} == {"selective_pre.npz", "selective_selection.npz"}
    resumed = _fit(tmp_path, *PYRO)
    straight = runs["pyro"][1]
    assert resumed["final_loss"] == straight["final_loss"] and resumed["metrics"] == straight["metrics"]
    for name in ("params.npz", "selection.npz"):
        with np.load(tmp_path / name) as a, np.load(runs["pyro"][0] / name) as b:
            for key in b.files:
                np.testing.assert_array_equal(a[key], b[key])


def test_the_other_backends_checkpoint_is_refused_naming_backend(runs, tmp_path, capsys):
    folder = tmp_path / "run"
    shutil.copytree(runs["pyro"][0], folder)
    assert main(["fit", "selective", *TINY, "--out", str(folder), *QUIET]) == 2
    assert "--backend 'pyro' -> 'numpyro'" in capsys.readouterr().err


def test_a_loaded_pyro_run_predicts_as_the_run_did(runs):
    folder, record = runs["pyro"]
    ds = data.load_dataset(record["data"], record["split"], record["options"]["target"])
    run = load_run(folder)
    assert run.method == "selective"
    mean, var = run.predict(ds.X_test)
    assert mean.shape == var.shape == ds.y_test.shape
    assert metrics.rmse(ds.y_test, mean) == pytest.approx(record["metrics"]["rmse"], rel=1e-9)
