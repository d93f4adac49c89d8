"""The harness that runs the authors' released BSGP code (benchmarks/bsgp_released_code.py, issue 24 item 2): its
mixture MNLL is the released formula in original units, and a wrong ``--repo`` or ``--dataset`` is refused by name.
The TensorFlow run itself needs the authors' checkout and is not run here."""

import numpy as np
import pytest
from scipy.stats import norm


@pytest.fixture
def harness(load_benchmark):
    return load_benchmark("bsgp_released_code")


def test_mixture_mnll_is_the_gaussian_nll_in_original_units_for_equal_draws_and_a_logsumexp_otherwise(harness):
    rng = np.random.default_rng(0)
    y, m, v = rng.normal(size=(5, 2)), rng.normal(size=(5, 2)), rng.uniform(0.1, 2.0, size=(5, 2))
    y_std = np.array([0.01, 3.0])
    one = harness.mixture_mnll(np.stack([m] * 4), np.stack([v] * 4), y, y_std)
    assert one == pytest.approx(-np.mean(norm.logpdf(y * y_std, m * y_std, np.sqrt(v) * y_std)), rel=1e-12)
    m2, v2 = rng.normal(size=(5, 2)), rng.uniform(0.1, 2.0, size=(5, 2))
    two = harness.mixture_mnll(np.stack([m, m2]), np.stack([v, v2]), y, y_std)
    density = 0.5 * (
        norm.pdf(y * y_std, m * y_std, np.sqrt(v) * y_std) + norm.pdf(y * y_std, m2 * y_std, np.sqrt(v2) * y_std)
    )
    assert two == pytest.approx(-np.mean(np.log(density)), rel=1e-12)


def test_a_folder_without_the_released_code_or_the_dataset_is_refused_by_name(harness, tmp_path, capsys):
    with pytest.raises(SystemExit):
        harness.main(["--repo", str(tmp_path), "--label", "x"])
    assert "--repo: expected a checkout of the released BSGP code" in capsys.readouterr().err
    (tmp_path / "bsgp").mkdir()
    (tmp_path / "run_regression.py").write_text("")
    (tmp_path / "bsgp" / "models.py").write_text("")
    with pytest.raises(SystemExit):
        harness.main(["--repo", str(tmp_path), "--dataset", "naval", "--label", "x"])
    assert "--dataset: expected one of the checkout's data/*.pth files, got 'naval'" in capsys.readouterr().err
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "naval.pth").write_bytes(b"")
    with pytest.raises(SystemExit):
        harness.main(["--repo", str(tmp_path), "--iterations", "0", "--label", "x"])
    assert "--iterations: expected a positive integer, got 0" in capsys.readouterr().err
