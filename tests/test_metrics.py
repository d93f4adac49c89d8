"""Tests for ppl_sparsegp.metrics against direct numpy/scipy/sklearn computations."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from ppl_sparsegp.metrics import (
    accuracy,
    binary_nll,
    expected_calibration_error,
    mae,
    multiclass_nll,
    nearest_neighbour_accuracy,
    nlpd_gaussian,
    nlpd_mixture,
    rmse,
    roc_auc,
)

rng = np.random.default_rng(0)
Y = rng.normal(size=(20, 3))
MEAN = Y + rng.normal(scale=0.3, size=(20, 3))
VAR = rng.uniform(0.1, 2.0, size=(20, 3))


def test_rmse_and_mae_by_hand():
    y, m = np.array([1.0, 2.0, 4.0]), np.array([1.5, 2.0, 1.0])
    assert rmse(y, m) == pytest.approx(np.sqrt((0.25 + 0.0 + 9.0) / 3))
    assert mae(y, m) == pytest.approx((0.5 + 0.0 + 3.0) / 3)
    assert rmse(Y, MEAN) == pytest.approx(np.sqrt(np.mean((Y - MEAN) ** 2)))
    assert isinstance(rmse(jnp.asarray(Y), jnp.asarray(MEAN)), float)
    assert mae(torch.tensor(Y), torch.tensor(MEAN)) == pytest.approx(np.mean(np.abs(Y - MEAN)))


def test_nlpd_gaussian_matches_scipy():
    expected = -np.mean(norm.logpdf(Y, MEAN, np.sqrt(VAR)))
    assert nlpd_gaussian(Y, MEAN, VAR) == pytest.approx(expected, rel=1e-12)
    assert nlpd_gaussian(jnp.asarray(Y[:, 0]), MEAN[:, 0], VAR[:, 0]) == pytest.approx(
        -np.mean(norm.logpdf(Y[:, 0], MEAN[:, 0], np.sqrt(VAR[:, 0]))), rel=1e-6
    )


def test_nlpd_mixture_matches_scipy_logsumexp():
    S = 5
    means = MEAN[None] + rng.normal(scale=0.5, size=(S, 20, 3))
    vars_ = rng.uniform(0.05, 1.0, size=(S, 20, 3))
    comps = norm.logpdf(Y[None], means, np.sqrt(vars_))
    expected = -np.mean(logsumexp(comps, axis=0) - np.log(S))
    assert nlpd_mixture(Y, means, vars_) == pytest.approx(expected, rel=1e-12)
    w = np.array([1.0, 2.0, 0.0, 3.0, 4.0])
    weighted = -np.mean(logsumexp(comps, axis=0, b=(w / w.sum())[:, None, None]))
    assert nlpd_mixture(Y, means, vars_, weights=w) == pytest.approx(weighted, rel=1e-12)


def test_nlpd_mixture_of_identical_components_is_gaussian_and_stable():
    means = np.broadcast_to(MEAN, (4, 20, 3))
    vars_ = np.broadcast_to(VAR, (4, 20, 3))
    assert nlpd_mixture(Y, means, vars_) == pytest.approx(nlpd_gaussian(Y, MEAN, VAR), rel=1e-12)
    far = nlpd_mixture(np.array([1e3]), np.zeros((2, 1)), np.full((2, 1), 1e-4))
    assert far == pytest.approx(-norm.logpdf(1e3, 0.0, 1e-2), rel=1e-12)  # no underflow to inf


def test_regression_shape_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"mean must have the shape of y \(20, 3\), got \(20,\)"):
        rmse(Y, MEAN[:, 0])
    with pytest.raises(ValueError, match="var must have the shape of y"):
        nlpd_gaussian(Y, MEAN, VAR[:5])
    with pytest.raises(ValueError, match="var must be > 0"):
        nlpd_gaussian(Y, MEAN, -VAR)
    with pytest.raises(ValueError, match=r"means must have shape \[S, \*y.shape\] = \[S, 20, 3\]"):
        nlpd_mixture(Y, MEAN, VAR)
    with pytest.raises(ValueError, match="vars must have the shape of means"):
        nlpd_mixture(Y, MEAN[None], VAR[None, :10])
    with pytest.raises(ValueError, match=r"weights must have shape \[S\] = \(1,\)"):
        nlpd_mixture(Y, MEAN[None], VAR[None], weights=np.ones(2))
    with pytest.raises(ValueError, match="weights must be non-negative"):
        nlpd_mixture(Y, MEAN[None], VAR[None], weights=-np.ones(1))
    with pytest.raises(ValueError, match="y must not be empty"):
        mae(np.zeros(0), np.zeros(0))


LABELS = np.array([0, 1, 1, 0, 1, 1, 0, 0])
P_BIN = np.array([0.1, 0.8, 0.4, 0.3, 0.95, 0.6, 0.7, 0.05])
LABELS3 = np.array([0, 2, 1, 2, 0])
P3 = np.array(
    [
        [0.7, 0.2, 0.1],
        [0.1, 0.3, 0.6],
        [0.5, 0.4, 0.1],
        [0.2, 0.2, 0.6],
        [0.3, 0.3, 0.4],
    ]
)


def test_accuracy_binary_multiclass_and_labels():
    assert accuracy(LABELS, P_BIN) == pytest.approx(6 / 8)
    assert accuracy(LABELS3, P3) == pytest.approx(3 / 5)
    assert accuracy(LABELS, (P_BIN > 0.5).astype(np.int64)) == pytest.approx(6 / 8)
    assert accuracy(jnp.asarray(LABELS3), jnp.asarray(P3)) == pytest.approx(3 / 5)
    assert accuracy(LABELS.astype(float), torch.tensor(P_BIN)) == pytest.approx(6 / 8)


def ece_by_hand(labels, probs, n_bins):
    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    total = 0.0
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        inside = (conf > lo) & (conf <= hi)
        if inside.any():
            total += inside.mean() * abs(correct[inside].mean() - conf[inside].mean())
    return total


def test_expected_calibration_error_against_a_loop():
    p2 = np.stack([1 - P_BIN, P_BIN], axis=1)
    assert expected_calibration_error(LABELS, P_BIN) == pytest.approx(ece_by_hand(LABELS, p2, 10))
    assert expected_calibration_error(LABELS3, P3, n_bins=5) == pytest.approx(ece_by_hand(LABELS3, P3, 5))
    # a worked example: confidences 0.9 (right) and 0.6 (wrong) in separate bins
    assert expected_calibration_error(np.array([1, 1]), np.array([0.9, 0.4])) == pytest.approx(0.5 * 0.1 + 0.5 * 0.6)
    big = rng.dirichlet(np.ones(4), size=500)
    labels = rng.integers(0, 4, size=500)
    assert expected_calibration_error(labels, big, 15) == pytest.approx(ece_by_hand(labels, big, 15))
    with pytest.raises(ValueError, match="n_bins must be a positive integer"):
        expected_calibration_error(LABELS, P_BIN, n_bins=0)


def test_roc_auc_uses_sklearn():
    assert roc_auc(LABELS, P_BIN) == pytest.approx(roc_auc_score(LABELS, P_BIN))
    assert roc_auc(LABELS, P_BIN) == pytest.approx(14 / 16)  # 14 of 16 (pos, neg) pairs ordered
    big = rng.dirichlet(np.ones(3), size=60)
    labels = np.arange(60) % 3
    assert roc_auc(labels, big) == pytest.approx(roc_auc_score(labels, big, multi_class="ovr"))


def test_nll_by_hand():
    expected = -np.mean(LABELS * np.log(P_BIN) + (1 - LABELS) * np.log(1 - P_BIN))
    assert binary_nll(LABELS, P_BIN) == pytest.approx(expected, rel=1e-12)
    assert multiclass_nll(LABELS3, P3) == pytest.approx(-np.mean(np.log([0.7, 0.6, 0.4, 0.6, 0.3])), rel=1e-12)
    assert np.isfinite(binary_nll(np.array([1]), np.array([0.0])))  # clipped, not inf


def test_classification_errors_name_the_argument():
    with pytest.raises(ValueError, match="y must hold labels 0/1"):
        binary_nll(np.array([-1, 1]), np.array([0.2, 0.8]))
    with pytest.raises(ValueError, match=r"y must hold labels 0\.\.2"):
        multiclass_nll(np.array([0, 3]), P3[:2])
    with pytest.raises(ValueError, match="probs must be 2-D"):
        multiclass_nll(LABELS, P_BIN)
    with pytest.raises(ValueError, match="probs must be 1-D"):
        binary_nll(LABELS3, P3)
    with pytest.raises(ValueError, match="probs rows .* must sum to 1"):
        multiclass_nll(LABELS3, P3 * 2)
    with pytest.raises(ValueError, match=r"probs must have len\(y\) = 8 rows, got 5"):
        expected_calibration_error(LABELS, P_BIN[:5])
    with pytest.raises(ValueError, match=r"probs must be probabilities in \[0, 1\]"):
        binary_nll(LABELS, P_BIN + 0.5)
    with pytest.raises(ValueError, match="y must hold integer class labels"):
        accuracy(np.array([0.5, 1.0]), np.array([0.2, 0.9]))
    with pytest.raises(ValueError, match="y must be 1-D class labels"):
        accuracy(LABELS[:, None], P_BIN)
    with pytest.raises(ValueError, match=r"prob_or_labels must have the shape of y \(8,\)"):
        accuracy(LABELS, np.array([0, 1]))
    with pytest.raises(ValueError, match=r"scores must have len\(y\) = 8 rows"):
        roc_auc(LABELS, P_BIN[:3])


def test_nearest_neighbour_accuracy_counts_the_test_points_whose_nearest_training_point_shares_their_label():
    train = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    test = np.array([[1.0, 0.0], [9.0, 1.0], [0.5, 9.0], [9.0, 0.0]])
    assert nearest_neighbour_accuracy(train, [0, 1, 2], test, [0, 1, 2, 2]) == 0.75
    with pytest.raises(ValueError, match="one label per row"):
        nearest_neighbour_accuracy(train, [0, 1], test, [0, 1, 2, 2])
