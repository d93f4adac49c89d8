"""Models are composed, not stacked (issue 20): at most one level of inheritance, own model and guide."""

import importlib
import inspect
import pkgutil

import pytest

import ppl_sparsegp.models.numpyro
from ppl_sparsegp.models.numpyro._base import GPModel
from ppl_sparsegp.models.numpyro.selective import SelectiveModel


def _classes() -> dict[str, type]:
    """Every class defined in a module of ppl_sparsegp.models.numpyro, by qualified name."""
    found = {}
    for info in pkgutil.iter_modules(ppl_sparsegp.models.numpyro.__path__):
        module = importlib.import_module(f"ppl_sparsegp.models.numpyro.{info.name}")
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                found[f"{info.name}.{name}"] = cls
    return found


CLASSES = _classes()
MODELS = {name: cls for name, cls in CLASSES.items() if callable(getattr(cls, "model", None))}


def test_every_model_is_found():
    expected = {
        "svgp.SVGP",
        "sgpr.SGPR",
        "selective.SelectiveSGPR",
        "selective.SelectiveSVGP",
        "gplvm.BayesianGPLVM",
        "gplvm.CollapsedGPLVM",
        "selective_gplvm.SelectiveGPLVM",
        "selective_gplvm.SelectiveCollapsedGPLVM",
        "deep_svgp.DeepSVGP",
        "selective_deep.SelectiveDeepSVGP",
        "idsgp.IDSGP",
        "sas_gplvm.SASGPLVM",
    }
    assert expected <= set(MODELS)


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_class_has_at_most_one_level_of_inheritance(name):
    assert len(CLASSES[name].__mro__) <= 3, CLASSES[name].__mro__


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_derives_from_one_base_or_nothing_and_writes_its_own_model_and_guide(name):
    cls = CLASSES[name]
    assert cls.__mro__[1:] in ((object,), (GPModel, object), (SelectiveModel, object)), cls.__mro__
    assert "model" in vars(cls)
    assert "guide" in vars(cls) or not hasattr(cls, "guide")  # DeepBSGP is sampled by MCMC only


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_follows_the_predictive_idiom(name):
    """``model(X, y=None)`` (GP-LVMs: ``model(Y=None)``) and its guide, where it has one, default the observations
    to None, which draws them (tests/models/test_predictive_idiom.py checks what each draws); keyword-only options
    may follow (IDSGP's ``train``)."""
    cls = MODELS[name]
    for method in (cls.model, *([cls.guide] if hasattr(cls, "guide") else [])):
        positional = [p for p in inspect.signature(method).parameters.values() if p.kind != p.KEYWORD_ONLY]
        observed = positional[-1]
        assert observed.name in ("y", "Y") and observed.default is None, (name, method.__name__)
