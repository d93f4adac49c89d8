"""Twin coverage, checked rather than remembered (issue 25): every module of models/numpyro has its Pyro twin in
models/pyro under the same name, defining every public class and function of the NumPyro module, and every public
method of each NumPyro class exists on the twin's class of the same name. A model added without its twin fails
here."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import ppl_sparsegp.models

MODELS = Path(ppl_sparsegp.models.__path__[0])
NUMPYRO_MODULES = sorted(p.stem for p in (MODELS / "numpyro").glob("*.py") if not p.name.startswith("_"))


def _public(module) -> dict[str, object]:
    """The classes and functions a module defines (not those it imports), by name."""
    return {
        name: value
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and value.__module__ == module.__name__
    }


def _methods(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}


def test_the_model_modules_are_found():
    assert {"gpr", "sgpr", "svgp", "sgpmc", "bsgp", "selective"} <= set(NUMPYRO_MODULES)


@pytest.mark.parametrize("name", NUMPYRO_MODULES)
def test_every_numpyro_model_has_its_pyro_twin(name):
    assert (MODELS / "pyro" / f"{name}.py").exists(), f"models/numpyro/{name}.py has no twin models/pyro/{name}.py"
    numpyro_side = importlib.import_module(f"ppl_sparsegp.models.numpyro.{name}")
    pyro_side = importlib.import_module(f"ppl_sparsegp.models.pyro.{name}")
    expected, found = _public(numpyro_side), _public(pyro_side)
    assert set(expected) <= set(found), f"models/pyro/{name}.py lacks {sorted(set(expected) - set(found))}"
    for cls_name, cls in expected.items():
        if inspect.isclass(cls):
            missing = _methods(cls) - _methods(found[cls_name])
            assert not missing, f"models/pyro/{name}.py: {cls_name} lacks {sorted(missing)}"
