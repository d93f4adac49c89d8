"""The fit picture's 1-D regression curve (:func:`ppl_sparsegp.results.regression_curve`)."""

from __future__ import annotations

import numpy as np

from ppl_sparsegp import data, results


def _dataset(D: int = 1, task: str = "regression") -> data.Dataset:
    rng = np.random.default_rng(0)
    X = rng.uniform(2.0, 6.0, (30, D))
    y = 3.0 * X[:, 0] + 10.0 if task == "regression" else (X[:, 0] > 4).astype(np.int64)
    return data.Dataset(X, y, X[:5], y[:5], "test/line", task)


def test_the_curve_spans_the_widened_training_range_in_original_units():
    ds = _dataset()
    std, scaler = data.standardize(ds)
    Z = std.X_train[:4]
    seen = []

    def predict(X_grid):  # the identity in standardised units: y_std = x_std, variance 0.25
        seen.append(X_grid)
        return X_grid[:, 0], np.full(len(X_grid), 0.25)

    curve = results.regression_curve(ds, scaler, predict, Z, size=50)
    lo, hi = ds.X_train.min(), ds.X_train.max()
    np.testing.assert_allclose(curve["x"][[0, -1]], [lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo)])
    np.testing.assert_allclose(seen[0][:, 0], scaler.transform_x(curve["x"][:, None])[:, 0])
    np.testing.assert_allclose(curve["mean"], scaler.inverse_mean(seen[0][:, 0]))
    np.testing.assert_allclose(curve["var"], 0.25 * scaler.y_scale**2)
    np.testing.assert_allclose(curve["Z"], ds.X_train[:4, 0])
    assert np.array_equal(curve["X"], ds.X_train[:, 0]) and np.array_equal(curve["y"], ds.y_train)


def test_there_is_no_curve_beyond_one_input_or_for_classification():
    for ds in (_dataset(D=2), _dataset(task="binary")):
        assert results.regression_curve(ds, data.standardize(ds)[1], lambda X: (X[:, 0], X[:, 0])) is None
