"""The Fig 5.2 benchmark's sampler helpers (benchmarks/multiclass_synthetic.py): the time limit that ends its
sampling with the draws kept, and the mixing diagnostics its verdict rests on."""

import importlib.util
import time
from pathlib import Path

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import HMC

from ppl_sparsegp.infer.mcmc import MCMCResult, run_mcmc

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "multiclass_synthetic.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("multiclass_synthetic", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _result(variance: np.ndarray, lengthscale: np.ndarray, u: np.ndarray) -> MCMCResult:
    C, S = variance.shape
    extra = {"accept_prob": np.full((C, S), 0.9), "adapt_state.step_size": np.full((C, S), 0.05),
             "num_steps": np.full((C, S), 30), "diverging": np.zeros((C, S), bool)}  # fmt: skip
    samples = {"kernel.k0.variance": variance, "kernel.k0.lengthscale": lengthscale, "u": u}
    return MCMCResult(samples=samples, extra_fields=extra, last_state=None, kernel_name="HMC", num_warmup=10,
                      thinning=1)  # fmt: skip


def test_time_limit_stops_only_after_the_warmup_and_the_limit(bench):
    assert bench.time_limit(None, time.perf_counter()) is None
    warmed = MCMCResult({}, {}, None, "HMC", num_warmup=10, thinning=1, warmup_done=10)
    sampling = MCMCResult({"x": np.zeros((2, 5))}, {}, None, "HMC", num_warmup=10, thinning=1, warmup_done=10)
    late = bench.time_limit(1.0, time.perf_counter() - 120.0)
    late(warmed)  # the limit is passed, but no draw is kept yet: go on
    with pytest.raises(KeyboardInterrupt):
        late(sampling)
    bench.time_limit(1.0, time.perf_counter())(sampling)  # within the limit: go on


def test_time_limit_ends_run_mcmc_with_the_draws_so_far(bench):
    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0))

    began = time.perf_counter() - 120.0  # the limit is already passed: the first chunk is the last
    result = run_mcmc(HMC(model, num_steps=3, trajectory_length=None), num_warmup=5, num_samples=40, thinning=2,
                      chunk_size=10, num_chains=2, key=jax.random.PRNGKey(0), progress=False,
                      callback=bench.time_limit(1.0, began))  # fmt: skip
    assert result.interrupted
    assert result.samples["x"].shape == (2, 5)


def test_diagnostics_separate_mixed_from_stuck_chains(bench, rng):
    C, S = 4, 200
    variance = np.exp(rng.normal(size=(C, S)))
    lengthscale = np.exp(rng.normal(size=(C, S)))
    u = rng.normal(size=(C, S, 3, 50))
    mixed = bench.diagnostics(_result(variance, lengthscale, u))
    assert mixed["kernel.k0.variance"]["r_hat"] < 1.05 and mixed["kernel.k0.variance"]["ess_bulk"] > 400
    assert mixed["u"]["fraction_r_hat_above_1.1"] == 0.0
    assert bench.mixing_targets(mixed) == {"theta_r_hat_at_most_1.05": True, "theta_ess_bulk_at_least_100": True,
                                           "u_fraction_r_hat_above_1.1": 0.0}  # fmt: skip

    stuck_u = u.copy()
    stuck_u[0, :, 0, :10] += 3.0  # one chain elsewhere in 10 of the 150 outputs
    stuck_variance = variance * np.array([[1.0], [1.0], [1.0], [5.0]])  # and one chain elsewhere in the variance
    stuck = bench.diagnostics(_result(stuck_variance, lengthscale, stuck_u))
    assert stuck["u"]["fraction_r_hat_above_1.1"] == pytest.approx(10 / 150)
    assert stuck["kernel.k0.variance"]["r_hat"] > 1.05
    assert bench.mixing_targets(stuck)["theta_r_hat_at_most_1.05"] is False
    assert stuck["kept_draws_per_chain"] == S and stuck["stopped_by_time_limit"] is False
