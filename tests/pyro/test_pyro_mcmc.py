"""The Pyro MCMC runner (ppl_sparsegp.pyro.mcmc.run_mcmc): chains from their own seeds and starts, a run killed
between chains resumes to the draws of an uninterrupted run, another run's checkpoint is refused naming what
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
from ppl_sparsegp.pyro import diagnostics
from ppl_sparsegp.pyro import mcmc as pyro_mcmc

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


def test_a_run_killed_between_chains_resumes_to_the_uninterrupted_draws(tmp_path, monkeypatch):
    gp, X, y, start = _problem()
    straight = _run(gp, X, y, start)
    path = tmp_path / "mcmc.ckpt"
    run_chain, calls = pyro_mcmc._run_chain, []

    def killed_in_the_second_chain(*args):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return run_chain(*args)

    monkeypatch.setattr(pyro_mcmc, "_run_chain", killed_in_the_second_chain)
    first = _run(gp, X, y, start, checkpoint=path)
    assert first.interrupted and first.num_chains == 1
    monkeypatch.setattr(pyro_mcmc, "_run_chain", run_chain)
    resumed = _run(gp, X, y, start, checkpoint=path)
    assert not resumed.interrupted
    for site, value in straight.samples.items():
        np.testing.assert_array_equal(resumed.samples[site], value)
    np.testing.assert_array_equal(resumed.extra_fields["diverging"], straight.extra_fields["diverging"])


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
        ({"initial_params": {"u": torch.zeros(3, 1, 4)}}, r"initial_params\['u'\]: expected a leading axis"),
    ],
)
def test_bad_arguments_are_refused_by_name(bad, message):
    gp, X, y, start = _problem()
    options = {"num_warmup": 2, "num_samples": 2, "num_chains": CHAINS, "initial_params": start, **bad}
    with pytest.raises(ValueError, match=message):
        pyro_mcmc.run_mcmc(pyro.infer.NUTS(gp.model), X, y, **options)
