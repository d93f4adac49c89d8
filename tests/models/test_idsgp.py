"""IDSGP (spec 002 §6b): the SVGP reduction, the prior invariance, the KL weighting by enumeration, finite gradients
at both precisions, plain NumPyro SVI and Predictive, and refusals by name."""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import optax
import pytest
from numpyro import handlers
from numpyro.infer import SVI, Predictive, TraceMeanField_ELBO

from ppl_sparsegp.core import conditionals
from ppl_sparsegp.core.kernels import Matern32, White
from ppl_sparsegp.core.likelihoods import Bernoulli, Gaussian
from ppl_sparsegp.models.numpyro.idsgp import IDSGP, NETWORK_PARAMS
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.numpyro import nn

RNG = np.random.default_rng(0)
N, D, M = 12, 2, 3
X = RNG.uniform(-2.0, 2.0, (N, D))
Y = np.sin(X[:, 0]) + 0.1 * RNG.standard_normal(N)
LABELS = (Y > 0).astype(float)
Z0 = RNG.uniform(-2.0, 2.0, (M, D))
M0 = RNG.standard_normal(M)
L0 = np.tril(0.3 * RNG.standard_normal((M, M)), -1) + np.diag(RNG.uniform(0.3, 1.0, M))


def _kernel():
    return Matern32(1.2, np.array([0.8, 1.5]))


def _constant(gp: IDSGP) -> IDSGP:
    """``gp`` with a network that outputs Z0, M0 and L0 for every input (zero weights, the constants as the last
    bias): one shared inducing set and q(u), i.e. an unwhitened SVGP."""
    zeroed = jax.tree.map(lambda a: jnp.zeros_like(a) if eqx.is_inexact_array(a) else a, gp.network)
    network = eqx.tree_at(lambda n: n.layers[-1].bias, zeroed, nn.inducing_network_constants(Z0, M0, L0))
    return IDSGP(gp.kernel, gp.likelihood, input_dim=D, num_inducing=M, network=network, batch_size=gp.batch_size)


def _svgp(likelihood):
    return SVGP(_kernel(), likelihood, Z=Z0, whiten=False), {"u_loc": M0[None], "u_scale_tril": L0[None]}


def _params(gp: IDSGP) -> dict:
    weights, _ = eqx.partition(gp.network, eqx.is_inexact_array)
    return {NETWORK_PARAMS: weights}


def _objectives(gp: IDSGP, y, batches):
    """The negative of TraceMeanField_ELBO's loss, the objective the SVI step ascends, on each batch of indices in
    ``batches`` [K, B] (compiled once, mapped over the batches)."""

    def objective(idx):
        model, guide = (handlers.substitute(f, data={"data": idx}) for f in (gp.model, gp.guide))
        return -TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), _params(gp), model, guide, X, y)

    return np.asarray(jax.jit(jax.vmap(objective))(jnp.asarray(batches)))


def _objective(gp: IDSGP, y) -> float:
    """The objective on the full batch."""
    return -float(
        jax.jit(lambda p: TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), p, gp.model, gp.guide, X, y))(_params(gp))
    )


@pytest.mark.parametrize(
    "likelihood, y",
    [(Gaussian(0.3), Y), (Bernoulli(), LABELS), (Bernoulli(link="logit"), LABELS)],
    ids=["gaussian", "probit", "logit"],
)
@pytest.mark.slow
def test_a_constant_network_gives_the_svgp_elbo(likelihood, y):
    """T2: with Z(x), m(x), L(x) constant the objective is SVGP's ELBO, full batch and on a minibatch."""
    gp = _constant(IDSGP(_kernel(), likelihood, input_dim=D, num_inducing=M))
    svgp, q = _svgp(likelihood)
    np.testing.assert_allclose(gp.elbo(_params(gp), X, y), svgp.elbo(q, X, y), rtol=1e-10)
    np.testing.assert_allclose(_objective(gp, y), svgp.elbo(q, X, y), rtol=1e-10)
    batched = _constant(IDSGP(_kernel(), likelihood, input_dim=D, num_inducing=M, batch_size=4))
    idx = np.array([0, 5, 5, 9])
    kl = float(np.sum(svgp.pointwise_log_likelihood(q, X, y))) - float(svgp.elbo(q, X, y))
    expected = N / 4 * float(np.sum(svgp.pointwise_log_likelihood(q, X[idx], y[idx]))) - kl
    np.testing.assert_allclose(_objectives(batched, y, idx[None])[0], expected, rtol=1e-10)


@pytest.mark.slow
def test_a_constant_network_predicts_as_svgp():
    """With Z(x) fixed to Z the per-point predictive is SVGP's."""
    gp = _constant(IDSGP(_kernel(), Gaussian(0.3), input_dim=D, num_inducing=M))
    svgp, q = _svgp(Gaussian(0.3))
    X_new = RNG.uniform(-3.0, 3.0, (9, D))
    for got, want in zip(gp.predict_y(_params(gp), X_new), svgp.predict_y(q, X_new), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.slow
def test_given_a_draw_of_each_inputs_u_it_predicts_as_svgp_given_that_u():
    """With Z(x) = Z for every input, f(x_n) given a draw u_n is SVGP's p(f(x_n) | u = u_n), input by input."""
    gp = _constant(IDSGP(_kernel(), Gaussian(0.3), input_dim=D, num_inducing=M))
    svgp, _ = _svgp(Gaussian(0.3))
    X_new = RNG.uniform(-3.0, 3.0, (5, D))
    u = RNG.standard_normal((5, M))
    mean, var = gp.predict_f({**_params(gp), "u": u}, X_new)
    for n in range(5):
        m_n, v_n = svgp.predict_f({"u": u[n][None]}, X_new[n : n + 1])
        np.testing.assert_allclose([mean[n], var[n]], [m_n[0], v_n[0]], rtol=1e-10)
    with pytest.raises(ValueError, match=r"params\['u'\]: expected one u per input, \[5, 3\]"):
        gp.predict_f({**_params(gp), "u": u[:4]}, X_new)


def test_the_prior_of_f_does_not_depend_on_the_network():
    """T1: with q(u | x) = p(u | x) the marginal of f(x) is the GP prior N(0, k(x, x)), whatever Z(x) is."""
    gp = IDSGP(_kernel(), Gaussian(0.3), input_dim=D, num_inducing=M, hidden=(5,))
    Lmm, kmn, knn, _, _ = gp._per_input(gp.kernel, jax.vmap(gp.network)(jnp.asarray(X)), jnp.asarray(X))
    mean, var = conditionals.per_input_conditional(Lmm, kmn, knn, jnp.zeros((N, M)), Lmm, whiten=False)
    np.testing.assert_allclose(mean, 0.0, atol=1e-14)
    np.testing.assert_allclose(var, knn, rtol=1e-8)


def test_minibatch_objective_averages_to_the_full_objective_with_the_kl_averaged_not_scaled():
    """T6 and the KL weighting: over every batch of B = 2 indices drawn with replacement (N² of them, equally
    likely) the mean minibatch objective is Σ_n ELL_n - mean_n KL_n; scaling the KL by N/B instead would give
    Σ_n (ELL_n - KL_n), far from it."""
    gp = IDSGP(_kernel(), Gaussian(0.3), input_dim=D, num_inducing=M, hidden=(4,), batch_size=2)
    values = _objectives(gp, Y, list(itertools.product(range(N), repeat=2)))
    params = _params(gp)
    full = float(gp.elbo(params, X, Y))
    np.testing.assert_allclose(np.mean(values), full, rtol=1e-10)
    _, _, kls = gp._marginals(params, X)
    assert abs(np.mean(values) - (full + float(np.mean(kls)) - float(np.sum(kls)))) > 1e-3


@pytest.mark.parametrize("x64", [True, False])
def test_gradients_through_the_network_are_finite_at_both_precisions(x64):
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        gp = IDSGP(_kernel(), Gaussian(0.3), input_dim=D, num_inducing=5, hidden=(8,), batch_size=6)
        params = _params(gp)
        assert jax.tree.leaves(params)[0].dtype == dtype
        elbo = TraceMeanField_ELBO()
        Xd, yd = jnp.asarray(X, dtype), jnp.asarray(Y, dtype)
        loss = jax.jit(jax.grad(lambda p: elbo.loss(jax.random.PRNGKey(0), p, gp.model, gp.guide, Xd, yd)))
        grads = loss(params)
        leaves = jax.tree.leaves(grads)
        assert leaves and all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
        assert any(float(jnp.max(jnp.abs(g))) > 0 for g in leaves)


@pytest.mark.slow  # about 11 s; `make test-slow` runs it
def test_plain_numpyro_svi_fits_and_predictive_matches_predict_f():
    """The model runs under NumPyro's own SVI and Predictive, not only through fit_svi."""
    gp = IDSGP(Matern32(1.0, np.ones(D)) + White(0.1), Gaussian(0.1), input_dim=D, num_inducing=M, hidden=(10,))
    svi = SVI(gp.model, gp.guide, numpyro.optim.optax_to_numpyro(optax.adam(0.01)), TraceMeanField_ELBO())
    fitted = svi.run(jax.random.PRNGKey(0), 300, X, Y, progress_bar=False)
    assert fitted.losses[-1] < fitted.losses[0]
    X_new = RNG.uniform(-2.0, 2.0, (4, D))
    draws = Predictive(gp.model, guide=gp.guide, params=fitted.params, num_samples=4000)(jax.random.PRNGKey(1), X_new)
    mean, var = gp.predict_f(fitted.params, X_new)
    assert draws["f"].shape == (4000, 4) and draws["y"].shape == (4000, 4)
    np.testing.assert_array_less(np.abs(draws["f"].mean(0) - mean), 5 * np.sqrt(var / 4000))
    np.testing.assert_allclose(draws["f"].var(0), var, rtol=0.15)


def test_bad_settings_and_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match="activation"):
        IDSGP(_kernel(), Gaussian(), input_dim=D, activation="swish")
    with pytest.raises(ValueError, match="num_inducing"):
        IDSGP(_kernel(), Gaussian(), input_dim=D, num_inducing=0)
    gp = IDSGP(_kernel(), Gaussian(), input_dim=D, num_inducing=M)
    with pytest.raises(ValueError, match="X: expected"):
        IDSGP(Matern32(1.0, 1.0), Gaussian(), input_dim=D).check_data(X[:, :1], Y)
    with pytest.raises(ValueError, match="full_cov"):
        gp.predict_f(_params(gp), X, full_cov=True)
    with pytest.raises(ValueError, match="X_new"):
        gp.predict_f(_params(gp), X[:, :1])


def test_inducing_sets_are_the_network_outputs_at_each_input():
    gp = _constant(IDSGP(_kernel(), Gaussian(0.3), input_dim=D, num_inducing=M))
    Z, m, L = gp.inducing_sets(_params(gp), X[:3])
    assert Z.shape == (3, M, D) and m.shape == (3, M) and L.shape == (3, M, M)
    np.testing.assert_allclose(Z, np.broadcast_to(Z0, (3, M, D)), rtol=1e-14)
    np.testing.assert_allclose(L, np.broadcast_to(L0, (3, M, M)), rtol=1e-12, atol=1e-15)
