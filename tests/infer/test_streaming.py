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

from ppl_sparsegp.infer.streaming import NpyBatches, fit_streamed


def write_rows(path: Path, shape: tuple[int, ...], fill, chunk: int = 100_000) -> None:
    """An .npy file written chunk by chunk (never whole in memory): rows ``fill(start, stop)``."""
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=shape)
    for start in range(0, shape[0], chunk):
        out[start : start + chunk] = fill(start, min(start + chunk, shape[0]))
    out.flush()
    del out


def test_two_million_rows_stream_with_a_resident_set_well_below_the_file(tmp_path):
    """2e6 x 32 float64 (504 MiB) and y = row number mod 7: 300 batches of 4096 (1.2 M rows drawn) raise the peak
    resident set by far less than the file (measured: 7 MiB over the ~740 MiB a process with jax started holds
    before the first batch), and the streamed y has the file's mean."""
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
    Xb, yb = next(iter(batches))
    np.testing.assert_array_equal(np.asarray(yb), np.asarray(Xb)[:, 0] * 10)  # rows kept together
    index = np.random.default_rng(3).integers(0, 20, 8)
    np.testing.assert_array_equal(np.asarray(Xb), X[index])  # the draws of the seeded generator, in order
    np.save(tmp_path / "short.npy", X[:5, 0])
    with pytest.raises(ValueError, match="^X_path, y_path: "):
        NpyBatches(tmp_path / "X.npy", tmp_path / "short.npy", 8)
    with pytest.raises(ValueError, match="^y_path: no such file"):
        NpyBatches(tmp_path / "X.npy", tmp_path / "none.npy", 8)
    with pytest.raises(ValueError, match="^batch_size: "):
        NpyBatches(tmp_path / "X.npy", tmp_path / "y.npy", 0)


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
    params, losses = fit_streamed(model, guide, batches, optimizer=optax.adam(0.02), num_steps=800)
    assert losses.shape == (800,)
    assert params["loc"] == pytest.approx(y.mean(), abs=0.05)


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
