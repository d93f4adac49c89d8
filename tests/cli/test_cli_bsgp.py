"""``ppl-sparsegp fit bsgp``, run in-process through ``main([...])`` into ``tmp_path``.

A BSGP run compiles the SGHMC chain, its initialisation and the mixture predictive (most of a minute on a loaded
two-core machine, whatever the settings), so the default tests make one tiny end-to-end run (yacht, 20 warmup
iterations, 4 kept draws, M = 10) and check everything else before compilation; the deep, NUTS, classification
and resume runs are marked slow (``make test-slow``).
"""

from __future__ import annotations

import json
import math
from functools import partial

import jax
import numpy as np
import pytest

from ppl_sparsegp import data
from ppl_sparsegp.cli import bsgp as cli_bsgp
from ppl_sparsegp.cli import main
from ppl_sparsegp.cli.__main__ import build_parser
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.recipes.bsgp import plan_bsgp

TINY = ("--iterations", "20", "--kept", "4", "--inducing", "10", "--no-progress")


def _has(folder: str) -> bool:
    return (data.data_dir() / "uci" / folder).is_dir()


needs_yacht = pytest.mark.skipif(not _has("yacht"), reason="uci/yacht not found in the data folder")


@pytest.fixture
def no_compilation(monkeypatch):
    """Replace ``jax.jit`` by a trap: anything raised under this fixture was raised before compilation."""

    def trap(*args, **kwargs):
        raise AssertionError("jax.jit was reached before the bad input was rejected")

    monkeypatch.setattr(jax, "jit", trap)


def fit(folder, *args: str) -> dict:
    """Run ``ppl-sparsegp fit bsgp ARGS --out folder``; return results.json."""
    assert main(["fit", "bsgp", *args, "--out", str(folder)]) == 0
    return json.loads((folder / "results.json").read_text())


@needs_yacht
@pytest.mark.slow
def test_bsgp_on_yacht_end_to_end(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "out"
    record = fit(folder, "--data", "yacht", "--split", "0", "--chains", "2", *TINY)
    m, s, o = record["metrics"], record["sampler"], record["options"]
    assert record["method"] == "bsgp" and record["data"] == "bsgp/yacht" and record["split"] == 0
    assert (record["n_train"], record["n_eval"], record["input_dim"]) == (246, 62, 6)
    assert record["evaluated_on"] == "test" and record["task"] == "regression"
    # yacht's targets have sd ~15; even 20 iterations beat predicting the training mean
    assert math.isfinite(m["mnll"]) and m["mnll"] == m["nlpd"] and 0.0 < m["mnll"] < 6.0
    assert 0.0 < m["rmse"] < m["rmse_of_training_mean"]
    assert (record["engine"], record["layers"], record["z_prior"], record["noise"]) == ("sghmc", 1, "normal", "point")
    assert (record["data_term"], record["likelihood"]) == ("log_expected", "gaussian")
    assert (o["iterations"], o["kept"], o["inducing"], o["step_size"], o["batch_size"]) == (20, 4, 10, 0.01, 1000)
    assert o["noise_variance"] == 1.0 and o["steps"] is None and o["warmup"] is None
    assert s == {
        "kernel": "AdaptiveSGHMC",
        "chains": 2,
        "draws_per_chain": 4,
        "warmup_updates": 420,
        "sample_updates": 128,
        "thinning": 32,
        "updates_per_iteration": 21,
        "batch_size": 246,
        "step_size": 0.01,
    }
    assert record["warmup_seconds"] > 0 and record["sample_seconds"] > 0 and record["updates_per_second"] > 0
    assert record["resumed_from"] is None and record["divergences"] is None
    assert set(record["versions"]) >= {"jax", "numpyro", "ppl_sparsegp"}
    assert record["likelihood_parameters_standardised"]["likelihood.variance"] > 0

    printed = capsys.readouterr().out
    assert "bsgp (sghmc, 1 layer, normal Z prior) on bsgp/yacht (split 0; N = 246, D = 6, M = 10)" in printed
    assert f"test MNLL {m['mnll']:.4g}" in printed and str(folder / "results.json") in printed

    names = {p.name for p in folder.iterdir()}
    assert names == {"results.json", "posterior.nc", "fit.png", "mcmc.ckpt", "mcmc.ckpt.json"}
    assert (folder / "fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    idata = diagnostics.load(folder / "posterior.nc")
    Z = idata.posterior["Z"]
    assert Z.dims == ("chain", "draw", "inducing_point", "input_dim") and Z.shape == (2, 4, 10, 6)
    assert idata.posterior["u"].dims == ("chain", "draw", "latent", "inducing_point")
    assert idata.posterior["kernel.lengthscale"].dims == ("chain", "draw", "input_dim")
    assert {"likelihood.variance", "kernel.variance"} <= set(idata.posterior.data_vars)
    # fit_bsgp's scheme (its own end-to-end test in tests/models/test_bsgp.py is slow): Z is sampled, so its draws
    # differ; the noise is a point estimate, moved by the warmup from --noise-variance 1.0, then fixed while sampling
    assert np.ptp(Z.values, axis=1).max() > 0
    noise = idata.posterior["likelihood.variance"].values
    assert np.all(noise == noise[:, :1]) and np.all(noise < 1.0) and noise[0, 0] != noise[1, 0]  # one per chain
    assert idata.log_likelihood["y"].shape == (2, 4, 246)
    assert np.all(np.isfinite(idata.log_likelihood["y"].values)) and "lp" in idata.sample_stats
    groups = ["posterior", "sample_stats", "observed_data", "log_likelihood", "constant_data", "predictions",
              "predictions_constant_data"]  # fmt: skip
    assert record["files"]["posterior_groups"] == groups
    means = idata.predictions["y_mean"]  # each draw's predictive mean at the 62 test points
    assert means.dims == ("chain", "draw", "point") and means.shape == (2, 4, 62)
    assert idata.predictions_constant_data["X"].shape == (62, 6)
    rhat = record["predictive_rhat"]  # R-hat of every test point's predictive mean across the two chains
    assert (rhat["chains"], rhat["draws_per_chain"], rhat["points"], rhat["threshold"]) == (2, 4, 62, 1.1)
    expected = diagnostics.predictive_rhat(means.values)
    assert rhat["max"] == pytest.approx(expected.max) and rhat["fraction_below"] == expected.fraction_below
    assert f"R-hat of the test predictive means: max {rhat['max']:.3f}" in printed

    # the checkpoint was written for these settings: another Z prior in the same folder is refused, uncompiled
    before = (folder / "results.json").read_text()
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled before refusing the checkpoint"))
    args = ["fit", "bsgp", "--data", "yacht", "--chains", "2", *TINY, "--z-prior", "uniform", "--out", str(folder)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: checkpoint: {folder / 'mcmc.ckpt'} was written for a different model, data or other settings "
        "(--z-prior 'normal' -> 'uniform'); start afresh with --restart or choose another --out\n"
    )
    assert (
        main(["fit", "bsgp", "--data", "yacht", "--chains", "2", *TINY, "--iterations", "40", "--out", str(folder)])
        == 2
    )
    assert "other settings (--iterations 20 -> 40)" in capsys.readouterr().err
    assert (folder / "results.json").read_text() == before


BSGP_ERRORS = [
    (("bsgp", "--engine", "nuts", "--layers", "2"), "error: --engine nuts needs --layers 1, got --layers 2"),
    (("bsgp", "--engine", "nuts", "--noise", "point"), "error: --noise point needs --engine sghmc"),
    (("bsgp", "--engine", "hmc"), "error: --engine hmc: bsgp samples with sghmc or nuts"),
    (("bsgp", "--warmup", "10"), "error: --warmup applies to bsgp with --engine nuts, not sghmc"),
    (("bsgp", "--engine", "nuts", "--kept", "10"), "error: --kept applies to bsgp with --engine sghmc, not nuts"),
    (("bsgp", "--engine", "nuts", "--step-size", "0.1"), "error: --step-size applies to bsgp with --engine sghmc"),
    (("bsgp", "--engine", "nuts", "--batch-size", "64"), "error: --batch-size applies to bsgp with --engine sghmc"),
    (("bsgp", "--layers", "0"), "error: --layers must be a positive integer, got 0"),
    (("bsgp", "--kept", "0"), "error: --kept must be a positive integer, got 0"),
    (("bsgp", "--thinning", "0"), "error: --thinning must be a positive integer, got 0"),
    (("bsgp", "--chains", "0"), "error: --chains must be a positive integer, got 0"),
    (("bsgp", "--iterations", "-1"), "error: --iterations must be a non-negative integer, got -1"),
    (("bsgp", "--step-size", "0"), "error: --step-size must be finite and > 0, got 0.0"),
    (("bsgp", "--batch-size", "0"), "error: --batch-size must be a positive integer, got 0"),
    (("bsgp", "--noise-variance", "-1"), "error: --noise-variance must be finite and > 0, got -1.0"),
    (
        ("bsgp", "--engine", "nuts", "--samples", "10", "--thinning", "3"),
        "error: --samples (10) must be a multiple of --thinning (3)",
    ),
    (("bsgp", "--inducing", "400"), "error: --inducing must satisfy 1 <= --inducing <= N = 353"),
    (("bsgp", "--likelihood", "probit"), "error: --likelihood 'probit' does not fit regression data"),
    (
        ("bsgp", "--data", "breast_cancer", "--noise", "sampled"),
        "error: --noise: the Bernoulli likelihood of binary data (embedded/breast_cancer) has no noise",
    ),
    (("bsgp", "--data", "digits"), "error: --data: embedded/digits is a multiclass dataset"),
    (("bsgp", "--data", "yacht", "--split", "-1"), "error: --data 'bsgp/yacht' (--split -1): fold must be"),
]


@pytest.mark.parametrize("args, message", BSGP_ERRORS, ids=[" ".join(a) for a, _ in BSGP_ERRORS])
def test_bad_bsgp_options_are_refused_before_compilation(tmp_path, capsys, args, message, no_compilation):
    if "yacht" in args and not _has("yacht"):
        pytest.skip("uci/yacht not found in the data folder")
    code = main(["fit", *args, "--out", str(tmp_path / "out"), "--no-progress", "--quiet"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith(message) and captured.err.count("\n") == 1
    assert not (tmp_path / "out").exists()


OTHER_METHODS = [
    (("svgp", "--layers", "2"), "--layers"),
    (("sgpmc", "--z-prior", "dpp"), "--z-prior"),
    (("sgpr", "--kept", "8"), "--kept"),
    (("gpr", "--noise", "sampled"), "--noise"),
    (("svgp", "--iterations", "10"), "--iterations"),
    (("svgp", "--data-term", "expected_log"), "--data-term"),
    (("bsgp", "--steps", "100"), "--steps"),
    (("bsgp", "--lr", "0.1"), "--lr"),
    (("bsgp", "--checkpoint-every", "10"), "--checkpoint-every"),
    (("bsgp", "--kernel", "matern52"), "--kernel"),
    (("bsgp", "--kernel-variance", "2"), "--kernel-variance"),
    (("bsgp", "--lengthscale", "2"), "--lengthscale"),
    (("bsgp", "--prior", "gamma"), "--prior"),
    (("bsgp", "--chunk", "64"), "--chunk"),
    (("bsgp", "--q-diag"), "--q-diag"),
]
"""Options of other methods: each sub-command takes only its own, so argparse refuses these."""


@pytest.mark.parametrize("args, flag", OTHER_METHODS, ids=[" ".join(a) for a, _ in OTHER_METHODS])
def test_options_of_other_methods_are_unrecognized(tmp_path, capsys, args, flag, no_compilation):
    code = main(["fit", *args, "--out", str(tmp_path / "out"), "--no-progress", "--quiet"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert f"unrecognized arguments: {flag}" in captured.err and "usage: ppl-sparsegp" in captured.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (("--z-prior", "gaussian"), "argument --z-prior: invalid choice: 'gaussian'"),
        (("--data-term", "elbo"), "argument --data-term: invalid choice: 'elbo'"),
        (("--noise", "fixed"), "argument --noise: invalid choice: 'fixed'"),
        (("--layers", "two"), "argument --layers: invalid int value: 'two'"),
    ],
)
def test_bsgp_syntax_errors_come_from_argparse(tmp_path, capsys, args, message, no_compilation):
    assert main(["fit", "bsgp", *args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and "usage: ppl-sparsegp" in err and not (tmp_path / "out").exists()


def test_help_documents_the_bsgp_options(capsys):
    assert main(["fit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in ("--layers", "--z-prior", "--data-term", "--noise", "--iterations", "--kept"):
        assert option in text, option
    assert "{svgp,sgpr,gpr,sgpmc,bsgp,selective,idsgp,sas}" in text and "BSGP (bsgp only)" in text
    assert "{normal,dpp,strauss,uniform}" in text and "{log_expected,expected_log}" in text
    for default in ("default: 10000", "default: 256", "default: normal", "default: log_expected", "bsgp: 100"):
        assert default in text, default
    assert "--engine sghmc|nuts (default: sghmc)" in text and "OUT/mcmc.ckpt" in text


@pytest.mark.parametrize(("engine", "samples", "thinning"), [("sghmc", 5 * 1000, 1000), ("nuts", 500, 5)])
def test_thinning_is_each_engines_own(tmp_path, engine, samples, thinning):
    """``--thinning`` spaces SGHMC's ``--kept`` draws that many updates apart (the paper's AIRLINE runs keep 200 draws
    1000 apart), and keeps every k-th of NUTS's ``--samples``."""
    extra = ("--kept", "5") if engine == "sghmc" else ("--samples", "500")
    argv = ["fit", "bsgp", "--engine", engine, "--noise", "sampled", *extra, "--thinning", str(thinning)]
    opts = dict(vars(build_parser().parse_args([*argv, "--out", str(tmp_path)])))
    cli_bsgp._check(opts)
    X = np.linspace(0.0, 1.0, 30)[:, None]
    plan = plan_bsgp(X, np.sin(X[:, 0]), cli_bsgp._config(opts), {}, likelihood=None, Z=X[:4], z_prior_options=None)
    assert (plan.num_samples, plan.thinning) == (samples, thinning)


def test_bare_bsgp_names_load_the_papers_protocol():
    assert cli_bsgp.dataset_name("boston") == "bsgp/boston" and cli_bsgp.dataset_name("yacht") == "bsgp/yacht"
    assert cli_bsgp.dataset_name("diabetes") == "diabetes" and cli_bsgp.dataset_name("uci/yacht") == "uci/yacht"


@pytest.mark.slow  # about 2 minutes on a loaded two-core machine: the deep chain compiles slowly
def test_two_layer_bsgp_on_diabetes(tmp_path):
    folder = tmp_path / "deep"
    record = fit(folder, "--layers", "2", "--z-prior", "uniform", *TINY, "--quiet")
    assert record["layers"] == 2 and record["data"] == "embedded/diabetes"
    assert math.isfinite(record["metrics"]["mnll"]) and record["updates_per_second"] > 0
    groups = ["posterior", "sample_stats", "observed_data", "log_likelihood", "constant_data", "predictions",
              "predictions_constant_data"]  # fmt: skip
    assert record["files"]["posterior_groups"] == groups
    idata = diagnostics.load(folder / "posterior.nc")
    assert (
        idata.log_likelihood["y"].shape == (1, 4, 353) and idata.log_likelihood.attrs["log_likelihood"] == "predictive"
    )
    post = idata.posterior
    assert post["layer0.Z"].dims == ("chain", "draw", "inducing_point", "input_dim")
    assert post["layer1.Z"].dims == ("chain", "draw", "inducing_point", "hidden1")
    assert post["layer0.u"].dims == ("chain", "draw", "hidden1", "inducing_point")
    assert post["layer1.u"].dims == ("chain", "draw", "latent", "inducing_point")
    assert post["layer1.Z"].shape == (1, 4, 10, 10) and "likelihood.variance" in post.data_vars


@pytest.mark.slow
def test_bsgp_with_nuts_samples_the_noise(tmp_path):
    args = ("--engine", "nuts", "--warmup", "50", "--samples", "20", "--inducing", "8", "--quiet")
    record = fit(tmp_path / "nuts", *args)
    assert record["engine"] == "nuts" and record["noise"] == "sampled" and record["sampler"]["kernel"] == "NUTS"
    assert record["sampler"]["draws_per_chain"] == 20 and record["divergences"] is not None
    assert math.isfinite(record["metrics"]["mnll"]) and record["metrics"]["rmse"] < 70.0


@pytest.mark.slow
def test_bsgp_classifies_breast_cancer(tmp_path):
    record = fit(tmp_path / "bc", "--data", "breast_cancer", "--iterations", "50", "--kept", "8", "--inducing", "10")
    assert record["task"] == "binary" and record["likelihood"] == "probit" and record["noise"] is None
    assert record["metrics"]["accuracy"] > 0.85 and record["metrics"]["nll"] < 0.5


@pytest.mark.slow
def test_an_interrupted_bsgp_run_resumes_from_its_checkpoint(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "out"
    args = ["fit", "bsgp", "--iterations", "200", "--kept", "4", "--inducing", "10", "--out", str(folder)]
    real_fit = cli_bsgp.fit_bsgp

    def interrupt_after_first_piece(partial):
        if partial.mcmc.warmup_done == 2100:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_bsgp, "fit_bsgp", partial(real_fit, callback=interrupt_after_first_piece))
    assert main([*args, "--quiet"]) == 130
    assert capsys.readouterr().err.endswith(f"resume from {folder / 'mcmc.ckpt'}\n")
    assert not (folder / "results.json").exists() and (folder / "mcmc.ckpt").exists()
    monkeypatch.undo()
    assert main([*args, "--quiet"]) == 0
    record = json.loads((folder / "results.json").read_text())
    assert record["resumed_from"] == {"warmup_done": 2100, "draws_done": 0}
    assert record["sampler"]["warmup_updates"] == 4200 and record["sampler"]["draws_per_chain"] == 4
