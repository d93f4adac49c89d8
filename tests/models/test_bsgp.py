"""BSGP and deep BSGP: the potential against a direct computation, the deep model's one-layer reduction, SGHMC
against the closed-form posterior of v, the released sampler end to end, ArviZ output, and bad input."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer.util import potential_energy
from scipy import stats

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.infer.mcmc import run_mcmc
from ppl_sparsegp.infer.sghmc import AdaptiveSGHMC
from ppl_sparsegp.models.numpyro.bsgp import BSGP, bsgp_kernel, bsgp_priors
from ppl_sparsegp.models.numpyro.deep_bsgp import DeepBSGP, deep_bsgp, linear_mean_weights
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.recipes.bsgp import fit_bsgp

N, D, M = 40, 2, 6
NOISE = 0.3


@pytest.fixture(scope="module")
def problem():
    r = np.random.default_rng(0)
    X = r.uniform(-2, 2, (N, D))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.2 * r.normal(size=N)
    Z = np.stack(np.meshgrid(np.linspace(-1.5, 1.5, 3), np.linspace(-1, 1, 2)), -1).reshape(-1, D)
    values = {
        "kernel.lengthscale": np.array([0.8, 1.3]),
        "kernel.variance": np.asarray(0.7),
        "Z": Z,
        "u": r.normal(size=(1, M)),
    }
    return X, y, values


def _rbf(A, B, lengthscale, variance):
    d2 = (((A[:, None, :] - B[None, :, :]) / lengthscale) ** 2).sum(-1)
    return variance * np.exp(-0.5 * d2)


def _direct_log_joint(X, y, values, data_term, z_log_prior):
    """log p(θ) (on the log scale) + log p(v) + log p(Z) + Σ_n ℓ_n, in numpy (BSGP Eq. 6 and spec §1.3)."""
    ls, var, Z, v = (np.asarray(values[k]) for k in ("kernel.lengthscale", "kernel.variance", "Z", "u"))
    log_theta = stats.norm.logpdf(np.log(ls), 0, 1).sum() + stats.norm.logpdf(np.log(var), math.log(0.05), 1)
    Kzz = _rbf(Z, Z, ls, var)
    L = np.linalg.cholesky(Kzz + 1e-12 * np.eye(M))
    A = np.linalg.solve(L, _rbf(Z, X, ls, var))
    mean, s = v[0] @ A, var - (A * A).sum(0)
    if data_term == "log_expected":
        data = stats.norm.logpdf(y, mean, np.sqrt(s + NOISE)).sum()
    else:
        data = (-0.5 * np.log(2 * np.pi * NOISE) - ((y - mean) ** 2 + s) / (2 * NOISE)).sum()
    return log_theta + stats.norm.logpdf(v).sum() + z_log_prior(Z, Kzz) + data


Z_LOG_PRIORS = {
    "normal": lambda Z, K: stats.norm.logpdf(Z).sum(),
    "uniform": lambda Z, K: 0.0,
    "dpp": lambda Z, K: np.linalg.slogdet(K)[1],
    "strauss": lambda Z, K: (
        math.log(0.5) * sum(np.linalg.norm(Z[i] - Z[j]) <= 0.5 for i in range(M) for j in range(i + 1, M))
    ),
}


def _bsgp(data_term="log_expected", z_prior="normal", batch_size=None, **kw):
    kernel = bsgp_kernel(D)
    return BSGP(
        kernel=kernel,
        likelihood=likelihoods.Gaussian(variance=NOISE),
        Z=np.zeros((M, D)),
        priors=bsgp_priors(kernel),
        z_prior=z_prior,
        likelihood_term=data_term,
        batch_size=batch_size,
        **kw,
    )


def _unconstrained(values):
    return {k: jnp.log(v) if k.startswith("kernel.") else jnp.asarray(v) for k, v in values.items()}


@pytest.mark.parametrize("z_prior", sorted(Z_LOG_PRIORS))
@pytest.mark.parametrize("data_term", ["log_expected", "expected_log"])
def test_potential_is_the_negative_log_joint_computed_directly(problem, data_term, z_prior):
    X, y, values = problem
    model = _bsgp(data_term, z_prior)
    got = potential_energy(model.model, (jnp.asarray(X), jnp.asarray(y)), {}, _unconstrained(values))
    want = -_direct_log_joint(X, y, values, data_term, Z_LOG_PRIORS[z_prior])
    np.testing.assert_allclose(float(got), want, rtol=1e-7)


def test_log_expected_and_expected_log_differ_as_their_gaussian_formulas(problem):
    """For a Gaussian likelihood log E[p] - E[log p] = Σ_n [½ log(σ²/(σ²+s)) + (y-m)² s / (2σ²(σ²+s)) + s/(2σ²)]."""
    X, y, values = problem
    args = ((jnp.asarray(X), jnp.asarray(y)), {}, _unconstrained(values))
    gap = float(potential_energy(_bsgp("expected_log").model, *args) - potential_energy(_bsgp().model, *args))
    direct = _direct_log_joint(X, y, values, "log_expected", Z_LOG_PRIORS["normal"]) - _direct_log_joint(
        X, y, values, "expected_log", Z_LOG_PRIORS["normal"]
    )
    assert gap > 0  # Jensen: log E[p] >= E[log p]
    np.testing.assert_allclose(gap, direct, rtol=1e-7)


def test_minibatch_potential_is_unbiased(problem):
    X, y, values = problem
    args = ((jnp.asarray(X), jnp.asarray(y)), {}, _unconstrained(values))
    full = float(potential_energy(_bsgp().model, *args))
    batched = _bsgp(batch_size=8).model
    draws = jax.jit(jax.vmap(lambda k: potential_energy(handlers.seed(batched, k), *args)))(
        jax.random.split(jax.random.PRNGKey(0), 4000)
    )
    se = float(np.std(draws) / np.sqrt(len(draws)))
    assert abs(float(np.mean(draws)) - full) < 4 * se


def test_deep_bsgp_with_one_layer_is_bsgp(problem):
    X, y, values = problem
    shallow = _bsgp(z_prior="dpp")
    deep = DeepBSGP(
        Z=[np.zeros((M, D))],
        widths=[1],
        likelihood=likelihoods.Gaussian(variance=NOISE),
        z_prior="dpp",
        batch_size=None,
    )
    renamed = {f"layer0.{k}": v for k, v in _unconstrained(values).items()}
    args = (jnp.asarray(X), jnp.asarray(y))
    want = potential_energy(shallow.model, args, {}, _unconstrained(values))
    got = potential_energy(handlers.seed(deep.model, 0), args, {}, renamed)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-10)


@pytest.mark.slow
def test_deep_bsgp_predictive_density_averages_propagations_in_probability():
    r = np.random.default_rng(3)
    X, y = r.normal(size=(12, 2)), r.normal(size=12)
    deep = deep_bsgp(X, 1, likelihoods.Gaussian(variance=0.1), num_layers=2, Z=X[:4], batch_size=None)
    params = {**deep.initial_values(), "layer0.u": jnp.asarray(r.normal(size=(2, 4))),
              "layer1.u": jnp.asarray(r.normal(size=(1, 4)))}  # fmt: skip
    key = jax.random.PRNGKey(5)
    _, likelihood = deep.fitted(params)
    propagations = [deep.predict_f(params, X, key=k) for k in jax.random.split(key, 6)]
    each = np.stack([likelihood.log_predictive_density(jnp.asarray(y), *mv) for mv in propagations])
    mixed = deep.predict_log_density(params, X, y, key=key, num_samples=6)
    np.testing.assert_allclose(mixed, np.log(np.mean(np.exp(each), axis=0)), rtol=1e-10)
    assert not np.allclose(each[0], each[1])  # the propagations differ, so the average is not trivial
    with pytest.raises(ValueError, match="key: DeepBSGP.predict_log_density propagates random draws"):
        deep.predict_log_density(params, X, y)


def test_deep_bsgp_architecture_follows_the_paper():
    r = np.random.default_rng(1)
    X = r.normal(size=(30, 4))
    deep = deep_bsgp(X, 2, likelihoods.Gaussian(), num_layers=3, Z=X[:5], batch_size=None)
    assert deep.widths == [4, 4, 2] and deep.input_dims == [4, 4, 4]
    np.testing.assert_array_equal(deep.mean_weights[0], np.eye(4))  # identity when the widths match
    W = linear_mean_weights(X, 4, 2)  # narrowing: top right-singular vectors, orthonormal columns
    np.testing.assert_allclose(W.T @ W, np.eye(2), atol=1e-12)
    np.testing.assert_array_equal(linear_mean_weights(X, 2, 3), [[1, 0, 0], [0, 1, 0]])  # widening: zero padding
    init = deep.initial_values()
    np.testing.assert_allclose(init["layer1.kernel.lengthscale"], np.full(4, 2.0))  # √D
    assert float(init["layer2.kernel.variance"]) == 0.1 and init["layer2.u"].shape == (2, 5)


@pytest.mark.slow
def test_sghmc_with_fixed_z_and_theta_samples_the_closed_form_posterior_of_v(problem):
    """Given (Z, θ, σ²), log E[p] makes the posterior of v Gaussian: precision I + A diag(1/(σ²+s)) Aᵀ (spec §1.3)."""
    X, y, values = problem
    fixed = {k: values[k] for k in ("Z", "kernel.lengthscale", "kernel.variance")}
    conditioned = handlers.condition(_bsgp().model, data={k: jnp.asarray(v) for k, v in fixed.items()})
    ls, var, Z = values["kernel.lengthscale"], values["kernel.variance"], values["Z"]
    L = np.linalg.cholesky(_rbf(Z, Z, ls, var) + 1e-12 * np.eye(M))
    A = np.linalg.solve(L, _rbf(Z, X, ls, var))
    w = 1.0 / (NOISE + var - (A * A).sum(0))
    cov = np.linalg.inv(np.eye(M) + (A * w) @ A.T)
    mean = cov @ (A * w) @ y

    kernel = AdaptiveSGHMC(conditioned, num_data=N)
    res = run_mcmc(
        kernel,
        jnp.asarray(X),
        jnp.asarray(y),
        num_warmup=4000,
        num_samples=60_000,
        thinning=20,
        key=jax.random.PRNGKey(0),
    )
    v = res.flat_samples()["u"][:, 0, :]
    sd = np.sqrt(np.diag(cov))
    assert np.max(np.abs(v.mean(0) - mean) / sd) < 0.25
    assert np.max(np.abs(v.std(0) / sd - 1)) < 0.1


# fit_bsgp end to end compiles the SGHMC chain, its point estimates and the mixture predictive (20-30 s): `make
# test-slow`. The default run covers the same path through `fit bsgp` on yacht (tests/cli/test_cli_bsgp.py).
@pytest.mark.slow
def test_fit_bsgp_samples_z_noise_and_hyperparameters_and_predicts(problem):
    X, y, _ = problem
    fit = fit_bsgp(X, y, key=jax.random.PRNGKey(0), num_inducing=M, num_iterations=150, num_kept=20)
    draws = fit.mcmc.flat_samples()
    assert draws["Z"].shape == (20, M, D) and draws["u"].shape == (20, 1, M)
    assert np.ptp(draws["Z"], axis=0).max() > 0  # Z moves: it is sampled
    noise = draws["likelihood.variance"]
    assert np.all(noise == noise[0]) and noise[0] < 0.95  # optimised during warmup (from 1.0), then fixed
    lpd = fit.log_predictive_density(X, y)
    # better than the best constant predictor, N(mean(y), var(y)) (-1.40 per point here), by a quarter nat per point
    constant = float(np.mean(-0.5 * np.log(2 * np.pi * y.var()) - 0.5 * (y - y.mean()) ** 2 / y.var()))
    assert lpd.shape == (N,) and np.isfinite(lpd).all() and lpd.mean() > constant + 0.25
    window = fit.window_draws(X, y)
    assert window["Z"].shape == (64, M, D) and np.all(window["likelihood.variance"] == noise[0])
    idata = diagnostics.from_mcmc(fit.mcmc, fit.model, X, y)
    assert idata.posterior["Z"].dims == ("chain", "draw", "inducing_point", "input_dim")
    assert idata.log_likelihood["y"].shape == (1, 20, N)


@pytest.mark.slow
def test_vectorized_chains_with_point_noise_equal_sequential_chains_and_give_a_predictive_rhat(problem):
    X, y, _ = problem
    runs = {
        method: fit_bsgp(X, y, key=jax.random.PRNGKey(2), num_inducing=M, num_iterations=30, num_kept=8, num_chains=3,
                         chain_method=method)
        for method in ("vectorized", "sequential")
    }  # fmt: skip
    vectorized, sequential = (runs[m].mcmc.samples for m in ("vectorized", "sequential"))
    for site in ("Z", "u", "kernel.lengthscale", "likelihood.variance"):
        assert vectorized[site].shape[:2] == (3, 8)
        np.testing.assert_allclose(vectorized[site], sequential[site], rtol=1e-4, atol=1e-5)
    noise = vectorized["likelihood.variance"][:, 0]
    assert len(np.unique(noise)) == 3  # each chain optimised its own noise
    rhat = runs["vectorized"].predictive_rhat(X[:10])
    assert rhat.means.shape == (3, 8, 10) and rhat.rhat.shape == (10,)
    assert 0.0 <= rhat.fraction_below <= 1.0 and rhat.max >= float(np.min(rhat.rhat)) > 0.9
    idata, _ = runs["vectorized"].inference_data(X, y)
    diagnostics.with_predictions(idata, rhat.means, X[:10])
    assert idata.predictions["y_mean"].dims == ("chain", "draw", "point")


@pytest.mark.slow
def test_fit_deep_bsgp_two_layers(problem):
    X, y, _ = problem
    fit = fit_bsgp(X, y, key=jax.random.PRNGKey(1), num_layers=2, num_inducing=M, num_iterations=60, num_kept=8)
    draws = fit.mcmc.flat_samples()
    assert draws["layer0.Z"].shape == (8, M, D) and draws["layer0.u"].shape == (8, D, M)
    assert draws["layer1.u"].shape == (8, 1, M)
    lpd = fit.log_predictive_density(X, y, key=jax.random.PRNGKey(2))
    assert np.isfinite(lpd).all()
    again = fit.log_predictive_density(X, y, key=jax.random.PRNGKey(2))
    np.testing.assert_array_equal(lpd, again)  # the inner-layer draws come from the key
    idata, groups = fit.inference_data(X, y, log_likelihood_of="predictive")
    assert "log_likelihood" in groups and idata.log_likelihood["y"].shape == (1, 8, N)
    assert np.isfinite(idata.log_likelihood["y"].values).all()
    assert "log_likelihood" not in fit.inference_data(X, y)[1]  # the potential's data term has no pointwise form


@pytest.mark.slow
def test_fit_bsgp_classification_has_no_point_estimates():
    r = np.random.default_rng(2)
    X = r.normal(size=(60, 2))
    y = (X[:, 0] * X[:, 1] > 0).astype(float)
    fit = fit_bsgp(
        X, y, key=jax.random.PRNGKey(0), likelihood=likelihoods.Bernoulli(), num_inducing=8, num_iterations=40,
        num_kept=8,
    )  # fmt: skip
    assert fit.kernel.point_estimates is None
    p = fit.predict(X).y_mean
    assert np.all((p > 0) & (p < 1))


@pytest.mark.slow
def test_nuts_runs_on_the_same_model_with_sampled_noise(problem):
    X, y, _ = problem
    fit = fit_bsgp(
        X, y, key=jax.random.PRNGKey(0), engine="nuts", noise="sampled", num_inducing=4, num_warmup=150,
        num_samples=150,
    )  # fmt: skip
    draws = fit.mcmc.flat_samples()
    assert np.ptp(draws["likelihood.variance"]) > 0 and np.ptp(draws["Z"], axis=0).max() > 0
    assert np.mean(np.asarray(fit.mcmc.extra_fields["diverging"])) < 0.1
    assert fit.log_predictive_density(X, y).mean() > -1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"engine": "nuts", "num_layers": 2, "noise": "sampled"}, "engine: NUTS needs a deterministic potential"),
        ({"engine": "nuts"}, "noise: NUTS samples every site"),
        ({"engine": "hmc"}, "engine: expected one of"),
        ({"noise": "fixed"}, "noise: expected one of"),
        ({"chain_method": "parallel"}, "chain_method: expected one of"),
        ({"z_prior": "poisson"}, "z_prior: expected one of"),
        ({"likelihood_term": "elbo"}, "likelihood_term: expected one of"),
        ({"num_layers": 0}, "num_layers: expected a positive integer"),
        ({"num_inducing": 100}, "num_inducing"),
        ({"engine": "nuts", "noise": "sampled", "target_accept_prob": 1.0}, "target_accept_prob: expected a number"),
        ({"target_accept_prob": "0.9"}, "target_accept_prob: expected a number"),
    ],
)
def test_bad_settings_are_refused_before_any_compilation(problem, kwargs, message):
    X, y, _ = problem
    with pytest.raises(ValueError, match=message):
        fit_bsgp(X, y, key=jax.random.PRNGKey(0), **{"num_inducing": M, **kwargs})


def test_bsgp_requires_sampled_kernel_hyperparameters_and_whitening():
    kernel = kernels.RBF(lengthscale=np.ones(D))
    with pytest.raises(ValueError, match="priors: BSGP samples the kernel hyperparameters"):
        BSGP(kernel=kernel, likelihood=likelihoods.Gaussian(), Z=np.zeros((M, D)), priors={"kernel.variance": None})
    with pytest.raises(TypeError, match="whiten"):  # whitened by construction: there is no switch to turn off
        BSGP(kernel=kernel, likelihood=likelihoods.Gaussian(), Z=np.zeros((M, D)), whiten=False)
