"""The Pyro twin of fit_bsgp (recipes/bsgp_pyro.py): it refuses bad input before any step; the released SGHMC
schedule samples Z, v and θ with the noise a point estimate (thinning 32); Pyro's NUTS samples every site; a deep
model runs; a run interrupted after a warmup chunk and resumed from its checkpoint draws what an uninterrupted run
draws; and its start is the NumPyro recipe's (the same model at the same values: the potentials agree to 1e-10)."""

from __future__ import annotations

import jax
import numpy as np
import pyro
import pytest
import torch
from numpyro import handlers
from numpyro.infer.util import potential_energy

from ppl_sparsegp.core.likelihoods import Bernoulli
from ppl_sparsegp.infer import checkpoint as checkpoints
from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.pyro.sgmcmc import AdaptiveSGHMC
from ppl_sparsegp.pyro.z_priors import z_prior
from ppl_sparsegp.recipes import bsgp_pyro
from ppl_sparsegp.recipes.bsgp import BSGPConfig

N, D, M = 40, 2, 6
RNG = np.random.default_rng(0)
X = RNG.uniform(-2.0, 2.0, (N, D))
Y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.2 * RNG.standard_normal(N)
Y = (Y - Y.mean()) / Y.std()
SMALL = BSGPConfig(num_inducing=M, num_iterations=4, num_kept=4)
"""84 warmup updates and 4 draws 32 updates apart."""


@pytest.fixture(autouse=True)
def float64():
    with default_dtype("float64"):
        yield


def _constant_predictor_lpd(y: np.ndarray) -> float:
    """Mean log density of N(mean(y), var(y)), the best constant predictor."""
    return float(np.mean(-0.5 * np.log(2 * np.pi * y.var()) - 0.5 * (y - y.mean()) ** 2 / y.var()))


@pytest.mark.parametrize(
    "arguments, match",
    [
        ({"engine": "nuts"}, "noise: NUTS samples every site"),
        ({"engine": "nuts", "noise": "sampled", "num_layers": 2}, "engine: NUTS needs a deterministic potential"),
        ({"engine": "hmc"}, "engine: expected one of"),
        ({"num_inducing": N + 1}, "num_inducing"),
        ({"z_prior": z_prior("normal", M, D)}, "z_prior: the Pyro recipe takes a prior by name"),
        ({"X": np.full((N, D), np.nan)}, "X"),
    ],
)
def test_bad_input_is_refused_before_any_step(arguments, match, monkeypatch):
    monkeypatch.setattr(bsgp_pyro, "run_mcmc", lambda *a, **k: pytest.fail("the chain started"))
    x = arguments.pop("X", X)
    with pytest.raises(ValueError, match=match):
        bsgp_pyro.fit_bsgp(x, Y, SMALL, progress=False, **arguments)


def test_sghmc_samples_z_and_theta_with_the_noise_a_point_estimate():
    pyro.clear_param_store()
    pyro.get_param_store()["likelihood.variance"] = torch.tensor(7.0)  # the run's params live in a store of its own
    fit = bsgp_pyro.fit_bsgp(X, Y, SMALL, seed=0, progress=False, num_iterations=8, num_kept=6)
    assert float(pyro.param("likelihood.variance").detach()) == pytest.approx(7.0, rel=1e-12)
    pyro.clear_param_store()
    mcmc = fit.mcmc
    assert isinstance(fit.kernel, AdaptiveSGHMC) and mcmc.kernel_name == "AdaptiveSGHMC"
    assert (mcmc.num_chains, mcmc.num_draws, mcmc.thinning) == (1, 6, 32)
    draws = mcmc.flat_samples()
    assert set(draws) == {"kernel.lengthscale", "kernel.variance", "Z", "u", "likelihood.variance"}
    assert draws["Z"].shape == (6, M, D) and draws["u"].shape == (6, 1, M)
    assert all(np.isfinite(v).all() for v in draws.values())
    assert np.ptp(draws["Z"], axis=0).min() > 0 and np.ptp(draws["kernel.lengthscale"], axis=0).min() > 0
    noise = draws["likelihood.variance"]
    assert np.all(noise == noise[0]) and 0.3 < noise[0] < 0.99  # moved from 1.0 by the warmup, then fixed
    lpd = fit.log_predictive_density(X, Y)  # the NumPyro twin evaluates the Pyro draws
    assert lpd.shape == (N,) and lpd.mean() > _constant_predictor_lpd(Y) + 0.1


def test_classification_has_no_point_estimate():
    labels = (X[:, 0] * X[:, 1] > 0).astype(float)
    fit = bsgp_pyro.fit_bsgp(X, labels, SMALL, likelihood=Bernoulli(), seed=1, progress=False)
    assert fit.kernel.point_estimates is None and not any(s.startswith("likelihood.") for s in fit.mcmc.samples)
    p = fit.predict(X).y_mean
    assert p.shape == (N,) and np.all((p > 0) & (p < 1))


def test_nuts_samples_every_site_the_noise_included():
    fit = bsgp_pyro.fit_bsgp(
        X[:20], Y[:20], SMALL, engine="nuts", noise="sampled", num_inducing=3, nuts_warmup=8, nuts_samples=6, seed=2,
        progress=False,
    )  # fmt: skip
    mcmc = fit.mcmc
    assert mcmc.kernel_name == "NUTS" and (mcmc.num_draws, mcmc.thinning) == (6, 1)
    assert mcmc.extra_fields["diverging"].shape == (1, 6)
    draws = mcmc.flat_samples()
    assert np.ptp(draws["likelihood.variance"]) > 0 and np.ptp(draws["Z"], axis=0).max() > 0
    assert np.isfinite(fit.log_predictive_density(X[:20], Y[:20])).all()


def test_deep_bsgp_runs_and_predicts_through_the_numpyro_twin():
    fit = bsgp_pyro.fit_bsgp(X, Y, SMALL, num_layers=2, num_inducing=5, num_iterations=2, num_kept=2, seed=0,
                             progress=False)  # fmt: skip
    draws = fit.mcmc.flat_samples()
    assert draws["layer0.u"].shape == (2, D, 5) and draws["layer1.u"].shape == (2, 1, 5)
    assert draws["layer1.Z"].shape == (2, 5, D) and np.ptp(draws["layer0.Z"], axis=0).max() > 0
    key = jax.random.PRNGKey(3)
    lpd = fit.log_predictive_density(X, Y, key=key)
    assert np.isfinite(lpd).all()
    np.testing.assert_array_equal(lpd, fit.log_predictive_density(X, Y, key=key))


def test_a_run_resumed_after_a_warmup_chunk_draws_what_an_uninterrupted_run_draws(tmp_path, monkeypatch):
    config = BSGPConfig(num_inducing=M, num_iterations=3, num_kept=2, warmup_chunk_size=21)
    straight = bsgp_pyro.fit_bsgp(X, Y, config, seed=4, progress=False)
    checkpoint = str(tmp_path / "bsgp.ckpt")
    steps, sample = [], AdaptiveSGHMC.sample

    def interrupted(kernel, params):
        steps.append(1)
        if len(steps) > 30:  # inside the second warmup chunk
            raise KeyboardInterrupt
        return sample(kernel, params)

    monkeypatch.setattr(AdaptiveSGHMC, "sample", interrupted)
    with pytest.raises(KeyboardInterrupt):
        bsgp_pyro.fit_bsgp(X, Y, config, seed=4, progress=False, checkpoint=checkpoint)
    monkeypatch.setattr(AdaptiveSGHMC, "sample", sample)
    assert checkpoints.read(checkpoint).counters == {"chains_done": 0, "steps_done": 21}  # inside the chain
    resumed = bsgp_pyro.fit_bsgp(X, Y, config, seed=4, progress=False, checkpoint=checkpoint)
    assert len(steps) == 31 and resumed.mcmc.num_draws == 2 and not resumed.mcmc.interrupted
    for site, draws in straight.mcmc.samples.items():
        np.testing.assert_array_equal(resumed.mcmc.samples[site], draws, err_msg=site)
    with pytest.raises(ValueError, match="bsgp.step_size"):  # another recipe setting: the checkpoint is refused
        bsgp_pyro.fit_bsgp(X, Y, config, seed=4, progress=False, checkpoint=checkpoint, step_size=0.02)


def test_the_chain_starts_where_the_numpyro_recipes_starts():
    """The same plan builds the same model at the same start on both sides: the Pyro kernel's potential at its
    initial state (full batch) equals the NumPyro twin's there."""
    config = BSGPConfig(num_inducing=M, z_prior="strauss", num_iterations=0, num_samples=1, thinning=1)
    fit = bsgp_pyro.fit_bsgp(X, Y, config, seed=0, progress=False)
    kernel = fit.kernel
    with pyro.get_param_store().scope():
        kernel.setup(0, torch.as_tensor(X), torch.as_tensor(Y))
    z = {site: value.numpy() for site, value in kernel.state.z.items() if site != "likelihood.variance"}
    assert set(z) == {"kernel.lengthscale", "kernel.variance", "Z", "u"}
    np.testing.assert_array_equal(z["Z"], fit.model.Z)  # the k-means start of the plan, unconstrained = constrained
    expected = potential_energy(handlers.seed(fit.model.model, 0), (X, Y), {}, z)
    assert float(kernel.state.potential_energy) == pytest.approx(float(expected), rel=1e-10)


def test_a_float32_run_samples_in_float32():
    with default_dtype("float32"):
        fit = bsgp_pyro.fit_bsgp(X.astype(np.float32), Y.astype(np.float32), SMALL, num_iterations=2, num_kept=2,
                                 seed=0, progress=False)  # fmt: skip
    draws = fit.mcmc.flat_samples()
    assert all(v.dtype == np.float32 for v in draws.values()) and draws["Z"].shape == (2, M, D)
    assert np.isfinite(fit.log_predictive_density(X, Y)).all()
