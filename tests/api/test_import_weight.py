"""Start-up: importing the library, an engine or the command line's module loads none of the heavy packages that
only some paths use (ArviZ, matplotlib, pandas, scikit-learn, torch); they load when first used. Each check runs in
a fresh interpreter and reads ``sys.modules``, so it does not depend on how fast this machine is."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("arviz", "matplotlib", "pandas", "sklearn", "torch", "pyro", "xarray")
"""Loaded on first use only: posterior.nc and diagnostics (arviz, xarray), figures (matplotlib), tables (pandas),
k-means and the embedded datasets (sklearn), the Pyro twin (torch, pyro)."""


def _loaded_after(statement: str) -> list[str]:
    """The top-level packages of :data:`HEAVY` (and jax, numpyro) in ``sys.modules`` after ``statement`` runs in a
    fresh interpreter."""
    watched = (*HEAVY, "jax", "numpyro")
    code = f"import json, sys\n{statement}\nprint(json.dumps([m for m in {watched!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_the_library_loads_nothing_heavy_not_even_jax():
    assert _loaded_after("import ppl_sparsegp") == []


@pytest.mark.parametrize(
    "statement",
    [
        "import ppl_sparsegp.cli.__main__",  # the command line's module: every sub-command's parser
        "import ppl_sparsegp as psg; psg.fit_svi; psg.run_mcmc; psg.SVGP; psg.load_run; psg.compare_runs",
        "from ppl_sparsegp.cli.__main__ import build_parser; build_parser().parse_args(['fit', 'svgp'])",
    ],
)
def test_the_command_line_and_the_engines_load_heavy_packages_on_first_use(statement):
    loaded = _loaded_after(statement)
    assert "jax" in loaded  # the statement did import the engines
    assert [m for m in loaded if m in HEAVY] == []


@pytest.mark.slow
def test_a_fit_by_svi_writes_its_posterior_without_importing_arviz(tmp_path):
    """``fit svgp`` writes posterior.nc with xarray alone (the groups as ArviZ writes them): ArviZ, which a fit does
    not otherwise need, is never imported; the file is there and ArviZ reads it."""
    out = tmp_path / "run"
    argv = ["fit", "svgp", "--steps", "1", "--quiet", "--out", str(out)]
    loaded = _loaded_after(f"from ppl_sparsegp.cli.__main__ import main\nassert main({argv!r}) == 0")
    assert "jax" in loaded and "xarray" in loaded and "arviz" not in loaded
    import arviz as az

    idata = az.from_netcdf(out / "posterior.nc")
    assert set(idata.groups()) == {"posterior", "posterior_predictive", "log_likelihood", "observed_data"}


def test_the_command_stops_the_garbage_collector_only_at_the_interpreters_exit():
    """main() registers an exit handler that freezes and stops the collector (the final collections of a fit
    process cost 0.7 s of CPU): the collector is still on after main returns, and off when the process ends."""
    code = (
        "import atexit, gc, os\n"
        "atexit.register(lambda: os.write(1, f'at exit {gc.isenabled()}'.encode()))\n"  # runs after main's
        "from ppl_sparsegp.cli.__main__ import main\n"
        "assert main(['data', '--help']) == 0 and main(['fit', 'svgp', '--help']) == 0\n"
        "print(f'after main {gc.isenabled()}', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["after main True", "at exit False"]
