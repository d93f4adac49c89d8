"""BSGPConfig.noise_per_output (the released code's ``Gaussian(np.var(Y, 0))``, spec 001 §1.7): the default
likelihood gets one noise variance per output column; the SGHMC recipe's point estimate then follows each output's
own residual scale (an output of pure noise keeps σ² near 1 while a smooth one's falls), on both twins; a sampled
noise gets one LogNormal(0, 1) per output; deep BSGP takes it too; bad settings are refused before any step."""

from __future__ import annotations

import numpy as np
import pytest

from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.recipes import bsgp, bsgp_pyro
from ppl_sparsegp.recipes.bsgp import BSGPConfig, plan_bsgp

N, D, M = 40, 2, 6
RNG = np.random.default_rng(3)
X = RNG.uniform(-2.0, 2.0, (N, D))
Y = np.stack([RNG.standard_normal(N), np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.01 * RNG.standard_normal(N)], axis=1)
Y = (Y - Y.mean(axis=0)) / Y.std(axis=0)
"""Output 0 is noise only (its best σ² is 1); output 1 is a smooth function with a tiny noise."""


def test_the_default_likelihood_has_one_noise_variance_per_output_column():
    plan = plan_bsgp(X, Y, BSGPConfig(num_inducing=M, noise_per_output=True), {}, likelihood=None, Z=None,
                     z_prior_options=None)  # fmt: skip
    np.testing.assert_array_equal(plan.likelihood.variance, [1.0, 1.0])
    shared = plan_bsgp(X, Y, BSGPConfig(num_inducing=M), {}, likelihood=None, Z=None, z_prior_options=None)
    assert np.ndim(shared.likelihood.variance) == 0
    one = plan_bsgp(X, Y[:, 1], BSGPConfig(num_inducing=M, noise_per_output=True, noise_variance=0.5), {},
                    likelihood=None, Z=None, z_prior_options=None)  # fmt: skip
    assert np.ndim(one.likelihood.variance) == 0 and one.likelihood.variance == 0.5
    assert plan.fingerprint["bsgp.likelihood"] != shared.fingerprint["bsgp.likelihood"]  # no resume across them


@pytest.mark.parametrize(
    "arguments, match",
    [
        ({"noise_per_output": "yes"}, "noise_per_output: expected True or False"),
        ({"noise_per_output": True, "likelihood": Gaussian(variance=0.5)}, "noise_per_output: applies to the default"),
    ],
)
@pytest.mark.parametrize("recipe", [bsgp, bsgp_pyro], ids=["numpyro", "pyro"])
def test_bad_settings_are_refused_before_any_step(arguments, match, recipe, monkeypatch):
    monkeypatch.setattr(recipe, "run_mcmc", lambda *a, **k: pytest.fail("the chain started"))
    key = {"key": None} if recipe is bsgp else {"seed": 0}
    with pytest.raises(ValueError, match=match):
        recipe.fit_bsgp(X, Y, BSGPConfig(num_inducing=M), progress=False, **key, **arguments)


def _noise(fit) -> np.ndarray:
    draws = fit.mcmc.flat_samples()["likelihood.variance"]
    assert draws.shape == (4, 2) and np.all(draws == draws[0])  # a point estimate, fixed while sampling
    return draws[0]


@pytest.mark.slow
def test_sghmc_point_estimates_follow_each_outputs_residual_scale():
    import jax

    config = BSGPConfig(num_inducing=M, num_iterations=60, num_kept=4, noise_per_output=True)
    noise = _noise(bsgp.fit_bsgp(X, Y, config, key=jax.random.PRNGKey(0), progress=False))
    assert noise[0] > 0.85 and noise[1] < noise[0] - 0.15  # 60 Adam steps of 0.01: at most a factor e^-0.6 ~ 0.55


@pytest.mark.slow
def test_the_pyro_twin_estimates_one_noise_per_output_too():
    config = BSGPConfig(num_inducing=M, num_iterations=60, num_kept=4, noise_per_output=True)
    with default_dtype("float64"):
        noise = _noise(bsgp_pyro.fit_bsgp(X, Y, config, seed=0, progress=False))
    assert noise[0] > 0.85 and noise[1] < noise[0] - 0.15


def test_a_sampled_noise_gets_one_prior_per_output():
    from numpyro import handlers
    from numpyro.distributions import LogNormal

    plan = plan_bsgp(X, Y, BSGPConfig(num_inducing=M, noise_per_output=True, noise="sampled"), {}, likelihood=None,
                     Z=None, z_prior_options=None)  # fmt: skip
    model, initial = bsgp.build_model(plan, bsgp.bsgp_models, bsgp.deep_models, np.asarray)
    np.testing.assert_array_equal(initial["likelihood.variance"], [1.0, 1.0])
    value = np.array([0.5, 2.0])
    trace = handlers.trace(
        handlers.substitute(handlers.seed(model.model, 0), {**initial, "likelihood.variance": value})
    )
    site = trace.get_trace(X, Y)["likelihood.variance"]
    assert site["type"] == "sample" and site["fn"].event_shape == (2,)
    expected = float(np.sum(LogNormal(0.0, 1.0).log_prob(value)))
    assert float(site["fn"].log_prob(value)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.slow
def test_deep_bsgp_takes_a_noise_per_output_too():
    import jax

    config = BSGPConfig(num_layers=2, num_inducing=5, num_iterations=8, num_kept=4, noise_per_output=True)
    fit = bsgp.fit_bsgp(X, Y, config, key=jax.random.PRNGKey(0), progress=False)
    noise = _noise(fit)
    assert np.all(noise != 1.0) and noise[0] != noise[1]  # both moved, each by its own output's gradient
    lpd = fit.log_predictive_density(X, Y)
    assert lpd.shape == (N, 2) and np.isfinite(lpd).all()
