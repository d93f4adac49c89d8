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


def test_mixture_log_predictive_is_that_of_the_library(bench, rng):
    """The mixture's log predictive taken from the per-draw class probabilities equals
    ``log_predictive_density`` of the same draws (the quantity the earlier runs reported)."""
    from ppl_sparsegp.posterior.predict import log_predictive_density

    X, y = bench.three_gaussians(40, rng)
    kernel = bench.RBF(variance=1.0, lengthscale=1.0) + bench.White(variance=1e-3)
    likelihood = bench.RobustMax(3, epsilon=1e-3, quadrature_order=bench.parse([]).quadrature_order)
    model = bench.SGPMC(kernel=kernel, likelihood=likelihood, fixed=[bench.WHITE], Z=X[:6], num_latent=3,
                        priors={site: dist.Gamma(*ab) for site, ab in bench.PRIORS.items()})  # fmt: skip
    samples = {"kernel.k0.variance": np.exp(rng.normal(size=5)), "kernel.k0.lengthscale": np.exp(rng.normal(size=5)),
               "u": 2.0 * rng.normal(size=(5, 3, 6))}  # fmt: skip
    draws = bench.draw_probabilities(model, samples, X)
    assert draws.shape == (5, 40, 3)
    np.testing.assert_allclose(draws.sum(axis=-1), 1.0, rtol=1e-10)
    mixture = bench.mixture_summary(draws, draws, y)
    expected = np.mean(np.asarray(log_predictive_density(model, samples, X, y)))
    assert mixture["mean_log_predictive"] == pytest.approx(expected, rel=1e-10)


def test_chain_agreement_gives_each_chains_verdict_and_the_prediction_r_hat(bench, rng):
    C, S, N, G = 4, 100, 30, 50
    y = rng.integers(0, 3, size=N)
    gaussian = {"mean_confidence": 0.9, "grid_share_above_0.95": 0.5, "grid_share_above_0.99": 0.3}

    def probabilities(confidence: np.ndarray, n: int) -> np.ndarray:
        """[len(confidence), n, 3]: each draw gives class 0 this probability at every point, the rest split evenly."""
        top = confidence[:, None, None] * np.ones((1, n, 1))
        return np.concatenate([top, (1 - top) / 2, (1 - top) / 2], axis=-1)

    confidence = 0.8 + 0.01 * rng.normal(size=C * S)
    agreeing = bench.chain_agreement(probabilities(confidence, N), probabilities(confidence, G), y, C, gaussian)
    assert [c["more_conservative"] for c in agreeing["per_chain"]] == [True] * C
    assert agreeing["per_chain"][0]["mean_confidence"] == pytest.approx(np.mean(confidence[:S]))
    assert agreeing["test_probabilities"]["fraction_r_hat_above_1.1"] == 0.0
    assert agreeing["test_probabilities"]["without_r_hat"] == 0

    saturated = probabilities(confidence, N)
    saturated[:, 0] = [1.0, 0.0, 0.0]  # no draw changes the first test point's probabilities
    y[0] = 0
    with_constant = bench.chain_agreement(saturated, probabilities(confidence, G), y, C, gaussian)
    assert with_constant["test_probabilities"]["without_r_hat"] == 3
    assert np.isfinite(with_constant["test_probabilities"]["r_hat_median"])

    confidence[-S:] = 0.999  # the last chain elsewhere: sure of every point, above both grid thresholds
    split = bench.chain_agreement(probabilities(confidence, N), probabilities(confidence, G), y, C, gaussian)
    assert [c["more_conservative"] for c in split["per_chain"]] == [True, True, True, False]
    assert split["test_probabilities"]["r_hat_max"] > 1.5
    assert split["test_probabilities"]["fraction_r_hat_above_1.1"] == 1.0
    one_chain = bench.chain_agreement(
        probabilities(confidence[:S], N), probabilities(confidence[:S], G), y, 1, gaussian
    )
    assert "test_probabilities" not in one_chain and len(one_chain["per_chain"]) == 1
