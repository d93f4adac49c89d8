"""Test metrics: RMSE, MAE, NLPD (Gaussian and mixture), accuracy, ECE, ROC AUC and NLL.

Every function takes numpy, jax or torch arrays **in original units** (undo any standardisation first, e.g. with
:class:`ppl_sparsegp.data.Standardizer`) and returns a Python ``float``. Shapes must match exactly; nothing is
broadcast silently, and a mismatch raises :class:`ValueError` naming the argument.

Conventions:

* Regression targets ``y`` are [N] or [N, P]; predictive means/variances have the same shape. Averages run over
  all N * P entries (each output of each test point counts once, as in the BSGP protocol).
* Class labels ``y`` are integers [N]: 0/1 for binary problems, 0..C-1 for C classes. Binary predictions are
  probabilities of class 1, shape [N]; multi-class predictions are class probabilities [N, C].
* Probabilities are clipped below at the smallest positive float64 before a logarithm is taken, so a wrong
  prediction with probability exactly 1 gives a large finite NLL (about 708) rather than ``inf``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

Array = Any

_LOG_2PI = math.log(2.0 * math.pi)
_TINY = np.finfo(np.float64).tiny
_PROB_SUM_TOL = 1e-3


def _numpy(x: Array, name: str, dtype: type | None = np.float64) -> np.ndarray:
    """Any backend's array (torch tensors included) as a numpy array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    try:
        return np.asarray(x) if dtype is None else np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a numeric array, got {type(x).__name__}") from err


def _same_shape(ref_name: str, ref: np.ndarray, name: str, arr: np.ndarray) -> None:
    if arr.shape != ref.shape:
        raise ValueError(f"{name} must have the shape of {ref_name} {ref.shape}, got {arr.shape}")


def _nonempty(name: str, arr: np.ndarray) -> None:
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")


def _regression_pair(y: Array, mean: Array) -> tuple[np.ndarray, np.ndarray]:
    y_np, mean_np = _numpy(y, "y"), _numpy(mean, "mean")
    _nonempty("y", y_np)
    _same_shape("y", y_np, "mean", mean_np)
    return y_np, mean_np


def _positive_var(name: str, var: np.ndarray) -> None:
    if not np.all(var > 0):
        raise ValueError(f"{name} must be > 0 everywhere (a predictive variance), min is {var.min()}")


def rmse(y: Array, mean: Array) -> float:
    """Root mean squared error sqrt(mean((y - mean)^2)) over all entries; ``y``, ``mean``: [N] or [N, P]."""
    y_np, mean_np = _regression_pair(y, mean)
    return float(np.sqrt(np.mean((y_np - mean_np) ** 2)))


def mae(y: Array, mean: Array) -> float:
    """Mean absolute error mean(|y - mean|) over all entries; ``y``, ``mean``: [N] or [N, P]."""
    y_np, mean_np = _regression_pair(y, mean)
    return float(np.mean(np.abs(y_np - mean_np)))


def _gaussian_logpdf(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    return -0.5 * (_LOG_2PI + np.log(var) + (y - mean) ** 2 / var)


def nlpd_gaussian(y: Array, mean: Array, var: Array) -> float:
    """Mean negative log predictive density of independent Gaussians N(y; mean, var).

    Args:
        y, mean, var: [N] or [N, P], all the same shape; ``var`` > 0 is the predictive variance of y
            (including observation noise).

    Returns:
        -mean_{n,p} log N(y_np; mean_np, var_np).
    """
    y_np, mean_np = _regression_pair(y, mean)
    var_np = _numpy(var, "var")
    _same_shape("y", y_np, "var", var_np)
    _positive_var("var", var_np)
    return float(-np.mean(_gaussian_logpdf(y_np, mean_np, var_np)))


def nlpd_mixture(y: Array, means: Array, vars: Array, weights: Array | None = None) -> float:
    """Mean negative log density of a per-point mixture of S Gaussians (e.g. over posterior samples).

    log p(y_n) = logsumexp_s [log w_s + log N(y_n; means[s, n], vars[s, n])], computed stably.

    Args:
        y: [N] or [N, P].
        means, vars: [S, N] or [S, N, P], the component means and variances (``vars`` > 0).
        weights: [S] non-negative mixture weights (normalised here); ``None`` means 1/S each.

    Returns:
        -mean over all entries of y of log p(y).
    """
    y_np = _numpy(y, "y")
    _nonempty("y", y_np)
    means_np, vars_np = _numpy(means, "means"), _numpy(vars, "vars")
    if means_np.ndim != y_np.ndim + 1 or means_np.shape[1:] != y_np.shape or means_np.shape[0] < 1:
        raise ValueError(
            f"means must have shape [S, *y.shape] = [S, {', '.join(map(str, y_np.shape))}] with S >= 1, "
            f"got {means_np.shape}"
        )
    _same_shape("means", means_np, "vars", vars_np)
    _positive_var("vars", vars_np)
    n_components = means_np.shape[0]
    if weights is None:
        log_w = np.full(n_components, -math.log(n_components))
    else:
        w = _numpy(weights, "weights")
        if w.shape != (n_components,):
            raise ValueError(f"weights must have shape [S] = ({n_components},), got {w.shape}")
        if np.any(w < 0) or not np.sum(w) > 0:
            raise ValueError("weights must be non-negative with a positive sum")
        with np.errstate(divide="ignore"):
            log_w = np.log(w / np.sum(w))
    log_w = log_w.reshape((n_components,) + (1,) * y_np.ndim)
    terms = log_w + _gaussian_logpdf(y_np[None], means_np, vars_np)
    top = np.max(terms, axis=0)
    log_p = top + np.log(np.sum(np.exp(terms - top[None]), axis=0))
    return float(-np.mean(log_p))


def _labels(y: Array, n_classes: int | None) -> np.ndarray:
    """Integer class labels [N] in 0..n_classes-1 (no upper bound for ``None``) from int or float ``y``."""
    y_np = _numpy(y, "y", dtype=None)
    if y_np.ndim != 1:
        raise ValueError(f"y must be 1-D class labels [N], got shape {y_np.shape}")
    _nonempty("y", y_np)
    if not np.issubdtype(y_np.dtype, np.number) and y_np.dtype != np.bool_:
        raise ValueError(f"y must hold integer class labels, got dtype {y_np.dtype}")
    labels = y_np.astype(np.int64)
    if not np.array_equal(labels, y_np):
        raise ValueError("y must hold integer class labels (0/1 or 0..C-1), got non-integer values")
    if labels.min() < 0 or (n_classes is not None and labels.max() >= n_classes):
        expected = {None: "0, 1, 2, ...", 2: "0/1"}.get(n_classes, f"0..{n_classes - 1}")
        raise ValueError(f"y must hold labels {expected}, got values in [{labels.min()}, {labels.max()}]")
    return labels


def _probs(y: Array, probs: Array, name: str = "probs") -> tuple[np.ndarray, np.ndarray]:
    """Labels [N] and class probabilities [N, C] (a binary [N] input p becomes the columns [1 - p, p])."""
    p = _numpy(probs, name)
    if p.ndim == 1:
        labels = _labels(y, n_classes=2)
        p = np.stack([1.0 - p, p], axis=1)
    elif p.ndim == 2:
        labels = _labels(y, n_classes=p.shape[1])
        if not np.allclose(p.sum(axis=1), 1.0, rtol=0.0, atol=_PROB_SUM_TOL):
            raise ValueError(f"{name} rows [N, C] must sum to 1 (class probabilities, not logits)")
    else:
        raise ValueError(f"{name} must be [N] (binary) or [N, C] (multi-class), got shape {p.shape}")
    if p.shape[0] != labels.shape[0]:
        raise ValueError(f"{name} must have len(y) = {labels.shape[0]} rows, got {p.shape[0]}")
    if np.any(p < 0) or np.any(p > 1) or not np.all(np.isfinite(p)):
        raise ValueError(f"{name} must be probabilities in [0, 1]")
    return labels, p


def accuracy(y: Array, prob_or_labels: Array) -> float:
    """Fraction of correct predictions.

    Args:
        y: true labels [N].
        prob_or_labels: predicted labels [N] of an integer dtype; or binary probabilities of class 1 [N]
            (floating dtype, predicted class 1 when p > 0.5); or class probabilities [N, C] (argmax).
    """
    pred = _numpy(prob_or_labels, "prob_or_labels", dtype=None)
    if pred.ndim == 1 and np.issubdtype(pred.dtype, np.integer):
        labels = _labels(y, n_classes=None)
        if pred.shape != labels.shape:
            raise ValueError(f"prob_or_labels must have the shape of y {labels.shape}, got {pred.shape}")
        return float(np.mean(pred == labels))
    labels, p = _probs(y, pred, name="prob_or_labels")
    return float(np.mean(np.argmax(p, axis=1) == labels))


def expected_calibration_error(y: Array, probs: Array, n_bins: int = 10) -> float:
    """Top-label expected calibration error with ``n_bins`` equal-width confidence bins on [0, 1].

    The confidence of a prediction is the largest class probability (max(p, 1 - p) for binary input); bin b
    holds the points with confidence in (b / n_bins, (b + 1) / n_bins] (the first bin also holds 0). Then
    ECE = sum_b (n_b / N) * |accuracy_b - mean confidence_b|.

    Args:
        y: true labels [N].
        probs: probabilities of class 1 [N], or class probabilities [N, C].
        n_bins: number of bins (>= 1).
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    labels, p = _probs(y, probs)
    confidence = np.max(p, axis=1)
    correct = (np.argmax(p, axis=1) == labels).astype(np.float64)
    bins = np.clip(np.ceil(confidence * n_bins).astype(np.int64) - 1, 0, n_bins - 1)
    acc_sum = np.bincount(bins, weights=correct, minlength=n_bins)
    conf_sum = np.bincount(bins, weights=confidence, minlength=n_bins)
    return float(np.sum(np.abs(acc_sum - conf_sum)) / labels.shape[0])


def roc_auc(y: Array, scores: Array) -> float:
    """Area under the ROC curve (``sklearn.metrics.roc_auc_score``).

    Args:
        y: true labels [N], 0/1 (binary) or 0..C-1.
        scores: binary scores of class 1 [N] (any monotone score: probability, latent mean); or class
            probabilities [N, C], scored one-vs-rest and macro-averaged.
    """
    s = _numpy(scores, "scores")
    if s.ndim == 1:
        labels = _labels(y, n_classes=2)
    elif s.ndim == 2:
        labels = _labels(y, n_classes=s.shape[1])
    else:
        raise ValueError(f"scores must be [N] or [N, C], got shape {s.shape}")
    if s.shape[0] != labels.shape[0]:
        raise ValueError(f"scores must have len(y) = {labels.shape[0]} rows, got {s.shape[0]}")
    from sklearn.metrics import roc_auc_score  # sklearn on first use (~1 s)

    if s.ndim == 1:
        return float(roc_auc_score(labels, s))
    return float(roc_auc_score(labels, s, multi_class="ovr", labels=np.arange(s.shape[1])))


def _safe_log(p: np.ndarray) -> np.ndarray:
    return np.log(np.clip(p, _TINY, None))


def binary_nll(y: Array, probs: Array) -> float:
    """Mean negative Bernoulli log-likelihood -mean[y log p + (1 - y) log(1 - p)].

    Args:
        y: labels [N] in {0, 1}.
        probs: predictive probabilities of class 1 [N].
    """
    p = _numpy(probs, "probs")
    if p.ndim != 1:
        raise ValueError(f"probs must be 1-D [N] probabilities of class 1, got shape {p.shape}")
    labels, p2 = _probs(y, p)
    return float(-np.mean(_safe_log(p2[np.arange(labels.shape[0]), labels])))


def multiclass_nll(y: Array, probs: Array) -> float:
    """Mean negative categorical log-likelihood -mean_n log probs[n, y_n].

    Args:
        y: labels [N] in 0..C-1.
        probs: predictive class probabilities [N, C], rows summing to 1.
    """
    p = _numpy(probs, "probs")
    if p.ndim != 2:
        raise ValueError(f"probs must be 2-D [N, C] class probabilities, got shape {p.shape}")
    labels, p = _probs(y, p)
    return float(-np.mean(_safe_log(p[np.arange(labels.shape[0]), labels])))


def nearest_neighbour_accuracy(
    train_points: Array, train_labels: Array, test_points: Array, test_labels: Array
) -> float:
    """Accuracy of the 1-nearest-neighbour classifier (Euclidean) fitted on ``train_points`` [N, Q] with
    ``train_labels`` [N] and scored on ``test_points`` [S, Q], ``test_labels`` [S] (a latent space's probe, e.g.
    SAS-GP's Table 2)."""
    from sklearn.neighbors import KNeighborsClassifier

    train, test = _numpy(train_points, "train_points"), _numpy(test_points, "test_points")
    labels, truth = _numpy(train_labels, "train_labels", None), _numpy(test_labels, "test_labels", None)
    _nonempty("train_points", train)
    _nonempty("test_points", test)
    if train.shape[0] != labels.shape[0] or test.shape[0] != truth.shape[0]:
        raise ValueError(f"points and labels: expected one label per row, got {train.shape[0]} rows and "
                         f"{labels.shape[0]} labels, {test.shape[0]} rows and {truth.shape[0]} labels")  # fmt: skip
    predicted = KNeighborsClassifier(n_neighbors=1).fit(train, labels).predict(test)
    return float(np.mean(predicted == truth))
