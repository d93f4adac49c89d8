"""``ppl-sparsegp fit selective``, run in-process through ``main([...])`` into ``tmp_path``.

A selective run compiles three fits (pre-training, selection, post-training) and the predictive, which takes most of
a minute on a loaded two-core machine whatever the settings, so the default tests make one tiny end-to-end run
(diabetes, K = 20 candidates, 50 + 30 + 30 steps) and check every bad option before anything is loaded or compiled;
the uncollapsed classification run is marked slow (``make test-slow``).
"""

from __future__ import annotations

import json
import math

import jax
import numpy as np
import pytest

from ppl_sparsegp import data
from ppl_sparsegp.cli import main
from ppl_sparsegp.cli import selective as cli_selective

TINY = ("--candidates", "20", "--pre-steps", "50", "--selection-steps", "30", "--post-steps", "30", "--no-progress")
CHECKPOINTS = [f"selective_{phase}.npz" for phase in ("pre", "selection", "post")]
OUTPUTS = {"results.json", "params.npz", "posterior.nc", "selection.npz", "fit.png", *CHECKPOINTS}


@pytest.fixture
def no_compilation(monkeypatch):
    """Replace ``jax.jit`` by a trap: anything raised under this fixture was raised before compilation."""

    def trap(*args, **kwargs):
        raise AssertionError("jax.jit was reached before the bad input was rejected")

    monkeypatch.setattr(jax, "jit", trap)


@pytest.fixture
def no_loading(monkeypatch, no_compilation):
    """Also trap the dataset loader: anything raised under this fixture was raised before the data were read."""

    def trap(*args, **kwargs):
        raise AssertionError("the dataset was loaded before the bad option was rejected")

    monkeypatch.setattr(data, "load_dataset", trap)


def fit(folder, *args: str) -> dict:
    """Run ``ppl-sparsegp fit selective ARGS --out folder``; return results.json."""
    assert main(["fit", "selective", *args, "--out", str(folder)]) == 0
    return json.loads((folder / "results.json").read_text())


def check_selection(folder, record: dict, K: int, D: int) -> None:
    """params.npz is the pruned model (|S| inducing points) and selection.npz agrees with results.json."""
    assert {p.name for p in folder.iterdir()} == OUTPUTS
    assert (folder / "fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with np.load(folder / "params.npz", allow_pickle=False) as params:
        assert all(np.all(np.isfinite(params[k])) for k in params.files)
        M = params["Z"].shape[0]
        assert params["Z"].shape == (M, D) and params["standardizer.x_mean"].shape == (D,)
    with np.load(folder / "selection.npz", allow_pickle=False) as sel:
        probs, mask = sel["inclusion_probs"], sel["mask"]
        assert probs.shape == mask.shape == (K,) and sel["candidates"].shape == (K, D)
        assert np.all((probs >= 0) & (probs <= 1)) and set(np.unique(mask)) <= {0, 1}
        np.testing.assert_array_equal(sel["selected"], np.flatnonzero(mask))
    assert record["candidates"] == K and record["selected_count"] == M == int(mask.sum())
    assert 1 <= record["selected_count"] <= K
    np.testing.assert_allclose(record["expected_count"], probs.sum())
    np.testing.assert_allclose(record["count_variance"], np.sum(probs * (1 - probs)))


@pytest.mark.slow
def test_selective_on_diabetes_end_to_end(tmp_path, capsys):
    folder = tmp_path / "out"
    record = fit(folder, *TINY)
    m, o = record["metrics"], record["options"]
    assert record["method"] == "selective" and record["data"] == "embedded/diabetes" and record["split"] == 0
    assert (record["n_train"], record["n_eval"], record["input_dim"]) == (353, 89, 10)
    assert record["evaluated_on"] == "test" and record["task"] == "regression"
    assert (record["bound"], record["selection"], record["likelihood"]) == ("collapsed", "frozen", "gaussian")
    assert all(math.isfinite(m[k]) for k in ("rmse", "mae", "nlpd"))
    assert 0.0 < m["mae"] < m["rmse"] < m["rmse_of_training_mean"] and 4.0 < m["nlpd"] < 7.0
    check_selection(folder, record, K=20, D=10)
    assert 0.0 < record["expected_count"] < 20.0 and record["count_variance"] > 0.0
    assert record["steps"] == {"pre": 50, "selection": 30, "post": 30}
    assert all(math.isfinite(v) for v in record["final_loss"].values())
    assert set(record["seconds"]) == {"pre", "selection", "post"} and all(s > 0 for s in record["seconds"].values())
    assert set(record["versions"]) >= {"jax", "numpyro", "ppl_sparsegp"}
    assert (o["alpha"], o["particles"], o["initial_inclusion"], o["selection_lr"]) == (0.1, 4, 0.5, 0.2)
    assert (o["init"], o["lr"], o["noise_variance"], o["kernel"]) == ("random", 0.01, 1.0, "rbf")
    assert o["steps"] is None and o["inducing"] is None and o["batch_size"] is None
    assert o["checkpoint_every"] == 500 and record["files"]["checkpoints"] == CHECKPOINTS

    printed = capsys.readouterr().out
    first = printed.splitlines()[0]
    assert first == (
        f"selective on embedded/diabetes split 0: kept {record['selected_count']} of 20 candidates "
        f"(E|S| = {record['expected_count']:.1f}), test RMSE {m['rmse']:.4g}, MAE {m['mae']:.4g}, "
        f"NLPD {m['nlpd']:.4g} (original units)"
    )
    assert str(folder / "results.json") in printed and "selection.npz" in printed


SELECTIVE_ERRORS = [
    (("selective", "--checkpoint-every", "0"), "error: --checkpoint-every must be a positive integer, got 0"),
    (("selective", "--candidates", "0"), "error: --candidates must be a positive integer, got 0"),
    (("selective", "--alpha", "-1"), "error: --alpha must be finite and >= 0, got -1.0"),
    (("selective", "--alpha", "nan"), "error: --alpha must be finite and >= 0, got nan"),
    (("selective", "--initial-inclusion", "1.5"), "error: --initial-inclusion must be a probability in (0, 1)"),
    (("selective", "--initial-inclusion", "0"), "error: --initial-inclusion must be a probability in (0, 1)"),
    (("selective", "--particles", "0"), "error: --particles must be a positive integer, got 0"),
    (("selective", "--selection-steps", "0"), "error: --selection-steps must be a positive integer, got 0"),
    (("selective", "--pre-steps", "-1"), "error: --pre-steps must be a non-negative integer, got -1"),
    (("selective", "--post-steps", "-5"), "error: --post-steps must be a non-negative integer, got -5"),
    (("selective", "--selection-lr", "0"), "error: --selection-lr must be finite and > 0, got 0.0"),
    (("selective", "--lr", "-0.1"), "error: --lr must be finite and > 0, got -0.1"),
    (("selective", "--bound", "titsias"), "error: --bound titsias: selective takes collapsed or uncollapsed"),
    (("selective", "--selection", "both"), "error: --selection both: selective takes frozen or joint"),
    (("selective", "--init", "greedy"), "error: --init greedy: selective takes random or kmeans"),
    (("selective", "--likelihood", "bernoulli"), "error: --likelihood bernoulli needs --bound uncollapsed"),
    (("selective", "--likelihood", "studentt"), "error: --likelihood studentt needs --bound uncollapsed"),
    (("selective", "--batch-size", "64"), "error: --batch-size needs --bound uncollapsed"),
    (
        ("selective", "--bound", "uncollapsed", "--batch-size", "0"),
        "error: --batch-size must be a positive integer, got 0",
    ),
    (("selective", "--likelihood", "cauchy"), "error: --likelihood: unknown likelihood 'cauchy'"),
    (("selective", "--kernel", "rbff"), "error: --kernel:"),
]


@pytest.mark.parametrize("args, message", SELECTIVE_ERRORS, ids=[" ".join(a) for a, _ in SELECTIVE_ERRORS])
def test_bad_selective_options_are_refused_before_loading(tmp_path, capsys, args, message, no_loading):
    code = main(["fit", *args, "--out", str(tmp_path / "out"), "--no-progress", "--quiet"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith(message) and captured.err.count("\n") == 1
    assert not (tmp_path / "out").exists()


OTHER_METHODS = [
    (("svgp", "--candidates", "10"), "--candidates"),
    (("sgpr", "--alpha", "0.5"), "--alpha"),
    (("gpr", "--particles", "2"), "--particles"),
    (("sgpmc", "--pre-steps", "10"), "--pre-steps"),
    (("bsgp", "--bound", "uncollapsed"), "--bound"),
    (("svgp", "--selection", "joint"), "--selection"),
    (("svgp", "--selection-steps", "10"), "--selection-steps"),
    (("svgp", "--post-steps", "0"), "--post-steps"),
    (("svgp", "--initial-inclusion", "0.3"), "--initial-inclusion"),
    (("svgp", "--selection-lr", "0.1"), "--selection-lr"),
    (("selective", "--whiten"), "--whiten"),
    (("selective", "--no-whiten"), "--no-whiten"),
    (("selective", "--q-diag"), "--q-diag"),
    (("selective", "--steps", "100"), "--steps"),
    (("selective", "--inducing", "10"), "--inducing"),
    (("selective", "--prior", "gamma"), "--prior"),
    (("selective", "--engine", "nuts"), "--engine"),
    (("selective", "--layers", "2"), "--layers"),
    (("selective", "--z-prior", "dpp"), "--z-prior"),
]
"""Options of other methods: each sub-command takes only its own, so argparse refuses these."""


@pytest.mark.parametrize("args, flag", OTHER_METHODS, ids=[" ".join(a) for a, _ in OTHER_METHODS])
def test_options_of_other_methods_are_unrecognized(tmp_path, capsys, args, flag, no_loading):
    code = main(["fit", *args, "--out", str(tmp_path / "out"), "--no-progress", "--quiet"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert f"unrecognized arguments: {flag}" in captured.err and "usage: ppl-sparsegp" in captured.err
    assert not (tmp_path / "out").exists()


DATASET_ERRORS = [
    (("--candidates", "400"), "error: --candidates must satisfy 1 <= --candidates <= N = 353"),
    (
        ("--data", "breast_cancer"),
        "error: --data: embedded/breast_cancer is a binary dataset; selective --bound collapsed needs regression "
        "data (use --bound uncollapsed)",
    ),
    (
        ("--data", "breast_cancer", "--bound", "uncollapsed", "--likelihood", "gaussian"),
        "error: --likelihood 'gaussian' does not fit binary data",
    ),
    (
        ("--data", "breast_cancer", "--bound", "uncollapsed", "--noise-variance", "0.5"),
        "error: --noise-variance: the Bernoulli likelihood of binary data",
    ),
    (("--data", "digits", "--bound", "uncollapsed"), "error: --data: embedded/digits is a multiclass dataset"),
]


@pytest.mark.parametrize("args, message", DATASET_ERRORS, ids=[" ".join(a) for a, _ in DATASET_ERRORS])
def test_options_that_do_not_fit_the_dataset_are_refused_before_compilation(
    tmp_path, capsys, args, message, no_compilation
):
    code = main(["fit", "selective", *args, "--out", str(tmp_path / "out"), "--no-progress", "--quiet"])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err.startswith(message) and captured.err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_an_interrupted_selective_run_names_its_checkpoints(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        assert kwargs["checkpoint_dir"] == tmp_path / "out" and kwargs["checkpoint_every"] == 500
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_selective, "fit_selective", interrupted)
    assert main(["fit", "selective", *TINY, "--out", str(tmp_path / "out")]) == 130
    assert capsys.readouterr().err == (
        f"interrupted; run the same command again to resume from {tmp_path / 'out' / 'selective_<phase>.npz'}\n"
    )
    assert not (tmp_path / "out").exists()


def test_help_documents_the_selective_options(capsys):
    assert main(["fit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    options = (
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
    )
    for option in options:
        assert option in text, option
    assert "selective (selective only)" in text and "{collapsed,uncollapsed}" in text and "{frozen,joint}" in text
    for default in ("default: 100", "default: 0.1", "default: collapsed", "default: frozen", "default: 4"):
        assert default in text, default
    for default in ("default: 0.5", "default: 2500", "default: 1500", "default: 1000", "default: 0.2"):
        assert default in text, default
    assert "selective: random" in text and "bsgp and selective: 1.0" in text and "selection.npz" in text


@pytest.mark.slow  # about 2 minutes on a loaded two-core machine: three SVGP fits in 30 dimensions
def test_uncollapsed_selective_classifies_breast_cancer(tmp_path, capsys):
    folder = tmp_path / "bc"
    args = ("--data", "breast_cancer", "--bound", "uncollapsed", "--candidates", "30", "--alpha", "0.05")
    steps = ("--pre-steps", "300", "--selection-steps", "100", "--post-steps", "100", "--lr", "0.03")
    record = fit(folder, *args, *steps, "--batch-size", "128", "--no-progress")
    m = record["metrics"]
    assert record["task"] == "binary" and record["likelihood"] == "probit" and record["bound"] == "uncollapsed"
    assert record["options"]["noise_variance"] is None and record["options"]["batch_size"] == 128
    assert m["accuracy"] > 0.9 and m["auc"] > 0.95 and 0.0 < m["nll"] < 0.4 and 0.0 <= m["ece"] < 0.15
    check_selection(folder, record, K=30, D=30)
    with np.load(folder / "params.npz") as params:
        M = record["selected_count"]
        assert params["u_loc"].shape == (1, M) and params["u_scale_tril"].shape == (1, M, M)
        assert "likelihood.variance" not in params.files
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"selective on embedded/breast_cancer split 0: kept {M} of 30 candidates")
    assert f"test accuracy {m['accuracy']:.4f}" in first
