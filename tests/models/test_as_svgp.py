"""An SGPR (or GPR) fit seen as the SVGP whose q(u) is the optimal q*(u): the same predictions and, for SGPR, an ELBO
equal to the collapsed bound (thesis §4.3); for GPR, Z = X and q(u) the exact posterior of f(X)."""

import jax
import numpy as np
import pytest

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.sgpr import SGPR


@pytest.fixture
def data():
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (40, 2))
    y = np.sin(2 * X[:, 0]) * X[:, 1] + 0.1 * rng.standard_normal(40)
    params = {"kernel.lengthscale": np.array([0.8, 1.3]), "kernel.variance": np.asarray(1.4),
              "likelihood.variance": np.asarray(0.05)}  # fmt: skip
    return X, y, rng.uniform(-2, 2, (7, 2)), params


@pytest.mark.slow
def test_sgpr_as_svgp_predicts_alike_and_its_elbo_is_the_collapsed_bound(data):
    X, y, X_new, params = data
    with jax.enable_x64(True):
        sgpr = SGPR(RBF(lengthscale=np.ones(2)), Gaussian(), Z=X[::4])
        params = {**params, "Z": X[::4] + 0.01}
        svgp, svgp_params = sgpr.as_svgp(params, X, y)
        np.testing.assert_allclose(svgp.elbo(svgp_params, X, y), sgpr.elbo(params, X, y), rtol=1e-10)
        for got, expected in zip(
            svgp.predict_f(svgp_params, X_new), sgpr.predict_f(params, X_new, X=X, y=y), strict=True
        ):
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
        assert svgp.whiten and np.array_equal(svgp_params["Z"], params["Z"])


def test_gpr_as_svgp_is_the_exact_posterior(data):
    X, y, X_new, params = data
    with jax.enable_x64(True):
        gpr = GPR(RBF(lengthscale=np.ones(2)), Gaussian())
        svgp, svgp_params = gpr.as_svgp(params, X, y)
        assert svgp.num_inducing == len(X)
        for got, expected in zip(
            svgp.predict_f(svgp_params, X_new), gpr.predict_f(params, X_new, X=X, y=y), strict=True
        ):
            # K(X, X) of 40 close inputs is ill-conditioned: the relative jitter of its Cholesky moves the result
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_gpr_with_its_posterior_factor_predicts_as_without(data):
    X, y, X_new, params = data
    with jax.enable_x64(True):
        gpr = GPR(RBF(lengthscale=np.ones(2)), Gaussian())
        cached = gpr.with_posterior_factor(params, X, y)
        assert cached["posterior.cholesky"].shape == (40, 40) and cached["posterior.projected_y"].shape == (40, 1)
        for got, expected in zip(
            gpr.predict_y(cached, X_new, X=X, y=y), gpr.predict_y(params, X_new, X=X, y=y), strict=True
        ):
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
        stale = gpr.with_posterior_factor(params, X, -y)  # the factor is used, not recomputed from y
        assert not np.allclose(gpr.predict_y(stale, X_new, X=X, y=y)[0], gpr.predict_y(params, X_new, X=X, y=y)[0])
