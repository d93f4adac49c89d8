"""``ppl-sparsegp fit svgp --devices N``: refusals (checked before anything compiles) and, on 4 forced host devices
in a subprocess, a run whose metrics equal the one-device run's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import pytest

from ppl_sparsegp.cli import main

RUN = ["fit", "svgp", "--data", "diabetes", "--steps", "20", "--batch-size", "64", "--quiet"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--devices", "0"], "error: --devices: expected a positive integer or 'all', got 0"),
        (["--devices", str(jax.device_count() + 1)], f"error: --devices: asked for {jax.device_count() + 1}, but only"),
        (["--devices", "many"], "error: --devices: expected a positive integer or 'all', got 'many'"),
        (["--devices", "1", "--batch-size", "1000"], "error: --devices splits a minibatch over the devices"),
        (["--num-processes", "2"], "error: coordinator: --num-processes and --process-id need --coordinator"),
    ],
)
def test_bad_devices_flags_are_refused_by_name(tmp_path, capsys, flags, message):
    assert main([*RUN, "--out", str(tmp_path / "out"), *flags]) == 2
    assert capsys.readouterr().err.startswith(message)


def _metrics_with_and_without_devices(tmp_path, count: int, run: list, refused: list, error: str) -> tuple:
    """In one interpreter on ``count`` forced host devices: ``run`` on one device and with ``--devices count``, then
    ``refused`` (which must exit 2 with ``error``); returns both runs' results.json."""
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}", "JAX_PLATFORMS": "cpu"}
    script = (
        "import sys\nfrom ppl_sparsegp.cli import main\n"
        f"for extra in ([], ['--devices', '{count}']):\n"
        f"    assert main({run!r} + ['--out', sys.argv[1] + str(len(extra))] + extra) == 0\n"
        f"assert main({refused!r} + ['--out', sys.argv[1] + 'x']) == 2\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "run")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert error in done.stderr
    return tuple(json.loads((tmp_path / f"run{k}" / "results.json").read_text()) for k in (0, 2))


def _same_metrics(one: dict, many: dict) -> None:
    for name, value in one["metrics"].items():
        assert many["metrics"][name] == pytest.approx(value, rel=1e-9, abs=0), name


@pytest.mark.slow
def test_a_run_on_four_devices_has_the_metrics_of_one_device(tmp_path):
    one, four = _metrics_with_and_without_devices(
        tmp_path, 4, RUN, [*RUN, "--devices", "3"], "error: --batch-size (64) must be a multiple of --devices (3)"
    )
    assert four["options"]["devices"] == "4"
    _same_metrics(one, four)


@pytest.mark.slow
def test_bsgp_sghmc_on_two_devices_has_the_metrics_of_one_device(tmp_path):
    """The SG-MCMC path: BSGP's SGHMC with its minibatch of 100 split over 2 devices; NUTS refuses 3 chains."""
    bsgp = ["fit", "bsgp", "--data", "yacht", "--iterations", "20", "--kept", "4", "--inducing", "10", "--quiet"]
    nuts = ["fit", "bsgp", "--data", "yacht", "--engine", "nuts", "--chains", "3", "--inducing", "10", "--quiet"]
    one, two = _metrics_with_and_without_devices(
        tmp_path, 2, [*bsgp, "--batch-size", "100"], [*nuts, "--devices", "2"],
        "error: --chains (3) must be a multiple of --devices (2)",
    )  # fmt: skip
    _same_metrics(one, two)


@pytest.mark.slow
def test_two_processes_write_one_run_and_a_quiet_copy_with_the_metrics_of_one_process(tmp_path):
    """``--coordinator/--num-processes/--process-id`` on localhost (gloo): process 0 writes OUT, process 1
    OUT.process1, both with the single-process run's metrics."""
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    cli = [sys.executable, "-m", "ppl_sparsegp.cli", *RUN]
    out = str(tmp_path / "run")
    joined = ["--devices", "all", "--coordinator", f"localhost:{port}", "--num-processes", "2", "--process-id"]
    procs = [subprocess.Popen([*cli, "--out", out, *joined, str(k)], env=env) for k in (1, 0)]
    procs.append(subprocess.Popen([*cli, "--out", str(tmp_path / "one")], env=env))
    try:
        assert [p.wait(timeout=300) for p in procs] == [0, 0, 0]
    finally:
        for p in procs:
            p.kill()
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    for folder in ("run", "run.process1"):
        got = json.loads((tmp_path / folder / "results.json").read_text())
        for name, value in one["metrics"].items():
            assert got["metrics"][name] == pytest.approx(value, rel=1e-9, abs=0), (folder, name)
