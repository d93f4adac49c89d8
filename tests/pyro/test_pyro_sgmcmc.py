"""The Pyro SG-MCMC kernels under ``pyro.infer.MCMC``: exact conjugate posteriors, the unbiased N/B minibatch
gradient, frozen adaptation, NaN rejection and point estimates (the twins of tests/infer/test_sghmc.py).

The conjugate problem: D independent means w_d ~ N(0, 1), y_nd ~ N(w_d, SIGMA²) for N points observed through the
``"data"`` plate, so every w_d has posterior precision λ = 1 + N/SIGMA² and the D standardised coordinates
(w_d - mu_d)/sd pool into one Monte Carlo sample D times as large as one chain's (runs stay at a few seconds).
"""

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import MCMC
from torch.distributions import constraints

from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.sgmcmc import SGHMC, SGLD, AdaptiveSGHMC, PointEstimates

N, D, SIGMA = 100, 16, 1.0
LAM = 1 + N / SIGMA**2  # posterior precision of every w_d
MEAN_TOL = 0.25  # max |mean error| in posterior SDs, as the NumPyro tests
SD_TOL = 0.10  # |pooled SD ratio - 1|, as the NumPyro tests


def _means(Y, batch_size=None):
    w = pyro.sample("w", dist.Normal(torch.zeros(D), 1.0).to_event(1))
    with sites.data_plate(Y.shape[0], batch_size) as idx:
        pyro.sample("obs", dist.Normal(w, SIGMA).to_event(1), obs=Y if idx is None else Y[idx])


@pytest.fixture(scope="module")
def problem():
    """Data Y [N, D] and the exact posterior means mu [D] and SD of every w_d."""
    r = np.random.default_rng(0)
    Y = np.linspace(-1.0, 1.0, D) + SIGMA * r.normal(size=(N, D))
    return torch.as_tensor(Y, dtype=torch.float64), Y.sum(0) / SIGMA**2 / LAM, LAM**-0.5


def _errors(w, mu, sd):
    """(max |mean error| in posterior SDs, |pooled SD ratio - 1|) of draws w [S, D] against N(mu_d, sd²)."""
    w = np.asarray(w)
    return np.max(np.abs(w.mean(0) - mu) / sd), abs(math.sqrt(np.mean(w.var(0))) / sd - 1)


def _run(kernel, Y, batch_size=None, *, warmup, samples, seed=0, hook_fn=None):
    pyro.set_rng_seed(seed)
    mcmc = MCMC(kernel, num_samples=samples, warmup_steps=warmup, disable_progbar=True, hook_fn=hook_fn)
    mcmc.run(Y, batch_size)
    return mcmc


def test_checker_rejects_wrong_posteriors(problem):
    """The tolerances pass exact draws and fail a 20 % SD error or a 0.5-SD mean shift."""
    _, mu, sd = problem
    exact = mu + sd * np.random.default_rng(1).normal(size=(1000, D))
    mean_err, sd_err = _errors(exact, mu, sd)
    assert mean_err < MEAN_TOL and sd_err < SD_TOL
    assert _errors(mu + 1.2 * (exact - mu), mu, sd)[1] > SD_TOL
    assert _errors(exact + 0.5 * sd, mu, sd)[0] > MEAN_TOL


FULL_BATCH = {  # ε λ = 0.2: SGLD's stationary SD is 1/sqrt(1 - ελ/4) ≈ 1.026 of the exact one
    "SGLD": lambda: SGLD(_means, step_size=0.2 / LAM),
    "SGHMC": lambda: SGHMC(_means, step_size=0.3 / math.sqrt(LAM), friction=3 * math.sqrt(LAM)),
    "AdaptiveSGHMC": lambda: AdaptiveSGHMC(_means, step_size=0.1, num_data=N),  # mdecay 0.05 as BSGP
}


@pytest.mark.parametrize("name", list(FULL_BATCH))
def test_full_batch_matches_exact_posterior(problem, name):
    """4000 draws after 500 warmup steps; measured (seed 0): mean errors <= 0.12 posterior SD, pooled SD ratios
    0.99-1.01."""
    Y, mu, sd = problem
    kernel = FULL_BATCH[name]()
    mcmc = _run(kernel, Y, warmup=500, samples=4000)
    mean_err, sd_err = _errors(mcmc.get_samples()["w"], mu, sd)
    print(f"{name}: mean error {mean_err:.3f} SD, pooled SD error {sd_err:.3f}")
    assert mean_err < MEAN_TOL and sd_err < SD_TOL
    assert not kernel.nonfinite and mcmc.diagnostics()["nonfinite"] == {"chain 0": False}


def test_minibatch_adaptive_sghmc_near_posterior(problem):
    """B = 50 of N = 100 through the subsampled plate: the gradient noise is not corrected (B̂ = 0), so the draws
    are over-dispersed, by sqrt(1 + ε² sqrt(Var ∇Ũ)/(2α)) ≈ 1.03 with sqrt(Var ∇Ũ) ≈ N/(SIGMA sqrt(B)) (the NumPyro
    test's estimate; ε = 0.1 and B = 25 give 1.7, and 1.59 was measured); the NumPyro minibatch test's band for the
    SD ratio, (0.95, 1.3)."""
    Y, mu, sd = problem
    mcmc = _run(AdaptiveSGHMC(_means, step_size=0.02, num_data=N), Y, 50, warmup=500, samples=3000)
    w = mcmc.get_samples()["w"]
    mean_err, _ = _errors(w, mu, sd)
    ratio = math.sqrt(np.mean(np.asarray(w).var(0))) / sd
    print(f"minibatch: mean error {mean_err:.3f} SD, pooled SD ratio {ratio:.3f}")
    assert torch.all(torch.isfinite(w)) and mean_err < 0.5 and 0.95 < ratio < 1.3


def test_minibatch_gradient_is_the_unbiased_scaled_one(problem):
    """At a fixed z: the full-batch ∇U is the analytic one; each minibatch ∇U is the prior's gradient plus N/B
    times a sum over B points, so it differs from the full one, and its mean over many minibatches is the full one
    (within 4 standard errors); a mis-scaled data term (e.g. by 1 instead of N/B) would be off by ~N/B."""
    Y, _, _ = problem
    kernel = SGLD(_means, step_size=0.01)
    kernel.setup(0, Y, None)  # all N points
    z = {"w": Y.mean(0) + 1.0}  # the data term's gradient is N/SIGMA² in every coordinate
    full = Y.shape[0]
    exact = z["w"] + (full * z["w"] - Y.sum(0)) / SIGMA**2  # -∇ log N(w; 0, 1) - Σ_n ∇ log N(y_n; w, SIGMA²)
    torch.testing.assert_close(kernel.potential_and_grad(z)[1]["w"], exact, rtol=1e-12, atol=1e-12)
    kernel.setup(0, Y, 10)  # batches of B = 10
    pyro.set_rng_seed(0)
    grads = torch.stack([kernel.potential_and_grad(z)[1]["w"] for _ in range(2000)])
    assert torch.all((grads - exact).abs().amax(1) > 1.0)  # every minibatch gradient is noisy
    se = grads.std(0) / math.sqrt(grads.shape[0])
    assert torch.all((grads.mean(0) - exact).abs() < 4 * se)
    data_grad = exact - z["w"]
    assert torch.all((1 - 10 / full) * data_grad.abs() > 10 * se)  # scaling the data term by 1 would fail


def test_adaptation_freezes_after_warmup(problem):
    Y, _, _ = problem
    kernel = AdaptiveSGHMC(_means, step_size=0.1, num_data=N)
    v_hats, taus = [], []

    def record(kernel, params, stage, i):
        v_hats.append(kernel.state.adapt_state.v_hat["w"].clone())
        taus.append(kernel.state.adapt_state.tau["w"].clone())

    _run(kernel, Y, warmup=50, samples=20, hook_fn=record)
    assert not torch.allclose(v_hats[49], torch.full((D,), float(N**2))) and torch.all(taus[49] > 1)
    assert not torch.equal(v_hats[48], v_hats[49])  # adapting through the last warmup step
    for v, tau in zip(v_hats[50:], taus[50:], strict=True):
        assert torch.equal(v, v_hats[49]) and torch.equal(tau, taus[49])


def _nan_beyond_one(z):
    """Standard normal potential that is NaN where x[0] > 1."""
    x = z["x"]
    return torch.where(x[0] > 1.0, torch.nan, 0.5 * torch.sum(x**2))


@pytest.mark.parametrize(
    "make",
    [
        lambda: SGLD(potential_fn=_nan_beyond_one, step_size=0.5),
        lambda: SGHMC(potential_fn=_nan_beyond_one, step_size=0.5, friction=1.0),
        lambda: AdaptiveSGHMC(potential_fn=_nan_beyond_one, step_size=0.5, mdecay=0.5),
    ],
    ids=["SGLD", "SGHMC", "AdaptiveSGHMC"],
)
def test_nonfinite_potential_is_rejected_and_flagged(make):
    """In float32, to check that dtypes follow z: the chain never enters the NaN region, the first rejected step
    does not move and zeroes the momentum, and the flag stays set."""
    kernel = make()
    flags, momenta = [], []

    def record(kernel, params, stage, i):
        flags.append(kernel.nonfinite)
        momenta.append(None if kernel.state.momentum is None else kernel.state.momentum["x"].clone())

    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, num_samples=300, warmup_steps=0, initial_params={"x": torch.zeros(2, dtype=torch.float32)},
                disable_progbar=True, hook_fn=record)  # fmt: skip
    mcmc.run()
    x = mcmc.get_samples()["x"]
    assert x.dtype == torch.float32 and torch.all(torch.isfinite(x)) and torch.all(x[:, 0] <= 1.0)
    first = flags.index(True)
    assert all(flags[first:])  # sticky
    torch.testing.assert_close(x[first], x[first - 1] if first else torch.zeros(2, dtype=x.dtype), rtol=0, atol=0)
    if momenta[first] is not None:
        assert torch.all(momenta[first] == 0)
    assert kernel.logging()["nonfinite"]


def _unknown_noise(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    noise = pyro.param("noise", torch.tensor(1.0), constraint=constraints.positive)
    with pyro.plate("data", y.shape[0]):
        pyro.sample("obs", dist.Normal(mu, torch.sqrt(noise)), obs=y)


def test_point_estimate_reaches_the_maximum_likelihood_noise_and_stays_fixed_while_sampling():
    """Monte Carlo EM: Adam on the noise at window states converges to its MLE mean((y - mu)²) ≈ var(y); the
    dynamics never move it and it is constant after warmup, where mu's draws follow N(mean(y), noise/N)."""
    pyro.clear_param_store()
    y = torch.as_tensor(2.0 + 2.0 * np.random.default_rng(1).normal(size=400))
    point = PointEstimates(("noise",), optimizer=lambda p: torch.optim.Adam(p, lr=0.05), every=5, window=16)
    kernel = AdaptiveSGHMC(_unknown_noise, num_data=400, point_estimates=point)
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, num_samples=1500, warmup_steps=5 * 300, disable_progbar=True)
    mcmc.run(y)
    draws = mcmc.get_samples()
    noise = draws["noise"]
    assert torch.all(noise == noise[0])
    mle = float(y.var(unbiased=False))
    assert abs(float(noise[0]) / mle - 1) < 0.05
    assert abs(float(draws["mu"].mean()) - float(y.mean())) < 3 * math.sqrt(mle / 400)
    assert abs(float(draws["mu"].std()) / math.sqrt(float(noise[0]) / 400) - 1) < 0.25
    assert float(pyro.param("noise").detach()) == 1.0  # substituted, never written to the param store


def _unknown_noise_known_scale(y):
    mu = pyro.sample("mu", dist.Normal(0.0, 10.0))
    noise = pyro.param("noise", torch.tensor(1.0), constraint=constraints.positive)
    scale = pyro.param("scale", torch.tensor(2.0), constraint=constraints.positive)
    with pyro.plate("data", y.shape[0]):
        pyro.sample("obs", dist.Normal(mu, scale * torch.sqrt(noise)), obs=y)


def test_a_held_point_estimate_keeps_its_start_while_the_others_are_optimised():
    """As the NumPyro twin: the held scale stays at 2 in every draw, and the noise reaches var(y) / 4."""
    pyro.clear_param_store()
    y = torch.as_tensor(2.0 + 2.0 * np.random.default_rng(1).normal(size=400))
    point = PointEstimates(
        ("noise", "scale"), optimizer=lambda p: torch.optim.Adam(p, lr=0.05), every=5, window=16, held=("scale",)
    )
    kernel = AdaptiveSGHMC(_unknown_noise_known_scale, num_data=400, point_estimates=point)
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, num_samples=500, warmup_steps=5 * 300, disable_progbar=True)
    mcmc.run(y)
    draws = mcmc.get_samples()
    assert torch.all(draws["scale"] == 2.0)
    noise = draws["noise"]
    assert torch.all(noise == noise[0]) and abs(4 * float(noise[0]) / float(y.var(unbiased=False)) - 1) < 0.05


@pytest.mark.parametrize("held", [("noise",), ("mu",), ("noise", "noise"), "noise"])
def test_held_must_leave_an_optimised_site_among_the_sites(held):
    with pytest.raises(ValueError, match="^held: expected distinct names among the sites"):
        PointEstimates(("noise",), held=held)


def test_point_estimates_must_name_param_sites():
    kernel = AdaptiveSGHMC(_unknown_noise, num_data=10, point_estimates=PointEstimates(("mu",)))
    with pytest.raises(ValueError, match="point_estimates: 'mu' is not a param site"):
        kernel.setup(10, torch.ones(10))
    with pytest.raises(ValueError, match="sites"):
        PointEstimates("noise")


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: SGLD(_means, step_size=-0.1), "step_size"),
        (lambda: SGLD(_means, step_size=float("nan")), "step_size"),
        (lambda: SGHMC(_means, step_size=0.01, friction=0.0), "friction"),
        (lambda: SGHMC(_means, step_size=0.1, friction=20.0), "friction"),  # eps * C / M > 1
        (lambda: SGHMC(_means, step_size=0.01, mass=-1.0), "mass"),
        (lambda: AdaptiveSGHMC(_means, mdecay=0.0), "mdecay"),
        (lambda: AdaptiveSGHMC(_means, mdecay=1.5), "mdecay"),
        (lambda: AdaptiveSGHMC(_means, num_data=0), "num_data"),
        (lambda: SGLD(step_size=0.1), "model"),
        (lambda: SGLD(_means, potential_fn=_nan_beyond_one, step_size=0.1), "model"),
        (lambda: SGLD(potential_fn=_nan_beyond_one, step_size=0.1, point_estimates=PointEstimates(("a",))),
         "point_estimates"),
    ],
)  # fmt: skip
def test_bad_arguments(make, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        make()


def test_potential_fn_needs_initial_params():
    with pytest.raises(ValueError, match="^initial_params"):
        SGLD(potential_fn=_nan_beyond_one, step_size=0.1).setup(0)


def test_constrained_sites_carry_the_jacobian():
    """x ~ LogNormal(0, 1) sampled as z = log x: U(z) = z²/2 + const, the N(0, 1) potential, and the draws are
    returned constrained (positive)."""

    def model():
        pyro.sample("x", dist.LogNormal(0.0, 1.0))

    kernel = AdaptiveSGHMC(model, step_size=0.2, mdecay=0.2)
    kernel.setup(0)
    u0 = kernel.potential({"x": torch.tensor(0.0)})
    for z in (-1.5, 0.7, 2.0):
        u, grad = kernel.potential_and_grad({"x": torch.tensor(z)})
        torch.testing.assert_close(u - u0, torch.tensor(0.5 * z**2))
        torch.testing.assert_close(grad["x"], torch.tensor(z))
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, num_samples=2000, warmup_steps=200, disable_progbar=True)
    mcmc.run()
    x = mcmc.get_samples()["x"]
    assert torch.all(x > 0) and abs(float(torch.log(x).mean())) < 0.25 and abs(float(torch.log(x).std()) - 1) < 0.15
