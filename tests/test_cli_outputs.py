"""The files of ``ppl-sparsegp fit`` in ``--out``, run in-process through ``main([...])``.

* An unusable ``--out`` is refused before any work.

Runs are tiny (diabetes, a few steps or draws); "before any work" is checked by traps on ``jax.jit``, the inducing
initialisers and every method's fit function.
"""

from __future__ import annotations

import os

import jax
import pytest

from ppl_sparsegp import cli, cli_bsgp, cli_mcmc, cli_selective
from ppl_sparsegp.cli import main
from ppl_sparsegp.inducing import initialise

QUIET = ("--no-progress", "--quiet")
RUNS = {
    "svgp": ("--inducing", "8", "--steps", "20", "--lr", "0.05", "--checkpoint-every", "10"),
    "sgpr": ("--inducing", "8", "--steps", "10"),
    "gpr": ("--steps", "10"),
    "sgpmc": ("--inducing", "5", "--steps", "20", "--warmup", "10", "--samples", "10", "--chains", "1"),
    "bsgp": ("--iterations", "2", "--kept", "2", "--inducing", "5"),
    "selective": ("--candidates", "10", "--pre-steps", "5", "--selection-steps", "5", "--post-steps", "5"),
}
"""A tiny run of every method on diabetes."""


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
        (cli, "fit_svi"),
        (cli_mcmc, "fit_sgpmc"),
        (cli_bsgp, "fit_bsgp"),
        (cli_selective, "fit_selective"),
    ]:
        monkeypatch.setattr(module, name, trap)


@pytest.fixture
def no_work(monkeypatch):
    trap_work(monkeypatch)


def one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    return captured.err


# --------------------------------------------------------------------------------------------------------
# Outputs


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
