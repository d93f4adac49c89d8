"""Data parallelism (ppl_sparsegp.infer.sharding): fit_svi and run_mcmc on 4 forced host devices against one device.

XLA_FLAGS must be set before jax is imported, so each comparison runs ``tests/infer/_on_devices.py`` in a subprocess
with ``--xla_force_host_platform_device_count=4``; it runs the case once on one device and once on all four, and
writes both results to an .npz that the test compares. The refusals that need one device only run here.
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from numpyro.infer import NUTS

from ppl_sparsegp.infer import sharding
from ppl_sparsegp.infer.mcmc import run_mcmc
from ppl_sparsegp.infer.svi import fit_svi

WORKER = Path(__file__).with_name("_on_devices.py")


def on_four_devices(case: str, tmp_path: Path) -> tuple[dict, dict]:
    """(single-device, four-device) results of a case of _on_devices.py."""
    out = tmp_path / f"{case}.npz"
    env = {
        **os.environ,
        # a collective that waits 15 s is a deadlock here: XLA aborts the process then, not after its default 40 s
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4 --xla_cpu_collective_call_terminate_timeout_seconds=15",
        "JAX_PLATFORMS": "cpu",
        "OPENBLAS_NUM_THREADS": "1",
    }
    run = subprocess.run(
        [sys.executable, str(WORKER), case, str(out)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    with np.load(out) as data:
        single = {k.split("/", 1)[1]: data[k] for k in data if k.startswith("single/")}
        sharded = {k.split("/", 1)[1]: data[k] for k in data if k.startswith("sharded/")}
    return single, sharded


def assert_same(single: dict, sharded: dict, atol: float) -> None:
    assert single.keys() == sharded.keys() and single
    for name in single:
        np.testing.assert_allclose(sharded[name], single[name], rtol=0, atol=atol, err_msg=name)


@pytest.mark.slow
def test_sharded_elbo_and_gradient_equal_one_device(tmp_path):
    single, sharded = on_four_devices("elbo", tmp_path)
    assert_same(single, sharded, atol=1e-6)


@pytest.mark.slow
def test_100_sharded_svi_steps_equal_one_device(tmp_path):
    """Adam, B = 64 split 16 per device, float64: the losses and the params after 100 steps."""
    single, sharded = on_four_devices("adam", tmp_path)
    assert single["losses"].shape == (100,)
    assert_same(single, sharded, atol=1e-6)


@pytest.mark.slow
def test_a_checkpoint_written_on_one_device_resumes_on_four(tmp_path):
    """50 steps on one device, then resumed to 100 on four (the device count is not part of the fingerprint): the
    uninterrupted single-device run's losses and params."""
    single, sharded = on_four_devices("resumed", tmp_path)
    assert int(single.pop("resumed_from")) == 0 and int(sharded.pop("resumed_from")) == 50
    assert single["losses"].shape == (100,)
    assert_same(single, sharded, atol=1e-6)


@pytest.mark.slow
def test_sharded_sghmc_draws_equal_one_device(tmp_path):
    """The same key gives the same minibatches and noise on one device or four, so the same draws, up to the order
    of the minibatch sums (measured: 1e-14)."""
    single, sharded = on_four_devices("sghmc", tmp_path)
    assert_same(single, sharded, atol=1e-9)


@pytest.mark.slow
def test_streamed_batches_split_over_devices_equal_one_device(tmp_path):
    """Minibatches read from .npy files (infer.streaming), each split over 4 devices: 200 SVI steps as on one."""
    single, sharded = on_four_devices("streamed", tmp_path)
    assert not single.pop("serial") and sharded.pop("serial")  # four CPU devices: each step waited for
    assert single["losses"].shape == (200,)
    assert_same(single, sharded, atol=1e-6)


def test_streamed_sghmc_split_over_devices_equals_one_device(tmp_path):
    """Adaptive SGHMC over batches streamed from .npy files, each split over 4 devices: the draws as on one."""
    single, sharded = on_four_devices("streamed_sghmc", tmp_path)
    assert single["samples/w"].shape == (1, 20, 2)
    assert_same(single, sharded, atol=1e-9)


@pytest.mark.slow
def test_nuts_chains_go_across_devices(tmp_path):
    """Four NUTS chains, one per device under shard_map: the state is split by chain, and the draws target the same
    posterior (a chain's tree decisions can flip on a round-off difference, so draws are compared in law)."""
    single, sharded = on_four_devices("nuts", tmp_path)
    assert "P('data',)" in str(sharded["sharding"])
    assert single["samples/mu"].shape == sharded["samples/mu"].shape == (4, 100)
    np.testing.assert_allclose(sharded["samples/mu"].mean(), single["samples/mu"].mean(), atol=0.15)
    np.testing.assert_allclose(sharded["samples/sigma"].mean(), single["samples/sigma"].mean(), atol=0.15)


def test_batch_and_chains_the_devices_cannot_split_are_refused(tmp_path):
    _, messages = on_four_devices("refusals", tmp_path)
    assert str(messages["svi"]).startswith("batch_size: the minibatch of plate 'data' has 50 rows")
    assert "devices=4" in str(messages["svi"])
    assert str(messages["nuts"]) == "num_chains: 3 is not a multiple of devices=4; each device takes num_chains/devices"


def _never_traced(*args):
    raise AssertionError("the model was run before the devices were checked")


@pytest.mark.parametrize("devices", [0, -1, "two", 1.5, True, jax.device_count() + 1])
def test_bad_devices_are_refused_before_anything_runs(devices):
    with pytest.raises(ValueError, match=r"^devices: "):
        fit_svi(_never_traced, _never_traced, np.zeros(4), optimizer=optax.adam(0.1), num_steps=1, devices=devices)
    with pytest.raises(ValueError, match=r"^devices: "):
        run_mcmc(NUTS(_never_traced), num_warmup=1, num_samples=1, key=jax.random.PRNGKey(0), devices=devices)


def test_one_device_mesh_runs_and_all_means_every_device():
    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        with numpyro.plate("data", y.shape[0], subsample_size=2):
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y[:2])

    def guide(y):
        numpyro.sample("mu", dist.Normal(numpyro.param("loc", 0.0), 1.0))

    res = fit_svi(model, guide, np.ones(8), optimizer=optax.adam(0.1), num_steps=5, progress=False, devices="all")
    assert res.losses.shape == (5,)
    assert sharding.count_devices("all") == jax.device_count()
    assert sharding.data_mesh(None) is None


def test_initialize_reads_the_environment_and_checks_it():
    assert sharding.initialize(environ={}) is False
    with pytest.raises(ValueError, match="^coordinator: "):
        sharding.initialize(num_processes=2, environ={})
    env = {"PPL_SPARSEGP_COORDINATOR": "localhost:1", "PPL_SPARSEGP_NUM_PROCESSES": "2"}
    with pytest.raises(ValueError, match="^process_id: "):
        sharding.initialize(environ=env)
    with pytest.raises(ValueError, match="^num_processes: "):
        sharding.initialize(environ={**env, "PPL_SPARSEGP_NUM_PROCESSES": "two"})


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def on_two_processes(mode: str, tmp_path: Path) -> tuple[list[dict], dict]:
    """(each process's results, the single-process reference) of a MODE of _multiprocess.py: two processes on
    localhost joined by jax.distributed (gloo collectives), one CPU device each, and a third alone on one device."""
    worker = Path(__file__).with_name("_multiprocess.py")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "OPENBLAS_NUM_THREADS": "1"}
    env.pop("XLA_FLAGS", None)
    coordinator = f"localhost:{_free_port()}"
    outs = [tmp_path / f"process{i}.npz" for i in range(2)] + [tmp_path / "reference.npz"]
    commands = [[mode, coordinator, "2", str(i), str(outs[i])] for i in range(2)] + [
        [mode, "-", "0", "0", str(outs[2])]
    ]
    procs = [
        subprocess.Popen([sys.executable, str(worker), *c], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for c in commands
    ]
    try:
        logs = [p.communicate(timeout=300)[0].decode()[-3000:] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), logs
    results = []
    for out in outs:
        with np.load(out) as data:
            results.append(dict(data))
    for got in results[:2]:
        assert int(got.pop("processes")) == 2 and int(got.pop("devices")) == 2
    assert int(results[2].pop("processes")) == 1
    results[2].pop("devices")
    return results[:2], results[2]


@pytest.mark.slow
def test_two_processes_on_localhost_equal_one_process(tmp_path):
    """jax.distributed over 2 CPU processes (gloo collectives), one device each: 100 sharded Adam steps equal the
    same fit in one process on one device. Slow: three processes on 2 cores took 59-73 s here."""
    processes, want = on_two_processes("svgp", tmp_path)
    assert want["losses"].shape == (100,)
    for got in processes:
        assert_same(want, got, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["SGHMC", "AdaptiveSGHMC"])
def test_sghmc_over_two_processes_draws_as_one_process(tmp_path, kernel):
    """SGPMC by SGHMC or by BSGP's adaptive SGHMC, the minibatch of 64 split 32 per process: the same key gives the
    same 50 draws on each process as in one process on one device, up to the order of the minibatch sums
    (measured 5.6e-14 and 3.3e-14)."""
    processes, want = on_two_processes(kernel, tmp_path)
    assert want and all(v.shape[:2] == (1, 50) for v in want.values())
    for got in processes:
        assert_same(want, got, atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["HMC", "HMC-resumed"])
def test_hmc_chains_over_two_processes_draw_as_one_process(tmp_path, mode):
    """4 chains of HMC with a fixed path of 10 leapfrog steps, 2 per process under shard_map: every process gets
    all 4 chains back, with the draws of one process on one device up to round-off (measured 4.4e-16). HMC-resumed:
    checkpointed every 50 draws into one file both processes write, killed after the first chunk and resumed from
    that file, against an uninterrupted run in one process."""
    processes, want = on_two_processes(mode, tmp_path)
    assert want["samples/mu"].shape == (4, 100)
    want.pop("sharding")
    for got in processes:
        assert "P('data',)" in str(got.pop("sharding"))
        assert_same(want, got, atol=1e-12)


@pytest.mark.slow
def test_a_checkpointed_fit_over_two_processes_resumes_as_one_uninterrupted_process(tmp_path):
    """The 100 sharded Adam steps of the SVGP above, checkpointed every 50 steps into one file both processes write,
    killed after step 50's checkpoint and resumed: every process ends where one uninterrupted process does."""
    processes, want = on_two_processes("svgp-resumed", tmp_path)
    assert want["losses"].shape == (100,)
    for got in processes:
        assert_same(want, got, atol=1e-6)


@pytest.mark.slow
def test_nuts_chains_over_two_processes(tmp_path):
    """4 NUTS chains, 2 per process: every process gets the same 4 chains back. NUTS chains amplify round-off
    through their tree decisions and adaptation (measured: three chains within 7.5e-9 of the one-process draws,
    one 3.8e-4 off), so at least two must agree to 1e-6, and the means in law."""
    processes, want = on_two_processes("NUTS", tmp_path)
    assert want["samples/mu"].shape == (4, 100)
    want.pop("sharding")
    for got in processes:
        assert "P('data',)" in str(got.pop("sharding"))
        for site in ("samples/mu", "samples/sigma"):
            chain_differences = np.abs(got[site] - want[site]).max(axis=1)
            assert np.sum(chain_differences < 1e-6) >= 2, chain_differences
            np.testing.assert_allclose(got[site].mean(), want[site].mean(), atol=0.15, err_msg=site)
    assert_same(processes[0], processes[1], atol=0)
