"""The ablation options of BSGP's UCI benchmark (benchmarks/bsgp_uci.py, issue 24 item 4): ``--likelihood-terms`` and
``--num-inducing`` reach ``fit_bsgp`` (the data term, and k-means Z of each M), every combination is its own cell,
the cells run before the options existed keep their keys, and the summary sets the E[log p] cells beside the
authors' E[log p] numbers and no paper number beside an M the paper's data does not have; ``--methods z-optimised``
runs SGHMC-DGP's recipe with only Z optimised on BSGP's schedule, in cells of its own, beside Fig. 1's numbers;
``--methods z-svgp`` hands the Z of a (shortened) protocol SVGP fit to that recipe, held, and ``--z-init svgp`` hands
that Z to BSGP's recipe as its start, in cells of their own."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

DATA_DIR = Path(os.environ.get("PPL_SPARSEGP_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.fixture
def bench(load_benchmark, monkeypatch, tmp_path):
    """The benchmark module, its run folder under ``tmp_path``."""
    module = load_benchmark("bsgp_uci")
    monkeypatch.setattr(module, "RUNS", tmp_path / "runs")
    return module


def _cell(**settings) -> dict:
    cell = {"dataset": "yacht", "layers": 1, "z_prior": "normal", "iterations": 10_000, "kept": 256, "fold": 0}
    return {**cell, **settings}


def test_keys_of_the_earlier_cells_are_kept_and_each_ablation_is_its_own_cell(bench):
    assert bench.cell_key(_cell()) == "yacht/L1/normal/it10000/kept256/fold0"
    assert bench.cell_key(_cell(likelihood_term="log_expected", num_inducing=100)) == bench.cell_key(_cell())
    assert bench.cell_key(_cell(likelihood_term="expected_log")) == "yacht+expected-log/L1/normal/it10000/kept256/fold0"
    assert bench.cell_key(_cell(num_inducing=50)) == "yacht+M50/L1/normal/it10000/kept256/fold0"
    both = _cell(likelihood_term="expected_log", num_inducing=25, noise_per_output=True)
    assert bench.cell_key(both) == "yacht+noise-per-output+expected-log+M25/L1/normal/it10000/kept256/fold0"
    assert bench.cell_key(_cell(z_init="kmeans")) == bench.cell_key(_cell())
    assert bench.cell_key(_cell(z_init="svgp")) == "yacht+z-init-svgp/L1/normal/it10000/kept256/fold0"
    z_svgp = _cell(method="z-svgp", updates_per_iteration=21, z_prior="svgp", z_init="svgp")
    assert bench.cell_key(z_svgp) == "z-svgp-upd21/yacht/L1/svgp/it10000/kept256/fold0"


def test_summary_sets_each_data_term_beside_its_own_paper_number(bench):
    cells = {}
    for term, m, mnll in (("log_expected", 100, -0.2), ("expected_log", 100, 0.7), ("log_expected", 50, 0.1)):
        for fold in (0, 1):
            cell = _cell(likelihood_term=term, num_inducing=m, fold=fold, test_mnll=mnll + 0.1 * fold)
            cell.update(updates_per_second=None, **{"seconds_to_within_0.05": None})
            cells[bench.cell_key(cell)] = cell
    summary = bench.summarise(cells)
    default = summary["yacht/L1/normal/it10000/kept256"]
    assert default["paper"] == -0.23 and default["paper_table7"] == -0.32
    assert default["test_mnll_mean"] == pytest.approx(-0.15)
    expected_log = summary["yacht+expected-log/L1/normal/it10000/kept256"]
    assert (expected_log["likelihood_term"], expected_log["num_inducing"]) == ("expected_log", 100)
    assert expected_log["paper"] == 0.78 and expected_log["paper_table7"] is None
    assert expected_log["test_mnll_mean"] == pytest.approx(0.75)
    smaller = summary["yacht+M50/L1/normal/it10000/kept256"]
    assert smaller["num_inducing"] == 50 and smaller["paper"] is None and smaller["paper_table7"] is None
    table = bench.markdown_table(summary)
    assert "yacht (E[log p])" in table and "yacht (M = 50)" in table


@pytest.mark.skipif(not (DATA_DIR / "uci").exists(), reason="the shared UCI data is not beside the checkout")
def test_main_hands_every_term_and_m_to_fit_bsgp(bench, monkeypatch, tmp_path):
    """``main`` over 2 terms x 2 M: ``fit_bsgp`` gets each data term and a k-means Z of each size (it is replaced by
    a stand-in that records its arguments and fails, which ``main`` records as the cell's error and goes on)."""
    monkeypatch.setenv("PPL_SPARSEGP_DATA_DIR", str(DATA_DIR))
    seen = []

    def fit_bsgp(X, y, **kwargs):
        seen.append((kwargs["likelihood_term"], kwargs["Z"].shape))
        raise RuntimeError("stand-in")

    monkeypatch.setattr(bench, "fit_bsgp", fit_bsgp)
    output = tmp_path / "cells.json"
    argv = ["--datasets", "yacht", "--folds", "0", "--iterations", "20", "--eval-every", "10", "--kept", "4",
            "--likelihood-terms", "log_expected", "expected_log", "--num-inducing", "100", "7",
            "--output", str(output)]  # fmt: skip
    assert bench.main(argv) == 0
    assert seen == [("log_expected", (100, 6)), ("log_expected", (7, 6)), ("expected_log", (100, 6)),
                    ("expected_log", (7, 6))]  # fmt: skip
    cells = json.loads(output.read_text())["cells"]
    assert sorted(cells) == [
        "yacht+M7/L1/normal/it20/kept4/fold0",
        "yacht+expected-log+M7/L1/normal/it20/kept4/fold0",
        "yacht+expected-log/L1/normal/it20/kept4/fold0",
        "yacht/L1/normal/it20/kept4/fold0",
    ]
    assert all(cell["error"] == "RuntimeError: stand-in" for cell in cells.values())


def test_paper_numbers_follow_the_settings(bench):
    number = bench.paper_number
    assert number("bsgp", "naval", 1, "normal", "log_expected", 100) == -8.22  # Table 6
    assert number("bsgp", "kin8nm", 5, "normal", "log_expected", 100) == -1.43  # Table 6's deepest rows
    assert number("bsgp", "protein", 4, "normal", "log_expected", 100) == 2.50
    assert number("bsgp", "protein", 6, "normal", "log_expected", 100) is None
    assert number("bsgp", "naval", 1, "normal", "log_expected", 50) == -7.83  # Fig. 1's data
    assert number("bsgp", "naval", 1, "normal", "log_expected", 25) is None
    assert number("bsgp", "naval", 1, "dpp", "log_expected", 50) is None
    assert number("bsgp", "naval", 1, "normal", "expected_log", 100) == -8.16
    assert number("bsgp", "naval", 1, "normal", "expected_log", 50) is None
    assert number("sghmc-dgp", "naval", 1, "optimised", "log_expected", 100) == -6.23  # Table 6's SGHMC GP
    assert number("sghmc-dgp", "naval", 1, "optimised", "expected_log", 100) is None
    assert number("z-optimised", "naval", 1, "optimised", "log_expected", 100) == -6.67
    assert number("z-optimised", "protein", 1, "optimised", "log_expected", 10) == 2.98
    assert number("z-optimised", "yacht", 1, "optimised", "log_expected", 100) is None
    assert number("z-optimised", "naval", 2, "optimised", "log_expected", 100) is None
    assert number("z-svgp", "naval", 1, "svgp", "log_expected", 100) == -6.67  # the same line, the other reading
    assert number("z-svgp", "protein", 1, "svgp", "log_expected", 50) == 2.91


def _run_with_a_stand_in_recipe(bench, monkeypatch, tmp_path, recipe: str, *options: str) -> tuple[dict, str]:
    """``main`` on yacht fold 0 (20 iterations, 4 draws) with ``options``, with the recipe function ``recipe``
    replaced by a stand-in that records its keyword arguments and fails (``main`` records the cell's error and goes
    on): (those keyword arguments, the one cell's key)."""
    monkeypatch.setenv("PPL_SPARSEGP_DATA_DIR", str(DATA_DIR))
    seen = []

    def stand_in(X, y, **kwargs):
        seen.append(kwargs)
        raise RuntimeError("stand-in")

    monkeypatch.setattr(bench, recipe, stand_in)
    output = tmp_path / "cells.json"
    argv = ["--datasets", "yacht", "--folds", "0", "--iterations", "20", "--eval-every", "10", "--kept", "4",
            *options, "--output", str(output)]  # fmt: skip
    assert bench.main(argv) == 0
    (kwargs,) = seen
    (key,) = json.loads(output.read_text())["cells"]
    return kwargs, key


@pytest.mark.skipif(not (DATA_DIR / "uci").exists(), reason="the shared UCI data is not beside the checkout")
def test_z_optimised_runs_sghmc_dgp_with_only_z_optimised_on_bsgps_schedule(bench, monkeypatch, tmp_path):
    kwargs, key = _run_with_a_stand_in_recipe(bench, monkeypatch, tmp_path, "fit_sghmc_dgp", "--methods", "z-optimised")
    settings = {k: kwargs[k] for k in ("optimised", "held", "updates_per_iteration", "thinning", "num_kept")}
    assert settings == {"optimised": ("Z",), "held": (), "updates_per_iteration": 21, "thinning": 32, "num_kept": 4}
    assert key == "z-optimised-upd21/yacht/L1/optimised/it20/kept4/fold0"


@pytest.mark.skipif(not (DATA_DIR / "uci").exists(), reason="the shared UCI data is not beside the checkout")
def test_z_svgp_holds_the_z_of_a_protocol_svgp_fit(bench, monkeypatch, tmp_path):
    """The SVGP stage runs (30 steps instead of the protocol's 10,000) from the cell's k-means Z, and the recipe gets
    the Z it ended at, held, with only Z optimised, on BSGP's schedule."""
    monkeypatch.setattr(bench.svgp_uci, "STEPS", 30)
    kwargs, key = _run_with_a_stand_in_recipe(bench, monkeypatch, tmp_path, "fit_sghmc_dgp", "--methods", "z-svgp")
    assert (kwargs["optimised"], kwargs["held"], kwargs["updates_per_iteration"]) == (("Z",), ("Z",), 21)
    _assert_z_is_30_adam_steps_from_kmeans(bench, kwargs["Z"])
    assert key == "z-svgp-upd21/yacht/L1/svgp/it20/kept4/fold0"


@pytest.mark.skipif(not (DATA_DIR / "uci").exists(), reason="the shared UCI data is not beside the checkout")
def test_z_init_svgp_starts_bsgp_where_the_protocol_svgp_ends(bench, monkeypatch, tmp_path):
    """``--z-init svgp``: BSGP's recipe gets the SVGP stage's Z as its start (Z is still sampled: BSGP's recipe has no
    held sites), in a cell of its own; the SVGP stage's checkpoint is named for the dataset, fold and M only."""
    monkeypatch.setattr(bench.svgp_uci, "STEPS", 30)
    kwargs, key = _run_with_a_stand_in_recipe(bench, monkeypatch, tmp_path, "fit_bsgp", "--z-init", "svgp")
    _assert_z_is_30_adam_steps_from_kmeans(bench, kwargs["Z"])
    assert key == "yacht+z-init-svgp/L1/normal/it20/kept4/fold0"
    assert (tmp_path / "runs" / "yacht_fold0_M100_svgp30.npz").exists()


def _assert_z_is_30_adam_steps_from_kmeans(bench, Z: np.ndarray) -> None:
    """Z [100, 6] moved from yacht fold 0's k-means start by the 30 Adam steps of the shortened SVGP stage."""
    X = bench.data.standardize(bench.data.load_bsgp_uci("yacht", 0))[0].X_train
    start = bench.kmeans(np.asarray(X, np.float64), 100, seed=0)
    assert Z.shape == start.shape and 1e-4 < np.max(np.abs(Z - start)) < 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--methods", "z-svgp", "--layers", "2"], "--methods z-svgp: one layer only"),
        (["--z-init", "svgp", "--layers", "1", "3"], "--z-init svgp: one layer only"),
    ],
)
def test_an_svgp_z_is_refused_with_several_layers(bench, argv, message, capsys):
    with pytest.raises(SystemExit):
        bench.main([*argv, "--output", "/nonexistent/never-written.json"])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--num-inducing", "0"], ["--likelihood-terms", "log_p"]])
def test_bad_ablation_arguments_are_refused_before_anything_runs(bench, argv, capsys):
    with pytest.raises(SystemExit):
        bench.main([*argv, "--output", "/nonexistent/never-written.json"])
    err = capsys.readouterr().err
    assert "--num-inducing" in err or "--likelihood-terms" in err


def test_a_cells_checkpoint_name_is_the_file_its_run_wrote(bench):
    """``checkpoint_name`` names, from a cell's record alone, the files the runs folder holds for those settings
    (the names below are those of runs recorded before the function existed)."""
    name = bench.checkpoint_name
    assert name(_cell(dataset="kin8nm", layers=5, fold=2)) == "kin8nm_L5_normal_fold2_it10000_kept256.ckpt"
    assert name(_cell(dataset="boston", num_inducing=50)) == "boston_L1_normal_fold0_it10000_kept256_M50.ckpt"
    assert name(_cell(dataset="naval", z_init="svgp")) == "naval_L1_normal_fold0_it10000_kept256_z-init-svgp.ckpt"
    z_svgp = _cell(dataset="naval", method="z-svgp", z_prior="svgp", z_init="svgp", updates_per_iteration=21)
    assert name(z_svgp) == "z-svgp_naval_L1_svgp_fold0_it10000_kept256_upd21.ckpt"
    baseline = _cell(method="sghmc-dgp", z_prior="optimised", updates_per_iteration=1, likelihood_term="expected_log")
    assert name(baseline) == "sghmc-dgp_yacht_L1_optimised_fold0_it10000_kept256_expected_log_upd1.ckpt"
    assert name(_cell(noise_per_output=True)) == "yacht_L1_normal_fold0_it10000_kept256_noise-per-output.ckpt"


@pytest.mark.skipif(not (DATA_DIR / "uci").exists(), reason="the shared UCI data is not beside the checkout")
@pytest.mark.parametrize(
    ("recipe", "options"), [("fit_bsgp", ["--num-inducing", "50"]), ("fit_sghmc_dgp", ["--methods", "sghmc-dgp"])]
)
def test_main_hands_the_recipe_the_checkpoint_its_record_names(bench, monkeypatch, tmp_path, recipe, options):
    kwargs, key = _run_with_a_stand_in_recipe(bench, monkeypatch, tmp_path, recipe, *options)
    cell = json.loads((tmp_path / "cells.json").read_text())["cells"][key]
    assert Path(kwargs["checkpoint"]) == tmp_path / "runs" / bench.checkpoint_name(cell)
