"""End-to-end tests of ``ppl-sparsegp fit``, run in-process through ``main([...])`` into ``tmp_path``.

Runs are short (M = 16, a few hundred steps at a raised learning rate) so that the whole file stays fast (the
float32 and Snelson runs, each one more compilation, are marked slow and run by ``make test-slow``); the
thresholds are set against the diabetes test set, whose targets have standard deviation 71.6 (predicting the
training mean gives RMSE 71.7; a linear model about 54; the full default demo about 58).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys

import arviz as az
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ppl_sparsegp import data, results
from ppl_sparsegp.cli import main
from ppl_sparsegp.cli import svgp as cli_svgp
from ppl_sparsegp.posterior import diagnostics

FAST = ("--inducing", "16", "--lr", "0.05", "--no-progress", "--quiet")


def fit(tmp_path, *args: str, out: str = "out") -> tuple[dict, object]:
    """Run ``ppl-sparsegp fit ARGS --out tmp_path/out``; return results.json and the output folder."""
    folder = tmp_path / out
    assert main(["fit", *args, "--out", str(folder)]) == 0
    return json.loads((folder / "results.json").read_text()), folder


@pytest.fixture(scope="module")
def diabetes_test_sd() -> float:
    return float(np.std(data.load_dataset("diabetes").y_test))


SVGP_RUN = ("svgp", "--checkpoint-every", "100", *FAST)


@pytest.fixture(scope="module")
def svgp_run(tmp_path_factory) -> tuple[dict, object]:
    """One ``fit svgp --steps 200`` on diabetes (checkpointed every 100 steps), made once for the module: the
    end-to-end test checks its outputs and the resume test continues a copy of its folder."""
    return fit(tmp_path_factory.mktemp("svgp"), *SVGP_RUN, "--steps", "200")


def check_outputs(folder, expected_params: dict[str, tuple[int, ...]]) -> None:
    """The three output files exist; params.npz loads without pickle and holds the expected shapes."""
    assert (folder / "fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with np.load(folder / "params.npz", allow_pickle=False) as params:
        shapes = {k: params[k].shape for k in params.files}
        assert all(np.all(np.isfinite(params[k])) for k in params.files)
    for name, shape in expected_params.items():
        assert shapes[name] == shape, name
    assert shapes["standardizer.x_mean"] == (10,)
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_svgp_on_diabetes_end_to_end(svgp_run, diabetes_test_sd):
    record, folder = svgp_run
    m = record["metrics"]
    assert record["method"] == "svgp" and record["data"] == "embedded/diabetes" and record["split"] == 0
    assert record["n_train"] == 353 and record["n_eval"] == 89 and record["evaluated_on"] == "test"
    assert 50.0 < m["rmse"] < 0.9 * diabetes_test_sd
    assert 35.0 < m["mae"] < m["rmse"]
    assert 5.0 < m["nlpd"] < 5.8
    np.testing.assert_allclose(m["rmse_of_training_mean"], 71.657, atol=1e-3)
    assert record["steps"] == 200 and record["resumed_from_step"] == 0
    assert math.isfinite(record["final_loss"]) and record["steps_per_second"] > 0
    assert record["compile_seconds"] > 0 and record["train_seconds"] >= record["run_seconds"]
    assert set(record["versions"]) >= {"jax", "numpyro", "ppl_sparsegp"}
    o = record["options"]
    assert (o["likelihood"], o["noise_variance"], o["inducing"], o["init"], o["whiten"]) == (
        "gaussian",
        0.1,
        16,
        "kmeans",
        True,
    )
    check_outputs(
        folder,
        {"Z": (16, 10), "u_loc": (1, 16), "u_scale_tril": (1, 16, 16), "kernel.lengthscale": (10,)},
    )


@pytest.mark.slow
def test_sgpr_prints_a_summary_and_writes_results(tmp_path, capsys, diabetes_test_sd):
    record, folder = fit(tmp_path, "sgpr", "--steps", "100", "--inducing", "16", "--lr", "0.05", "--no-progress")
    m = record["metrics"]
    assert 50.0 < m["rmse"] < 0.9 * diabetes_test_sd and 5.0 < m["nlpd"] < 5.8
    printed = capsys.readouterr().out
    assert f"test RMSE {m['rmse']:.4g}" in printed and f"NLPD {m['nlpd']:.4g}" in printed
    assert "sgpr on embedded/diabetes" in printed and str(folder / "results.json") in printed
    check_outputs(folder, {"Z": (16, 10), "likelihood.variance": ()})


@pytest.mark.slow
def test_gpr_on_diabetes(tmp_path, diabetes_test_sd):
    record, folder = fit(tmp_path, "gpr", "--steps", "60", "--lr", "0.1", "--no-progress", "--quiet")
    m = record["metrics"]
    assert 50.0 < m["rmse"] < 0.9 * diabetes_test_sd and 5.0 < m["nlpd"] < 5.8
    assert record["options"]["inducing"] is None and record["options"]["init"] is None
    check_outputs(folder, {"kernel.variance": (), "kernel.lengthscale": (10,)})
    with np.load(folder / "params.npz") as params:
        assert "Z" not in params.files


@pytest.mark.slow
def test_float32_run_stores_float32_parameters(tmp_path):
    record, folder = fit(tmp_path, "svgp", "--steps", "100", "--dtype", "float32", *FAST)
    assert record["metrics"]["rmse"] < 65.0
    with np.load(folder / "params.npz") as params:
        assert params["u_loc"].dtype == np.float32 and params["kernel.lengthscale"].dtype == np.float32


@pytest.mark.slow
def test_the_default_float64_run_computes_in_64_bits_in_a_process_without_x64(tmp_path):
    # The test session enables x64 (conftest); a user's shell does not. The CLI sets it for the run from --dtype.
    out = tmp_path / "out"
    command = [sys.executable, "-m", "ppl_sparsegp.cli", "fit", "svgp", "--steps", "5", "--out", str(out), *FAST]
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    with np.load(out / "params.npz") as params:
        assert params["u_loc"].dtype == np.float64 and params["kernel.lengthscale"].dtype == np.float64


def test_a_stopped_run_resumes_from_its_checkpoint(svgp_run, tmp_path, capsys):
    common = SVGP_RUN
    first, first_folder = svgp_run  # a finished 200-step run: copied, so that the shared folder stays as it was
    folder = tmp_path / "out"
    shutil.copytree(first_folder, folder)
    assert first["resumed_from_step"] == 0 and first["steps"] == 200
    with np.load(folder / "checkpoint.npz") as ckpt:
        assert int(ckpt["step"]) == 200
        first_losses = ckpt["losses"].copy()

    again, _ = fit(tmp_path, *common, "--steps", "300")
    assert again["resumed_from_step"] == 200 and again["steps_this_run"] == 100 and again["steps"] == 300
    with np.load(folder / "checkpoint.npz") as ckpt:
        assert int(ckpt["step"]) == 300
        np.testing.assert_array_equal(ckpt["losses"][:200], first_losses)
    assert again["final_loss"] < first_losses[-1]

    # The checkpoint of another model (here a diagonal q(u)) is refused with a message, not silently reused.
    before = (folder / "results.json").read_text()
    assert main(["fit", *common, "--steps", "400", "--q-diag", "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: checkpoint: {folder / 'checkpoint.npz'} was written for a different model")
    assert (folder / "results.json").read_text() == before


def test_an_interrupted_run_says_how_to_resume(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_svgp, "fit_svi", interrupted)
    folder = tmp_path / "out"
    assert main(["fit", "sgpr", *FAST, "--out", str(folder)]) == 130
    err = capsys.readouterr().err
    assert err == f"interrupted; run the same command again to resume from {folder / 'checkpoint.npz'}\n"


@pytest.mark.slow
def test_binary_classification_with_svgp(tmp_path):
    record, folder = fit(tmp_path, "svgp", "--data", "breast_cancer", "--steps", "100", *FAST)
    m = record["metrics"]
    assert record["task"] == "binary" and record["options"]["likelihood"] == "probit"
    assert record["options"]["noise_variance"] is None
    assert m["accuracy"] > 0.9 and m["auc"] > 0.95
    assert 0.0 < m["nll"] < 0.3 and 0.0 <= m["ece"] < 0.1
    with np.load(folder / "params.npz") as params:
        assert "likelihood.variance" not in params.files and params["Z"].shape == (16, 30)


@pytest.mark.slow
def test_dataset_without_test_targets_is_evaluated_on_training_data(tmp_path):
    root = data.data_dir()
    if not (root / "snelson").is_dir():
        pytest.skip(f"snelson not found under {root}")
    record, folder = fit(tmp_path, "sgpr", "--data", "snelson", "--steps", "100", *FAST)
    assert record["evaluated_on"] == "train" and record["n_eval"] == 200
    assert "no test targets" in record["note"]
    assert record["metrics"]["rmse"] < 0.4  # Snelson's noise sd is about 0.3
    assert (folder / "fit.png").stat().st_size > 10_000


def test_help_lists_every_option_with_its_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag: no flag named in a help text broken at a hyphen
    assert main(["fit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    options = [
        "--data",
        "--data-npy",
        "--target",
        "--split",
        "--inducing",
        "--init",
        "--steps",
        "--lr",
        "--batch-size",
        "--kernel",
        "--kernel-variance",
        "--lengthscale",
        "--noise-variance",
        "--likelihood",
        "--whiten",
        "--no-whiten",
        "--q-diag",
        "--seed",
        "--dtype",
        "--checkpoint-every",
        "--out",
        "--restart",
        "--no-progress",
        "--quiet",
        "--engine",
        "--warmup",
        "--samples",
        "--chains",
        "--thinning",
        "--step-size",
        "--prior",
        "--chunk",
        "--layers",
        "--z-prior",
        "--data-term",
        "--noise",
        "--noise-per-output",
        "--iterations",
        "--kept",
        "--candidates",
        "--alpha",
        "--bound",
        "--selection",
        "--particles",
        "--initial-inclusion",
        "--pre-steps",
        "--selection-steps",
        "--post-steps",
        "--selection-lr",
        "--white",
        "--hidden",
        "--activation",
        "--epochs",
        "--dropout",
        "--optimizer",
        "--natgrad-step",
        "--freeze-steps",
        "--positive-transform",
        "--active",
        "--batch",
        "--latent-dim",
        "--weight",
        "--bayesian",
        "--conditioning",
        "--devices",
        "--coordinator",
        "--num-processes",
        "--process-id",
        "--backend",
    ]
    for option in options:
        assert option in text, option
    assert set(re.findall(r"--[a-z][a-z0-9-]*", text)) == {*options, "--help"}
    for default in ("default: diabetes", "default: 128", "default: kmeans", "default: 2000", "default: 0.01"):
        assert default in text
    assert "default: runs/<method>-<data>-<split>" in text and "{svgp,sgpr,gpr,sgpmc,bsgp,selective,idsgp,sas}" in text


@pytest.mark.slow  # about 80 s: an SVGP fit and two NUTS chains in 30 dimensions; `make test-slow` runs it
def test_sgpmc_on_breast_cancer_then_diagnose(tmp_path, capsys, monkeypatch):
    """fit sgpmc (SVGP fit, then NUTS with Z fixed) writes posterior.nc, metrics and a figure of the chains;
    diagnose summarises it."""
    args = ["--data", "breast_cancer", "--inducing", "8", "--steps", "300", "--lr", "0.03"]
    mcmc = ["--warmup", "100", "--samples", "100", "--chains", "2", "--chunk", "50", "--no-progress", "--quiet"]
    figures, figure_file = [], results.figure_file
    monkeypatch.setattr(results, "figure_file", lambda figure: figures.append(figure) or figure_file(figure))
    record, folder = fit(tmp_path, "sgpmc", *args, *mcmc)
    chains = figures[0].axes[0]
    assert chains.get_title() == "kept draws" and [line.get_label() for line in chains.lines] == ["chain 0", "chain 1"]
    assert record["method"] == "sgpmc" and record["engine"] == "nuts" and record["task"] == "binary"
    assert record["chains"] == 2 and record["draws_per_chain"] == 100
    assert record["metrics"]["accuracy"] > 0.9 and record["metrics"]["nll"] < 0.3
    assert record["divergences"] == 0 and record["max_rhat"] < 1.1
    assert {"posterior.nc", "fit.png", "results.json", "mcmc.ckpt"} <= {p.name for p in folder.iterdir()}
    capsys.readouterr()
    assert main(["diagnose", str(folder)]) == 0
    table = capsys.readouterr().out
    assert "kernel.lengthscale[29]" in table and "r_hat" in table and "u[" not in table
    assert (folder / "trace.png").read_bytes()[:4] == b"\x89PNG" and (folder / "rank.png").exists()


def test_predicted_versus_observed_draws_every_point_and_error_bars_on_a_spread_subset():
    rng = np.random.default_rng(0)
    y = rng.normal(size=800)
    figure = results.plot_fit(np.ones(3), "regression", "test", y, y + 0.1, np.full(800, 0.04))
    try:
        ax = figure.axes[1]
        (points,) = [line for line in ax.lines if line.get_marker() == "."]
        assert len(points.get_xdata()) == 800
        (bars,) = ax.containers
        segments = bars.lines[2][0].get_segments()
        xs = sorted(segment[0][0] for segment in segments)
        assert len(segments) == results.MAX_ERROR_BARS and xs[0] == y.min() and xs[-1] == y.max()
        assert "on 150 of 800" in ax.get_title()
    finally:
        plt.close(figure)
    small = results.plot_fit(np.ones(3), "regression", "test", y[:40], y[:40], np.full(40, 0.04))
    assert len(small.axes[1].containers[0].lines[2][0].get_segments()) == 40
    assert small.axes[1].get_title() == "test set"
    plt.close(small)


def _overlapping_titles(figure) -> list[str]:
    """Titles of ``figure``'s axes that cover another title or another axes' x tick or axis labels."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    axes = [a for a in figure.axes if a.get_visible()]
    found = []
    for a in (a for a in axes if a.get_title()):
        box = a.title.get_window_extent(renderer)
        for b in (b for b in axes if b is not a):
            texts = [*b.get_xticklabels(), b.xaxis.label, b.title]
            if any(t.get_text() and box.overlaps(t.get_window_extent(renderer)) for t in texts):
                found.append(a.get_title())
    return found


def test_diagnose_prints_the_files_it_wrote_and_lays_out_its_plots(tmp_path, capsys, monkeypatch):
    rng = np.random.default_rng(0)
    draws = {"kernel.lengthscale": rng.normal(size=(2, 50, 3)), "kernel.variance": rng.normal(size=(2, 50))}
    diagnostics.save(az.from_dict(posterior={**draws, "u": rng.normal(size=(2, 50, 1, 4))}), tmp_path / "posterior.nc")
    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda figure: figures.append(figure))
    assert main(["diagnose", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'trace.png'}, {tmp_path / 'rank.png'}" in out
    assert len(figures) == 2
    for figure in figures:
        assert _overlapping_titles(figure) == []
        close(figure)


def test_diagnose_without_a_posterior_exits_2(tmp_path, capsys):
    assert main(["diagnose", str(tmp_path)]) == 2
    assert "no posterior.nc" in capsys.readouterr().err
