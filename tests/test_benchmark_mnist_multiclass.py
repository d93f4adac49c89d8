"""benchmarks/mnist_multiclass.py: a resumed run goes on with the curve and clock of the run that wrote its
checkpoint."""

import json

import numpy as np
import pytest

SETTINGS = {
    "inducing": 500,
    "batch": 1000,
    "lr": 0.01,
    "halve_every": 10_000,
    "dtype": "float32",
    "natural": None,
    "positive_transform": "softplus",
}


def row(step: int, seconds: float) -> dict:
    return {"step": step, "train_seconds": seconds, "test_error_percent": 3.0, "mean_log_predictive": -0.1, "loss": 1.0}


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("mnist_multiclass")


def test_a_fresh_run_starts_an_empty_curve_whatever_the_report_holds(bench):
    earlier = {"settings": {**SETTINGS, "lr": 0.1}, "curve": [row(1000, 60.0)]}
    assert bench.resume_point(earlier, SETTINGS, 0) == ([], 0.0)


def test_points_after_the_checkpoint_are_dropped_and_the_clock_read_at_its_step(bench):
    earlier = {"settings": SETTINGS, "curve": [row(1000, 60.0), row(2000, 118.0), row(3000, 180.0)],
               "progress": {"step": 3100, "train_seconds": 186.0}}  # fmt: skip
    curve, seconds = bench.resume_point(earlier, SETTINGS, 2000)  # killed after scoring 3000, before its checkpoint
    assert curve == [row(1000, 60.0), row(2000, 118.0)]
    assert seconds == 118.0


def test_a_run_stopped_between_evaluations_resumes_from_its_progress(bench):
    earlier = {"settings": SETTINGS, "curve": [row(1000, 60.0)], "progress": {"step": 1300, "train_seconds": 77.5}}
    assert bench.resume_point(earlier, SETTINGS, 1300) == ([row(1000, 60.0)], 77.5)


def test_a_report_of_other_settings_or_without_the_step_is_refused(bench):
    earlier = {"settings": SETTINGS, "curve": [row(1000, 60.0)], "progress": {"step": 1300, "train_seconds": 77.5}}
    with pytest.raises(ValueError, match="--checkpoint resumes at step 1000 but --output holds a run with other"):
        bench.resume_point(earlier, {**SETTINGS, "dtype": "float64"}, 1000)
    with pytest.raises(ValueError, match="knows no training time at that step .it reaches step 1300"):
        bench.resume_point(earlier, SETTINGS, 1200)
    with pytest.raises(ValueError, match="holds a run with other settings"):
        bench.resume_point({}, SETTINGS, 1000)


def small_classes(dtype: str):
    """Ten separable classes in 4 dimensions in place of MNIST: 300 training and 100 test points."""
    rng = np.random.default_rng(0)
    centres = 3.0 * rng.normal(size=(10, 4))
    y, y_test = rng.integers(0, 10, 300), rng.integers(0, 10, 100)
    X, X_test = (centres[labels] + rng.normal(size=(len(labels), 4)) for labels in (y, y_test))
    return X.astype(dtype), y, X_test.astype(dtype), y_test


@pytest.mark.slow
def test_a_resumed_run_continues_the_uninterrupted_curve(bench, monkeypatch, tmp_path):
    monkeypatch.setattr(bench, "mnist", small_classes)

    def run(steps: int, name: str) -> dict:
        files = ["--checkpoint", str(tmp_path / f"{name}.npz"), "--output", str(tmp_path / f"{name}.json")]
        small = ["--inducing", "5", "--batch", "50", "--eval-every", "10", "--speed-steps", "1"]
        bench.main(["--steps", str(steps), *small, *files])
        return json.loads((tmp_path / f"{name}.json").read_text())

    whole = run(40, "whole")
    first = run(20, "parts")
    resumed = run(40, "parts")
    assert [r["step"] for r in first["curve"]] == [10, 20]
    assert first["progress"]["step"] == 20
    assert resumed["curve"][:2] == first["curve"]
    assert [r["step"] for r in resumed["curve"]] == [10, 20, 30, 40] == [r["step"] for r in whole["curve"]]
    for part, one in zip(resumed["curve"], whole["curve"], strict=True):
        assert part["loss"] == one["loss"]
        assert part["test_error_percent"] == one["test_error_percent"]
        assert part["hyperparameters"] == one["hyperparameters"]
        assert part["hyperparameters"].keys() == {"kernel.k0.variance", "kernel.k0.lengthscale", "kernel.k1.variance"}
    seconds = [r["train_seconds"] for r in resumed["curve"]]
    assert seconds == sorted(seconds) and resumed["progress"] == {"step": 40, "train_seconds": seconds[-1]}
