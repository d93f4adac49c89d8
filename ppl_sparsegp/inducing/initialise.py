"""Initial inducing inputs Z [M, D] chosen from training inputs X [N, D].

* :func:`random_subset`: M distinct rows of X, uniformly.
* :func:`kmeans`: scikit-learn's k-means centres (the thesis' choice, Ch 4-5).
* :func:`greedy_variance`: greedy conditional-variance selection (a pivoted Cholesky of K_XX): each step adds
  the point with the largest residual prior variance ``k(x, x) - Q(x, x)`` given the points chosen so far, the
  initialisation analysed by Burt, Rasmussen & van der Wilk (2020).

:func:`by_name` picks one by name. Each function checks its inputs eagerly and raises ``ValueError`` naming the
argument.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ppl_sparsegp import validation

Array = Any


def _check(X: Array, num_inducing: int) -> np.ndarray:
    X = np.asarray(X)
    validation.check_inputs(X)
    validation.check_inducing_count(num_inducing, X.shape[0])
    return X


def random_subset(X: Array, num_inducing: int, seed: int = 0) -> np.ndarray:
    """M rows of X [N, D] drawn without replacement -> Z [M, D]."""
    X = _check(X, num_inducing)
    idx = np.random.default_rng(seed).choice(X.shape[0], size=num_inducing, replace=False)
    return X[np.sort(idx)].copy()


def kmeans(X: Array, num_inducing: int, seed: int = 0, max_points: int = 20000) -> np.ndarray:
    """k-means centres of X [N, D] (fitted on a random subset of at most ``max_points`` rows) -> Z [M, D]."""
    X = _check(X, num_inducing)
    rng = np.random.default_rng(seed)
    if X.shape[0] > max_points:
        X = X[rng.choice(X.shape[0], size=max_points, replace=False)]
    from sklearn.cluster import KMeans  # sklearn on first use (~1 s)

    km = KMeans(n_clusters=num_inducing, n_init=1, random_state=seed).fit(X)
    return np.asarray(km.cluster_centers_, dtype=X.dtype)


def greedy_variance(
    X: Array, num_inducing: int, kernel: Callable[..., Any], seed: int = 0, threshold: float = 0.0
) -> np.ndarray:
    """Greedy conditional-variance selection -> Z [M', D] with M' <= M rows of X [N, D].

    Partial pivoted Cholesky of K_XX: keep the residual diagonal d = diag(K_XX - Q_XX); pick
    ``argmax d``; update d with the new column of the incomplete Cholesky factor. Stops early when the largest
    residual variance falls to ``threshold`` (X is then represented exactly up to that tolerance).
    Cost O(N M²) time, O(N M) memory. ``kernel`` is a :class:`ppl_sparsegp.core.kernels.Kernel` (or any callable
    with ``kernel(A, B) -> [len(A), len(B)]`` and ``kernel.diag(A) -> [len(A)]``) evaluated on numpy arrays.
    The first pivot is random (``seed``), as the residual variances are all equal for stationary kernels.
    """
    X = _check(X, num_inducing)
    N = X.shape[0]
    d = np.array(kernel.diag(X), dtype=np.float64)
    factor = np.zeros((num_inducing, N))
    chosen = [int(np.random.default_rng(seed).integers(N))]
    for m in range(num_inducing):
        i = chosen[-1]
        if m > 0:
            if d[i] <= threshold:
                chosen.pop()
                break
        k_col = np.asarray(kernel(X, X[i : i + 1]), dtype=np.float64)[:, 0]
        col = (k_col - factor[:m].T @ factor[:m, i]) / np.sqrt(d[i])
        factor[m] = col
        d = np.maximum(d - col**2, 0.0)
        d[chosen] = 0.0
        if m + 1 < num_inducing:
            chosen.append(int(np.argmax(d)))
    return X[np.array(chosen)].copy()


INITIALISERS = ("kmeans", "random", "greedy")


def by_name(name: str, X: Array, num_inducing: int, kernel: Callable[..., Any], seed: int = 0) -> np.ndarray:
    """Z [M, D] from X [N, D] by the initialiser ``name`` (one of :data:`INITIALISERS`; ``kernel`` for "greedy"),
    as X's dtype."""
    validation.check_choice("init", name, INITIALISERS)
    if name == "greedy":
        Z = greedy_variance(X, num_inducing, kernel, seed=seed)
    else:
        Z = (kmeans if name == "kmeans" else random_subset)(X, num_inducing, seed=seed)
    return np.asarray(Z, dtype=np.asarray(X).dtype)
