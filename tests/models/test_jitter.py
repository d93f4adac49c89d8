"""The relative jitter is settable per model (``jitter=`` on every model class) through the one policy of
:mod:`ppl_sparsegp.core.ops`: the model's value is the :func:`ops.model_jitter` scope of its model, guide,
predictions and ELBOs; a caller's :func:`ops.relative_jitter` scope overrides it for one call, and a ``jitter=``
given to :func:`ops.cholesky` itself overrides both; bad values are refused."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers

from ppl_sparsegp.core import conditionals, ops
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.models.numpyro.bsgp import BSGP
from ppl_sparsegp.models.numpyro.deep_bsgp import DeepBSGP
from ppl_sparsegp.models.numpyro.deep_svgp import DeepSVGP
from ppl_sparsegp.models.numpyro.gplvm import BayesianGPLVM
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.selective import SelectiveSGPR, SelectiveSVGP
from ppl_sparsegp.models.numpyro.selective_deep import SelectiveDeepSVGP
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP

Z = np.linspace(-1.0, 1.0, 5)[:, None]
X = np.linspace(-1.5, 1.5, 7)[:, None]
Y = np.sin(2.0 * X[:, 0])


def _kernel():
    return RBF(variance=1.0, lengthscale=1.0)


def _svgp(**options):
    return SVGP(kernel=_kernel(), likelihood=Gaussian(0.1), Z=Z, whiten=False, **options)


def _prior_factor(model):
    """The Kmm factor the model's prior p(u) = N(0, Kmm) was built with, from a trace of the model."""
    trace = handlers.trace(handlers.seed(model.model, 0)).get_trace(jnp.asarray(X), jnp.asarray(Y))
    return np.asarray(trace["u"]["fn"].Lmm)


def test_a_models_jitter_sets_the_kmm_factor_of_its_model():
    K = _kernel()(jnp.asarray(Z))
    default, larger = _prior_factor(_svgp()), _prior_factor(_svgp(jitter=1e-3))
    np.testing.assert_allclose(default, ops.cholesky(K), rtol=1e-12)
    np.testing.assert_allclose(larger, ops.cholesky(K, jitter=1e-3), rtol=1e-12)
    # a larger jitter: L Lᵀ = K + 1e-3 mean(diag K) I instead of K + 1e-8 mean(diag K) I
    np.testing.assert_allclose(np.diag(larger @ larger.T - default @ default.T), 1e-3 - 1e-8, rtol=1e-6)
    # the scope ends with the call
    np.testing.assert_allclose(ops.cholesky(K), default, rtol=1e-12)


def test_the_models_jitter_reaches_compiled_models_and_eager_predictions():
    model = _svgp(jitter=1e-3)
    jitted = jax.jit(lambda X, y: handlers.trace(handlers.seed(model.model, 0)).get_trace(X, y)["u"]["fn"].Lmm)
    K = _kernel()(jnp.asarray(Z))
    np.testing.assert_allclose(jitted(jnp.asarray(X), jnp.asarray(Y)), ops.cholesky(K, jitter=1e-3), rtol=1e-12)
    params = {"u_loc": np.ones((1, 5)), "u_scale_tril": 0.5 * np.eye(5)[None]}
    mean, var = model.predict_f(params, X)
    expected = conditionals.conditional(
        _kernel()(jnp.asarray(Z), jnp.asarray(X)),
        ops.cholesky(K, jitter=1e-3),
        _kernel().diag(jnp.asarray(X)),
        jnp.ones((1, 5)),
        0.5 * jnp.eye(5)[None],
        whiten=False,
    )
    np.testing.assert_allclose(mean, expected[0][0], rtol=1e-10)
    np.testing.assert_allclose(var, expected[1][0], rtol=1e-10)
    default_mean, _ = _svgp().predict_f(params, X)
    assert not np.allclose(mean, default_mean, rtol=1e-6)
    elbo = model.elbo(params, X, Y)
    assert np.isfinite(float(elbo)) and not np.isclose(float(elbo), float(_svgp().elbo(params, X, Y)), rtol=1e-9)


def test_a_callers_scope_overrides_the_models_jitter_for_that_call():
    K = _kernel()(jnp.asarray(Z))
    model = _svgp(jitter=1e-3)
    with ops.relative_jitter(1e-6):
        np.testing.assert_allclose(_prior_factor(model), ops.cholesky(K, jitter=1e-6), rtol=1e-12)
        np.testing.assert_allclose(_prior_factor(_svgp()), ops.cholesky(K, jitter=1e-6), rtol=1e-12)
    np.testing.assert_allclose(_prior_factor(model), ops.cholesky(K, jitter=1e-3), rtol=1e-12)


def test_a_jitter_given_to_cholesky_overrides_the_scopes():
    K = _kernel()(jnp.asarray(Z))
    with ops.model_jitter(1e-2), ops.relative_jitter(1e-3):
        scoped = ops.cholesky(K)
        per_call = ops.cholesky(K, jitter=1e-6)
    np.testing.assert_allclose(scoped, ops.cholesky(K, jitter=1e-3), rtol=1e-12)
    np.testing.assert_allclose(per_call, ops.cholesky(K, jitter=1e-6), rtol=1e-12)
    assert not np.allclose(scoped, per_call)


@pytest.mark.parametrize("bad", [-1e-6, float("nan"), float("inf"), "big", True])
@pytest.mark.parametrize(
    "build",
    [
        lambda j: GPR(kernel=_kernel(), likelihood=Gaussian(0.1), jitter=j),
        lambda j: SGPR(kernel=_kernel(), likelihood=Gaussian(0.1), Z=Z, jitter=j),
        lambda j: _svgp(jitter=j),
        lambda j: SelectiveSVGP(SVGP(kernel=_kernel(), likelihood=Gaussian(0.1), Z=Z, whiten=False, jitter=j)),
        lambda j: DeepSVGP(Z=[Z], widths=[1], likelihood=Gaussian(0.1), jitter=j),
        lambda j: SelectiveDeepSVGP(DeepSVGP(Z=[Z], widths=[1], likelihood=Gaussian(0.1), whiten=False, jitter=j)),
        lambda j: DeepBSGP(Z=[Z], widths=[1], likelihood=Gaussian(0.1), jitter=j),
    ],
    ids=["gpr", "sgpr", "svgp", "selective", "deep_svgp", "selective_deep", "deep_bsgp"],
)
def test_an_invalid_jitter_is_refused_naming_jitter(build, bad):
    with pytest.raises(ValueError, match="jitter: expected a finite relative jitter >= 0"):
        build(bad)


def test_every_model_class_takes_a_jitter_and_scopes_its_public_methods():
    kernel, likelihood = _kernel(), Gaussian(0.1)
    models = [
        GPR(kernel=kernel, likelihood=likelihood, jitter=1e-4),
        SGPR(kernel=kernel, likelihood=likelihood, Z=Z, jitter=1e-4),
        SGPMC(kernel=kernel, likelihood=likelihood, Z=Z, priors=default_priors(kernel, likelihood), jitter=1e-4),
        BSGP(kernel=kernel, likelihood=likelihood, Z=Z, jitter=1e-4),
        SelectiveSGPR(SGPR(kernel=kernel, likelihood=likelihood, Z=Z, jitter=1e-4)),
        SelectiveSVGP(SVGP(kernel=kernel, likelihood=likelihood, Z=Z, whiten=False, jitter=1e-4)),
        BayesianGPLVM(kernel=kernel, likelihood=likelihood, Z=Z, X_init=X, jitter=1e-4),
        DeepSVGP(Z=[Z], widths=[1], likelihood=likelihood, jitter=1e-4),
        SelectiveDeepSVGP(DeepSVGP(Z=[Z], widths=[1], likelihood=likelihood, whiten=False, jitter=1e-4)),
        DeepBSGP(Z=[Z], widths=[1], likelihood=likelihood, jitter=1e-4),
    ]
    for model in models:
        assert model.jitter == 1e-4
        for name in ("model", "guide", "predict_f", "elbo"):
            if hasattr(model, name):
                assert getattr(getattr(type(model), name), "__ppl_sparsegp_entry__", False), (type(model), name)


def test_gpr_factorises_under_its_jitter_in_its_model_and_its_marginal_likelihood():
    """GPR defines its own model and log marginal likelihood, with no jitter code: the scope still reaches them."""
    model, plain = (GPR(kernel=_kernel(), likelihood=Gaussian(0.1), jitter=j) for j in (1e-2, None))
    trace = handlers.trace(handlers.seed(model.model, 0)).get_trace(jnp.asarray(X), jnp.asarray(Y))
    L = np.asarray(trace["y"]["fn"].base_dist.scale_tril)
    K = _kernel()(jnp.asarray(X)) + 0.1 * jnp.eye(7)
    np.testing.assert_allclose(L, ops.cholesky(K, jitter=1e-2), rtol=1e-12)
    jittered = float(model.log_marginal_likelihood({}, X, Y))
    with ops.relative_jitter(1e-2):
        np.testing.assert_allclose(jittered, float(plain.log_marginal_likelihood({}, X, Y)), rtol=1e-12)
    assert not np.isclose(jittered, float(plain.log_marginal_likelihood({}, X, Y)), rtol=1e-9)
