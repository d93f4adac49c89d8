"""ArviZ output of every engine (NUTS, SG-MCMC, SVI): groups, names, netCDF round trip, az.loo/summary; and the
posterior predictive mixtures of posterior.predict."""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import xarray as xr
from numpyro.infer import MCMC, NUTS
from scipy.special import logsumexp

import ppl_sparsegp as psg
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.data import Standardizer
from ppl_sparsegp.infer.mcmc import run_mcmc
from ppl_sparsegp.infer.sghmc import AdaptiveSGHMC
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.posterior import diagnostics, predict


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, (30, 2))
    y = np.sin(X[:, 0]) + 0.2 * rng.standard_normal(30)
    kernel, likelihood = RBF(lengthscale=np.ones(2), variance=1.0), Gaussian(variance=0.1)
    priors = default_priors(kernel, likelihood)
    model = SGPMC(kernel=kernel, likelihood=likelihood, Z=X[:5], priors=priors)
    return jnp.asarray(X), jnp.asarray(y), model


@pytest.fixture(scope="module")
def engines(problem):
    """InferenceData from a NUTS run, an SG-MCMC run and an SVI fit of the same small SGPMC/SVGP problem."""
    X, y, model = problem
    key = jax.random.PRNGKey(0)
    nuts = run_mcmc(NUTS(model.model, max_tree_depth=5), X, y, num_warmup=100, num_samples=100, num_chains=2, key=key)
    sg = run_mcmc(AdaptiveSGHMC(model.model, num_data=30), X, y, num_warmup=300, num_samples=400, thinning=4,
                  num_chains=2, key=key)  # fmt: skip
    svgp = SVGP(kernel=model.kernel, likelihood=model.likelihood, Z=model.Z, priors=model.priors)
    fit = fit_svi(
        svgp.model,
        svgp.guide,
        X,
        y,
        optimizer=optax.adam(0.02),
        num_steps=300,
        progress=False,
        validate=svgp.check_data,
    )
    return {
        "NUTS": diagnostics.from_mcmc(nuts, model, X, y),
        "AdaptiveSGHMC": diagnostics.from_mcmc(sg, model, X, y),
        "SVI": diagnostics.from_svi(svgp, fit.params, X, y, num_draws=200),
    }


# The three tests on the `engines` fixture compile NUTS, SG-MCMC and SVI runs (about 2 min): `make test-slow`.
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["NUTS", "AdaptiveSGHMC", "SVI"])
def test_inference_data_round_trips_through_netcdf_and_supports_loo(engines, engine, tmp_path):
    idata = engines[engine]
    groups = set(idata.groups())
    assert {"posterior", "log_likelihood", "posterior_predictive", "observed_data"} <= groups
    post = idata.posterior
    assert post["u"].dims == ("chain", "draw", "latent", "inducing_point")
    assert post["kernel.lengthscale"].dims == ("chain", "draw", "input_dim")
    assert idata.log_likelihood["y"].dims == ("chain", "draw", "obs") and idata.log_likelihood["y"].shape[-1] == 30
    assert idata.posterior_predictive["y"].shape[-1] == 30
    assert post.attrs["engine"] == engine
    path = diagnostics.save(idata, tmp_path / "run.nc")
    back = diagnostics.load(path)
    for group in idata.groups():
        xr.testing.assert_identical(getattr(back, group), getattr(idata, group))
    loo = az.loo(back)
    assert np.isfinite(loo["elpd_loo"])
    table = diagnostics.summary(back, var_names=["kernel.lengthscale", "kernel.variance"])
    assert list(table.index) == ["kernel.lengthscale[0]", "kernel.lengthscale[1]", "kernel.variance"]
    assert {"r_hat", "ess_bulk"} <= set(table.columns)


@pytest.mark.slow
def test_sample_stats_use_arviz_names(engines):
    nuts = engines["NUTS"].sample_stats
    assert {"diverging", "acceptance_rate", "step_size", "n_steps", "lp"} <= set(nuts.data_vars)
    assert nuts["diverging"].dims == ("chain", "draw")
    sg = engines["AdaptiveSGHMC"].sample_stats
    assert {"step_size", "adapt_scale", "nonfinite", "lp"} <= set(sg.data_vars)
    assert not bool(sg["nonfinite"].any())


@pytest.mark.slow
def test_loglikelihood_of_a_draw_is_the_variational_potential(problem, engines):
    """log_likelihood holds E_{p(f_n|u,θ)}[log p(y_n|f_n)] of each draw: recomputed here from the closed form."""
    X, y, model = problem
    idata = engines["NUTS"]
    draw = {k: jnp.asarray(idata.posterior[k].values[1, 7]) for k in ("u", "kernel.lengthscale", "kernel.variance")}
    draw["likelihood.variance"] = jnp.asarray(idata.posterior["likelihood.variance"].values[1, 7])
    kernel, likelihood = model.fitted(draw)
    mean, var = model.predict_f(draw, X)  # p(f_n | u, θ): mean a_n^T v, variance k_nn - a_n^T a_n
    s2 = draw["likelihood.variance"]
    expected = -0.5 * np.log(2 * np.pi * s2) - ((y - mean) ** 2 + var) / (2 * s2)
    np.testing.assert_allclose(idata.log_likelihood["y"].values[1, 7], expected, rtol=1e-10)


@pytest.mark.slow  # about 30 s; `make test-slow` runs it in CI
def test_a_plain_numpyro_mcmc_gives_the_same_inference_data_as_run_mcmc(problem):
    """diagnostics.from_mcmc takes a numpyro.infer.MCMC as NumPyro users run it: same draws, same groups."""
    X, y, model = problem
    mcmc = MCMC(
        NUTS(model.model, max_tree_depth=3),
        num_warmup=20,
        num_samples=10,
        num_chains=2,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(3), X, y)
    idata = diagnostics.from_mcmc(mcmc, model, X, y)
    assert {"posterior", "log_likelihood", "posterior_predictive", "observed_data", "sample_stats"} <= set(
        idata.groups()
    )
    np.testing.assert_array_equal(idata.posterior["u"].values, mcmc.get_samples(group_by_chain=True)["u"])
    assert idata.posterior["u"].dims == ("chain", "draw", "latent", "inducing_point")
    assert idata.sample_stats["diverging"].shape == (2, 10)
    assert idata.posterior.attrs["engine"] == "NUTS" and idata.posterior.attrs["num_warmup"] == "20"
    with pytest.raises(ValueError, match=r"result: this numpyro.infer.MCMC has no draws yet"):
        diagnostics.from_mcmc(MCMC(NUTS(model.model), num_warmup=1, num_samples=1), model, X, y)
    with pytest.raises(ValueError, match="result: expected an MCMCResult"):
        diagnostics.from_mcmc({"u": np.zeros((1, 1, 1, 5))}, model, X, y)


def test_gpr_has_no_pointwise_likelihood_and_says_so():
    X, y = jnp.zeros((3, 1)), jnp.zeros(3)
    with pytest.raises(NotImplementedError, match="az.loo"):
        GPR(kernel=RBF(), likelihood=Gaussian()).pointwise_log_likelihood({}, X, y)


@pytest.mark.slow
def test_mixture_predictive_matches_a_direct_computation():
    """Two hyperparameter draws of an exact GP: the mixture's moments and log density by hand."""
    rng = np.random.default_rng(0)
    X, y = rng.uniform(-2, 2, (20, 1)), rng.standard_normal(20)
    X_new, y_new = rng.uniform(-2, 2, (7, 1)), rng.standard_normal(7)
    model = GPR(kernel=RBF(), likelihood=Gaussian(variance=0.1))
    samples = {"kernel.lengthscale": np.array([0.5, 2.0]), "likelihood.variance": np.array([0.1, 0.3])}
    per_draw = [model.predict_y({k: v[s] for k, v in samples.items()}, X_new, X=X, y=y) for s in range(2)]
    means = np.stack([m for m, _ in per_draw])
    variances = np.stack([v for _, v in per_draw])
    pp = predict.posterior_predictive(model, samples, X_new, X=X, y=y)
    np.testing.assert_allclose(pp.y_mean, means.mean(0), rtol=1e-12)
    np.testing.assert_allclose(pp.y_var, (variances + means**2).mean(0) - means.mean(0) ** 2, rtol=1e-10)
    logp = [model.predict_log_density({k: v[s] for k, v in samples.items()}, X_new, y_new, X=X, y=y) for s in range(2)]
    expected = logsumexp(np.stack(logp), axis=0) - np.log(2)
    got = predict.log_predictive_density(model, samples, X_new, y_new, X=X, y=y)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # in original units: y = 3 y_std + 5 -> the mean maps affinely, the density gains -log 3
    st = Standardizer(np.zeros(1), np.ones(1), np.asarray(5.0), np.asarray(3.0))
    pp_orig = predict.posterior_predictive(model, samples, X_new, standardizer=st, X=X, y=y)
    np.testing.assert_allclose(pp_orig.y_mean, 3 * pp.y_mean + 5, rtol=1e-12)
    np.testing.assert_allclose(pp_orig.y_var, 9 * pp.y_var, rtol=1e-12)
    got_orig = predict.log_predictive_density(model, samples, X_new, y_new, standardizer=st, X=X, y=y)
    np.testing.assert_allclose(got_orig, expected - np.log(3.0), rtol=1e-12)


def test_predict_rejects_mismatched_inputs(problem):
    X, y, model = problem
    samples = {"u": np.zeros((4, 1, 5)), "kernel.variance": np.ones(3)}
    with pytest.raises(ValueError, match="same number of draws"):
        predict.posterior_predictive(model, samples, X)
    with pytest.raises(ValueError, match="y_new"):
        predict.log_predictive_density(model, {"u": np.zeros((4, 1, 5))}, X, y[:3])


@pytest.fixture(scope="module")
def svi_fit(problem):
    X, y, model = problem
    svgp = SVGP(kernel=model.kernel, likelihood=model.likelihood, Z=model.Z)
    fit = fit_svi(svgp.model, svgp.guide, X, y, optimizer=optax.adam(0.05), num_steps=100, progress=False)
    return svgp, fit.params


def test_the_predictive_log_likelihood_of_a_draw_integrates_f_out(problem, svi_fit):
    """log_likelihood_of="predictive" holds log N(y_n | mean_n(u), var_n(u) + σ²) for each draw u of q(u), and
    the hyperparameters appear at their point estimates, constant over the draws."""
    X, y, _ = problem
    svgp, params = svi_fit
    idata = diagnostics.from_svi(svgp, params, X, y, num_draws=7, log_likelihood_of="predictive")
    assert idata.log_likelihood.attrs["log_likelihood"] == "predictive"
    assert idata.log_likelihood["y"].shape == (1, 7, 30)
    draw = {**params, "u": jnp.asarray(idata.posterior["u"].values[0, 3])}
    mean, var = svgp.predict_f(draw, X)
    scale = np.sqrt(np.asarray(var) + float(params["likelihood.variance"]))
    expected = -0.5 * np.log(2 * np.pi * scale**2) - 0.5 * ((np.asarray(y) - np.asarray(mean)) / scale) ** 2
    np.testing.assert_allclose(idata.log_likelihood["y"].values[0, 3], expected, rtol=1e-10)
    lengthscales = idata.posterior["kernel.lengthscale"].values
    np.testing.assert_array_equal(lengthscales, np.broadcast_to(params["kernel.lengthscale"], (1, 7, 2)))
    assert "kernel.lengthscale" in idata.posterior.attrs["point_estimates"]
    with pytest.raises(ValueError, match="log_likelihood_of"):
        diagnostics.from_svi(svgp, params, X, y, num_draws=2, log_likelihood_of="exact")


def test_local_sites_are_drawn_for_the_log_likelihood_but_not_kept(problem, svi_fit):
    X, y, _ = problem
    svgp, params = svi_fit
    idata = diagnostics.from_svi(svgp, params, X, y, num_draws=4, log_likelihood_of="predictive", local=("u",))
    assert "u" not in idata.posterior and "kernel.variance" in idata.posterior
    assert idata.log_likelihood["y"].shape == (1, 4, 30)


def test_groups_written_without_arviz_read_back_as_the_inference_data_arviz_writes(problem, svi_fit, tmp_path):
    """netcdf_file of svi_groups (posterior.nc of the command line, ArviZ not imported) and of the InferenceData
    assembled from the same groups give files that ArviZ reads back the same: groups, values bitwise, dims, coords,
    attrs and zlib compression."""
    X, y, _ = problem
    svgp, params = svi_fit
    groups = diagnostics.svi_groups(svgp, params, X, y, num_draws=70, log_likelihood_of="predictive")
    assert isinstance(groups, dict) and all(isinstance(g, xr.Dataset) for g in groups.values())
    plain, by_arviz = tmp_path / "plain.nc", tmp_path / "arviz.nc"
    diagnostics.netcdf_file(groups)(plain)
    diagnostics.netcdf_file(diagnostics.assemble(groups))(by_arviz)
    a, b = az.from_netcdf(plain), az.from_netcdf(by_arviz)
    assert a.groups() == b.groups() == ["posterior", "posterior_predictive", "log_likelihood", "observed_data"]
    for name in a.groups():
        xr.testing.assert_identical(a[name], b[name])
        for var in a[name].variables:
            assert a[name][var].encoding.get("zlib") == b[name][var].encoding.get("zlib")
    assert a.posterior["u"].shape == (1, 70, 1, 5)  # 70 draws: mapped in a batch of 64 and one of 6
    same = diagnostics.from_svi(svgp, params, X, y, num_draws=70, log_likelihood_of="predictive")
    xr.testing.assert_identical(a.log_likelihood, same.log_likelihood)
    xr.testing.assert_identical(a.posterior_predictive, same.posterior_predictive)


@pytest.mark.slow
def test_to_inference_data_takes_the_result_of_either_engine(problem, svi_fit):
    """psg.to_inference_data dispatches on the result: an SVIResult to from_svi, an MCMC run to from_mcmc."""
    X, y, model = problem
    svgp, _ = svi_fit
    fit = fit_svi(svgp.model, svgp.guide, X, y, optimizer=optax.adam(0.05), num_steps=5, progress=False)
    from_svi = psg.to_inference_data(fit, svgp, X, y, num_draws=3)
    assert from_svi.posterior.attrs["engine"] == "SVI" and from_svi.posterior["u"].shape[:2] == (1, 3)
    mcmc = MCMC(NUTS(model.model, max_tree_depth=2), num_warmup=3, num_samples=4, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, y)
    assert psg.to_inference_data(mcmc, model, X, y).posterior["u"].shape[:2] == (1, 4)
    with pytest.raises(ValueError, match="fit: expected an SVIResult, an MCMCResult or a numpyro.infer.MCMC"):
        psg.to_inference_data({"u": 1}, model, X, y)


def test_predictive_rhat_is_arviz_rhat_per_point_and_flags_the_points_where_chains_disagree():
    means = np.random.default_rng(7).normal(size=(4, 200, 10))
    agree = diagnostics.predictive_rhat(means)
    assert agree.rhat.shape == (10,) and agree.max < 1.05 and agree.fraction_below == 1.0
    np.testing.assert_allclose(agree.rhat[3], float(az.rhat(means[:, :, 3])))
    rescaled = diagnostics.predictive_rhat(3.0 * means - 1.0).rhat  # rank-based: units do not matter (up to rounding)
    np.testing.assert_allclose(rescaled, agree.rhat, rtol=1e-3)
    shifted = means.copy()
    shifted[0, :, :3] += 2.0  # one chain sits elsewhere at three points
    flagged = diagnostics.predictive_rhat(shifted)
    assert np.all(flagged.rhat[:3] > 1.25) and np.all(flagged.rhat[3:] < 1.05)
    assert flagged.fraction_below == 0.7 and flagged.max == float(flagged.rhat.max())
    summary = flagged.summary()
    assert (summary["chains"], summary["draws_per_chain"], summary["points"]) == (4, 200, 10)
    assert summary["fraction_below"] == 0.7 and summary["threshold"] == 1.1
    np.testing.assert_allclose([summary["mean"], summary["sd"]], [flagged.rhat.mean(), flagged.rhat.std()])
    assert diagnostics.predictive_rhat(means.reshape(4, 200, 5, 2)).rhat.shape == (5, 2)  # two outputs


@pytest.mark.parametrize(
    ("means", "threshold", "message"),
    [
        (np.zeros((200, 10)), 1.1, "means: expected"),
        (np.zeros((4, 3, 10)), 1.1, "draws >= 4"),
        (np.zeros((1, 20, 10)), 1.1, "chains >= 2"),
        (np.full((4, 20, 10), np.nan), 1.1, "means: expected finite"),
        (np.zeros((4, 20, 10)), 1.0, "threshold: expected a number > 1"),
    ],
)
def test_predictive_rhat_rejects_bad_input(means, threshold, message):
    with pytest.raises(ValueError, match=message):
        diagnostics.predictive_rhat(means, threshold)


def test_predictions_group_holds_the_means_by_chain_draw_and_point_and_round_trips(tmp_path):
    means, X_new = np.random.default_rng(8).normal(size=(3, 6, 4)), np.arange(8.0).reshape(4, 2)
    idata = diagnostics.to_inference_data({"a": np.zeros((3, 6))})
    diagnostics.with_predictions(idata, means, X_new)
    back = diagnostics.load(diagnostics.save(idata, tmp_path / "run.nc"))
    assert {"posterior", "predictions", "predictions_constant_data"} <= set(diagnostics.group_names(back))
    assert back["predictions"]["y_mean"].dims == ("chain", "draw", "point")
    np.testing.assert_array_equal(back["predictions"]["y_mean"].values, means)
    assert back["predictions_constant_data"]["X"].dims == ("point", "input_dim")
    np.testing.assert_allclose(float(az.rhat(back["predictions"])["y_mean"][2]), float(az.rhat(means[:, :, 2])))
