"""Multi-class data on the command line: ``fit svgp`` and ``fit sgpmc`` with robust-max (the default for digits)
or softmax, classes inferred from integer labels of a CSV; the run loaded back and ``predict`` writing class
probabilities; labels that are not classes and methods that fit no multi-class likelihood refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli_outputs import QUIET

from ppl_sparsegp.cli import main
from ppl_sparsegp.runs import load_run


@pytest.fixture(scope="module")
def three_classes(tmp_path_factory):
    """A CSV of 200 points in 2-D labelled 0, 1, 2 by the largest of three smooth functions (column ``label``)."""
    X = np.random.default_rng(0).uniform(-3, 3, (200, 2))
    f = np.stack([np.sin(X[:, 0]), np.cos(X[:, 1]), 0.4 * X[:, 0] * X[:, 1] / 3], axis=1)
    path = tmp_path_factory.mktemp("data") / "three.csv"
    np.savetxt(path, np.column_stack([X, np.argmax(f, axis=1)]), delimiter=",", header="x1,x2,label", comments="")
    return path


@pytest.mark.slow  # about 50 s on 2 cores; `make test-slow` runs it in CI
def test_svgp_on_digits_fits_ten_classes_by_robust_max(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["fit", "svgp", "--data", "digits", "--inducing", "20", "--steps", "150", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "test accuracy" in printed and "AUC" not in printed
    record = json.loads((out / "results.json").read_text())
    assert (record["task"], record["num_classes"], record["options"]["likelihood"]) == ("multiclass", 10, "robustmax")
    assert set(record["metrics"]) == {"accuracy", "nll", "ece"}
    assert record["metrics"]["accuracy"] > 0.85
    assert (out / "posterior.nc").exists() and (out / "fit.png").exists()


@pytest.mark.parametrize("method", ["svgp", pytest.param("sgpmc", marks=pytest.mark.slow)])
def test_softmax_on_a_csv_of_labels_loads_back_and_predicts_class_probabilities(method, three_classes, tmp_path):
    out = tmp_path / "run"
    short = ["--warmup", "60", "--samples", "40", "--chains", "1", "--steps", "300"] if method == "sgpmc" else []
    argv = ["fit", method, "--data", str(three_classes), "--target", "label", "--likelihood", "softmax",
            "--inducing", "12", *short, "--out", str(out), *QUIET]  # fmt: skip
    assert main(argv) == 0
    record = json.loads((out / "results.json").read_text())
    assert (record["task"], record["num_classes"]) == ("multiclass", 3)
    assert record["metrics"]["accuracy"] > 0.85
    run = load_run(out)
    X = np.loadtxt(three_classes, delimiter=",", skiprows=1)[:, :2]
    p, _ = run.predict(X[:7])
    assert p.shape == (7, 3)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-9)
    inputs, written = tmp_path / "new.csv", tmp_path / "preds.csv"
    np.savetxt(inputs, X[:7], delimiter=",")
    assert main(["predict", str(out), "--input", str(inputs), "--out", str(written)]) == 0
    table = np.loadtxt(written, delimiter=",", skiprows=1)
    assert written.read_text().splitlines()[0] == "p0,p1,p2"
    np.testing.assert_allclose(table, p, rtol=1e-12)


def test_labels_that_are_not_classes_and_methods_without_multiclass_are_refused(three_classes, tmp_path, capsys):
    table = np.loadtxt(three_classes, delimiter=",", skiprows=1)
    cases = []
    for name, labels in (("half", table[:, 2] + 0.5), ("gap", table[:, 2] * 2)):
        path = tmp_path / f"{name}.csv"
        np.savetxt(path, np.column_stack([table[:, :2], labels]), delimiter=",", header="x1,x2,label", comments="")
        cases.append(path)
    expected = [
        (["svgp", "--data", str(cases[0]), "--target", "label", "--likelihood", "robustmax"],
         "--likelihood robustmax: " + str(cases[0]) + ": a multi-class likelihood needs class labels 0, 1, 2, ... as "
         "y; got values such as 0.5, 1.5, 2.5"),
        (["svgp", "--data", str(cases[1]), "--target", "label", "--likelihood", "softmax"],
         "--likelihood softmax: " + str(cases[1]) + ": a multi-class likelihood needs class labels 0..J-1 with every "
         "class present; got 3 distinct labels between 0 and 4"),
        (["bsgp", "--data", "digits"], "--data: embedded/digits is a multiclass dataset; bsgp fits regression and "
         "binary data (svgp and sgpmc fit multi-class data)"),
        (["svgp", "--data", "digits", "--noise-variance", "0.1"], "--noise-variance: the multi-class likelihood of "
         "multiclass data (embedded/digits) has no noise"),
        (["svgp", "--data", "digits", "--likelihood", "probit"], "--likelihood 'probit' does not fit multiclass data"),
    ]  # fmt: skip
    for argv, message in expected:
        out = tmp_path / "never"
        assert main(["fit", *argv, "--out", str(out), *QUIET]) == 2
        assert capsys.readouterr().err.startswith("error: " + message)
        assert not out.exists()
