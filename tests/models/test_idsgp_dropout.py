"""IDSGP's output dropout (spec 002 §1.5, the authors' UCI launchers): the keep mask's statistics and scaling, one
mask shared by the model's Z(x) and the guide's q(u | x) in a step, a new mask every step, the mask's zero KL, no
dropout outside training steps (predicting, evaluating, the guide's posterior draws), and bad rates refused by name."""

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer import Predictive, TraceMeanField_ELBO, log_likelihood

from ppl_sparsegp.core.kernels import Matern32, White
from ppl_sparsegp.core.likelihoods import Bernoulli, Gaussian
from ppl_sparsegp.models.numpyro.idsgp import DROPOUT, IDSGP, NETWORK_PARAMS
from ppl_sparsegp.numpyro import nn

RNG = np.random.default_rng(3)
N, D, M = 12, 2, 3
O = nn.inducing_output_size(M, D)
X = RNG.uniform(-2.0, 2.0, (N, D))
Y = np.sin(X[:, 0]) + 0.1 * RNG.standard_normal(N)


def _gp(rate: float, likelihood=None, **settings) -> IDSGP:
    """A small IDSGP; the white term keeps K(Z(x), Z(x)) well conditioned where dropped outputs put Z's rows at 0."""
    kernel = Matern32(1.2, np.array([0.8, 1.5])) + White(0.5)
    return IDSGP(kernel, likelihood or Gaussian(0.3), input_dim=D, num_inducing=M, hidden=(5,), dropout=rate,
                 **settings)  # fmt: skip


def _params(gp: IDSGP) -> dict:
    weights, _ = eqx.partition(gp.network, eqx.is_inexact_array)
    return {NETWORK_PARAMS: weights}


def _step(gp: IDSGP, key: int, X=X, y=Y) -> dict:
    """From the guide's trace under a seed and the model's replaying it, as one training step runs them (compiled):
    both masks, the guide's q(u) and the mask's log p - log q."""

    def run(key):
        guide = handlers.substitute(handlers.seed(partial(gp.guide, train=True), key), data=_params(gp))
        guide = handlers.trace(guide).get_trace(X, y)
        model = handlers.replay(handlers.seed(partial(gp.model, train=True), key + 1), guide)
        model = handlers.trace(handlers.substitute(model, data=_params(gp))).get_trace(X, y)
        keep = guide[DROPOUT]["value"]
        term = jnp.sum(model[DROPOUT]["fn"].log_prob(keep) - guide[DROPOUT]["fn"].log_prob(keep))
        return {"guide": keep, "model": model[DROPOUT]["value"], "loc": guide["u"]["fn"].loc,
                "scale_tril": guide["u"]["fn"].scale_tril, "term": term}  # fmt: skip

    return jax.device_get(jax.jit(run)(key))


def test_the_mask_keeps_each_output_with_probability_one_minus_the_rate_and_scales_it_up():
    rate, rows = 0.3, 400
    gp = _gp(rate)
    Xs = RNG.uniform(-2.0, 2.0, (rows, D))
    step = _step(gp, 0, Xs, np.zeros(rows))
    keep = step["guide"]
    assert keep.shape == (rows, O) and set(np.unique(keep)) == {0, 1}
    assert abs(keep.mean() - (1 - rate)) < 4 * np.sqrt(rate * (1 - rate) / keep.size)
    np.testing.assert_array_equal(step["model"], keep)  # the model replays the guide's mask
    # q(u | x) of the guide is read from the network's outputs times keep / (1 - rate)
    full = jax.vmap(gp.network)(jnp.asarray(Xs))
    _, m, L = nn.split_inducing_outputs(full * keep / (1 - rate), M, D)
    np.testing.assert_allclose(step["loc"], m, rtol=1e-12, atol=1e-15)  # compiled against eager
    np.testing.assert_allclose(step["scale_tril"], L, rtol=1e-12, atol=1e-15)
    assert np.any(np.asarray(m) == 0.0)  # some of m's outputs were dropped
    # the mask's own term is exactly zero: its distribution is the same in the model and the guide
    assert float(step["term"]) == 0.0


def test_every_step_draws_a_new_mask_and_the_same_key_the_same_one():
    gp = _gp(0.5)
    first, second, again = (_step(gp, key)["guide"] for key in (0, 1, 0))
    assert not np.array_equal(first, second)
    np.testing.assert_array_equal(first, again)


@pytest.mark.parametrize("likelihood, y", [(Gaussian(0.3), Y), (Bernoulli(), (Y > 0).astype(float))], ids=str)
def test_a_mask_shared_by_all_rows_is_the_network_with_its_outputs_scaled(likelihood, y):
    """Given one keep vector k for every row, dropout gives the objective of the undropped model whose last layer
    is scaled by k / (1 - rate): the model's Z(x) and the guide's m(x), L(x) all go through the mask."""
    rate = 0.4
    gp = _gp(rate, likelihood)
    k = (RNG.uniform(size=O) > rate).astype(float)
    scale = k / (1 - rate)
    last = gp.network.layers[-1]
    scaled = eqx.tree_at(lambda n: (n.layers[-1].weight, n.layers[-1].bias), gp.network,
                         (last.weight * scale[:, None], last.bias * scale))  # fmt: skip
    plain = IDSGP(gp.kernel, likelihood, input_dim=D, num_inducing=M, network=scaled)

    def loss(model, params, mask):
        f, g = (handlers.substitute(partial(h, train=True), data=mask) for h in (model.model, model.guide))
        return float(TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), params, f, g, X, y))

    dropped = loss(gp, _params(gp), {DROPOUT: np.broadcast_to(k, (N, O))})
    np.testing.assert_allclose(dropped, loss(plain, _params(plain), {}), rtol=1e-12)
    assert abs(dropped - loss(gp, _params(gp), {DROPOUT: np.ones((N, O))})) > 1e-3  # the mask matters


@pytest.mark.slow
def test_prediction_and_evaluation_use_the_whole_network():
    gp, plain = _gp(0.5), _gp(0.0)
    params = _params(gp)
    for method in ("predict_f", "predict_y"):
        for a, b in zip(getattr(gp, method)(params, X[:4]), getattr(plain, method)(params, X[:4]), strict=True):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(gp.elbo(params, X, Y), plain.elbo(params, X, Y))
    np.testing.assert_array_equal(
        gp.pointwise_log_likelihood(params, X, Y), plain.pointwise_log_likelihood(params, X, Y)
    )
    draws = Predictive(gp.model, guide=gp.guide, params=params, num_samples=3)(jax.random.PRNGKey(0), X[:4])
    assert DROPOUT not in draws and draws["f"].shape == (3, 4)
    # a model run without a key (NumPyro's log_likelihood, which ArviZ calls) draws no mask and scores every point
    scores = log_likelihood(gp.model, {"u": np.zeros((1, N, M))}, X, Y, batch_ndims=1)
    assert scores["y"].shape == (1, N)
    # the guide's draws given y (the posterior group of a run's InferenceData) are of the whole network
    draws = Predictive(gp.guide, params=params, num_samples=2)(jax.random.PRNGKey(0), X, Y)
    assert set(draws) == {"u"}

    # the loss of a training step is random with dropout (a new mask per key), deterministic without; outside
    # training steps it is the loss without dropout
    def losses(g, train):
        f, q = partial(g.model, train=train), partial(g.guide, train=train)
        return [float(TraceMeanField_ELBO().loss(jax.random.PRNGKey(k), params, f, q, X, Y)) for k in (0, 1)]

    dropped, whole, untrained = losses(gp, True), losses(plain, True), losses(gp, False)
    assert dropped[0] != dropped[1] and whole[0] == whole[1] == untrained[0] == untrained[1]


@pytest.mark.parametrize("rate", [1.0, -0.1, 1.5, float("nan"), True, "0.5"])
def test_a_rate_outside_zero_to_one_is_refused_by_name(rate):
    with pytest.raises(ValueError, match=r"dropout: expected a number in \[0, 1\)"):
        _gp(rate)
