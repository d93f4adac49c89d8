"""``fit svgp --data-npy X.npy Y.npy``: SVGP on minibatches streamed from .npy files (ppl_sparsegp.infer.streaming)."""

import json
import re

import numpy as np
import pytest

from ppl_sparsegp.cli.__main__ import main

FAST = ("--inducing", "8", "--batch-size", "32", "--lr", "0.05", "--no-progress", "--quiet")


def write(tmp_path, n: int = 600, shift: float = 50.0):
    """y = sin(x0) x1 + noise in original units far from standardised ones (X around ``shift``, y around 10)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (n, 2))
    y = 10 + 3 * np.sin(2 * X[:, 0]) * X[:, 1] + 0.3 * rng.standard_normal(n)
    np.save(tmp_path / "X.npy", X + shift)
    np.save(tmp_path / "y.npy", y)
    return str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), y


@pytest.mark.slow
def test_streamed_svgp_fits_writes_results_and_resumes(tmp_path, capsys):
    """300 steps on 600 rows standardised by the pass over the files: the test RMSE beats the training mean's, the
    record names the stream, and raising --steps to 400 resumes from the checkpoint at 300."""
    X_path, y_path, y = write(tmp_path)
    out = tmp_path / "out"
    args = ["fit", "svgp", "--data-npy", X_path, y_path, *FAST, "--out", str(out), "--checkpoint-every", "100"]
    assert main([*args, "--steps", "300"]) == 0
    record = json.loads((out / "results.json").read_text())
    assert record["n_train"] == 600 and record["evaluated_on"] == "train sample" and record["steps"] == 300
    assert record["stream"] == {"num_data": 600, "files": [X_path, y_path], "batch_size": 32, "sample_rows": 600}
    assert record["metrics"]["rmse"] < 0.6 * np.std(y)  # a constant predictor's RMSE is std(y)
    assert {"params.npz", "posterior.nc", "fit.png", "checkpoint.npz"} <= {p.name for p in out.iterdir()}
    assert main([*args, "--steps", "400"]) == 0
    resumed = json.loads((out / "results.json").read_text())
    assert (resumed["steps"], resumed["resumed_from_step"], resumed["steps_this_run"]) == (400, 300, 100)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda p: (p / "y.npy").unlink(), "--data-npy: y_path: no such file"),
        (lambda p: np.save(p / "y.npy", np.zeros(599)), r"--data-npy: X_path, y_path: expected X \[N, D\] and y"),
        (lambda p: np.save(p / "y.npy", np.array(["a"] * 600)), "--data-npy: y_path: .* holds <U1 values; expected"),
        (lambda p: np.save(p / "y.npy", np.r_[np.zeros(599), np.nan]), "--data-npy: Y_path: .* NaN .* in row 599"),
    ],
)  # fmt: skip
def test_streamed_svgp_refuses_bad_files(tmp_path, capsys, change, message):
    X_path, y_path, _ = write(tmp_path)
    change(tmp_path)
    code = main(["fit", "svgp", "--data-npy", X_path, y_path, *FAST, "--out", str(tmp_path / "out")])
    assert code == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--backend", "pyro"), "--data-npy: --backend pyro cannot stream minibatches"),
        (("--optimizer", "natgrad"), "--data-npy streams with Adam alone; --optimizer natgrad needs"),
        (("--batch-size", "600"), r"--batch-size \(600\) must be smaller than the N = 600 rows"),
        (("--likelihood", "probit"), "--data-npy: --likelihood probit needs labels 0 and 1"),
    ],
)
def test_streamed_svgp_refuses_what_it_cannot_stream(tmp_path, capsys, extra, message):
    X_path, y_path, _ = write(tmp_path)
    code = main(["fit", "svgp", "--data-npy", X_path, y_path, *FAST, *extra, "--out", str(tmp_path / "out")])
    assert code == 2
    assert re.search(message, capsys.readouterr().err)
