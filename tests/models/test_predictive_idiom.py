"""NumPyro's prediction idiom, ``Predictive(model, guide=..., params=...)(key, X_new, None)`` or with
``posterior_samples``: with ``y=None`` a model draws f and y at X_new as the sites ``"f"`` and ``"y"``, and their
moments are those of :meth:`predict_f` / :meth:`predict_y`."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from numpyro.infer import Predictive

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Bernoulli, Gaussian
from ppl_sparsegp.models.numpyro.bsgp import BSGP
from ppl_sparsegp.models.numpyro.deep_bsgp import DeepBSGP
from ppl_sparsegp.models.numpyro.deep_svgp import DeepSVGP
from ppl_sparsegp.models.numpyro.gplvm import BayesianGPLVM, CollapsedGPLVM
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.selective import SelectiveSGPR, SelectiveSVGP
from ppl_sparsegp.models.numpyro.selective_deep import SelectiveDeepSVGP
from ppl_sparsegp.models.numpyro.selective_gplvm import SelectiveCollapsedGPLVM, SelectiveGPLVM
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP

RNG = np.random.default_rng(3)
X = RNG.uniform(-2.0, 2.0, (30, 1))
X_NEW = np.linspace(-2.5, 2.5, 7)[:, None]
DRAWS = 4000


def _moments_agree(draws, mean, var):
    """Monte Carlo mean and variance of ``draws`` [K, ...] against ``mean`` and ``var`` (5 standard errors)."""
    mean, var = np.asarray(mean), np.asarray(var)
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean), 5 * np.sqrt(var / len(draws)) + 1e-9)
    np.testing.assert_allclose(draws.var(0), var, rtol=0.15)


def _q_parameters(outputs: int, M: int = 6) -> dict[str, np.ndarray]:
    """A q(u) away from the prior: a random mean [P, M] and lower-triangular square root [P, M, M]."""
    rng = np.random.default_rng(outputs)
    scale = np.tril(0.3 * rng.normal(size=(outputs, M, M)), -1) + np.eye(M) * rng.uniform(0.2, 0.8, (outputs, M, 1))
    return {"u_loc": rng.normal(size=(outputs, M)), "u_scale_tril": scale}


@pytest.mark.parametrize(
    "whiten, data_term, outputs",
    [(True, "analytic", 1), (False, "analytic", 1), (True, "sampled", 1), (False, "sampled", 1), (True, "analytic", 2)],
)
def test_svgp_predictive_draws_f_and_y_with_the_moments_of_its_predictions(whiten, data_term, outputs):
    gp = SVGP(RBF(1.0, 1.0), Gaussian(0.1), Z=X[:6], num_latent=outputs, whiten=whiten, data_term=data_term)
    params = _q_parameters(outputs)
    drawn = Predictive(gp.model, guide=gp.guide, params=params, num_samples=DRAWS)(jax.random.PRNGKey(0), X_NEW)
    shape = (DRAWS, 7) if outputs == 1 else (DRAWS, 7, 2)
    assert drawn["f"].shape == shape and drawn["y"].shape == shape
    _moments_agree(np.asarray(drawn["f"]), *gp.predict_f(params, X_NEW))
    _moments_agree(np.asarray(drawn["y"]), *gp.predict_y(params, X_NEW))


def test_svgp_predictive_draws_class_labels_for_binary_data():
    gp, params = SVGP(RBF(1.0, 1.0), Bernoulli(), Z=X[:6]), _q_parameters(1)
    drawn = Predictive(gp.model, guide=gp.guide, params=params, num_samples=DRAWS)(jax.random.PRNGKey(1), X_NEW)
    assert set(np.unique(drawn["y"])) <= {0, 1}
    p_one = np.asarray(gp.predict_y(params, X_NEW)[0])
    np.testing.assert_array_less(np.abs(drawn["y"].mean(0) - p_one), 5 * np.sqrt(0.25 / DRAWS))


def _one_prior_draw_repeated(model):
    """A draw of every latent site (hyperparameters, u, Z) from the prior, repeated DRAWS times as
    ``posterior_samples``; and that draw as a params dict."""
    prior = Predictive(model, num_samples=1)(jax.random.PRNGKey(2), X, None)
    draw = {k: v[0] for k, v in prior.items() if k not in ("f", "y")}
    return {k: np.repeat(v[None], DRAWS, axis=0) for k, v in draw.items()}, draw


@pytest.mark.parametrize("model_class", [SGPMC, BSGP])
def test_sampled_models_predictive_from_posterior_draws_matches_predict_f(model_class):
    kernel, likelihood = RBF(1.0, 1.0), Gaussian(0.1)
    priors = default_priors(kernel, likelihood)
    gp = model_class(kernel, likelihood, Z=X[:6], priors=priors)
    samples, draw = _one_prior_draw_repeated(gp.model)
    drawn = Predictive(gp.model, posterior_samples=samples)(jax.random.PRNGKey(3), X_NEW, None)
    assert drawn["f"].shape == (DRAWS, 7) and drawn["y"].shape == (DRAWS, 7)
    _moments_agree(np.asarray(drawn["f"]), *gp.predict_f(draw, X_NEW))
    _moments_agree(np.asarray(drawn["y"]), *gp.predict_y(draw, X_NEW))


@pytest.mark.slow
@pytest.mark.parametrize("whiten", [True, False])
def test_deep_svgp_predictive_draws_one_pass_per_sample_with_the_moments_of_its_mixture(whiten):
    Z = [np.linspace(-2.0, 2.0, 5)[:, None], np.linspace(-1.0, 1.0, 4)[:, None]]
    deep = DeepSVGP(Z, [1, 1], Gaussian(0.1), [RBF(1.0, 1.0), RBF(1.0, 1.0)], [np.eye(1)], whiten=whiten)
    rng = np.random.default_rng(4)
    params = {f"layer{i}.{name}": value for i in range(2) for name, value in _q_parameters(1, M=len(Z[i])).items()}
    params["layer0.u_loc"] = rng.normal(size=(1, 5))
    drawn = Predictive(deep.model, guide=deep.guide, params=params, num_samples=DRAWS)(jax.random.PRNGKey(5), X_NEW)
    assert drawn["f"].shape == (DRAWS, 7) and drawn["y"].shape == (DRAWS, 7)
    mixture = deep.predict_y(params, X_NEW, key=jax.random.PRNGKey(6), num_samples=5000)
    _moments_agree(np.asarray(drawn["y"]), *mixture)


@pytest.mark.slow
def test_deep_bsgp_predictive_from_posterior_draws_matches_one_layer_predictions_and_shapes_with_two():
    one = DeepBSGP([X[:6]], [1], Gaussian(0.1))
    samples, draw = _one_prior_draw_repeated(one.model)
    drawn = Predictive(one.model, posterior_samples=samples)(jax.random.PRNGKey(7), X_NEW)
    _moments_agree(np.asarray(drawn["f"]), *one.predict_f(draw, X_NEW, key=jax.random.PRNGKey(8)))
    two = DeepBSGP([X[:6], X[:4]], [1, 1], Gaussian(0.1), [np.eye(1)])
    samples, _ = _one_prior_draw_repeated(two.model)
    drawn = Predictive(two.model, posterior_samples=samples)(jax.random.PRNGKey(9), X_NEW)
    assert drawn["f"].shape == drawn["y"].shape == (DRAWS, 7) and np.all(np.isfinite(drawn["y"]))


@pytest.mark.parametrize("model_class", [GPR, SGPR])
def test_models_without_inducing_outputs_draw_the_prior_predictive(model_class):
    kernel, likelihood = RBF(0.7, 0.8), Gaussian(0.1)
    gp = GPR(kernel, likelihood) if model_class is GPR else SGPR(kernel, likelihood, Z=X[:5])
    drawn = Predictive(gp.model, num_samples=DRAWS)(jax.random.PRNGKey(10), X_NEW)
    f, y = np.asarray(drawn["f"]), np.asarray(drawn["y"])
    assert f.shape == y.shape == (DRAWS, 7)
    K = np.asarray(kernel(X_NEW))
    np.testing.assert_allclose(np.cov(f.T), K, atol=0.06)  # f ~ N(0, K): correlated across points
    np.testing.assert_allclose(np.cov(y.T), K + 0.1 * np.eye(7), atol=0.06)
    np.testing.assert_array_less(np.abs(f.mean(0)), 5 * np.sqrt(np.diag(K) / DRAWS))


def test_the_bayesian_gplvm_draws_f_and_y_at_its_latents():
    latents = np.linspace(-1.5, 1.5, 7)[:, None]
    gp = BayesianGPLVM(RBF(1.0, 1.0), Gaussian(0.1), Z=X[:6], num_latent=2, batch_size=3, X_init=latents)
    params = {**_q_parameters(2), "X_loc": latents, "X_scale": np.full((7, 1), 1e-6)}  # q(X) a point: f at X_loc
    drawn = Predictive(gp.model, guide=gp.guide, params=params, num_samples=DRAWS)(jax.random.PRNGKey(11))
    assert drawn["f"].shape == drawn["y"].shape == (DRAWS, 7, 2)
    _moments_agree(np.asarray(drawn["f"]), *gp.predict_f(params, latents))
    _moments_agree(np.asarray(drawn["y"]), *gp.predict_y(params, latents))


@pytest.mark.slow
def test_selective_models_draw_f_and_y_given_the_subset():
    svgp = SVGP(RBF(1.0, 1.0), Gaussian(0.1), Z=X[:6], whiten=False)
    selective, params = SelectiveSVGP(svgp, alpha=0.1), _q_parameters(1)
    everything = {**params, "inclusion_probs": np.ones(6)}  # every candidate kept: the SVGP's own predictions
    drawn = Predictive(selective.model, guide=selective.guide, params=everything, num_samples=DRAWS)(
        jax.random.PRNGKey(12), X_NEW
    )
    _moments_agree(np.asarray(drawn["f"]), *svgp.predict_f(params, X_NEW))
    half = {**params, "inclusion_probs": np.full(6, 0.5)}
    drawn = Predictive(selective.model, guide=selective.guide, params=half, num_samples=50)(
        jax.random.PRNGKey(13), X_NEW
    )
    assert drawn["f"].shape == drawn["y"].shape == (50, 7) and np.all(np.isfinite(drawn["y"]))
    collapsed = SelectiveSGPR(SGPR(RBF(1.0, 1.0), Gaussian(0.1), Z=X[:6]), alpha=0.1)
    drawn = Predictive(collapsed.model, num_samples=50)(jax.random.PRNGKey(14), X_NEW)
    assert drawn["f"].shape == drawn["y"].shape == (50, 7)


LATENTS = np.linspace(-1.5, 1.5, 7)[:, None]
POINT_LATENTS = {"X_loc": LATENTS, "X_scale": np.full((7, 1), 1e-6)}  # q(X) a point: f at X_loc


@pytest.mark.slow
def test_selective_gplvms_draw_f_and_y_at_their_latents():
    lvm = BayesianGPLVM(RBF(1.0, 1.0), Gaussian(0.1), Z=X[:6], num_latent=2, whiten=False, X_init=LATENTS)
    params = {**_q_parameters(2), **POINT_LATENTS}
    kept = {**params, "inclusion_probs": np.ones(6)}  # every candidate kept: the GP-LVM's own predictions
    selective = SelectiveGPLVM(lvm, alpha=0.1)
    drawn = Predictive(selective.model, guide=selective.guide, params=kept, num_samples=DRAWS)(jax.random.PRNGKey(15))
    assert drawn["f"].shape == drawn["y"].shape == (DRAWS, 7, 2)
    _moments_agree(np.asarray(drawn["f"]), *lvm.predict_f(params, LATENTS))
    collapsed = SelectiveCollapsedGPLVM(
        CollapsedGPLVM(RBF(1.0, 1.0), Gaussian(0.1), Z=X[:6], X_init=LATENTS), alpha=0.1
    )
    for model in (collapsed, collapsed.ordinary):
        drawn = Predictive(model.model, guide=model.guide, params=POINT_LATENTS, num_samples=DRAWS)(
            jax.random.PRNGKey(16)
        )
        assert drawn["f"].shape == drawn["y"].shape == (DRAWS, 7)
        np.testing.assert_allclose(np.cov(np.asarray(drawn["f"]).T), np.asarray(RBF(1.0, 1.0)(LATENTS)), atol=0.08)


@pytest.mark.slow
def test_the_selective_deep_gp_keeping_every_candidate_draws_as_the_deep_gp():
    Z = [np.linspace(-2.0, 2.0, 5)[:, None], np.linspace(-1.0, 1.0, 4)[:, None]]
    deep = DeepSVGP(Z, [1, 1], Gaussian(0.1), [RBF(1.0, 1.0), RBF(1.0, 1.0)], [np.eye(1)], whiten=False)
    params = {f"layer{i}.{name}": value for i in range(2) for name, value in _q_parameters(1, M=len(Z[i])).items()}
    kept = {**params, "layer0.inclusion_probs": np.ones(5), "layer1.inclusion_probs": np.ones(4)}
    selective = SelectiveDeepSVGP(deep, alpha=0.1)
    drawn = Predictive(selective.model, guide=selective.guide, params=kept, num_samples=DRAWS)(
        jax.random.PRNGKey(17), X_NEW
    )
    assert drawn["f"].shape == drawn["y"].shape == (DRAWS, 7)
    _moments_agree(np.asarray(drawn["y"]), *deep.predict_y(params, X_NEW, key=jax.random.PRNGKey(18), num_samples=5000))
