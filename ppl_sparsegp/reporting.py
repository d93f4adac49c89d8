"""Evaluation of fitted GPs in original units and the picture of a fit (shared by the command-line runs)."""

from __future__ import annotations

import matplotlib
import numpy as np

from ppl_sparsegp import metrics
from ppl_sparsegp.data import Standardizer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after selecting the non-interactive backend)


def evaluate(
    predicted: tuple[np.ndarray, np.ndarray, np.ndarray], y_eval: np.ndarray, scaler: Standardizer, task: str
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Metrics in original units from predictions of :func:`compiled_predictor` at the evaluation points.

    Args:
        predicted: (mean, var, log density) of y in standardised units, each [S] or [S, P].
        y_eval: targets in original units, [S] or [S, P] (class labels [S] for binary data).
        scaler: the training standardisation, to map predictions back.
        task: "regression" or "binary".

    Returns:
        (metrics, mean, variance), the moments of y in original units; for binary data the mean is p(y = 1).
    """
    mean, var, log_p = (np.asarray(a) for a in predicted)
    if task == "binary":
        scores = {
            "accuracy": metrics.accuracy(y_eval, mean),
            "nll": metrics.binary_nll(y_eval, mean),
            "ece": metrics.expected_calibration_error(y_eval, mean),
            "auc": metrics.roc_auc(y_eval, mean),
        }
        return scores, mean, var
    mean, var = scaler.inverse_mean(mean), scaler.inverse_var(var)
    scores = {
        "rmse": metrics.rmse(y_eval, mean),
        "mae": metrics.mae(y_eval, mean),
        "nlpd": float(-np.mean(scaler.log_density_to_original(log_p))),
        "rmse_of_training_mean": metrics.rmse(y_eval, np.broadcast_to(scaler.y_mean, y_eval.shape)),
    }
    return scores, mean, var


def plot_fit(
    losses: np.ndarray,
    task: str,
    evaluated_on: str,
    y_eval: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    curve: dict[str, np.ndarray] | None = None,
) -> matplotlib.figure.Figure:
    """Loss trace (left) and the fit (right).

    The right panel is, for 1-D regression (``curve`` given: grid ``x`` [G], ``mean`` and ``var`` [G], training
    ``X``/``y``, inducing inputs ``Z`` [M] or absent), the predictive mean +- 2 sd with data and inducing points;
    for other regression, predicted vs observed at the evaluation points (error bars 2 sd); for binary data, a
    reliability diagram (observed frequency of class 1 against predicted probability, 10 bins).
    """
    fig, (ax_loss, ax_fit) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax_loss.plot(np.arange(1, len(losses) + 1), losses, lw=0.8)
    ax_loss.set(xlabel="step", ylabel="loss (negative ELBO, standardised units)", title="training loss")
    if len(losses) and np.all(losses > 0):
        ax_loss.set_yscale("log")
    if curve is not None:
        sd = np.sqrt(curve["var"])
        ax_fit.fill_between(curve["x"], curve["mean"] - 2 * sd, curve["mean"] + 2 * sd, alpha=0.25, label="±2 sd")
        ax_fit.plot(curve["x"], curve["mean"], lw=1.5, label="predictive mean")
        ax_fit.plot(curve["X"], curve["y"], "k.", ms=3, alpha=0.6, label="training data")
        if "Z" in curve:
            ax_fit.plot(curve["Z"], np.full(len(curve["Z"]), ax_fit.get_ylim()[0]), "r|", ms=12, label="Z")
        ax_fit.set(xlabel="x", ylabel="y", title="predictive distribution")
        ax_fit.legend(loc="best", fontsize=8)
    elif task == "regression":
        ax_fit.errorbar(y_eval.ravel(), mean.ravel(), yerr=2 * np.sqrt(var.ravel()), fmt=".", ms=3, lw=0.5, alpha=0.6)
        lo, hi = float(min(y_eval.min(), mean.min())), float(max(y_eval.max(), mean.max()))
        ax_fit.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax_fit.set(xlabel="observed y", ylabel="predicted mean ± 2 sd", title=f"{evaluated_on} set")
    else:
        edges = np.linspace(0.0, 1.0, 11)
        which = np.digitize(mean, edges[1:-1])  # bin 0..9
        filled = [b for b in range(10) if np.any(which == b)]
        predicted = [mean[which == b].mean() for b in filled]
        observed = [y_eval[which == b].mean() for b in filled]
        ax_fit.plot([0, 1], [0, 1], "k--", lw=0.8)
        ax_fit.plot(predicted, observed, "o-")
        ax_fit.set(xlabel="predicted p(y = 1)", ylabel="observed frequency", title=f"reliability, {evaluated_on} set")
    fig.tight_layout()
    return fig
