"""Bayesian GP-LVMs: bounds against the SVGP / SGPR ones and closed-form KLs, minibatches, unbiasedness, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer import TraceMeanField_ELBO

from ppl_sparsegp.core import bounds
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Bernoulli, Gaussian
from ppl_sparsegp.models.numpyro.gplvm import BayesianGPLVM, CollapsedGPLVM, pca_latents
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP

N, D, Q, M = 30, 3, 2, 5


@pytest.fixture(scope="module")
def setup():
    """Data Y [N, D] from a 2-D latent manifold, a model, and random (not fitted) parameters of every site."""
    rng = np.random.default_rng(1)
    t = rng.uniform(-2, 2, size=(N, Q))
    Y = np.stack([np.sin(t[:, 0]), np.cos(t[:, 1]), t[:, 0] * t[:, 1]], axis=1) + 0.1 * rng.normal(size=(N, D))
    common = {
        "kernel": RBF(variance=1.3, lengthscale=np.array([0.8, 1.4])),
        "likelihood": Gaussian(0.2),
        "Z": rng.normal(size=(M, Q)),
        "num_latent": D,
    }
    tril = np.tril(0.3 * rng.normal(size=(D, M, M)), -1) + np.eye(M) * rng.uniform(0.3, 0.8, size=(D, 1, M))
    params = {
        "kernel.variance": jnp.asarray(1.3),
        "kernel.lengthscale": jnp.asarray([0.8, 1.4]),
        "likelihood.variance": jnp.asarray(0.2),
        "Z": jnp.asarray(common["Z"]),
        "u_loc": jnp.asarray(rng.normal(size=(D, M))),
        "u_scale_tril": jnp.asarray(tril),
        "X_loc": jnp.asarray(pca_latents(Y, Q) + 0.1 * rng.normal(size=(N, Q))),
        "X_scale": jnp.asarray(rng.uniform(0.1, 0.5, size=(N, Q))),
    }
    return Y, common, params


def sites_of(model, params):
    """The entries of ``params`` that are sites of ``model`` (a model refuses keys it does not know)."""
    return {k: v for k, v in params.items() if k in model.parameter_names()}


def closed_form_latent_kl(loc, scale):
    """Σ_nq ½ (s² + μ² − 1 − log s²), KL[N(μ, s²) ‖ N(0, 1)] summed."""
    loc, scale = np.asarray(loc), np.asarray(scale)
    return 0.5 * np.sum(scale**2 + loc**2 - 1.0 - np.log(scale**2))


def negative_loss(model, params, Y, key, num_particles=1):
    return -TraceMeanField_ELBO(num_particles).loss(key, params, model.model, model.guide, jnp.asarray(Y))


def test_bound_with_point_mass_latents_is_the_svgp_elbo_at_those_inputs_minus_the_latent_kl(setup):
    """X_scale → 0 with X_loc = X: the model/guide bound equals the unwhitened SVGP ELBO at X (same Z, q(u)) minus
    the closed-form Σ_n KL[q(x_n) ‖ N(0, I)]."""
    Y, common, params = setup
    params = {**params, "X_scale": jnp.full((N, Q), 1e-9)}
    gplvm = BayesianGPLVM(**common, X_init=np.asarray(params["X_loc"]))
    svgp = SVGP(**common, whiten=False)
    X = np.asarray(params["X_loc"])
    expected = float(jax.jit(svgp.elbo)(sites_of(svgp, params), X, Y)) - closed_form_latent_kl(X, params["X_scale"])
    bound = float(jax.jit(lambda key: negative_loss(gplvm, params, Y, key))(jax.random.PRNGKey(0)))
    np.testing.assert_allclose(bound, expected, rtol=1e-9)


def test_latent_kl_is_closed_form_and_minibatches_take_the_guides_rows(setup):
    """KL[q(X) ‖ p(X)] against its formula; with batch_size=B the model's latents are the guide's rows, scaled N/B."""
    Y, common, params = setup
    gplvm = BayesianGPLVM(**common, X_init=np.asarray(params["X_loc"]), batch_size=7)
    np.testing.assert_allclose(
        float(gplvm.latents.kl(params)), closed_form_latent_kl(params["X_loc"], params["X_scale"]), rtol=1e-12
    )

    @jax.jit
    def sites(params):
        seeded_guide = handlers.seed(handlers.substitute(gplvm.guide, data=params), 3)
        guide = handlers.trace(seeded_guide).get_trace(Y)
        seeded_model = handlers.seed(handlers.substitute(gplvm.model, data=params), 4)
        model = handlers.trace(handlers.replay(seeded_model, guide)).get_trace(Y)
        values = (model["data"]["value"], guide["data"]["value"], guide["X"]["fn"].base_dist.loc)
        return *values, model["X"]["value"], guide["X"]["value"], model["X"]["scale"], guide["X"]["scale"]

    model_idx, guide_idx, guide_loc, model_x, guide_x, model_scale, guide_scale = sites(params)
    assert model_idx.shape == (7,)
    np.testing.assert_array_equal(model_idx, guide_idx)
    np.testing.assert_allclose(guide_loc, np.asarray(params["X_loc"])[np.asarray(model_idx)])
    np.testing.assert_array_equal(model_x, guide_x)
    assert model_x.shape == (7, Q)
    assert float(model_scale) == float(guide_scale) == pytest.approx(N / 7)


def test_minibatch_monte_carlo_bound_is_unbiased(setup):
    """The training objective (one latent draw, B = 10 of 30 rows) averages to the full-batch bound."""
    Y, common, params = setup
    gplvm = BayesianGPLVM(**common, X_init=np.asarray(params["X_loc"]), batch_size=10)
    full = BayesianGPLVM(**common, X_init=np.asarray(params["X_loc"]))
    keys = jax.random.split(jax.random.PRNGKey(7), 3000)
    estimates = np.asarray(jax.jit(jax.vmap(lambda k: negative_loss(gplvm, params, Y, k)))(keys))
    reference = np.asarray(jax.jit(jax.vmap(lambda k: full.elbo(params, Y, k)))(keys))
    se = np.sqrt(estimates.var() / estimates.size + reference.var() / reference.size)
    assert abs(estimates.mean() - reference.mean()) < 4 * se
    assert estimates.std() > reference.std() > 0  # minibatching adds variance; latent draws are random


def test_gradients_are_finite_and_reach_latents_kernel_and_qu(setup):
    Y, common, params = setup
    gplvm = BayesianGPLVM(**common, X_init=np.asarray(params["X_loc"]), batch_size=10)
    grads = jax.jit(jax.grad(lambda p: negative_loss(gplvm, p, Y, jax.random.PRNGKey(0))))(params)
    for name, g in grads.items():
        assert np.all(np.isfinite(np.asarray(g))), name
    for name in ("X_loc", "X_scale", "kernel.lengthscale", "u_loc", "u_scale_tril", "Z"):
        assert np.any(np.asarray(grads[name]) != 0), name


def test_predictions_and_reconstruction(setup):
    Y, common, params = setup
    gplvm = BayesianGPLVM(**common, X_init=np.asarray(params["X_loc"]))
    mean, var = jax.jit(gplvm.reconstruct)(params)
    assert mean.shape == var.shape == (N, D) and np.all(np.asarray(var) > 0.2)
    np.testing.assert_allclose(mean, jax.jit(gplvm.predict_f)(params, params["X_loc"])[0], rtol=1e-12)
    np.testing.assert_allclose(gplvm.latents.means(params), params["X_loc"])


def test_pca_latents_are_unit_variance_principal_scores(rng):
    basis = rng.normal(size=(2, 6))
    t = rng.normal(size=(50, 2)) * np.array([3.0, 0.5])
    X = pca_latents(t @ basis + 1.0, 2)
    np.testing.assert_allclose(X.std(axis=0), 1.0)
    np.testing.assert_allclose(np.corrcoef(X.T)[0, 1], 0.0, atol=1e-10)
    residual = np.linalg.lstsq(np.c_[X, np.ones(50)], t @ basis, rcond=None)[1]
    np.testing.assert_allclose(residual, 0.0, atol=1e-8)


def test_bad_input_names_the_argument(setup):
    Y, common, params = setup
    X0 = np.asarray(params["X_loc"])
    with pytest.raises(ValueError, match="X_init"):
        BayesianGPLVM(**common)
    with pytest.raises(ValueError, match="X_init"):
        BayesianGPLVM(**common, X_init=X0[:, :1])
    with pytest.raises(ValueError, match="whiten"):
        BayesianGPLVM(**common, X_init=X0, whiten=True)
    with pytest.raises(ValueError, match="X_scale_init"):
        BayesianGPLVM(**common, X_init=X0, X_scale_init=-1.0)
    with pytest.raises(ValueError, match="num_data"):
        BayesianGPLVM(**common, X_init=X0, num_data=100)
    gplvm = BayesianGPLVM(**common, X_init=X0)
    with pytest.raises(ValueError, match=r"Y: expected shape \[N, D\] = \[30, 3\]"):
        gplvm.check_data(Y[:, :2])
    with pytest.raises(ValueError, match="Y"):
        gplvm.check_data(np.where(Y > 0, np.nan, Y))
    with pytest.raises(ValueError, match="latent_dim"):
        pca_latents(Y, 4)


def test_initial_params_start_q_u_at_the_prior(setup):
    """S_d = Kmm and m_d = 0: KL[q(u) ‖ p(u)] = 0 and q(f(x)) is the prior N(0, k(x, x)) at any x."""
    Y, common, params = setup
    gplvm = BayesianGPLVM(**common, X_init=np.asarray(params["X_loc"]))
    init = gplvm.initial_params()
    assert set(init) == {"u_scale_tril"} and init["u_scale_tril"].shape == (D, M, M)
    collapsed = CollapsedGPLVM(**collapsed_fields(common), X_init=np.asarray(params["X_loc"]))
    assert collapsed.initial_params() == {}  # no q(u) parameters to start
    at_prior = {**params, "u_loc": jnp.zeros((D, M)), **init}  # at the initial kernel: variance 1.3
    mean, var = jax.jit(gplvm.predict_f)(at_prior, jnp.asarray(params["X_loc"]))
    np.testing.assert_allclose(mean, 0.0, atol=1e-12)
    np.testing.assert_allclose(var, 1.3, rtol=1e-5)
    svgp = SVGP(**common, whiten=False)
    at_prior = sites_of(svgp, at_prior)
    elbo = float(jax.jit(svgp.elbo)(at_prior, np.zeros((1, Q)), np.zeros((1, D))))
    data_only = float(jax.jit(svgp.pointwise_log_likelihood)(at_prior, np.zeros((1, Q)), np.zeros((1, D))).sum())
    np.testing.assert_allclose(elbo - data_only, 0.0, atol=1e-5)  # the KL term vanishes


def collapsed_fields(common):
    """CollapsedGPLVM takes SGPR's fields: no num_latent (Y's columns share the kernel and the noise)."""
    return {k: v for k, v in common.items() if k != "num_latent"}


def test_collapsed_bound_with_point_mass_latents_is_the_sgpr_bound_at_those_inputs_minus_the_latent_kl(setup):
    """X_scale → 0 with X_loc = X: the collapsed model/guide bound equals Titsias' bound at X (SGPR, same Z and
    hyperparameters) minus the closed-form latent KL; the guide has no q(u)."""
    Y, common, params = setup
    params = {**params, "X_scale": jnp.full((N, Q), 1e-9)}
    gplvm = CollapsedGPLVM(**collapsed_fields(common), X_init=np.asarray(params["X_loc"]))
    X = np.asarray(params["X_loc"])
    sgpr = SGPR(**collapsed_fields(common))
    expected = float(jax.jit(sgpr.elbo)(sites_of(sgpr, params), X, Y)) - closed_form_latent_kl(X, params["X_scale"])
    bound = float(jax.jit(lambda key: negative_loss(gplvm, params, Y, key))(jax.random.PRNGKey(0)))
    np.testing.assert_allclose(bound, expected, rtol=1e-9)
    guide_params = handlers.trace(handlers.seed(gplvm.guide, 0)).get_trace(Y)
    assert {"u", "u_loc", "u_scale_tril"}.isdisjoint(guide_params) and {"X", "X_loc", "X_scale"} <= set(guide_params)


@pytest.mark.slow
def test_collapsed_bound_is_the_uncollapsed_bound_maximised_over_q_u_for_each_latent_draw(setup):
    """For the same draws of X, the collapsed estimate exceeds the uncollapsed one at any q(u), and equals it at
    the optimal q(u) of Titsias' bound when q(X) is a point mass (one draw, X = μ)."""
    Y, common, params = setup
    gplvm = BayesianGPLVM(**common, X_init=np.asarray(params["X_loc"]))
    collapsed = CollapsedGPLVM(**collapsed_fields(common), X_init=np.asarray(params["X_loc"]))
    key = jax.random.PRNGKey(3)
    assert float(collapsed.elbo(sites_of(collapsed, params), Y, key, 16)) > float(gplvm.elbo(params, Y, key, 16))
    point = {**params, "X_scale": jnp.full((N, Q), 1e-9)}
    X = jnp.asarray(point["X_loc"])
    kernel = RBF(variance=1.3, lengthscale=np.array([0.8, 1.4]))
    Z = jnp.asarray(common["Z"])
    q_mu, q_sqrt = bounds.sgpr_optimal_qu(kernel(Z, X), kernel(Z), jnp.asarray(Y), 0.2, whiten=False)
    optimal = {**point, "u_loc": q_mu, "u_scale_tril": q_sqrt}
    np.testing.assert_allclose(
        float(gplvm.elbo(optimal, Y, key, 1)), float(collapsed.elbo(sites_of(collapsed, point), Y, key, 1)), rtol=1e-8
    )


def test_collapsed_reconstruction_is_the_learned_q_u_reconstruction_at_the_optimal_q_u(setup):
    """The collapsed model predicts Y at μ through the SGPR equations (whitened optimal q(u)); the BayesianGPLVM
    with its unwhitened q(u) set to that optimum predicts the same through the SVGP conditional."""
    Y, common, params = setup
    X0 = np.asarray(params["X_loc"])
    collapsed = CollapsedGPLVM(**collapsed_fields(common), X_init=X0)
    learned = BayesianGPLVM(**common, X_init=X0)
    kernel, Z, mu = RBF(variance=1.3, lengthscale=np.array([0.8, 1.4])), jnp.asarray(common["Z"]), jnp.asarray(X0)
    q_mu, q_sqrt = bounds.sgpr_optimal_qu(kernel(Z, mu), kernel(Z), jnp.asarray(Y), 0.2, whiten=False)
    mean, var = collapsed.reconstruct(sites_of(collapsed, params), Y)
    expected_mean, expected_var = learned.reconstruct({**params, "u_loc": q_mu, "u_scale_tril": q_sqrt}, Y)
    assert mean.shape == var.shape == (N, D)
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var, expected_var, rtol=1e-8)


def test_collapsed_bad_input_names_the_argument(setup):
    Y, common, params = setup
    X0 = np.asarray(params["X_loc"])
    fields = collapsed_fields(common)
    with pytest.raises(ValueError, match="X_init"):
        CollapsedGPLVM(**fields)
    with pytest.raises(ValueError, match="X_init"):
        CollapsedGPLVM(**fields, X_init=X0[:, :1])
    with pytest.raises(ValueError, match="likelihood"):
        CollapsedGPLVM(**{**fields, "likelihood": Bernoulli()}, X_init=X0)
    gplvm = CollapsedGPLVM(**fields, X_init=X0)
    with pytest.raises(ValueError, match=r"Y: expected shape \[N, D\] = \[30, D\]"):
        gplvm.check_data(Y[:20])
    with pytest.raises(ValueError, match="Y"):
        gplvm.check_data(np.where(Y > 0, np.inf, Y))
