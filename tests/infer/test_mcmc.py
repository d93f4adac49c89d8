"""The MCMC run loop: conjugate posterior, chains and thinning, checkpoint/resume, interrupts, divergence stop."""

import dataclasses
import sys
import types
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from numpyro.infer import NUTS
from numpyro.infer.mcmc import MCMCKernel

from ppl_sparsegp.core import ops
from ppl_sparsegp.infer import progress
from ppl_sparsegp.infer.mcmc import DivergingChainError, init_from_svi, run_mcmc
from ppl_sparsegp.infer.svi import fit_svi


def _normal_model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    sigma = numpyro.sample("sigma", dist.LogNormal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, sigma), obs=y)


def _normal_guide(y):
    loc = numpyro.param("loc", 0.0)
    numpyro.sample("mu", dist.Normal(loc, 0.1))
    numpyro.sample("sigma", dist.Delta(numpyro.param("sigma_map", 1.0, constraint=dist.constraints.positive)))


@pytest.fixture(scope="module")
def data():
    return jnp.asarray(np.random.default_rng(1).normal(2.0, 0.5, 40))


def _run(data, **kw):
    settings = dict(num_warmup=150, num_samples=200, key=jax.random.PRNGKey(0))
    return run_mcmc(NUTS(_normal_model), data, **{**settings, **kw})


@pytest.fixture(scope="module")
def two_chains(data):
    """One uninterrupted run in a single chunk, the reference for the chunked and resumed runs."""
    return _run(data, num_chains=2)


def test_nuts_draws_match_the_conjugate_posterior_and_shapes_follow_chains(data, two_chains):
    res = two_chains
    assert res.samples["mu"].shape == (2, 200) and res.samples["sigma"].shape == (2, 200)
    assert set(res.extra_fields) >= {"diverging", "accept_prob", "adapt_state.step_size"}
    assert res.extra_fields["diverging"].shape == (2, 200)
    assert res.flat_samples()["mu"].shape == (400,)
    # posterior of mu: mean near the sample mean (the prior is flat by comparison), sd near s / sqrt(n)
    np.testing.assert_allclose(res.samples["mu"].mean(), float(data.mean()), atol=0.03)
    np.testing.assert_allclose(res.samples["mu"].std(), float(data.std()) / np.sqrt(40), rtol=0.25)
    assert not res.interrupted and res.warmup_seconds > 0 and res.sample_seconds > 0


def test_divergences_count_the_kept_draws_of_every_chain(two_chains):
    assert two_chains.divergences == int(two_chains.extra_fields["diverging"].sum())
    assert dataclasses.replace(two_chains, extra_fields={}).divergences is None


def _bar_positions(err: str, desc: str) -> list[int]:
    """The distinct counts ``n`` of ``n/total`` that the tqdm bar ``desc`` showed, in order."""
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith(f"{desc}:")]
    return [int(n) for n in dict.fromkeys(line.split("|")[2].split("/")[0] for line in lines if line.count("|") >= 2)]


@pytest.mark.slow
def test_progress_moves_about_twenty_times_and_leaves_the_draws_and_checkpoints_alone(data, two_chains, capsys):
    calls = []
    res = _run(data, num_chains=2, progress=True, callback=lambda r: calls.append((r.warmup_done, r.num_draws)))
    err = capsys.readouterr().err
    assert _bar_positions(err, "NUTS warmup") == [*range(0, 150, 8), 150]
    assert _bar_positions(err, "NUTS") == list(range(0, 201, 10))
    assert calls == [(150, 0), (150, 200)]  # callbacks (and checkpoints) once per warmup piece and chunk, as without
    np.testing.assert_array_equal(res.samples["mu"], two_chains.samples["mu"])
    np.testing.assert_array_equal(res.extra_fields["accept_prob"], two_chains.extra_fields["accept_prob"])


def test_progress_is_shown_in_a_terminal_or_notebook_unless_told(monkeypatch):
    class ZMQInteractiveShell:  # the class of IPython's shell in a Jupyter kernel
        pass

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    monkeypatch.setitem(sys.modules, "ipykernel", sys)  # imported, as pytest.importorskip does: not a notebook
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert not progress.shown(None) and progress.shown(True) and not progress.shown(False)
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=ZMQInteractiveShell))
    assert progress.shown(None) and not progress.shown(False)
    monkeypatch.delitem(sys.modules, "IPython")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert progress.shown(None) and not progress.shown(False)


def test_progress_pieces_cover_the_work():
    assert progress.pieces(10, 4) == [4, 4, 2] and progress.pieces(8, 4) == [4, 4] and progress.pieces(0, 3) == []
    assert progress.piece_size(150) == 8 and progress.piece_size(5) == 1 and progress.piece_size(1000, 32) == 64


@pytest.mark.slow
def test_sequential_chains_sample_the_same_posterior(data):
    seq = _run(data, num_chains=2, chain_method="sequential")
    assert seq.samples["mu"].shape == (2, 200)
    np.testing.assert_allclose(seq.samples["mu"].mean(axis=1), float(data.mean()), atol=0.04)


class _Killed(Exception):
    pass


@pytest.mark.slow
def test_killed_chunked_run_resumes_and_reproduces_the_uninterrupted_run(data, two_chains, tmp_path):
    path = tmp_path / "run.ckpt"
    chunks_seen = []

    def die_after_two_chunks(result):
        chunks_seen.append(result.num_draws)
        if len(chunks_seen) == 3:
            raise _Killed  # nothing after the last checkpoint survives, as with SIGKILL

    with pytest.raises(_Killed):
        _run(data, num_chains=2, chunk_size=50, checkpoint=path, callback=die_after_two_chunks)
    assert chunks_seen == [0, 50, 100] and path.exists()  # the warmup, then two chunks
    resumed = _run(data, num_chains=2, chunk_size=50, checkpoint=path)
    # the same draws as one uninterrupted, unchunked run with the same key
    np.testing.assert_array_equal(resumed.samples["mu"], two_chains.samples["mu"])
    np.testing.assert_array_equal(resumed.extra_fields["accept_prob"], two_chains.extra_fields["accept_prob"])


@pytest.mark.slow
def test_run_killed_during_a_chunked_warmup_resumes_it_and_reproduces_the_uninterrupted_run(data, two_chains, tmp_path):
    path = tmp_path / "warm.ckpt"
    pieces = []

    def die_in_warmup(result):
        pieces.append(result.warmup_done)
        if len(pieces) == 2:
            raise _Killed

    with pytest.raises(_Killed):
        _run(data, num_chains=2, warmup_chunk_size=60, checkpoint=path, callback=die_in_warmup)
    assert pieces == [60, 120]
    resumed = _run(data, num_chains=2, warmup_chunk_size=60, checkpoint=path)
    assert resumed.warmup_done == 150
    np.testing.assert_array_equal(resumed.samples["mu"], two_chains.samples["mu"])


def test_keyboard_interrupt_returns_the_thinned_draws_so_far(data, tmp_path):
    def interrupt(result):
        if result.num_draws == 50:
            raise KeyboardInterrupt

    res = _run(data, thinning=2, chunk_size=100, checkpoint=tmp_path / "c.ckpt", callback=interrupt)
    assert res.interrupted and res.samples["mu"].shape == (1, 50)


def test_checkpoint_from_other_settings_is_refused(data, tmp_path):
    path = tmp_path / "run.ckpt"
    _run(data, num_warmup=10, num_samples=20, checkpoint=path)
    with pytest.raises(ValueError, match="checkpoint"):
        _run(data, num_warmup=10, num_samples=20, chunk_size=10, checkpoint=path)


class _State(NamedTuple):
    i: jnp.ndarray
    z: dict
    rng_key: jnp.ndarray
    nonfinite: jnp.ndarray


class _BreaksAtStep(MCMCKernel):
    """A random walk whose state turns non-finite at step ``k`` (a stand-in for a diverging SG-MCMC chain)."""

    sample_field = "z"
    default_fields = ("z", "nonfinite")

    def __init__(self, k):
        self.k = k

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        return _State(jnp.array(0), {"x": jnp.array(0.0)}, rng_key, jnp.array(False))

    def sample(self, state, model_args, model_kwargs):
        key, sub = jax.random.split(state.rng_key)
        broken = state.nonfinite | (state.i + 1 >= self.k)
        x = jnp.where(broken, state.z["x"], state.z["x"] + jax.random.normal(sub))
        return _State(state.i + 1, {"x": x}, key, broken)

    def postprocess_fn(self, model_args, model_kwargs):
        return lambda z: z


def test_a_diverging_chain_stops_with_an_error_that_keeps_the_earlier_draws(tmp_path):
    kernel = _BreaksAtStep(k=10 + 37)  # 10 warmup steps, then the 37th post-warmup state is non-finite
    with pytest.raises(DivergingChainError, match="36 kept draws") as err:
        run_mcmc(kernel, num_warmup=10, num_samples=100, chunk_size=20, key=jax.random.PRNGKey(0))
    kept = err.value.result.samples["x"]
    assert kept.shape == (1, 36) and np.all(np.isfinite(kept))


@pytest.mark.slow
def test_init_from_svi_starts_chains_at_draws_of_the_guide(data):
    fit = fit_svi(_normal_model, _normal_guide, data, optimizer=optax.adam(0.05), num_steps=300, progress=False)
    init = init_from_svi(_normal_model, _normal_guide, fit.params, data, key=jax.random.PRNGKey(2), num_chains=3)
    assert init["mu"].shape == (3,) and init["sigma"].shape == (3,)
    # sigma is unconstrained (log) and at the point estimate in every chain; mu differs between chains
    np.testing.assert_allclose(init["sigma"], np.log(fit.params["sigma_map"]), rtol=1e-10)
    assert np.std(init["mu"]) > 0
    res = _run(data, num_chains=3, num_warmup=20, num_samples=20, init_params=init)
    assert res.samples["mu"].shape == (3, 20)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_samples": 0}, "num_samples"),
        ({"num_warmup": -1}, "num_warmup"),
        ({"thinning": 3}, "num_samples: expected a multiple of thinning"),
        ({"chunk_size": 150, "thinning": 4}, "chunk_size"),
        ({"chain_method": "pooled"}, "chain_method"),
        ({"num_chains": 2, "chain_method": "parallel"}, "one device per chain"),
    ],
)
def test_bad_arguments_are_named(data, kwargs, match):
    with pytest.raises(ValueError, match=match):
        _run(data, **kwargs)


@pytest.mark.slow
def test_engines_by_name_and_plain_hmc_runs(data):
    from numpyro.infer import HMC, MCMC

    from ppl_sparsegp.infer.mcmc import kernel_from_name
    from ppl_sparsegp.infer.sghmc import SGLD, AdaptiveSGHMC

    assert isinstance(kernel_from_name("nuts", _normal_model), NUTS)
    assert isinstance(kernel_from_name("sghmc", _normal_model, num_data=40), AdaptiveSGHMC)
    assert isinstance(kernel_from_name("sgld", _normal_model, step_size=1e-3), SGLD)
    with pytest.raises(ValueError, match="engine: expected one of nuts, hmc, sghmc, sgld"):
        kernel_from_name("gibbs", _normal_model)
    with pytest.raises(ValueError, match="engine options for 'nuts'"):
        kernel_from_name("nuts", _normal_model, friction=0.1)
    hmc = kernel_from_name("hmc", _normal_model)
    assert type(hmc) is HMC
    res = run_mcmc(hmc, data, num_warmup=200, num_samples=300, key=jax.random.PRNGKey(1))
    np.testing.assert_allclose(res.samples["mu"].mean(), float(data.mean()), atol=0.04)
    # the run loop drives a kernel as numpyro.infer.MCMC does: with no adaptation, the same draws for the same key
    # (with adaptation both are right but rounding differences grow chaotically along the chain)
    fixed = dict(step_size=0.05, num_steps=10, adapt_step_size=False)
    ours = run_mcmc(HMC(_normal_model, **fixed), data, num_warmup=50, num_samples=100, key=jax.random.PRNGKey(1))
    reference = MCMC(HMC(_normal_model, **fixed), num_warmup=50, num_samples=100, progress_bar=False)
    reference.run(jax.random.PRNGKey(1), data)
    assert np.std(ours.samples["mu"]) > 0.02
    np.testing.assert_allclose(ours.samples["mu"][0], reference.get_samples()["mu"], rtol=1e-9)


def _factorised_beyond_two(X=None):
    """x ~ N(0, 1) and a factor through the Cholesky of a matrix that is NaN where x > 2 (a proposal there fails)."""
    x = numpyro.sample("x", dist.Normal(0.0, 1.0))
    A = jnp.eye(2) * jnp.where(x > 2.0, jnp.nan, 1.0 + x**2)
    numpyro.factor("through_cholesky", jnp.sum(jnp.log(jnp.diagonal(ops.cholesky(A)))))


def test_a_failed_cholesky_inside_nuts_is_a_rejected_proposal_counted_as_a_divergence():
    """issue 26 §1: inside the compiled step the factorisation is one call at a static jitter (no callback); a
    proposal through a failed one has non-finite energy, is rejected and counted as a divergence (never silent),
    and every kept draw is finite and below 2."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ops.JitterWarning)  # nothing escalates inside the compiled step
        result = run_mcmc(NUTS(_factorised_beyond_two), num_warmup=300, num_samples=600, key=jax.random.PRNGKey(1))
    draws = np.asarray(result.samples["x"])
    assert np.all(np.isfinite(draws)) and draws.max() <= 2.0
    assert np.all(np.isfinite(result.extra_fields["potential_energy"]))
    assert result.divergences > 0, "no proposal reached x > 2"
