"""The Pyro MCMC runner (ppl_sparsegp.pyro.mcmc.run_mcmc): chains from their own seeds and starts, a run killed
anywhere (warmup or sampling, first chain or later) resumes inside the chain to the draws of an uninterrupted run,
thinning keeps every k-th step, another run's checkpoint is refused naming what
differs, bad initial values are refused by name before anything runs, and the result reads as a NumPyro run's
(ArviZ output with the GP dims, divergences per draw)."""

from __future__ import annotations

import numpy as np
import pyro
import pytest
import torch

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.infer.checkpoint import CheckpointMismatchError
from ppl_sparsegp.models.pyro import sgpmc
from ppl_sparsegp.posterior.diagnostics import group_names
from ppl_sparsegp.pyro import diagnostics, sites
from ppl_sparsegp.pyro import mcmc as pyro_mcmc
from ppl_sparsegp.pyro.sgmcmc import SGHMC, SGLD, AdaptiveSGHMC, PointEstimates

CHAINS, WARMUP, SAMPLES = 2, 8, 6


def _problem():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (15, 1))
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.standard_normal(15)
    kernel, likelihood = kernels.RBF(lengthscale=1.0), likelihoods.Gaussian(variance=0.1)
    gp = sgpmc.SGPMC(kernel, likelihood, Z=X[:4], priors=sgpmc.default_priors(kernel, likelihood))
    start = {  # unconstrained: log of the positive hyperparameters, v itself
        "kernel.variance": torch.zeros(CHAINS),
        "kernel.lengthscale": torch.zeros(CHAINS),
        "likelihood.variance": torch.full((CHAINS,), -2.0),
        "u": 0.1 * torch.arange(CHAINS * 4, dtype=torch.float64).reshape(CHAINS, 1, 4),
    }
    return gp, X, y, start


def _run(gp, X, y, start, **options):
    kernel = pyro.infer.NUTS(gp.model, max_tree_depth=3)
    return pyro_mcmc.run_mcmc(
        kernel, X, y, num_warmup=WARMUP, num_samples=SAMPLES, num_chains=CHAINS, initial_params=start, **options
    )


def test_chains_run_from_their_own_seeds_and_read_as_a_numpyro_run():
    gp, X, y, start = _problem()
    result = _run(gp, X, y, start)
    assert set(result.samples) == {"kernel.variance", "kernel.lengthscale", "likelihood.variance", "u"}
    assert result.samples["u"].shape == (CHAINS, SAMPLES, 1, 4) and result.num_chains == CHAINS
    assert result.extra_fields["diverging"].shape == (CHAINS, SAMPLES) and result.kernel_name == "NUTS"
    assert not np.allclose(result.samples["u"][0], result.samples["u"][1])
    assert len(set(pyro_mcmc.chain_seeds(0, 4))) == 4 and pyro_mcmc.chain_seeds(0, 2) != pyro_mcmc.chain_seeds(1, 2)
    idata = diagnostics.from_mcmc(result, gp, X, y)
    assert {"posterior", "sample_stats", "log_likelihood"} <= set(group_names(idata))
    assert idata["posterior"]["u"].dims == ("chain", "draw", "latent", "inducing_point")
    np.testing.assert_array_equal(idata["posterior"]["u"].values, result.samples["u"])


class _KilledAfter:
    """Replaces a kernel class's ``sample`` so that its ``calls``-th call, counted over every copy, raises
    KeyboardInterrupt (a run killed there)."""

    def __init__(self, monkeypatch, kernel_class, calls):
        self.sample, self.left = kernel_class.sample, calls
        monkeypatch.setattr(kernel_class, "sample", self)

    def __get__(self, kernel, owner):
        def sample(params):
            self.left -= 1
            if self.left == 0:
                raise KeyboardInterrupt
            return self.sample(kernel, params)

        return sample


def _assert_same_run(resumed, straight):
    assert not resumed.interrupted and set(resumed.samples) == set(straight.samples)
    for site, value in straight.samples.items():
        np.testing.assert_array_equal(resumed.samples[site], value)
    assert set(resumed.extra_fields) == set(straight.extra_fields)
    for name, value in straight.extra_fields.items():
        np.testing.assert_array_equal(resumed.extra_fields[name], value)


@pytest.mark.parametrize(
    "killed_at", [5, WARMUP + SAMPLES + 5, WARMUP + SAMPLES + WARMUP + 4], ids=["warmup", "chain2-warmup", "samples"]
)
def test_a_killed_nuts_run_resumes_inside_the_chain_to_the_uninterrupted_draws(tmp_path, monkeypatch, killed_at):
    """Checkpoints every 3 warmup and 2 post-warmup steps; killed in the first chain's warmup, in the second's
    warmup, or in its sampling, the run resumes from the last checkpoint with NUTS's adaptation, cache, counters and
    torch's generator restored, and gives the uninterrupted run's draws, divergences and energies bit for bit."""
    gp, X, y, start = _problem()
    chunks = {"chunk_size": 2, "warmup_chunk_size": 3}
    straight = _run(gp, X, y, start, **chunks)
    path = tmp_path / "mcmc.ckpt"
    _KilledAfter(monkeypatch, pyro.infer.NUTS, killed_at)
    if killed_at <= WARMUP + SAMPLES:
        with pytest.raises(KeyboardInterrupt):
            _run(gp, X, y, start, checkpoint=path, **chunks)
    else:
        assert _run(gp, X, y, start, checkpoint=path, **chunks).interrupted
    monkeypatch.undo()
    _assert_same_run(_run(gp, X, y, start, checkpoint=path, **chunks), straight)
    assert set(straight.extra_fields) == {"diverging", "potential_energy"}


def _means_with_noise(Y, batch_size):
    """w ~ N(0, I_3); y_n ~ N(w, σ² I) observed in the data plate (minibatches of ``batch_size``); σ a param."""
    w = pyro.sample("w", pyro.distributions.Normal(torch.zeros(3), 1.0).to_event(1))
    sigma = pyro.param("sigma", torch.tensor(1.0), constraint=torch.distributions.constraints.positive)
    with sites.data_plate(Y.shape[0], batch_size) as idx:
        pyro.sample("obs", pyro.distributions.Normal(w, sigma).to_event(1), obs=Y if idx is None else Y[idx])


SG_KERNELS = {
    "adaptive-sghmc-point-noise": lambda: AdaptiveSGHMC(
        _means_with_noise, num_data=40, point_estimates=PointEstimates(("sigma",), every=2, window=3)
    ),
    "sghmc": lambda: SGHMC(_means_with_noise, step_size=1e-3),
    "sgld": lambda: SGLD(_means_with_noise, step_size=1e-3),
}


@pytest.mark.parametrize("name", SG_KERNELS)
def test_a_killed_sgmcmc_run_resumes_inside_the_chain_to_the_uninterrupted_draws(tmp_path, monkeypatch, name):
    """The SG-MCMC kernels on minibatches: momentum, moment estimates, the point estimate's window and Adam state,
    and the minibatch stream resume exactly, from a kill in the first chain's warmup and in the second's sampling."""
    pyro.clear_param_store()
    Y = torch.as_tensor(np.random.default_rng(1).normal(0.5, 0.3, (40, 3)))
    options = {"num_warmup": 18, "num_samples": 8, "num_chains": 2, "thinning": 2, "chunk_size": 4}
    options["warmup_chunk_size"] = 9
    straight = pyro_mcmc.run_mcmc(SG_KERNELS[name](), Y, 8, **options)
    assert straight.samples["w"].shape == (2, 4, 3) and "potential_energy" in straight.extra_fields
    kernel_class = type(SG_KERNELS[name]())
    for killed_at in (11, 26 + 18 + 6):
        path = tmp_path / f"killed-at-{killed_at}.ckpt"
        _KilledAfter(monkeypatch, kernel_class, killed_at)
        try:
            pyro_mcmc.run_mcmc(SG_KERNELS[name](), Y, 8, checkpoint=path, **options)
        except KeyboardInterrupt:
            assert killed_at < 26
        monkeypatch.undo()
        _assert_same_run(pyro_mcmc.run_mcmc(SG_KERNELS[name](), Y, 8, checkpoint=path, **options), straight)


def test_thinning_keeps_every_kth_post_warmup_step_of_the_same_chain():
    gp, X, y, start = _problem()
    every = _run(gp, X, y, start)
    thinned = _run(gp, X, y, start, thinning=3)
    assert thinned.thinning == 3 and thinned.samples["u"].shape == (CHAINS, SAMPLES // 3, 1, 4)
    for site, value in every.samples.items():
        np.testing.assert_array_equal(thinned.samples[site], value[:, 2::3])
    np.testing.assert_array_equal(
        thinned.extra_fields["potential_energy"], every.extra_fields["potential_energy"][:, 2::3]
    )


def test_another_runs_checkpoint_is_refused_naming_what_differs(tmp_path):
    gp, X, y, start = _problem()
    path = tmp_path / "mcmc.ckpt"
    _run(gp, X, y, start, checkpoint=path, fingerprint={"prior": "gamma"})
    with pytest.raises(CheckpointMismatchError, match="prior 'gamma' -> 'lognormal'"):
        _run(gp, X, y, start, checkpoint=path, fingerprint={"prior": "lognormal"})
    with pytest.raises(CheckpointMismatchError, match="seed 0 -> 3"):
        _run(gp, X, y, start, checkpoint=path, fingerprint={"prior": "gamma"}, seed=3)


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"num_samples": 0}, "num_samples"),
        ({"num_chains": 0}, "num_chains"),
        ({"thinning": 4}, "num_samples: expected a multiple of thinning=4"),
        ({"num_samples": 4, "thinning": 2, "chunk_size": 3}, "chunk_size: expected a multiple of thinning=2"),
        ({"initial_params": {"u": torch.zeros(3, 1, 4)}}, r"initial_params\['u'\]: expected a leading axis"),
    ],
)
def test_bad_arguments_are_refused_by_name(bad, message):
    gp, X, y, start = _problem()
    options = {"num_warmup": 2, "num_samples": 2, "num_chains": CHAINS, "initial_params": start, **bad}
    with pytest.raises(ValueError, match=message):
        pyro_mcmc.run_mcmc(pyro.infer.NUTS(gp.model), X, y, **options)
