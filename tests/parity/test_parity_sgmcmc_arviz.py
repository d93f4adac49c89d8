"""ArviZ output of a Pyro SG-MCMC run (BSGP under the Pyro AdaptiveSGHMC, ppl_sparsegp.pyro.diagnostics.from_mcmc):
Z sampled with its GP dims, no divergence statistics (the kernel reports none), and per-point log-likelihoods equal
to the NumPyro BSGP's at the same draw (1e-10, float64)."""

from __future__ import annotations

import numpy as np
import pyro
import torch
from parity_checks import close
from pyro.infer import MCMC
from pyro.infer.autoguide.initialization import init_to_value

from ppl_sparsegp.core import likelihoods
from ppl_sparsegp.models._shared import bsgp_kernel
from ppl_sparsegp.models.numpyro.bsgp import BSGP as NumPyroBSGP
from ppl_sparsegp.models.pyro.bsgp import BSGP
from ppl_sparsegp.posterior.diagnostics import group_names
from ppl_sparsegp.pyro import diagnostics
from ppl_sparsegp.pyro.sgmcmc import AdaptiveSGHMC, PointEstimates

N, M, DRAWS = 40, 6, 12


def test_the_arviz_output_of_a_pyro_sghmc_run_of_bsgp():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (N, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(N)
    model = BSGP(bsgp_kernel(2), likelihoods.Gaussian(variance=1.0), Z=X[:M], batch_size=10)
    kernel = AdaptiveSGHMC(
        model.model, step_size=0.05, num_data=N, init_strategy=init_to_value(values=model.initial_values()),
        point_estimates=PointEstimates(model.point_estimate_sites(), every=4, window=4),
    )  # fmt: skip
    pyro.set_rng_seed(0)
    mcmc = MCMC(kernel, num_samples=DRAWS, warmup_steps=DRAWS, disable_progbar=True)
    mcmc.run(torch.as_tensor(X), torch.as_tensor(y))
    idata = diagnostics.from_mcmc(mcmc, model, X, y)

    # no sample_stats: an SG-MCMC kernel reports no divergences
    assert set(group_names(idata)) == {"posterior", "log_likelihood", "posterior_predictive", "observed_data"}
    assert idata["posterior"]["Z"].dims == ("chain", "draw", "inducing_point", "input_dim")
    assert idata["posterior"]["Z"].shape == (1, DRAWS, M, 2)
    assert idata["log_likelihood"]["y"].shape == (1, DRAWS, N)
    assert idata["posterior"].attrs["engine"] == "AdaptiveSGHMC"
    draw = {k: v.numpy()[-1] for k, v in mcmc.get_samples().items()}
    twin = NumPyroBSGP(bsgp_kernel(2), likelihoods.Gaussian(variance=1.0), Z=X[:M], batch_size=10)
    close(twin.pointwise_log_likelihood(draw, X, y), idata["log_likelihood"]["y"].values[0, -1])
