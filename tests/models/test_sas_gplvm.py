"""SAS-GP (models/numpyro/sas_gplvm.py): the model's factor against the exact marginal and the enumerated SAS
objective, the Bayesian KL's scale, training in float32 up to A = 800, reconstruction, prior draws, refusals."""

from itertools import combinations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from numpyro import handlers
from numpyro.infer import Predictive
from numpyro.infer.util import log_density

from ppl_sparsegp.core import active_sets, ops
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian, StudentT
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.sas_gplvm import ENCODER_PARAMS, SASGPLVM
from ppl_sparsegp.numpyro import nn


def _data(N: int = 300, D: int = 8, Q: int = 2, seed: int = 0) -> np.ndarray:
    """Observations of a smooth 2-D manifold in D dimensions, noise sd 0.05."""
    rng = np.random.default_rng(seed)
    latents, W = rng.standard_normal((N, Q)), rng.standard_normal((Q, D))
    return np.tanh(latents @ W) + 0.05 * rng.standard_normal((N, D))


def _model(D: int = 8, **options) -> SASGPLVM:
    options = {"num_active": 20, "batch_size": 60, "hidden": (16,), **options}
    return SASGPLVM(RBF(1.0, np.ones(2)), Gaussian(0.1), data_dim=D, latent_dim=2, **options)


def _factor(model: SASGPLVM, Y: np.ndarray, key: jax.Array) -> jax.Array:
    """The deterministic model's log density at its initial encoder: the factor "sas" of one batch and split."""
    params = {ENCODER_PARAMS: eqx.partition(model.encoder, eqx.is_inexact_array)[0]}
    return log_density(handlers.seed(model.model, key), (Y,), {}, params)[0]


@pytest.mark.slow
def test_with_one_held_out_row_the_factor_is_the_exact_marginal_whatever_the_split():
    Y = _data(N=25)
    model = _model(num_active=24, batch_size=None)
    with ops.relative_jitter(0.0):
        exact = model.exact_log_marginal({}, Y)
        for seed in range(3):
            np.testing.assert_allclose(_factor(model, Y, jax.random.PRNGKey(seed)), exact, rtol=1e-10)


@pytest.mark.slow
def test_the_minibatch_factor_averages_to_the_full_data_sas_objective():
    """Batches of B distinct rows, split into A and B − A, weight (N − A)/(B − A): the mean over 40,000 steps'
    draws matches the enumerated full-data objective E_{|A|=A}[log p(Y_A) + Σ_{n∉A} log p(y_n | Y_A)]."""
    N, B, A = 7, 4, 2
    Y = _data(N=N, D=3)
    model = _model(D=3, num_active=A, batch_size=B)
    kernel, likelihood = model.fitted({})
    X = np.asarray(model.encode({}, Y))
    expected = np.mean([
        active_sets.sas_objective(kernel(X[list(a)]), kernel(X[list(a)], X[[n for n in range(N) if n not in a]]),
                                  kernel.diag(X[[n for n in range(N) if n not in a]]), Y[list(a)],
                                  Y[[n for n in range(N) if n not in a]], likelihood.variance)
        for a in combinations(range(N), A)
    ])  # fmt: skip
    keys = jax.random.split(jax.random.PRNGKey(0), 40_000)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: _factor(model, Y, k)))(keys))
    standard_error = draws.std() / np.sqrt(len(draws))
    assert abs(draws.mean() - expected) < 4 * standard_error, (draws.mean(), expected, standard_error)


def test_the_bayesian_latents_sit_in_the_data_plate_scaled_by_n_over_b_and_the_factor_outside():
    Y = _data(N=120)
    model = _model(bayesian=True, num_active=10, batch_size=40)
    key = jax.random.PRNGKey(0)
    guide = handlers.trace(handlers.seed(model.guide, key)).get_trace(Y)
    trace = handlers.trace(handlers.replay(handlers.seed(model.model, key), guide)).get_trace(Y)
    assert trace["X"]["value"].shape == (40, 2) and trace["X"]["scale"] == pytest.approx(3.0)
    assert trace["sas"]["scale"] is None
    idx = guide["data"]["value"]
    assert len(set(np.asarray(idx).tolist())) == 40  # distinct rows: the batch is drawn without replacement
    mean, var = jax.vmap(model.encoder)(jnp.asarray(Y)[idx])
    np.testing.assert_allclose(guide["X"]["fn"].base_dist.loc, mean)
    np.testing.assert_allclose(guide["X"]["fn"].base_dist.scale ** 2, var, rtol=1e-12)


@pytest.mark.slow  # about 30 s: two fits of 1200 steps; `make test-slow` runs it
@pytest.mark.parametrize("bayesian", [False, True])
def test_training_reconstructs_held_out_rows(bayesian):
    Y = _data(N=400)
    model = _model(num_active=40, batch_size=150, bayesian=bayesian, hidden=(32, 16))
    fit = fit_svi(model.model, model.guide, Y[:300], optimizer=optax.adam(0.01), num_steps=1200, progress=False,
                  validate=model.check_data)  # fmt: skip
    assert np.mean(fit.losses[-100:]) < np.mean(fit.losses[:100]) - 1000
    mean, var = model.reconstruct(fit.params, Y[300:], Y[:300])
    rmse = float(np.sqrt(np.mean((np.asarray(mean) - Y[300:]) ** 2)))
    assert rmse < 0.12, rmse  # the noise sd is 0.05; the training mean gives about 0.66
    assert np.all(np.asarray(var) > float(fit.params["likelihood.variance"]))
    subset = model.reconstruct(fit.params, Y[300:], Y[:300], num_conditioning=100, key=1)[0]
    assert float(np.sqrt(np.mean((np.asarray(subset) - Y[300:]) ** 2))) < 2 * rmse
    assert abs(float(model.sas_estimate(fit.params, Y, jax.random.PRNGKey(0)))) > 0


@pytest.mark.parametrize("num_active", [100, 200, *(pytest.param(a, marks=pytest.mark.slow) for a in (400, 800))])
def test_float32_training_stays_finite_with_active_sets_up_to_800(num_active):
    """Spec 004 §6.2 (h): the loss falls, with no NaN and no Cholesky failure, in float32 (B = 1024, lr 1e-3)."""
    Y = _data(N=1100, D=16).astype(np.float32)
    with jax.enable_x64(False):
        model = _model(D=16, num_active=num_active, batch_size=1024, hidden=(64, 32))
        fit = fit_svi(model.model, model.guide, Y, optimizer=optax.adam(1e-3), num_steps=60, progress=False)
    losses = np.asarray(fit.losses)
    assert fit.params["likelihood.variance"].dtype == np.float32 and np.all(np.isfinite(losses))
    assert np.mean(losses[-10:]) < np.mean(losses[:10])


def test_prior_draws_have_the_gp_decoders_moments():
    model = _model(D=3, bayesian=True, num_data=4)
    draws = Predictive(model.model, num_samples=4000)(jax.random.PRNGKey(2))
    assert draws["X"].shape == (4000, 4, 2) and draws["f"].shape == (4000, 3, 4) and draws["y"].shape == (4000, 4, 3)
    y = np.asarray(draws["y"])
    np.testing.assert_allclose(y.var(axis=(0, 2)), 1.0 + 0.1, atol=0.08)  # k(x, x) + σ² for every row


def test_refusals_name_the_argument():
    cases = [
        (dict(likelihood=StudentT()), "likelihood: SAS-GP needs the Gaussian likelihood, got StudentT"),
        (dict(batch_size=20), "batch_size"),
        (dict(weight="mean"), "weight"),
        (dict(encoder=nn.encoder_network(8, 2, (4,), "relu", jax.random.PRNGKey(0), np.float64), bayesian=True),
         "encoder: Bayesian SAS takes a GaussianEncoder"),
    ]  # fmt: skip
    for options, message in cases:
        likelihood = options.pop("likelihood", Gaussian(0.1))
        with pytest.raises(ValueError, match=message):
            SASGPLVM(RBF(1.0, np.ones(2)), likelihood, data_dim=8, latent_dim=2, num_active=20, **options)
    model = _model()
    with pytest.raises(ValueError, match=r"Y: expected \[N, 8\] with N > num_active = 20"):
        model.check_data(_data(N=10))
    with pytest.raises(ValueError, match="num_data: model"):
        Predictive(model.model, num_samples=1)(jax.random.PRNGKey(0))
