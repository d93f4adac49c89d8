"""SGHMC-DGP's recipe (recipes/sghmc_dgp.py), float64 on tiny data: Z, θ and σ² move during the MCEM warmup and
stay fixed after it while v is sampled; with Adam's learning rate 0 the point estimates stay at their start and the
draws of v follow the closed-form Gaussian posterior of v at that (Z, θ, σ²), the target of BSGP's sampler with
those sites held; a run killed in warmup resumes to the uninterrupted draws and a checkpoint of other MCEM settings
is refused; bad settings are refused by name before anything is compiled."""

from __future__ import annotations

import jax
import numpy as np
import numpyro.distributions as dist
import pytest

from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.models._shared import bsgp_kernel
from ppl_sparsegp.models.numpyro.bsgp import BSGP
from ppl_sparsegp.recipes import sghmc_dgp
from ppl_sparsegp.recipes.sghmc_dgp import SGHMC_DGP_OPTIMISED, SGHMCDGPConfig, fit_sghmc_dgp

N, D, M = 40, 2, 6
RNG = np.random.default_rng(0)
X = RNG.uniform(-2.0, 2.0, (N, D))
Y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.2 * RNG.standard_normal(N)
Y = (Y - Y.mean()) / Y.std()
SMALL = SGHMCDGPConfig(num_inducing=M, num_iterations=200, num_kept=20, thinning=5)
POINT_SITES = {"Z", "kernel.lengthscale", "kernel.variance", "likelihood.variance"}


@pytest.mark.slow
def test_point_estimates_move_in_warmup_then_stay_while_v_is_sampled():
    fit = fit_sghmc_dgp(X, Y, SMALL, key=jax.random.PRNGKey(0), progress=False)
    draws = fit.mcmc.flat_samples()
    assert set(draws) == POINT_SITES | {"u"} and draws["u"].shape == (20, 1, M)
    assert fit.kernel.point_estimates.sites == (*SGHMC_DGP_OPTIMISED, "likelihood.variance")
    start = {"Z": fit.model.Z, "kernel.lengthscale": np.sqrt(D) * np.ones(D), "kernel.variance": 0.1}
    start["likelihood.variance"] = 1.0
    for site in POINT_SITES:
        assert np.all(draws[site] == draws[site][0]), site  # fixed after warmup
        assert np.max(np.abs(draws[site][0] - start[site])) > 0.05, site  # moved by the Adam steps
    assert np.ptp(draws["u"], axis=0).min() > 1e-3  # every coordinate of v is sampled
    lpd = fit.log_predictive_density(X, Y)
    assert lpd.mean() > float(np.mean(-0.5 * np.log(2 * np.pi) - 0.5 * Y**2)) + 0.3  # beats N(0, 1) clearly


# Compiling the two-layer chain takes a minute on a loaded 2-core machine: `make test-slow`. The deep model's sites
# and terms are checked against its Pyro twin in tests/parity/test_parity_bsgp.py by default.
@pytest.mark.slow
def test_two_layers_point_estimate_every_layers_z_and_theta():
    fit = fit_sghmc_dgp(X, Y, SMALL, key=jax.random.PRNGKey(3), num_layers=2, num_iterations=60, progress=False)
    draws = fit.mcmc.flat_samples()
    points = {f"layer{i}.{s}" for i in (0, 1) for s in SGHMC_DGP_OPTIMISED} | {"likelihood.variance"}
    assert set(draws) == points | {"layer0.u", "layer1.u"} and set(fit.kernel.point_estimates.sites) == points
    assert draws["layer0.u"].shape == (20, D, M) and draws["layer1.u"].shape == (20, 1, M)
    for site in points:
        assert np.all(draws[site] == draws[site][0]), site
    assert np.max(np.abs(draws["layer1.Z"][0] - fit.model.Z[1])) > 0.05  # moved from BSGP's start
    assert np.ptp(draws["layer0.u"], axis=0).min() > 1e-4 and np.ptp(draws["layer1.u"], axis=0).min() > 1e-4
    assert np.isfinite(fit.log_predictive_density(X, Y, key=jax.random.PRNGKey(4))).all()


def _conditional_posterior_of_v(Z: np.ndarray, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean [M] and covariance [M, M] of p(v | y, Z, θ, σ²) under the log E[p] data term with BSGP's start θ:
    ℓ_n = log N(y_n; a_nᵀv, s_n + σ²), a_n = L⁻¹k_zn, s_n = k_nn − a_nᵀa_n, so the precision is I + A W Aᵀ with
    W = diag(1/(s + σ²)) and the mean its inverse times A W y."""
    kernel = bsgp_kernel(D)
    Kzz = np.asarray(kernel(Z)) + 1e-8 * 0.1 * np.eye(len(Z))
    A = np.linalg.solve(np.linalg.cholesky(Kzz), np.asarray(kernel(Z, X)))
    s = 0.1 - np.sum(A**2, axis=0)
    W = 1.0 / (s + noise)
    cov = np.linalg.inv(np.eye(len(Z)) + (A * W) @ A.T)
    return cov @ (A @ (W * Y)), cov


@pytest.mark.slow
def test_with_learning_rate_zero_v_samples_its_posterior_at_the_held_point_estimates():
    """BSGP's sampler over v alone at fixed (Z, θ, σ²) targets the Gaussian of :func:`_conditional_posterior_of_v`;
    with learning rate 0 the MCEM steps change nothing (Adam's update is exactly 0), so the recipe's draws must
    match that Gaussian: means within 0.3 posterior SD, SDs within 15 % (3,000 draws 10 updates apart, full batch;
    the draws are autocorrelated, so these are a few Monte Carlo standard errors)."""
    Z = np.array([[-1.5, -1.5], [1.5, 1.5], [-1.5, 1.5], [1.5, -1.5]])
    fit = fit_sghmc_dgp(
        X, Y, SMALL, key=jax.random.PRNGKey(1), Z=Z, num_inducing=4, learning_rate=0.0, noise_variance=0.3,
        num_iterations=1000, num_kept=3000, thinning=10, progress=False,
    )  # fmt: skip
    draws = fit.mcmc.flat_samples()
    np.testing.assert_array_equal(draws["Z"], np.broadcast_to(Z, draws["Z"].shape))
    for site, start in (("kernel.lengthscale", np.sqrt(D)), ("kernel.variance", 0.1), ("likelihood.variance", 0.3)):
        np.testing.assert_allclose(draws[site], np.broadcast_to(start, draws[site].shape), rtol=1e-14, err_msg=site)
    mean, cov = _conditional_posterior_of_v(Z, 0.3)
    sd = np.sqrt(np.diag(cov))
    v = draws["u"][:, 0]
    assert np.max(np.abs(v.mean(0) - mean) / sd) < 0.3
    np.testing.assert_allclose(v.std(0), sd, rtol=0.15)


@pytest.mark.slow
def test_killed_in_warmup_resumes_to_the_uninterrupted_draws_and_refuses_other_settings(tmp_path):
    config = SGHMCDGPConfig(num_inducing=M, num_iterations=60, num_kept=5, thinning=3, warmup_chunk_size=25)
    straight = fit_sghmc_dgp(X, Y, config, key=jax.random.PRNGKey(2), progress=False)
    path, pieces = str(tmp_path / "sghmc_dgp.ckpt"), []

    def die(partial):
        pieces.append(partial.mcmc.warmup_done)
        if len(pieces) == 2:
            raise KeyboardInterrupt

    killed = fit_sghmc_dgp(X, Y, config, key=jax.random.PRNGKey(2), progress=False, checkpoint=path, callback=die)
    assert killed.mcmc.interrupted and pieces == [25, 50]
    resumed = fit_sghmc_dgp(X, Y, config, key=jax.random.PRNGKey(2), progress=False, checkpoint=path)
    for site, value in straight.mcmc.samples.items():
        np.testing.assert_array_equal(resumed.mcmc.samples[site], value, err_msg=site)
    with pytest.raises(ValueError, match="sghmc_dgp.learning_rate"):
        fit_sghmc_dgp(X, Y, config, key=jax.random.PRNGKey(2), progress=False, checkpoint=path, learning_rate=0.02)


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"learning_rate": -0.01}, "learning_rate"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"window": 0}, "window"),
        ({"updates_per_iteration": 0}, "updates_per_iteration"),
        ({"thinning": 0}, "thinning"),
        ({"likelihood_term": "expected"}, "likelihood_term"),
        ({"num_inducing": N + 1}, "num_inducing"),
        ({"num_layers": 0}, "num_layers"),
        ({"optimised": ()}, "optimised: expected a non-empty list"),
        ({"optimised": ("Z", "Z")}, "optimised: expected a non-empty list of distinct sites"),
        ({"optimised": ("likelihood.variance",)}, "optimised"),
        ({"optimised": "Z"}, "optimised"),
        ({"optimised": ("Z",), "held": ("kernel.variance",)}, "held: expected a list of distinct sites among"),
        ({"held": ("Z", "Z")}, "held"),
        ({"held": "Z"}, "held"),
    ],
)
def test_bad_settings_are_refused_by_name_before_compiling(overrides, match, monkeypatch):
    monkeypatch.setattr(sghmc_dgp, "run_plan", lambda *a, **k: pytest.fail("the chain started"))
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("jax.jit was reached"))
    with pytest.raises(ValueError, match=match):
        fit_sghmc_dgp(X, Y, SMALL, key=jax.random.PRNGKey(0), **overrides)


def test_optimised_sites_are_stored_as_a_tuple_in_the_default_order():
    assert SGHMCDGPConfig().optimised == SGHMC_DGP_OPTIMISED
    config = SGHMCDGPConfig(optimised=["kernel.variance", "Z"])
    assert config.optimised == ("Z", "kernel.variance")


@pytest.mark.slow
def test_z_optimised_samples_theta_with_v_and_its_checkpoint_refuses_sghmc_dgps(tmp_path):
    """``optimised=("Z",)``, the BSGP paper's "Z optimised, θ inferred": Z and σ² are point estimates (moved by the
    MCEM steps, then fixed), θ is sampled with v; a checkpoint of it is refused to the default (Z and θ optimised)."""
    path = str(tmp_path / "z_optimised.ckpt")
    config = SGHMCDGPConfig(num_inducing=M, num_iterations=100, num_kept=20, thinning=5, optimised=("Z",))
    fit = fit_sghmc_dgp(X, Y, config, key=jax.random.PRNGKey(5), progress=False, checkpoint=path)
    assert fit.kernel.point_estimates.sites == ("Z", "likelihood.variance")
    draws = fit.mcmc.flat_samples()
    assert set(draws) == POINT_SITES | {"u"}
    for site in ("Z", "likelihood.variance"):
        assert np.all(draws[site] == draws[site][0]), site
    assert np.max(np.abs(draws["Z"][0] - fit.model.Z)) > 0.05
    for site in ("kernel.lengthscale", "kernel.variance", "u"):
        assert np.ptp(draws[site], axis=0).min() > 1e-3, site  # sampled: every coordinate moves between draws
    assert np.isfinite(fit.log_predictive_density(X, Y)).all()
    with pytest.raises(ValueError, match="sghmc_dgp.optimised"):
        fit_sghmc_dgp(X, Y, config, key=jax.random.PRNGKey(5), progress=False, checkpoint=path,
                      optimised=SGHMC_DGP_OPTIMISED)  # fmt: skip


def test_held_sites_name_every_layers_copy_in_the_default_order():
    config = SGHMCDGPConfig(held=["kernel.variance", "Z"])
    assert config.held == ("Z", "kernel.variance")
    sites = ("layer0.Z", "layer0.kernel.variance", "layer1.Z", "layer1.kernel.lengthscale", "likelihood.variance")
    assert sghmc_dgp.held_sites(config, sites) == ("layer0.Z", "layer0.kernel.variance", "layer1.Z")
    assert sghmc_dgp.held_sites(config, ("Z", "likelihood.variance")) == ("Z",)


@pytest.mark.slow
def test_z_held_at_the_given_inputs_samples_theta_with_v_while_the_noise_is_optimised():
    """``optimised=("Z",), held=("Z",)`` (Hensman et al. 2015b: Z from a variational fit, held): every draw has the
    given Z exactly, σ² was moved by the MCEM steps (with learning rate 0 it stays exactly 1), θ and v sampled."""
    Z = np.array([[a, b] for a in (-1.5, 0.0, 1.5) for b in (-1.0, 1.0)])
    config = SGHMCDGPConfig(num_inducing=M, num_iterations=200, num_kept=20, thinning=5, optimised=("Z",))
    fit = fit_sghmc_dgp(X, Y, config, key=jax.random.PRNGKey(6), Z=Z, held=("Z",), updates_per_iteration=5,
                        progress=False)  # fmt: skip
    assert fit.kernel.point_estimates.held == ("Z",)
    draws = fit.mcmc.flat_samples()
    np.testing.assert_array_equal(draws["Z"], np.broadcast_to(Z, draws["Z"].shape))
    noise = draws["likelihood.variance"]
    assert np.all(noise == noise[0]) and abs(noise[0] - 1.0) > 1e-3
    for site in ("kernel.lengthscale", "kernel.variance", "u"):
        assert np.ptp(draws[site], axis=0).min() > 1e-3, site
    assert np.isfinite(fit.log_predictive_density(X, Y)).all()


@pytest.mark.parametrize(
    "optimised, match",
    [
        (("W",), "optimised: 'W' is not one of"),
        (("Z", "Z"), "names a site twice"),
        ("Z", "expected a sequence"),
        (("likelihood.variance",), "not one of"),
    ],
)
def test_the_model_refuses_bad_optimised_sites(optimised, match):
    with pytest.raises(ValueError, match=match):
        BSGP(bsgp_kernel(D), Gaussian(), Z=X[:M], optimised=optimised)
    priors = {"kernel.variance": dist.LogNormal(), "kernel.lengthscale": dist.LogNormal().expand([D]).to_event(1)}
    with pytest.raises(ValueError, match="also has a prior"):
        BSGP(bsgp_kernel(D), Gaussian(), Z=X[:M], optimised=("kernel.variance",), priors=priors)
