"""The Pyro twin of fit_sghmc_dgp (recipes/sghmc_dgp_pyro.py) takes the NumPyro recipe's config: it refuses bad
settings before any step; Z, θ and σ² move during the MCEM warmup (torch's Adam) and stay after it while v is
sampled, and the NumPyro twin evaluates the draws; with the learning rate 0 the point estimates keep their start."""

from __future__ import annotations

import numpy as np
import pytest

from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.pyro.sgmcmc import AdaptiveSGHMC
from ppl_sparsegp.recipes import sghmc_dgp_pyro
from ppl_sparsegp.recipes.sghmc_dgp import SGHMC_DGP_OPTIMISED, SGHMCDGPConfig

N, D, M = 40, 2, 6
RNG = np.random.default_rng(0)
X = RNG.uniform(-2.0, 2.0, (N, D))
Y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.2 * RNG.standard_normal(N)
Y = (Y - Y.mean()) / Y.std()
SMALL = SGHMCDGPConfig(num_inducing=M, num_iterations=150, num_kept=10, thinning=5)
POINT_SITES = (*SGHMC_DGP_OPTIMISED, "likelihood.variance")


@pytest.fixture(autouse=True)
def float64():
    with default_dtype("float64"):
        yield


def test_point_estimates_move_in_warmup_then_stay_while_v_is_sampled():
    fit = sghmc_dgp_pyro.fit_sghmc_dgp(X, Y, SMALL, seed=0, progress=False)
    assert isinstance(fit.kernel, AdaptiveSGHMC) and fit.kernel.point_estimates.sites == POINT_SITES
    draws = fit.mcmc.flat_samples()
    assert set(draws) == {*POINT_SITES, "u"} and draws["u"].shape == (10, 1, M)
    start = {"Z": np.asarray(fit.model.Z), "kernel.lengthscale": np.sqrt(D), "kernel.variance": 0.1}
    start["likelihood.variance"] = 1.0
    for site in POINT_SITES:
        assert np.all(draws[site] == draws[site][0]), site
        assert np.max(np.abs(draws[site][0] - start[site])) > 0.05, site
    assert np.ptp(draws["u"], axis=0).min() > 1e-3
    lpd = fit.log_predictive_density(X, Y)  # the NumPyro twin evaluates the Pyro draws
    assert lpd.mean() > float(np.mean(-0.5 * np.log(2 * np.pi) - 0.5 * Y**2)) + 0.3


def test_learning_rate_zero_keeps_the_start_and_samples_v():
    fit = sghmc_dgp_pyro.fit_sghmc_dgp(X, Y, SMALL, seed=1, progress=False, learning_rate=0.0, num_iterations=20)
    draws = fit.mcmc.flat_samples()
    np.testing.assert_array_equal(draws["Z"], np.broadcast_to(np.asarray(fit.model.Z), draws["Z"].shape))
    for site, start in (("kernel.lengthscale", np.sqrt(D)), ("kernel.variance", 0.1), ("likelihood.variance", 1.0)):
        np.testing.assert_allclose(draws[site], np.broadcast_to(start, draws[site].shape), rtol=1e-14, err_msg=site)
    assert np.ptp(draws["u"], axis=0).min() > 1e-3


def test_two_layers_point_estimate_every_layers_z_and_theta():
    fit = sghmc_dgp_pyro.fit_sghmc_dgp(X, Y, SMALL, seed=2, progress=False, num_layers=2, num_iterations=30, num_kept=3)
    draws = fit.mcmc.flat_samples()
    points = {f"layer{i}.{s}" for i in (0, 1) for s in SGHMC_DGP_OPTIMISED} | {"likelihood.variance"}
    assert set(draws) == points | {"layer0.u", "layer1.u"} and set(fit.kernel.point_estimates.sites) == points
    for site in points:
        assert np.all(draws[site] == draws[site][0]), site
    assert np.max(np.abs(draws["layer0.Z"][0] - np.asarray(fit.model.Z[0]))) > 0.05
    assert np.ptp(draws["layer1.u"], axis=0).min() > 1e-4


@pytest.mark.parametrize("layers", [1, 2])
def test_z_optimised_samples_theta_with_v(layers):
    """``optimised=("Z",)`` (the BSGP paper's "Z optimised, θ inferred"): every layer's Z and σ² are point estimates,
    every layer's θ is sampled with v, as in the NumPyro twin."""
    fit = sghmc_dgp_pyro.fit_sghmc_dgp(
        X, Y, SMALL, seed=3, progress=False, optimised=("Z",), num_layers=layers, num_iterations=40
    )
    prefixes = [""] if layers == 1 else [f"layer{i}." for i in range(layers)]
    points = {f"{p}Z" for p in prefixes} | {"likelihood.variance"}
    sampled = {f"{p}{s}" for p in prefixes for s in ("kernel.lengthscale", "kernel.variance", "u")}
    assert set(fit.kernel.point_estimates.sites) == points
    draws = fit.mcmc.flat_samples()
    assert set(draws) == points | sampled
    for site in points:
        assert np.all(draws[site] == draws[site][0]), site
    for site in sampled:
        assert np.ptp(draws[site], axis=0).min() > 1e-4, site


def test_z_held_at_the_given_inputs_samples_theta_with_v():
    """``held=("Z",)`` as in the NumPyro twin: the given Z in every draw, σ² moved, θ and v sampled."""
    Z = np.array([[a, b] for a in (-1.5, 0.0, 1.5) for b in (-1.0, 1.0)])
    fit = sghmc_dgp_pyro.fit_sghmc_dgp(
        X, Y, SMALL, seed=4, Z=Z, progress=False, optimised=("Z",), held=("Z",), num_iterations=40
    )
    assert tuple(fit.kernel.point_estimates.held) == ("Z",)
    draws = fit.mcmc.flat_samples()
    np.testing.assert_array_equal(draws["Z"], np.broadcast_to(Z, draws["Z"].shape))
    assert abs(draws["likelihood.variance"][0] - 1.0) > 1e-3
    for site in ("kernel.lengthscale", "kernel.variance", "u"):
        assert np.ptp(draws[site], axis=0).min() > 1e-4, site


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"window": 0}, "window"),
        ({"updates_per_iteration": 0}, "updates_per_iteration"),
        ({"num_inducing": N + 1}, "num_inducing"),
        ({"optimised": ("W",)}, "optimised"),
        ({"optimised": ("Z",), "held": ("kernel.variance",)}, "held"),
    ],
)
def test_bad_settings_are_refused_before_any_step(overrides, match, monkeypatch):
    monkeypatch.setattr(sghmc_dgp_pyro, "run_plan", lambda *a, **k: pytest.fail("the chain started"))
    with pytest.raises(ValueError, match=match):
        sghmc_dgp_pyro.fit_sghmc_dgp(X, Y, SMALL, progress=False, **overrides)
