"""The score-function ELBO: unbiased against enumeration, its baseline, frozen vs pathwise gradients (spec 000 §3.1)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from numpyro.distributions.kl import kl_divergence
from numpyro.infer import SVI

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.score_function import BASELINE_SITE, ScoreFunctionELBO
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.selective import SelectiveSGPR
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.numpyro.subset_prior import IndependentInclusion, SubsetPointProcess, no_signal_inclusion_probability

K = 8


def selective_problem(rng, alpha=0.3, Z=None):
    X = rng.uniform(0, 6, size=(30, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=30)
    Z = np.linspace(0, 6, K)[:, None] if Z is None else Z
    model = SelectiveSGPR(
        SGPR(kernel=RBF(variance=1.0, lengthscale=0.7), likelihood=Gaussian(variance=0.02), Z=Z), alpha=alpha
    )
    return model, X, y


def exact_objective(model, X, y):
    """λ -> E_q[L(s)] − KL[q_λ ‖ p_α] by enumerating all 2^K masks (at the model's initial GP values)."""
    masks = np.array(list(itertools.product([0.0, 1.0], repeat=K)))
    bounds = jax.jit(jax.vmap(lambda m: model.subset_bound({}, X, y, m)))(jnp.asarray(masks))
    prior = SubsetPointProcess(K, model.alpha)

    def objective(probs):
        q = IndependentInclusion(probs)
        weights = jnp.exp(q.log_prob(jnp.asarray(masks)))
        return jnp.sum(weights * bounds) - kl_divergence(q, prior)

    return objective


def estimator(model, X, y, elbo, baseline_state):
    """(key, logits) -> (surrogate loss, its gradient in the logits), as SVI sees them."""

    def loss(logits, key):
        params = {"inclusion_probs": jax.nn.sigmoid(logits)}
        if baseline_state is not None:
            params[BASELINE_SITE] = baseline_state
        return elbo.loss_with_mutable_state(key, params, model.model, model.guide, X, y)["loss"]

    return jax.jit(jax.vmap(jax.value_and_grad(loss), in_axes=(None, 0)))


@pytest.mark.parametrize("with_history", [False, True], ids=["leave-one-out", "decaying-average"])
@pytest.mark.slow
def test_score_function_gradient_is_unbiased(rng, with_history):
    """Spec check U3: the mean of many estimates equals the enumerated gradient, coordinate by coordinate."""
    model, X, y = selective_problem(rng)
    logits = jnp.asarray(rng.normal(scale=1.0, size=K))
    objective = exact_objective(model, X, y)
    exact_value, exact_grad = jax.value_and_grad(lambda r: objective(jax.nn.sigmoid(r)))(logits)
    state = None
    if with_history:  # a stale baseline 30 nats off the current mean bound: still unbiased
        state = {"total": jnp.asarray(2.0 * (float(exact_value) - 30.0)), "weight": jnp.asarray(2.0)}
    draws = 4000
    keys = jax.random.split(jax.random.PRNGKey(1), draws)
    values, grads = estimator(model, X, y, ScoreFunctionELBO(4), state)(logits, keys)
    grads = -np.asarray(grads)
    mean, stderr = grads.mean(axis=0), grads.std(axis=0, ddof=1) / np.sqrt(draws)
    assert np.all(np.abs(mean - np.asarray(exact_grad)) < 4.0 * stderr + 1e-9)
    assert np.all(stderr > 0)
    values = -np.asarray(values)
    assert abs(values.mean() - float(exact_value)) < 4.0 * values.std(ddof=1) / np.sqrt(draws)


@pytest.mark.slow
def test_baselines_reduce_the_variance(rng):
    """A baseline near the mean bound gives a lower-variance estimate than none at all (a zero baseline)."""
    model, X, y = selective_problem(rng)
    logits = jnp.zeros(K)
    objective = exact_objective(model, X, y)
    level = float(objective(jax.nn.sigmoid(logits)))
    keys = jax.random.split(jax.random.PRNGKey(2), 2000)
    near = {"total": jnp.asarray(level), "weight": jnp.asarray(1.0)}
    zero = {"total": jnp.asarray(0.0), "weight": jnp.asarray(1.0)}
    spread = {}
    for name, state in (("near", near), ("zero", zero), ("leave-one-out", None)):
        _, grads = estimator(model, X, y, ScoreFunctionELBO(4), state)(logits, keys)
        spread[name] = float(np.mean(np.var(np.asarray(grads), axis=0)))
    assert spread["near"] < 0.5 * spread["zero"]
    assert spread["leave-one-out"] < 0.5 * spread["zero"]


def test_baseline_state_is_the_decaying_average_of_past_mean_bounds(rng):
    model, X, y = selective_problem(rng)
    svi = SVI(model.model, model.guide, optax.adam(0.1), ScoreFunctionELBO(4, baseline_decay=0.9))
    state = jax.jit(svi.init)(jax.random.PRNGKey(0), X, y)
    update = jax.jit(svi.update)
    assert state.mutable_state[BASELINE_SITE]["weight"] == 0.0
    total = 0.0
    for _ in range(3):
        kl = float(model.kl_selection(svi.get_params(state)))
        state, loss = update(state, X, y)
        total = 0.9 * (total + (-float(loss) + kl))  # the loss is −(mean bound − KL) at the pre-update values
    baseline = state.mutable_state[BASELINE_SITE]
    assert float(baseline["weight"]) == pytest.approx(0.9 + 0.81 + 0.729, rel=1e-12)
    assert float(baseline["total"]) == pytest.approx(total, rel=1e-10)


@pytest.mark.slow
def test_frozen_selection_gives_the_gp_exactly_zero_gradient(rng):
    model, X, y = selective_problem(rng)
    params = {"inclusion_probs": jnp.full(K, 0.6), "kernel.variance": jnp.asarray(1.2)}

    def loss(variance, pathwise):
        p = {**params, "kernel.variance": variance}
        elbo = ScoreFunctionELBO(4, pathwise=pathwise)
        return elbo.loss_with_mutable_state(jax.random.PRNGKey(3), p, model.model, model.guide, X, y)["loss"]

    assert float(jax.grad(loss)(jnp.asarray(1.2), False)) == 0.0
    assert float(jax.grad(loss)(jnp.asarray(1.2), True)) != 0.0


def test_pathwise_gradient_is_that_of_the_selected_bound(rng):
    """With every λ_k = 1 each draw is the full set, so the pathwise gradient is that of the SGPR bound."""
    model, X, y = selective_problem(rng)
    sgpr = model.ordinary

    def loss(variance):
        p = {"inclusion_probs": jnp.ones(K), "kernel.variance": variance}
        return ScoreFunctionELBO(4).loss_with_mutable_state(jax.random.PRNGKey(4), p, model.model, model.guide, X, y)[
            "loss"
        ]

    expected = jax.grad(lambda v: -sgpr.elbo({"kernel.variance": v}, X, y))(jnp.asarray(1.0))
    np.testing.assert_allclose(jax.grad(loss)(jnp.asarray(1.0)), expected, rtol=1e-10)


def test_inclusion_probabilities_settle_at_the_no_signal_fixed_point(rng):
    """Spec check U6: candidates far from every input carry no signal; λ -> 0.183 for K = 80, α = 0.05."""
    X = rng.uniform(0, 1, size=(50, 1))
    y = rng.normal(size=50)
    far = 1e3 + np.linspace(0, 40, 80)[:, None]
    model = SelectiveSGPR(
        SGPR(kernel=RBF(variance=1.0, lengthscale=0.5), likelihood=Gaussian(variance=1.0), Z=far, learn_Z=False),
        alpha=0.05,
    )
    optimizer = optax.multi_transform(
        {"inclusion": optax.adam(0.05), "gp": optax.set_to_zero()},
        lambda tree: {k: "inclusion" if k == "inclusion_probs" else "gp" for k in tree},
    )
    result = fit_svi(
        model.model,
        model.guide,
        X,
        y,
        optimizer=optimizer,
        num_steps=1500,
        loss=ScoreFunctionELBO(4),
        progress=False,
        validate=model.check_data,
    )
    probs = np.asarray(result.params["inclusion_probs"])
    target = no_signal_inclusion_probability(80, 0.05)
    assert target == pytest.approx(0.183, abs=5e-4)
    np.testing.assert_allclose(probs, target, atol=2e-3)
    assert probs.sum() == pytest.approx(14.6, abs=0.2)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_num_particles_is_checked(bad):
    with pytest.raises(ValueError, match="num_particles"):
        ScoreFunctionELBO(bad)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, "x"])
def test_baseline_decay_is_checked(bad):
    with pytest.raises(ValueError, match="baseline_decay"):
        ScoreFunctionELBO(baseline_decay=bad)
