"""How many library files a reader follows through ``ppl-sparsegp fit svgp``.

The count: library files (``ppl_sparsegp/**`` and ``models/**``) one of whose functions is called while ``fit svgp``
runs (a tiny run, every library module imported beforehand, so that code run at import does not count), leaving out
``ppl_sparsegp/core/`` and ``ppl_sparsegp/backends/`` -- the numerical layers, which a reader consults for an
equation, not for the flow. docs/architecture.md states the same definition.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import ppl_sparsegp
import ppl_sparsegp.models
from ppl_sparsegp.cli import main

LIBRARY = {Path(ppl_sparsegp.__file__).parent: "ppl_sparsegp", Path(ppl_sparsegp.models.__file__).parent: "models"}
NUMERICAL = ("ppl_sparsegp/core/", "ppl_sparsegp/backends/")
MAX_FILES = 25  # 22, infer/compilation_cache, infer/hot_path and infer/sharding (issue 26)


def _import_everything() -> None:
    for package in (ppl_sparsegp, ppl_sparsegp.models):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if ".backends." not in module.name:  # torch's backend loads torch; not followed here either way
                importlib.import_module(module.name)


def _library_file(filename: str) -> str | None:
    path = Path(filename)
    for root, name in LIBRARY.items():
        if path.is_relative_to(root):
            return f"{name}/{path.relative_to(root).as_posix()}"
    return None


@pytest.mark.slow
def test_fit_svgp_runs_through_few_library_files(tmp_path):
    _import_everything()
    called: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            called.add(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        code = main(["fit", "svgp", "--steps", "5", "--inducing", "4", "--quiet", "--out", str(tmp_path / "out")])
    finally:
        sys.setprofile(None)
    assert code == 0
    files = sorted(f for f in map(_library_file, called) if f is not None and not f.startswith(NUMERICAL))
    assert len(files) <= MAX_FILES, files
