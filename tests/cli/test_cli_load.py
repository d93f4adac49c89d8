"""A run folder loaded back (``load_run``) predicts as the run did, for every method and for a CSV or Parquet file of
the user's (``--data file.csv --target COL``); ``ppl-sparsegp predict`` writes a CSV of predictions from a CSV of
inputs, and refuses bad input by name.

The run's own test metrics (results.json) are the oracle: the loaded model's predictions at the test inputs give
the same RMSE (every method) and, where the predictive is one Gaussian, the same NLPD.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from test_cli_outputs import QUIET, RUNS

from ppl_sparsegp import data, metrics
from ppl_sparsegp.cli import main
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.runs import compare_runs, load_run

VARIANTS = {
    **{method: (method, RUNS[method]) for method in RUNS if method != "sas"},  # sas: refused, tested below
    "bsgp-deep": ("bsgp", (*RUNS["bsgp"], "--layers", "2")),
    "selective-uncollapsed": ("selective", (*RUNS["selective"], "--bound", "uncollapsed")),
    "svgp-binary": ("svgp", (*RUNS["svgp"], "--data", "breast_cancer")),
    "sgpr-csv": ("sgpr", (*RUNS["sgpr"], "--data", "{csv}", "--target", "target")),
    "svgp-parquet": ("svgp", (*RUNS["svgp"], "--data", "{parquet}", "--target", "target")),
}
GAUSSIAN_PREDICTIVE = {"svgp", "sgpr", "gpr", "idsgp", "selective", "selective-uncollapsed", "sgpr-csv", "svgp-parquet"}
"""Runs whose predictive density is one Gaussian (not a mixture over draws), so NLPD follows from mean and
variance."""


QUICK = ("svgp", "sgpr", "svgp-binary", "sgpr-csv")
"""The variants the default test run fits; the others are fitted by ``make test-slow`` (a minute or more each
between them: MCMC, selection, a network)."""


class Runs(dict):
    """Variant name -> its run folder, each variant run on first use (once per test process)."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self.tmp = tmp_path_factory

    def __missing__(self, name):
        method, options = VARIANTS[name]
        tables = {suffix: self.tmp.getbasetemp() / f"diabetes.{suffix}" for suffix in ("csv", "parquet")}
        if not tables["csv"].exists():
            frame = load_diabetes(as_frame=True).frame
            frame.to_csv(tables["csv"], index=False)
            frame.to_parquet(tables["parquet"], index=False)
        folder = self.tmp.mktemp(name)
        options = [option.format(**tables) for option in options]
        assert main(["fit", method, *options, "--out", str(folder), *QUIET]) == 0
        self[name] = folder
        return folder


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """Name -> run folder, every variant run once when a test first asks for it."""
    return Runs(tmp_path_factory)


def variant(name):
    """The variant as a test parameter, marked slow unless it is one of :data:`QUICK`."""
    return pytest.param(name, marks=() if name in QUICK else pytest.mark.slow)


@pytest.mark.parametrize("name", [variant(name) for name in VARIANTS])
@pytest.mark.slow
def test_a_loaded_run_predicts_the_test_set_as_the_run_did(name, fitted):
    folder = fitted[name]
    record = json.loads((folder / "results.json").read_text())
    ds = data.load_dataset(record["data"], record["split"], record["options"]["target"])
    run = load_run(folder)
    assert run.method == VARIANTS[name][0]
    mean, var = run.predict(ds.X_test)
    assert mean.shape == var.shape == ds.y_test.shape
    m = record["metrics"]
    if ds.task == "binary":
        assert metrics.accuracy(ds.y_test, mean) == pytest.approx(m["accuracy"], abs=1e-12)
        assert metrics.binary_nll(ds.y_test, mean) == pytest.approx(m["nll"], rel=1e-9)
        return
    assert metrics.rmse(ds.y_test, mean) == pytest.approx(m["rmse"], rel=1e-9)
    if name in GAUSSIAN_PREDICTIVE:
        nlpd = np.mean(0.5 * np.log(2 * np.pi * var) + 0.5 * (ds.y_test - mean) ** 2 / var)
        assert nlpd == pytest.approx(m["nlpd"], rel=1e-9)


@pytest.mark.parametrize("name", [variant(name) for name in VARIANTS])
def test_a_loaded_runs_test_density_is_the_runs_nlpd(name, fitted):
    record = json.loads((fitted[name] / "results.json").read_text())
    run = load_run(fitted[name])
    X, y = run.stored.evaluation()
    assert len(X) == record["n_eval"]
    logp = run.log_density(X, y, chunk_size=30)
    assert logp.shape == (len(X),)
    m = record["metrics"]
    if VARIANTS[name][1][-2:] == ("--layers", "2"):  # deep: the inner layers' draws come from another key
        assert -np.mean(logp) == pytest.approx(m["nlpd"], rel=0.05)
    else:
        assert -np.mean(logp) == pytest.approx(m.get("nlpd", m.get("nll")), rel=1e-9)


def test_prediction_in_chunks_equals_prediction_at_once(fitted):
    run = load_run(fitted["svgp"])
    X = data.load_dataset("diabetes").X_test
    whole, chunked = run.predict(X), run.predict(X, chunk_size=7)
    np.testing.assert_allclose(chunked[0], whole[0], rtol=1e-12)
    np.testing.assert_allclose(chunked[1], whole[1], rtol=1e-12)


def _inputs(tmp_path, header: bool, rows: int = 9, columns: int = 10):
    X = data.load_dataset("diabetes").X_test[:rows, :columns]
    path = tmp_path / "new.csv"
    names = ",".join(f"x{i}" for i in range(columns))
    np.savetxt(path, X, delimiter=",", header=names if header else "", comments="")
    return path, X


@pytest.mark.parametrize("header", [True, False])
def test_predict_writes_mean_variance_and_the_interval_of_each_input(header, fitted, tmp_path, capsys):
    path, X = _inputs(tmp_path, header)
    out = tmp_path / "preds.csv"
    argv = ["predict", str(fitted["svgp"]), "--input", str(path), "--out", str(out), "--level", "0.9"]
    assert main(argv) == 0
    assert str(out) in capsys.readouterr().out
    table = np.genfromtxt(out, delimiter=",", names=True)
    assert table.dtype.names == ("mean", "variance", "lower", "upper")
    mean, var = load_run(fitted["svgp"]).predict(X)
    np.testing.assert_allclose(table["mean"], mean, rtol=1e-12)
    np.testing.assert_allclose(table["variance"], var, rtol=1e-12)
    np.testing.assert_allclose(table["upper"] - table["mean"], 1.6448536269514722 * np.sqrt(var), rtol=1e-12)
    np.testing.assert_allclose(table["mean"] - table["lower"], 1.6448536269514722 * np.sqrt(var), rtol=1e-12)


def test_predict_on_binary_data_writes_the_probability_of_class_one(fitted, tmp_path):
    X = data.load_dataset("breast_cancer").X_test[:5]
    path, out = tmp_path / "new.csv", tmp_path / "preds.csv"
    np.savetxt(path, X, delimiter=",")
    assert main(["predict", str(fitted["svgp-binary"]), "--input", str(path), "--out", str(out)]) == 0
    table = np.genfromtxt(out, delimiter=",", names=True)
    assert table.dtype.names == ("p1", "variance")
    assert np.all((table["p1"] > 0) & (table["p1"] < 1))


@pytest.mark.parametrize(
    "case, message",
    [
        ("columns", "--input: {input} has 3 columns; the run was fitted on 10 inputs"),
        ("level", "--level must be in (0, 1), got 1.5"),
        ("chunk", "--chunk-size must be a positive integer, got 0"),
        ("missing input", "--input: {input} is not a file"),
        ("text", "--input: {input} is not a CSV of numbers"),
        ("no run", "{run}: no results.json (expected the output folder of `ppl-sparsegp fit`)"),
        ("out is a folder", "--out: {out} is a folder; give the path of the CSV to write"),
    ],
)
def test_predict_refuses_bad_input_by_name_and_writes_nothing(case, message, fitted, tmp_path, capsys):
    path, _ = _inputs(tmp_path, header=True, columns=3 if case == "columns" else 10)
    run, out, extra = fitted["svgp"], tmp_path / "preds.csv", []
    if case == "level":
        extra = ["--level", "1.5"]
    elif case == "chunk":
        extra = ["--chunk-size", "0"]
    elif case == "missing input":
        path = tmp_path / "absent.csv"
    elif case == "text":
        path.write_text("a,b\n1,x\n")
    elif case == "no run":
        run = tmp_path / "empty"
        run.mkdir()
    elif case == "out is a folder":
        out = tmp_path
    assert main(["predict", str(run), "--input", str(path), "--out", str(out), *extra]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: " + message.format(input=path, run=run, out=out))
    assert not (tmp_path / "preds.csv").exists()


def test_a_damaged_params_file_is_one_error_naming_it(fitted, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("results.json", "params.npz"):
        (folder / name).write_bytes((fitted["svgp"] / name).read_bytes())
    (folder / "params.npz").write_bytes((folder / "params.npz").read_bytes()[:100])
    with pytest.raises(ValueError, match=r"params\.npz is not a readable \.npz file"):
        load_run(folder)


def test_a_run_predicting_from_its_data_refuses_other_data(fitted, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    record = json.loads((fitted["sgpr"] / "results.json").read_text())
    record["split"] = 1
    (folder / "results.json").write_text(json.dumps(record))
    (folder / "params.npz").write_bytes((fitted["sgpr"] / "params.npz").read_bytes())
    run = load_run(folder)
    with pytest.raises(ValueError, match="is not the data this run was fitted on"):
        run.predict(np.zeros((2, 10)))


def test_compare_by_test_density_ranks_by_the_runs_nlpd(fitted, tmp_path, capsys):
    runs = ("svgp", "sgpr", "sgpr-csv")
    out = tmp_path / "cmp"
    assert main(["compare", *(str(fitted[name]) for name in runs), "--by", "test", "--out", str(out)]) == 2
    assert "were fitted on different data (data 'embedded/diabetes' vs" in capsys.readouterr().err
    assert main(["compare", str(fitted["svgp"]), str(fitted["sgpr"]), "--by", "test", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("Test-set log predictive density on embedded/diabetes (split 0, test points S = 89")
    summary = json.loads((out / "compare.json").read_text())
    assert summary["criterion"] == "test" and summary["pareto_k_above_limit"] == {}
    for name in ("svgp", "sgpr"):
        record = json.loads((fitted[name] / "results.json").read_text())
        row = summary["table"][fitted[name].name]
        assert row["elpd_test"] == pytest.approx(-89 * record["metrics"]["nlpd"], rel=1e-9)
    best, other = sorted(summary["table"].values(), key=lambda row: row["rank"])
    assert best["elpd_test"] >= other["elpd_test"] and best["elpd_diff"] == best["dse"] == 0.0
    assert other["elpd_diff"] == pytest.approx(best["elpd_test"] - other["elpd_test"]) and other["dse"] > 0
    with pytest.raises(ValueError, match="criterion must be one of .loo., .test.; got .waic."):
        compare_runs([fitted["svgp"], fitted["sgpr"]], criterion="waic")


@pytest.mark.slow  # idsgp, sgpmc, bsgp and deep bsgp runs
def test_compare_by_test_density_ranks_every_loadable_method(fitted, tmp_path):
    runs = ("svgp", "sgpr", "gpr", "sgpmc", "bsgp", "bsgp-deep", "selective", "idsgp")
    out = tmp_path / "cmp"
    assert main(["compare", *(str(fitted[name]) for name in runs), "--by", "test", "--out", str(out)]) == 0
    table = json.loads((out / "compare.json").read_text())["table"]
    assert set(table) == {fitted[name].name for name in runs}
    assert sorted(row["rank"] for row in table.values()) == list(range(len(runs)))
    assert all(np.isfinite(row["elpd_test"]) and row["se"] > 0 for row in table.values())


COMPARED = ("svgp", "sgpr", "gpr", "sgpmc", "bsgp", "bsgp-deep", "selective")
"""Runs on the same data whose posterior.nc carries the predictive log-likelihood."""


@pytest.mark.slow  # seven runs, sgpmc, bsgp, deep bsgp and selective among them
def test_compare_ranks_runs_of_every_method_by_psis_loo(fitted, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", *(str(fitted[name]) for name in COMPARED), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("PSIS-LOO on embedded/diabetes (split 0, N = 353")
    summary = json.loads((out / "compare.json").read_text())
    names = [fitted[name].name for name in COMPARED]
    methods = [VARIANTS[name][0] for name in COMPARED]
    assert set(summary["table"]) == set(names) and [summary["runs"][n]["method"] for n in names] == methods
    ranks = sorted(summary["table"].values(), key=lambda row: row["rank"])
    assert [row["rank"] for row in ranks] == list(range(len(COMPARED)))
    assert summary["runs"][fitted["bsgp-deep"].name]["method"] == "bsgp"
    assert all(np.isfinite(row["elpd_loo"]) for row in ranks)
    assert np.isclose(sum(row["weight"] for row in ranks), 1.0)
    for name in names:  # a warning line exactly for the runs with points beyond their Pareto-k limit
        assert (f"warning: {name}: " in printed) == (summary["pareto_k_above_limit"][name] > 0)
    notes = {name for name in names if f"note: {name} is a fit by SVI" in printed}
    assert notes == {fitted[m].name for m in ("svgp", "sgpr", "gpr", "selective")}
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "case, message",
    [
        ("one run", "run_dirs: compare needs at least two runs, got 1"),
        ("twice", "run_dirs: a run is named twice"),
        ("other data", "run_dirs: {svgp} and {svgp-binary} were fitted on different data (data 'embedded/diabetes'"),
        (
            "no predictive log-likelihood",
            "run_dirs: {potential}/posterior.nc has no predictive log-likelihood to compare (found potential)",
        ),
        pytest.param(
            "idsgp",
            "run_dirs: {idsgp} is an idsgp run, which compare cannot rank: its q(u | x) comes from a network",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_compare_refuses_runs_it_cannot_compare(case, message, fitted, tmp_path, capsys):
    runs = {
        "one run": ["svgp"],
        "twice": ["svgp", "svgp"],
        "other data": ["svgp", "svgp-binary"],
        "no predictive log-likelihood": ["sgpr", "potential"],
        "idsgp": ["svgp", "idsgp"],
    }[case]
    folders = {name: fitted[name] for name in runs if name != "potential"}
    if "potential" in runs:  # a run whose log-likelihood is the model's own factor (log_likelihood_of="potential")
        folders["potential"] = tmp_path / "potential"
        folders["potential"].mkdir()
        for file in fitted["svgp"].iterdir():
            (folders["potential"] / file.name).write_bytes(file.read_bytes())
        idata = diagnostics.load(fitted["svgp"] / "posterior.nc")
        idata["log_likelihood"].attrs["log_likelihood"] = "potential"
        diagnostics.save(idata, folders["potential"] / "posterior.nc")
    out = tmp_path / "cmp"
    assert main(["compare", *(str(folders[name]) for name in runs), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: " + message.format(**{name: str(folder) for name, folder in folders.items()}))
    assert not out.exists()


@pytest.mark.slow
def test_a_sas_run_is_refused_by_name(tmp_path):
    folder = tmp_path / "sas"
    assert main(["fit", "sas", *RUNS["sas"], "--out", str(folder), *QUIET]) == 0
    with pytest.raises(ValueError, match="a sas run cannot be loaded to predict: a GP-LVM decoder"):
        load_run(folder)
