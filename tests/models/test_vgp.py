"""VGP (Opper-Archambeau): the exact-GP oracle for a Gaussian likelihood, SVGP with Z = X for the others, fits by
SVI with learned hyperparameters, NumPyro's Predictive, and the model's checks."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from numpyro.infer import Predictive, TraceMeanField_ELBO

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.core.opper_archambeau import whitened_q
from ppl_sparsegp.infer.optimisers import LBFGS
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.models.numpyro.vgp import VGP

ALL_FIXED = ("kernel.variance", "kernel.lengthscale", "likelihood.variance")


def _data(rng, N=25, P=1):
    X = rng.uniform(-3, 3, (N, 1))
    y = np.sin(2 * X[:, :1] + np.arange(P)) + 0.2 * rng.standard_normal((N, P))
    return X, (y[:, 0] if P == 1 else y)


def _kernel():
    return kernels.RBF(variance=1.1, lengthscale=np.array([0.8]))


def _loss(gp, params, X, y):
    return float(jax.jit(lambda p: TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), p, gp.model, gp.guide, X, y))(
        params))  # fmt: skip


@pytest.mark.parametrize("P", [2])
@pytest.mark.slow
def test_gaussian_optimum_is_the_exact_posterior_and_its_elbo_the_marginal_likelihood(rng, P):
    """α = (K + σ² I)⁻¹ y and λ = 1/σ make q(f) the exact posterior, so the ELBO is log p(y) (the KL gap closes)."""
    X, y = _data(rng, P=P)
    s2 = 0.05
    lik = likelihoods.Gaussian(variance=s2)
    vgp, gpr = VGP(_kernel(), lik, fixed=ALL_FIXED, num_latent=P), GPR(_kernel(), lik)
    Y = y.reshape(len(X), -1)
    alpha = np.linalg.solve(_kernel()(X) + s2 * np.eye(len(X)), Y).T
    params = {"q_alpha": alpha, "q_lambda": np.full((P, len(X)), 1 / np.sqrt(s2))}
    lml = gpr.log_marginal_likelihood({}, X, y)
    np.testing.assert_allclose(vgp.elbo(params, X, y), lml, rtol=1e-7)
    np.testing.assert_allclose(-_loss(vgp, params, X, y), lml, rtol=1e-7)
    Xs = np.linspace(-3.5, 3.5, 8)[:, None]
    for got, want in zip(vgp.predict_f(params, Xs, X=X, y=y), gpr.predict_f({}, Xs, X=X, y=y), strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)
    # any other q is worse
    worse = {"q_alpha": alpha * 0.9, "q_lambda": params["q_lambda"] * 1.3}
    assert vgp.elbo(worse, X, y) < lml - 1e-3


@pytest.mark.parametrize(
    "likelihood",
    [likelihoods.Bernoulli(), likelihoods.RobustMax(3), likelihoods.Poisson()],
    ids=lambda x: type(x).__name__,
)
def test_elbo_equals_whitened_svgp_with_z_equal_x_for_the_same_q(rng, likelihood):
    """The O-A q(v) is a Gaussian over the whitened values at X: SVGP with Z = X and that q(u) has the same ELBO."""
    X, y = _data(rng)
    J = likelihood.latent_dim or 1
    labels = {"Bernoulli": (y > 0).astype(float), "RobustMax": np.digitize(y, [-0.5, 0.5]).astype(float),
              "Poisson": np.round(np.exp(y))}[type(likelihood).__name__]  # fmt: skip
    fixed = ("kernel.variance", "kernel.lengthscale")
    vgp = VGP(_kernel(), likelihood, fixed=fixed, num_latent=J)
    svgp = SVGP(_kernel(), likelihood, fixed=fixed, Z=X, learn_Z=False, num_latent=J)
    params = {"q_alpha": 0.3 * rng.standard_normal((J, len(X))), "q_lambda": rng.uniform(0.3, 2.0, (J, len(X)))}
    L = np.linalg.cholesky(_kernel()(X) + 1e-8 * np.mean(np.diag(_kernel()(X))) * np.eye(len(X)))
    q_mu, q_sqrt = whitened_q(L, params["q_alpha"], params["q_lambda"])
    expected = svgp.elbo({"u_loc": q_mu, "u_scale_tril": q_sqrt}, X, labels)
    np.testing.assert_allclose(vgp.elbo(params, X, labels), expected, rtol=1e-6)
    np.testing.assert_allclose(-_loss(vgp, params, X, labels), expected, rtol=1e-6)


@pytest.mark.slow  # about 30 s (two L-BFGS fits); `make test-slow` runs it in CI
def test_bernoulli_optimum_matches_svgp_with_z_equal_x_and_a_free_cholesky(rng):
    """Opper and Archambeau: 2N parameters reach the optimum of the full N(N+1)/2 (digest §3.9's oracle). 1000 L-BFGS
    steps: the 2N-parameter fit was still 1.1e-6 (relative) short of the optimum after 300 (2026-11-28), 1.7e-8 after
    1000."""
    X, y = _data(rng, N=20)
    yb = (y > 0).astype(float)
    fixed = ("kernel.variance", "kernel.lengthscale")
    vgp = VGP(_kernel(), likelihoods.Bernoulli(), fixed=fixed)
    svgp = SVGP(_kernel(), likelihoods.Bernoulli(), fixed=fixed, Z=X, learn_Z=False)
    fits = [fit_svi(gp.model, gp.guide, X, yb, optimizer=LBFGS(), num_steps=1000, progress=False) for gp in (vgp, svgp)]
    np.testing.assert_allclose(vgp.elbo(fits[0].params, X, yb), svgp.elbo(fits[1].params, X, yb), rtol=1e-6)


@pytest.mark.slow  # about 15 s (two L-BFGS fits); `make test-slow` runs it in CI
def test_svi_learns_hyperparameters_to_the_gpr_maximum(rng):
    """The guide depends on θ through K: fitting q and θ together reaches GPR's type-II maximum likelihood."""
    X, y = _data(rng)
    lik = likelihoods.Gaussian(variance=0.3)
    gpr, vgp = GPR(_kernel(), lik), VGP(_kernel(), lik)
    best = fit_svi(gpr.model, gpr.guide, X, y, optimizer=LBFGS(), num_steps=200, progress=False)
    fit = fit_svi(vgp.model, vgp.guide, X, y, optimizer=LBFGS(), num_steps=6000, progress=False)
    np.testing.assert_allclose(-fit.losses[-1], gpr.log_marginal_likelihood(best.params, X, y), rtol=1e-4)
    for site in ("kernel.lengthscale", "likelihood.variance"):
        np.testing.assert_allclose(fit.params[site], best.params[site], rtol=1e-2)


def test_map_hyperparameters_with_priors_and_adam(rng):
    """A prior makes a hyperparameter a sample site with a point mass in the guide at ``<site>_map``."""
    import numpyro.distributions as dist

    X, y = _data(rng)
    vgp = VGP(_kernel(), likelihoods.Gaussian(0.1), priors={"kernel.lengthscale": dist.Gamma(2.0, 2.0).expand([1])})
    fit = fit_svi(vgp.model, vgp.guide, X, y, optimizer=optax.adam(0.05), num_steps=300, progress=False)
    assert "kernel.lengthscale_map" in fit.params and "kernel.lengthscale" not in fit.params
    assert fit.losses[-1] < fit.losses[0] and np.all(np.isfinite(fit.losses))


def test_predictive_draws_f_and_y_at_the_training_inputs(rng):
    X, y = _data(rng)
    vgp = VGP(_kernel(), likelihoods.Gaussian(0.1), fixed=ALL_FIXED)
    params = {"q_alpha": np.zeros((1, len(X))), "q_lambda": np.ones((1, len(X)))}
    predictive = Predictive(vgp.model, guide=vgp.guide, params=params, num_samples=5, return_sites=["v", "f", "y"])
    draws = predictive(jax.random.PRNGKey(1), jnp.asarray(X))
    assert draws["f"].shape == draws["y"].shape == (5, len(X)) and draws["v"].shape == (5, 1, len(X))
    # a draw of v predicts f = L v at the training inputs with next to no variance left (up to the relative
    # jitter 1e-8 of K, which K⁻¹ magnifies at Z = X)
    mean, var = vgp.predict_f({"v": draws["v"][0]}, X, X=X, y=y)
    np.testing.assert_allclose(mean, draws["f"][0], atol=1e-3)
    np.testing.assert_array_less(var, 1e-4)


def test_checks_name_the_argument(rng):
    X, y = _data(rng)
    with pytest.raises(ValueError, match="num_latent"):
        VGP(_kernel(), likelihoods.Gaussian(0.1), num_latent=0)
    with pytest.raises(ValueError, match="num_latent"):
        VGP(_kernel(), likelihoods.RobustMax(3))
    vgp = VGP(_kernel(), likelihoods.Gaussian(0.1))
    with pytest.raises(ValueError, match="X and y"):
        vgp.predict_f({"q_alpha": np.zeros((1, 25)), "q_lambda": np.ones((1, 25))}, X)
    with pytest.raises(ValueError, match=r"params\['q_alpha'\]"):
        vgp.predict_f({"q_alpha": np.zeros((1, 3)), "q_lambda": np.ones((1, 25))}, X, X=X, y=y)
