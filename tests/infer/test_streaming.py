"""Minibatches streamed from memory-mapped .npy files (ppl_sparsegp.infer.streaming)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from numpyro.infer import NUTS

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.infer import checkpoint
from ppl_sparsegp.infer.mcmc import kernel_from_name
from ppl_sparsegp.infer.streaming import NpyBatches, fit_streamed, sample_streamed
from ppl_sparsegp.models.numpyro.svgp import SVGP


def write_rows(path: Path, shape: tuple[int, ...], fill, chunk: int = 100_000) -> None:
    """An .npy file written chunk by chunk (never whole in memory): rows ``fill(start, stop)``."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=shape)
    for start in range(0, shape[0], chunk):
        out[start : start + chunk] = fill(start, min(start + chunk, shape[0]))
    out.flush()
    del out


@pytest.mark.slow
def test_two_million_rows_stream_with_a_resident_set_well_below_the_file(tmp_path):
    """2e6 x 32 float64 (504 MiB) and y = row number mod 7: the 299 batches of 4096 after the first (1.2 M rows
    drawn) raise the peak resident set (VmHWM) by far less than the file, and the streamed y has the file's mean.
    Measured on a file in the page cache (2026-11-29): 291 -> 291 MiB; the first batch's sum, the runtime's one-off
    cost, took it from 265 to 291 MiB, so a bound counted from before it sat at the edge (26.7 MiB against 26.4 in
    CI). Read through a memory map, the same batches raised it to 640 MiB."""
    N, D = 2_000_000, 32
    X_path, y_path = tmp_path / "X.npy", tmp_path / "y.npy"
    write_rows(X_path, (N, D), lambda a, b: np.broadcast_to(np.arange(a, b, dtype=np.float64)[:, None], (b - a, D)))
    write_rows(y_path, (N,), lambda a, b: np.arange(a, b) % 7)
    size = X_path.stat().st_size + y_path.stat().st_size
    worker = Path(__file__).with_name("_stream_rss.py")
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, str(worker), str(X_path), str(y_path), "300"], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    grown = got["after"] - got["before"]
    print(f"file {size / 2**20:.0f} MiB, peak RSS {got['before'] / 2**20:.0f} -> {got['after'] / 2**20:.0f} MiB")
    assert grown < 0.05 * size
    assert got["mean_y"] == pytest.approx(3.0, abs=0.02)  # mean of n mod 7


def test_batches_hold_the_rows_drawn_and_are_refused_when_malformed(tmp_path):
    X = np.arange(60.0).reshape(20, 3)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", X[:, 0] * 10)
    batches = NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 8, seed=3)
    stream = iter(batches)
    for position in range(3):
        Xb, yb = next(stream)
        np.testing.assert_array_equal(np.asarray(yb), np.asarray(Xb)[:, 0] * 10)  # rows kept together
        rng = np.random.default_rng(np.random.SeedSequence(3, spawn_key=(position,)))
        np.testing.assert_array_equal(np.asarray(Xb), X[rng.integers(0, 20, 8)])  # batch i: generator (seed, i)
    stream.close()
    Xb, _ = next(batches.batches(start=2))  # a stream opened at 2 starts with the third batch
    np.testing.assert_array_equal(np.asarray(Xb), X[batches.draw(batches.generator(2))])
    np.save(tmp_path / "short.npy", X[:5, 0])
    with pytest.raises(ValueError, match="^X_path, y_path: "):
        NpyBatches(tmp_path / "X.npy", tmp_path / "short.npy", 8)
    with pytest.raises(ValueError, match="^y_path: no such file"):
        NpyBatches(tmp_path / "X.npy", tmp_path / "none.npy", 8)
    with pytest.raises(ValueError, match="^batch_size: "):
        NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 0)
    np.save(tmp_path / "words.npy", np.array(["a"] * 20))
    with pytest.raises(ValueError, match="^y_path: .*words.npy' holds <U1 values; expected real numbers"):
        NpyBatches(tmp_path / "X.npy", tmp_path / "words.npy", 8)
    np.save(tmp_path / "fortran.npy", np.asfortranarray(X))
    with pytest.raises(ValueError, match="^X_path: .*fortran.npy' is stored in Fortran order"):
        NpyBatches(tmp_path / "fortran.npy", tmp_path / "y.npy", 8)
    (tmp_path / "text.npy").write_text("not an array")
    with pytest.raises(ValueError, match="^X_path: .*text.npy' is not a readable .npy array"):
        NpyBatches(tmp_path / "text.npy", tmp_path / "y.npy", 8)


def test_fit_streamed_reaches_the_conjugate_posterior(tmp_path):
    """Normal mean with known variance from streamed minibatches (the plate scaled by N/B through num_data)."""
    N = 5000
    y = np.random.default_rng(0).normal(2.0, 1.0, N)
    np.save(tmp_path / "X.npy", np.zeros((N, 1)))
    np.save(tmp_path / "y.npy", y)

    def model(X, y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.handlers.scale(scale=N / y.shape[0]), numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)

    def guide(X, y):
        loc = numpyro.param("loc", 0.0)
        numpyro.sample("mu", dist.Normal(loc, numpyro.param("scale", 0.1, constraint=dist.constraints.positive)))

    batches = NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 100, seed=0, dtype=jax.numpy.float64)
    fit = fit_streamed(model, guide, batches, optimizer=optax.adam(0.02), num_steps=800)
    assert fit.losses.shape == (800,)
    assert fit.params["loc"] == pytest.approx(y.mean(), abs=0.05)


def test_stratified_draws_keep_each_devices_rows_in_its_stratum(tmp_path):
    """With a mesh of P devices each device's B/P rows come from its own N/P rows (a stand-in mesh object: only its
    device count is read when drawing); N not a multiple of P is refused."""
    np.save(tmp_path / "X.npy", np.zeros((40, 1)))
    np.save(tmp_path / "y.npy", np.zeros(40))
    batches = NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 12, stratified=True)
    batches.num_devices = 4  # what a 4-device mesh gives; draw() reads nothing else
    index = batches.draw(np.random.default_rng(0))
    for device, rows in enumerate(index.reshape(4, 3)):
        assert np.all((rows >= 10 * device) & (rows < 10 * (device + 1)))
    many = np.concatenate([batches.draw(np.random.default_rng(k)) for k in range(500)])
    assert np.bincount(many, minlength=40).min() > 0  # every row can be drawn
    np.save(tmp_path / "X.npy", np.zeros((41, 1)))
    np.save(tmp_path / "y.npy", np.zeros(41))
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))
    NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 12, stratified=True, mesh=mesh)  # one device: one stratum
    four = SimpleNamespace(shape={"data": 4}, devices=np.empty(4))  # what the constructor reads of a 4-device mesh
    with pytest.raises(ValueError, match="^stratified: the 41 rows do not split into 4 equal strata"):
        NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 12, stratified=True, mesh=four)


def svgp_files(tmp_path: Path, n: int = 300) -> tuple[Path, Path, SVGP]:
    """A tiny regression data set written to X.npy, y.npy and the SVGP (M = 8) that takes its minibatches."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 2))
    y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(n)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    gp = SVGP(
        kernel=kernels.RBF(1.0, np.ones(2)), likelihood=likelihoods.Gaussian(0.1), Z=X[:: n // 8].copy(), num_data=n
    )
    return tmp_path / "X.npy", tmp_path / "y.npy", gp


class StopAt(NpyBatches):
    """A stream whose reader is interrupted (KeyboardInterrupt, as from Ctrl-C) when it comes to batch ``stop``."""

    def __init__(self, *args, stop: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.stop = stop

    def generator(self, position: int) -> np.random.Generator:
        if position == self.stop:
            raise KeyboardInterrupt
        return super().generator(position)


@pytest.mark.slow
def test_fit_streamed_interrupted_and_resumed_equals_uninterrupted_bit_for_bit(tmp_path):
    """SVGP on 300 rows, B = 16, float64: a run interrupted at step 23 (the stream's reader stopped) checkpoints
    there, and the same call resumes it to 40 steps; a run stopped at 30 and raised to 40 likewise. Both equal the
    uninterrupted 40 steps exactly: losses, params, optimiser state. Another seed's checkpoint is refused."""
    X_path, y_path, gp = svgp_files(tmp_path)
    options = {"optimizer": optax.adam(0.01), "key": 1, "checkpoint_every": 10}

    def fit(stream, steps, checkpoint=None):
        return fit_streamed(gp.model, gp.guide, stream, num_steps=steps, checkpoint=checkpoint, **options)

    whole = fit(NpyBatches(X_path, y_path, 16, seed=5), 40)
    path = tmp_path / "interrupted.npz"
    with pytest.raises(KeyboardInterrupt):
        fit(StopAt(X_path, y_path, 16, seed=5, stop=23), 40, path)
    saved = checkpoint.read(path)
    assert saved.counters == {"step": 23, "stream_position": 23}
    resumed = fit(NpyBatches(X_path, y_path, 16, seed=5), 40, path)
    assert (resumed.resumed_from, resumed.steps_run) == (23, 17)
    shorter = tmp_path / "shorter.npz"
    fit(NpyBatches(X_path, y_path, 16, seed=5), 30, shorter)
    raised = fit(NpyBatches(X_path, y_path, 16, seed=5), 40, shorter)
    for run in (resumed, raised):
        np.testing.assert_array_equal(run.losses, whole.losses)
        for a, b in zip(jax.tree.leaves(run.state), jax.tree.leaves(whole.state), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(checkpoint.CheckpointMismatchError, match="stream_seed 5 -> 6"):
        fit(NpyBatches(X_path, y_path, 16, seed=6), 40, path)


def regression_model(N: int):
    """Bayesian linear regression whose data term is scaled by N/B (minibatches of N rows)."""

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
        numpyro.deterministic("w_norm", jax.numpy.linalg.norm(w))
        with numpyro.handlers.scale(scale=N / y.shape[0]), numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(X @ w, 0.5), obs=y)

    return model


@pytest.mark.parametrize("engine", ["sghmc", "sgld"])
@pytest.mark.slow
def test_sample_streamed_equals_the_kernel_fed_the_same_batches_in_memory(tmp_path, engine):
    """SGHMC (BSGP's adaptive kernel) and SGLD over a 200-row file, B = 10, 2 chains, 20 warmup steps and 30 draws
    thinned by 3: the draws equal, bit for bit, those of the kernel's own init and sample run in memory (one lax.scan)
    on the same batches, read from the file beforehand; and a run interrupted at step 27 and resumed gives the same
    draws bit for bit."""
    N, B = 200, 10
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, 3))
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", X @ np.array([1.0, -0.5, 0.2]) + 0.5 * rng.normal(size=N))
    paths = (tmp_path / "X.npy", tmp_path / "y.npy")
    options = {"step_size": 1e-3, "num_data": N} if engine == "sghmc" else {"step_size": 1e-4}
    schedule = {"num_warmup": 20, "num_samples": 30, "thinning": 3, "num_chains": 2, "key": jax.random.PRNGKey(4)}

    def kernel():
        return kernel_from_name(engine, regression_model(N), **options)

    streamed = sample_streamed(kernel(), NpyBatches(*paths, B, seed=2), **schedule)
    assert streamed.samples["w"].shape == (2, 10, 3) and streamed.extra_fields["nonfinite"].shape == (2, 10)

    # in memory: the 51 batches (init + 50 steps) read beforehand, the kernel stepped through them by one scan
    batches = NpyBatches(*paths, B, seed=2)
    rows = [batches.read(batches.draw(batches.generator(i))) for i in range(51)]
    Xs, ys = (np.stack(part) for part in zip(*rows, strict=True))
    reference = kernel()
    keys = jax.random.split(schedule["key"], 2)
    state = jax.jit(lambda k: reference.init(k, 20, None, (Xs[0], ys[0]), {}))(keys)

    def steps(state, batch):
        state = reference.sample(state, batch, {})
        return state, state.z

    _, z = jax.jit(lambda s: jax.lax.scan(steps, s, (Xs[1:], ys[1:])))(state)
    kept = jax.tree.map(lambda v: np.swapaxes(np.asarray(v)[20:][2::3], 0, 1), z)  # [C, S, ...]
    postprocess = jax.vmap(jax.vmap(reference.postprocess_fn((Xs[0], ys[0]), {})))
    expected = jax.device_get(postprocess(kept))
    for site in ("w", "w_norm"):
        np.testing.assert_array_equal(streamed.samples[site], expected[site])  # measured: bit for bit

    path = tmp_path / f"{engine}.npz"
    interrupted = sample_streamed(kernel(), StopAt(*paths, B, seed=2, stop=28), checkpoint=path, **schedule)
    assert interrupted.interrupted and checkpoint.read(path).counters == {"steps": 27, "stream_position": 28}
    resumed = sample_streamed(kernel(), NpyBatches(*paths, B, seed=2), checkpoint=path, **schedule)
    for site in ("w", "w_norm"):
        np.testing.assert_array_equal(resumed.samples[site], streamed.samples[site])
    np.testing.assert_array_equal(resumed.extra_fields["potential_energy"], streamed.extra_fields["potential_energy"])


def test_sample_streamed_refuses_nuts(tmp_path):
    np.save(tmp_path / "X.npy", np.zeros((20, 1)))
    np.save(tmp_path / "y.npy", np.zeros(20))
    with pytest.raises(ValueError, match="^kernel: expected a stochastic-gradient kernel .* got NUTS"):
        sample_streamed(
            NUTS(regression_model(20)), NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 4), num_warmup=1,
            num_samples=1, key=0,
        )  # fmt: skip


def test_statistics_in_chunks_equal_numpys_and_samples_are_distinct_rows(tmp_path):
    """Moments merged over chunks of 7 rows equal numpy's over the whole arrays; sample() gives distinct rows."""
    rng = np.random.default_rng(3)
    X, y = rng.normal(5.0, 2.0, (50, 3)), rng.integers(0, 2, 50).astype(float)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    batches = NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 4)
    stats = batches.statistics(chunk=7)
    np.testing.assert_allclose(stats["x_mean"], X.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(stats["x_std"], X.std(axis=0), rtol=1e-13)
    np.testing.assert_allclose([stats["y_mean"], stats["y_std"]], [y.mean(), y.std()], rtol=1e-13)
    assert (stats["y_min"], stats["y_max"], bool(stats["y_integral"])) == (0.0, 1.0, True)
    Xs, ys = batches.sample(20, seed=0)
    rows = [int(np.flatnonzero((X == row).all(axis=1))[0]) for row in Xs]
    assert len(set(rows)) == 20 and rows == sorted(rows)
    np.testing.assert_array_equal(ys, y[rows])


def test_batches_are_placed_in_the_consumers_precision(tmp_path):
    """jax.enable_x64 is local to a thread (the command line runs under it): the reader thread places float64 rows
    as the consuming thread would, float32 with x64 off and float64 with it on."""
    np.save(tmp_path / "X.npy", np.ones((20, 2)))
    np.save(tmp_path / "y.npy", np.ones(20))
    batches = NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 4)
    for x64, dtype in ((False, np.float32), (True, np.float64)):
        with jax.enable_x64(x64):
            stream = iter(batches)
            Xb, yb = next(stream)
            stream.close()
        assert Xb.dtype == yb.dtype == dtype
