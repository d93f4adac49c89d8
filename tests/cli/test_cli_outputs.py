"""The files of ``ppl-sparsegp fit`` in ``--out``, for every method, run in-process through ``main([...])``.

* Checkpoints are data: a pickle planted at a checkpoint's path is refused, never run.
* A checkpoint belongs to one run: re-running with a changed option (or data) is refused before any work, naming
  the option, and ``--restart`` starts afresh (svgp, sgpr and gpr share the SVI checkpoint ``checkpoint.npz``;
  sgpmc and bsgp have ``mcmc.ckpt``; selective one ``selective_<phase>.npz`` per phase).
* Damage is one line naming the file: a truncated checkpoint, a checkpoint whose state is NaN (a non-zero exit), a
  damaged data manifest (a data-integrity failure, exit 1, not blamed on ``--data``).
* Outputs are committed as one set: a write failing midway leaves the previous set byte-identical; an unusable
  ``--out`` is refused before any work.

Runs are tiny (diabetes, a few steps or draws); "before any work" is checked by traps on ``jax.jit``, the inducing
initialisers and every method's fit function.
"""

from __future__ import annotations

import errno
import io
import json
import os
import pickle
import shutil

import jax
import matplotlib.figure
import numpy as np
import pytest

from ppl_sparsegp import data
from ppl_sparsegp.cli import bsgp as cli_bsgp
from ppl_sparsegp.cli import idsgp as cli_idsgp
from ppl_sparsegp.cli import main
from ppl_sparsegp.cli import sas as cli_sas
from ppl_sparsegp.cli import selective as cli_selective
from ppl_sparsegp.cli import sgpmc as cli_sgpmc
from ppl_sparsegp.cli import svgp as cli_svgp
from ppl_sparsegp.inducing import initialise

QUIET = ("--no-progress", "--quiet")
RUNS = {
    "svgp": ("--inducing", "8", "--steps", "20", "--lr", "0.05", "--checkpoint-every", "10"),
    "sgpr": ("--inducing", "8", "--steps", "10"),
    "gpr": ("--steps", "10"),
    "sgpmc": ("--inducing", "5", "--steps", "20", "--warmup", "10", "--samples", "10", "--chains", "1"),
    "bsgp": ("--iterations", "2", "--kept", "2", "--inducing", "5"),
    "selective": ("--candidates", "10", "--pre-steps", "5", "--selection-steps", "5", "--post-steps", "5"),
    "idsgp": ("--inducing", "4", "--hidden", "8", "--epochs", "3", "--checkpoint-every", "4"),
    "sas": ("--data", "diabetes", "--active", "20", "--batch", "60", "--hidden", "8", "--epochs", "3",
            "--conditioning", "100", "--checkpoint-every", "4"),
}  # fmt: skip
"""A tiny run of every method on diabetes."""
CHECKPOINT = {
    "svgp": "checkpoint.npz",
    "sgpr": "checkpoint.npz",
    "gpr": "checkpoint.npz",
    "sgpmc": "mcmc.ckpt",
    "bsgp": "mcmc.ckpt",
    "selective": "selective_pre.npz",
    "idsgp": "checkpoint.npz",
    "sas": "checkpoint.npz",
}
CHANGES = {
    "svgp": [
        ("--split", "1"),
        ("--data", "breast_cancer"),
        ("--no-whiten",),
        ("--kernel", "matern52"),
        ("--lr", "0.1"),
        ("--seed", "1"),
        ("--inducing", "6"),
    ],
    "sgpr": [("--kernel", "matern32"), ("--inducing", "6"), ("--noise-variance", "0.5")],
    "gpr": [("--lr", "0.1"), ("--split", "2"), ("--lengthscale", "2")],
    "sgpmc": [("--seed", "1"), ("--inducing", "6"), ("--lr", "0.1"), ("--prior", "lognormal")],
    "bsgp": [("--seed", "1"), ("--inducing", "6"), ("--z-prior", "uniform"), ("--step-size", "0.02")],
    "selective": [("--alpha", "0.5"), ("--seed", "1"), ("--candidates", "8")],
    "idsgp": [("--hidden", "6"), ("--white", "0"), ("--activation", "tanh"), ("--inducing", "3"), ("--dropout", "0.5")],
    "sas": [("--active", "10"), ("--bayesian",), ("--seed", "1"), ("--weight", "batch")],
}
"""Per method, options that change the result; the first of each is the one named in the refusal."""
FLAGS = {"--no-whiten": "--whiten/--no-whiten"}
METHODS = list(RUNS)


def command(method: str, folder, *extra: str) -> list[str]:
    return ["fit", method, *RUNS[method], *QUIET, *extra, "--out", str(folder)]


def trap_work(monkeypatch) -> None:
    """Trap compilation, the inducing initialisers and every method's fit: anything refused under these traps was
    refused before any work."""

    def trap(*args, **kwargs):
        raise AssertionError("work started before the run was refused")

    monkeypatch.setattr(jax, "jit", trap)
    for module, name in [
        (initialise, "kmeans"),
        (initialise, "random_subset"),
        (initialise, "greedy_variance"),
        (cli_svgp, "fit_svi"),
        (cli_sgpmc, "fit_sgpmc"),
        (cli_bsgp, "fit_bsgp"),
        (cli_selective, "fit_selective"),
        (cli_idsgp, "fit_idsgp"),
        (cli_sas, "fit_sas"),
    ]:
        monkeypatch.setattr(module, name, trap)


@pytest.fixture
def no_work(monkeypatch):
    trap_work(monkeypatch)


def one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


def files(folder, but: tuple[str, ...] = ()) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name not in but}


# --------------------------------------------------------------------------------------------------------
# No pickle


class _Payload:
    """Unpickling this creates the file ``marker``: what a crafted checkpoint could do with any code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("method", METHODS)
def test_a_pickle_planted_as_the_checkpoint_is_refused_and_never_run(method, tmp_path, capsys, no_work):
    folder, marker = tmp_path / "out", tmp_path / "marker"
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(_Payload(control))).close()
    assert control.exists()  # the payload is live
    folder.mkdir()
    (folder / CHECKPOINT[method]).write_bytes(pickle.dumps({"warmup_done": 0, "x": _Payload(marker)}))
    code = main(command(method, folder))
    assert not marker.exists()
    assert code == 2
    err = one_line_error(capsys)
    assert err.startswith(f"error: checkpoint: {folder / CHECKPOINT[method]} is not a checkpoint this version can")
    assert "pickle files, which older versions wrote, are never loaded" in err and "--restart" in err


# --------------------------------------------------------------------------------------------------------
# A checkpoint belongs to one run


@pytest.mark.parametrize("method", [pytest.param(m, marks=() if m == "svgp" else pytest.mark.slow) for m in METHODS])
def test_a_changed_run_is_refused_before_any_work_and_restart_starts_afresh(method, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "out"
    assert main(command(method, folder)) == 0
    assert (folder / CHECKPOINT[method]).is_file()  # gpr too: it is fitted by SVI like svgp and sgpr
    before = files(folder)
    capsys.readouterr()

    with monkeypatch.context() as patched:
        trap_work(patched)
        for change in CHANGES[method]:
            assert main(command(method, folder, *change)) == 2, change
            err = one_line_error(capsys)
            named = FLAGS.get(change[0], change[0])
            assert err.startswith(f"error: checkpoint: {folder / CHECKPOINT[method]} was written for a different "), err
            assert f"({named} " in err or f"; {named} " in err, (change, err)
            assert err.endswith("; start afresh with --restart or choose another --out\n"), err
        assert files(folder) == before  # nothing was touched

    change = ("--seed", "1")
    assert main(command(method, folder, *change, "--restart")) == 0
    record = json.loads((folder / "results.json").read_text())
    assert record["options"]["seed"] == 1 and record["options"]["restart"] is True
    resumed = record.get("resumed_from_step", record.get("resumed_from"))
    assert resumed in (0, None)
    assert main(command(method, folder, *change)) == 0  # and that run's checkpoint is resumed by the same command


# --------------------------------------------------------------------------------------------------------
# Damaged files


def _truncated_npz() -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, checkpoint=np.frombuffer(b'{"format": "x"}', dtype=np.uint8), leaf_0=np.ones(100))
    whole = buffer.getvalue()
    return whole[: len(whole) // 2]


@pytest.mark.parametrize("method", METHODS)
def test_a_truncated_checkpoint_is_one_error_naming_it(method, tmp_path, capsys, no_work):
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / CHECKPOINT[method]
    path.write_bytes(_truncated_npz())
    assert main(command(method, folder)) == 2
    err = one_line_error(capsys)
    assert err.startswith(f"error: checkpoint: {path} is damaged or truncated (") and "--restart" in err


def test_a_checkpoint_whose_state_is_nan_exits_non_zero(tmp_path, capsys):
    folder = tmp_path / "out"
    assert main(command("sgpr", folder)) == 0
    path = folder / "checkpoint.npz"
    with np.load(path, allow_pickle=False) as stored:
        members = {k: np.full_like(v, np.nan) if k.startswith("leaf_") and v.dtype.kind == "f" else v
                   for k, v in stored.items()}  # fmt: skip
    with open(path, "wb") as fh:
        np.savez(fh, **members)
    before = files(folder)
    capsys.readouterr()
    assert main(command("sgpr", folder)) == 2  # the same command, whose steps are all done: nothing would run
    err = one_line_error(capsys)
    assert err.startswith(f"error: checkpoint: {path} holds NaN or infinite values in leaf ")
    assert files(folder) == before


@pytest.fixture
def yacht_with_damaged_manifest(monkeypatch, tmp_path):
    source = data.data_dir() / "uci" / "yacht"
    if not source.is_dir():
        pytest.skip("uci/yacht not found in the data folder")
    root = tmp_path / "data"
    shutil.copytree(source, root / "uci" / "yacht")
    text = (data.data_dir() / "manifest.json").read_text()
    (root / "manifest.json").write_text(text[: len(text) // 2])
    monkeypatch.setenv(data.ENV_VAR, str(root))
    return root / "manifest.json"


def test_a_damaged_manifest_is_a_data_error_naming_it_not_blamed_on_the_data_option(
    yacht_with_damaged_manifest, tmp_path, capsys, no_work
):
    manifest = yacht_with_damaged_manifest.resolve()
    assert main(["fit", "sgpr", "--data", "uci/yacht", "--out", str(tmp_path / "out")]) == 1
    err = one_line_error(capsys)
    assert err.startswith(f"error: {manifest} is not a readable data manifest (JSONDecodeError: "), err
    assert "restore it from shared/data" in err


# --------------------------------------------------------------------------------------------------------
# Outputs as one set


@pytest.mark.slow
def test_a_write_failing_midway_leaves_the_old_outputs_byte_identical(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "out"
    assert main(command("sgpr", folder)) == 0
    old = files(folder, but=("checkpoint.npz",))
    assert set(old) == {"params.npz", "posterior.nc", "fit.png", "results.json"}

    def full_disk(self, *args, **kwargs):  # the figure is written after params.npz
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full_disk)
    assert main([*command("sgpr", folder), "--steps", "20"]) == 1  # ten more steps: new parameters
    assert one_line_error(capsys) == "error: [Errno 28] No space left on device\n"
    assert files(folder, but=("checkpoint.npz",)) == old
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]

    monkeypatch.undo()
    assert main([*command("sgpr", folder), "--steps", "20"]) == 0  # the fit was kept: nothing left to run
    record = json.loads((folder / "results.json").read_text())
    assert record["resumed_from_step"] == 20 and record["steps_this_run"] == 0
    assert files(folder)["params.npz"] != old["params.npz"]


@pytest.mark.parametrize("case", ["file", "under-a-file", "not-writable"])
def test_an_unusable_out_is_refused_before_any_work(case, tmp_path, capsys, monkeypatch, no_work):
    taken = tmp_path / "taken"
    taken.write_text("a file")
    out = {"file": taken, "under-a-file": taken / "out", "not-writable": tmp_path / "locked" / "out"}[case]
    if case == "not-writable":
        (tmp_path / "locked").mkdir()
        real_access = os.access
        # root may write anywhere, so the folder's mode alone cannot make it unwritable here
        monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).endswith("locked") else real_access(p, mode))
    assert main(["fit", "sgpr", *RUNS["sgpr"], "--out", str(out)]) == 2
    err = one_line_error(capsys)
    expected = {
        "file": f"error: --out: {out} exists and is not a folder\n",
        "under-a-file": f"error: --out: cannot create {out}, since {taken} is a file, not a folder\n",
        "not-writable": f"error: --out: {out} cannot be created: {tmp_path / 'locked'} is not writable\n",
    }[case]
    assert err == expected
    assert taken.read_text() == "a file" and not (tmp_path / "locked" / "out").exists()
