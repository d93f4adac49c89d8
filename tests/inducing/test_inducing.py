"""Inducing-input initialisers."""

import numpy as np
import pytest

from ppl_sparsegp.core import bounds, kernels
from ppl_sparsegp.inducing.initialise import greedy_variance, kmeans, random_subset


def test_random_subset_is_distinct_rows_of_x(rng):
    X = rng.standard_normal((50, 3))
    Z = random_subset(X, 10, seed=1)
    assert Z.shape == (10, 3)
    assert len({tuple(r) for r in Z}) == 10 and all(any(np.all(X == z, axis=1)) for z in Z)


def test_kmeans_finds_well_separated_clusters(rng):
    centres = np.array([[-5.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    X = np.concatenate([c + 0.1 * rng.standard_normal((40, 2)) for c in centres])
    Z = kmeans(X, 3)
    for c in centres:
        assert np.min(np.linalg.norm(Z - c, axis=1)) < 0.1


def test_greedy_variance_beats_random_on_the_residual_trace(rng):
    X = np.concatenate([rng.normal(0.0, 0.1, (150, 1)), rng.uniform(-4, 4, (50, 1))])
    k = kernels.RBF(variance=1.0, lengthscale=0.5)

    def residual_trace(Z):
        Lmm = np.linalg.cholesky(k(Z) + 1e-10 * np.eye(len(Z)))
        A = np.linalg.solve(Lmm, k(Z, X))
        return float(np.sum(k.diag(X)) - np.sum(A * A))

    greedy = residual_trace(greedy_variance(X, 12, k))
    randoms = [residual_trace(random_subset(X, 12, seed=s)) for s in range(5)]
    assert greedy < min(randoms)


def test_greedy_variance_stops_when_x_is_represented(rng):
    X = np.repeat(rng.standard_normal((4, 2)), 5, axis=0)  # only 4 distinct points
    Z = greedy_variance(X, 10, kernels.RBF(variance=1.0, lengthscale=1.0), threshold=1e-9)
    assert Z.shape == (4, 2)
    exact = bounds.gaussian_log_marginal(kernels.RBF()(X), np.ones(20), 0.1)
    k = kernels.RBF()
    np.testing.assert_allclose(bounds.sgpr_elbo(k(Z, X), k(Z), k.diag(X), np.ones(20), 0.1), exact, rtol=1e-6)


@pytest.mark.parametrize("init", [random_subset, kmeans])
def test_more_inducing_points_than_data_is_an_error(rng, init):
    with pytest.raises(ValueError, match="num_inducing"):
        init(rng.standard_normal((5, 2)), 6)


def test_non_finite_inputs_are_an_error():
    X = np.ones((5, 2))
    X[2, 1] = np.nan
    with pytest.raises(ValueError, match="X"):
        kmeans(X, 2)
