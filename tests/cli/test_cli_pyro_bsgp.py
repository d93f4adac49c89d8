"""``ppl-sparsegp fit bsgp --backend pyro``: the Pyro chain (the released SGHMC schedule, thinning 32) writes the
files a NumPyro run writes, with the same posterior groups and sampler record, and scores alike on diabetes; the same
command again resumes from its finished checkpoint; a checkpoint of the other backend is refused naming
``--backend``; ``--devices`` is refused; a loaded Pyro run predicts as the run did; NUTS runs on the Pyro side too."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli_outputs import QUIET

from ppl_sparsegp import data, metrics
from ppl_sparsegp.cli import main
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.runs import load_run

SMALL = ("--data", "diabetes", "--iterations", "5", "--kept", "2", "--inducing", "8", "--batch-size", "64")
"""105 warmup updates, 2 draws 32 updates apart, minibatches of 64 of the 353 training points."""


def _fit(folder, *options: str) -> dict:
    assert main(["fit", "bsgp", *options, "--out", str(folder), *QUIET]) == 0
    return json.loads((folder / "results.json").read_text())


@pytest.mark.slow
def test_a_pyro_bsgp_run_writes_the_numpyro_runs_outputs_scores_alike_and_resumes(tmp_path, capsys):
    record = _fit(tmp_path / "pyro", *SMALL, "--backend", "pyro")
    numpyro_run = _fit(tmp_path / "numpyro", *SMALL)

    assert record["options"]["backend"] == "pyro" and {"torch", "pyro"} <= set(record["versions"])
    names = sorted(p.name for p in (tmp_path / "pyro").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "numpyro").iterdir())
    assert record["files"] == numpyro_run["files"]
    assert record["sampler"] == numpyro_run["sampler"]
    assert (record["sampler"]["draws_per_chain"], record["sampler"]["thinning"]) == (2, 32)
    assert record["sampler"]["kernel"] == "AdaptiveSGHMC" and record["noise"] == "point"
    pyro_idata = diagnostics.load(tmp_path / "pyro" / "posterior.nc")
    numpyro_idata = diagnostics.load(tmp_path / "numpyro" / "posterior.nc")
    for site, values in numpyro_idata.posterior.data_vars.items():
        assert pyro_idata.posterior[site].dims == values.dims and pyro_idata.posterior[site].shape == values.shape
    assert pyro_idata.sample_stats["lp"].shape == (1, 2)
    noise = pyro_idata.posterior["likelihood.variance"].values
    # optimised in the warmup from 1.0 (5 Adam steps of lr 0.01 on its log), then fixed
    assert np.all(noise == noise.flat[0]) and noise.flat[0] != 1.0 and abs(np.log(noise.flat[0])) < 0.06
    # different random streams from the same start and schedule: both beat the training mean, by about as much
    m, n = record["metrics"], numpyro_run["metrics"]
    assert m["rmse"] < m["rmse_of_training_mean"] and n["rmse"] < n["rmse_of_training_mean"]
    assert m["mnll"] == pytest.approx(n["mnll"], abs=0.05) and m["rmse"] == pytest.approx(n["rmse"], rel=0.03)

    again = _fit(tmp_path / "pyro", *SMALL, "--backend", "pyro")  # every draw is in the checkpoint
    assert again["metrics"] == record["metrics"] and again["resumed_from"] == {"chains_done": 1, "steps_done": 0}

    capsys.readouterr()
    argv = ["fit", "bsgp", *SMALL, "--backend", "pyro", "--out", str(tmp_path / "numpyro"), *QUIET]
    assert main(argv) == 2
    assert "--backend 'numpyro' -> 'pyro'" in capsys.readouterr().err

    ds = data.load_dataset(record["data"], record["split"], record["options"]["target"])
    run = load_run(tmp_path / "pyro")
    assert run.method == "bsgp"
    mean, var = run.predict(ds.X_test)
    assert mean.shape == var.shape == ds.y_test.shape and np.all(var > 0)
    assert metrics.rmse(ds.y_test, mean) == pytest.approx(m["rmse"], rel=1e-9)


def test_devices_are_refused_with_the_pyro_backend(tmp_path, capsys):
    argv = ["fit", "bsgp", *SMALL, "--backend", "pyro", "--devices", "2", "--out", str(tmp_path / "run"), *QUIET]
    assert main(argv) == 2
    assert "--devices: --backend pyro runs on one device" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_pyro_nuts_writes_the_numpyro_runs_record(tmp_path):
    options = ("--data", "diabetes", "--engine", "nuts", "--warmup", "8", "--samples", "6", "--inducing", "3")
    record = _fit(tmp_path, *options, "--backend", "pyro")
    assert record["sampler"]["kernel"] == "NUTS" and record["sampler"]["draws_per_chain"] == 6
    assert record["noise"] == "sampled" and record["divergences"] is not None
    assert record["metrics"]["rmse"] < record["metrics"]["rmse_of_training_mean"]
    idata = diagnostics.load(tmp_path / "posterior.nc")
    assert np.ptp(idata.posterior["likelihood.variance"].values) > 0
