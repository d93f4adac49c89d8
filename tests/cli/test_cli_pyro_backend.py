"""``ppl-sparsegp fit gpr|sgpr|svgp|sgpmc --backend pyro``: the Pyro twin fitted by Pyro's engines writes the
outputs a NumPyro run writes and scores as well on diabetes; its checkpoint resumes to the steps of an uninterrupted
run (sgpmc: to its finished chains, and a thinned run inside a chain); a checkpoint of the other backend is refused
naming ``--backend``; ``--devices`` is refused with the Pyro backend; a loaded Pyro run predicts as the run did."""

from __future__ import annotations

import json

import numpy as np
import pyro
import pytest
from test_cli_outputs import QUIET

from ppl_sparsegp import data, metrics
from ppl_sparsegp.cli import main
from ppl_sparsegp.infer import checkpoint
from ppl_sparsegp.runs import load_run

SMALL = ("--inducing", "8", "--steps", "40", "--lr", "0.05", "--batch-size", "64", "--checkpoint-every", "20")


def _fit(folder, *options: str) -> dict:
    assert main(["fit", *options, "--out", str(folder), *QUIET]) == 0
    return json.loads((folder / "results.json").read_text())


@pytest.mark.parametrize("method", [pytest.param(m, marks=pytest.mark.slow) for m in ("gpr", "sgpr", "svgp")])
def test_a_pyro_run_writes_the_numpyro_runs_outputs_and_scores_alike(method, tmp_path):
    options = ("--steps", "30", "--lr", "0.05") + (("--inducing", "8") if method != "gpr" else ())
    pyro_run = _fit(tmp_path / "pyro", method, *options, "--backend", "pyro")
    numpyro_run = _fit(tmp_path / "numpyro", method, *options)

    assert pyro_run["options"]["backend"] == "pyro" and numpyro_run["options"]["backend"] == "numpyro"
    assert {"torch", "pyro"} <= set(pyro_run["versions"])
    assert sorted(p.name for p in (tmp_path / "pyro").iterdir()) == sorted(
        p.name for p in (tmp_path / "numpyro").iterdir()
    )
    assert pyro_run["steps"] == 30 and np.isfinite(pyro_run["final_loss"])
    # the same full-batch objective from the same start, by Adam in torch and in optax
    assert pyro_run["final_loss"] == pytest.approx(numpyro_run["final_loss"], rel=1e-6)
    assert pyro_run["metrics"]["nlpd"] == pytest.approx(numpyro_run["metrics"]["nlpd"], rel=1e-6)


@pytest.mark.slow
def test_a_resumed_pyro_run_takes_the_steps_of_an_uninterrupted_one(tmp_path):
    straight = _fit(tmp_path / "straight", "svgp", *SMALL, "--backend", "pyro")
    first = _fit(tmp_path / "resumed", "svgp", *SMALL[:3], "20", *SMALL[4:], "--backend", "pyro")
    resumed = _fit(tmp_path / "resumed", "svgp", *SMALL, "--backend", "pyro")

    assert first["steps"] == 20 and resumed["resumed_from_step"] == 20 and resumed["steps_this_run"] == 20
    assert resumed["final_loss"] == straight["final_loss"]
    assert resumed["metrics"] == straight["metrics"]


@pytest.mark.slow
def test_the_other_backends_checkpoint_is_refused_naming_backend(tmp_path, capsys):
    _fit(tmp_path, "svgp", *SMALL)
    capsys.readouterr()
    assert main(["fit", "svgp", *SMALL, "--backend", "pyro", "--out", str(tmp_path), *QUIET]) == 2
    assert "--backend 'numpyro' -> 'pyro'" in capsys.readouterr().err


def test_devices_are_refused_with_the_pyro_backend(tmp_path, capsys):
    argv = ["fit", "svgp", *SMALL, "--backend", "pyro", "--devices", "2", "--out", str(tmp_path / "run"), *QUIET]
    assert main(argv) == 2
    assert "--devices: --backend pyro runs on one device" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_loaded_pyro_run_predicts_as_the_run_did(tmp_path):
    record = _fit(tmp_path, "svgp", *SMALL, "--backend", "pyro")
    ds = data.load_dataset(record["data"], record["split"], record["options"]["target"])
    run = load_run(tmp_path)
    assert run.method == "svgp"
    mean, var = run.predict(ds.X_test)
    assert mean.shape == var.shape == ds.y_test.shape
    assert metrics.rmse(ds.y_test, mean) == pytest.approx(record["metrics"]["rmse"], rel=1e-9)


SGPMC = ("--inducing", "5", "--steps", "20", "--warmup", "10", "--samples", "10", "--chains", "2")


@pytest.mark.slow
def test_a_pyro_sgpmc_run_writes_the_numpyro_runs_outputs_and_resumes_from_its_chains(tmp_path):
    record = _fit(tmp_path / "pyro", "sgpmc", *SGPMC, "--backend", "pyro")
    numpyro_run = _fit(tmp_path / "numpyro", "sgpmc", *SGPMC)
    assert sorted(p.name for p in (tmp_path / "pyro").iterdir()) == sorted(
        p.name for p in (tmp_path / "numpyro").iterdir()
    )
    assert record["chains"] == 2 and record["draws_per_chain"] == 10 and record["engine"] == "nuts"
    assert np.isfinite(record["metrics"]["nlpd"]) and record["options"]["backend"] == "pyro"
    assert set(record["metrics"]) == set(numpyro_run["metrics"])
    again = _fit(tmp_path / "pyro", "sgpmc", *SGPMC, "--backend", "pyro")  # both chains in the checkpoint
    assert again["metrics"] == record["metrics"]


@pytest.mark.slow
def test_a_thinned_chunked_pyro_sgpmc_run_resumes_inside_a_chain_to_the_uninterrupted_run(tmp_path, monkeypatch):
    """--thinning 2 --chunk 4: five draws per chain; a run killed in the second chain's sampling resumes from its
    last chunk (not from the chain's start) and writes the metrics of the uninterrupted run."""
    options = (*SGPMC, "--thinning", "2", "--chunk", "4", "--backend", "pyro")
    straight = _fit(tmp_path / "straight", "sgpmc", *options)
    assert straight["draws_per_chain"] == 5
    calls = []
    nuts_sample = pyro.infer.NUTS.sample

    def killed(kernel, params):
        calls.append(1)
        if len(calls) == 20 + 10 + 6:  # chain 1's 20 steps, chain 2's 10 warmup steps and 6 post-warmup steps
            raise KeyboardInterrupt
        return nuts_sample(kernel, params)

    monkeypatch.setattr(pyro.infer.NUTS, "sample", killed)
    assert main(["fit", "sgpmc", *options, "--out", str(tmp_path / "killed"), *QUIET]) != 0
    monkeypatch.setattr(pyro.infer.NUTS, "sample", nuts_sample)
    saved = checkpoint.read(tmp_path / "killed" / "mcmc.ckpt")
    assert saved.counters == {"chains_done": 1, "steps_done": 10 + 4}
    resumed = _fit(tmp_path / "killed", "sgpmc", *options)
    assert resumed["metrics"] == straight["metrics"]
