"""The recipes' configs: each default is written once (in the config), and bad settings, negative step, draw and
iteration counts among them, are refused by name when the config is built, before anything is compiled."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.recipes.bsgp import BSGPConfig, bsgp_schedule, fit_bsgp
from ppl_sparsegp.recipes.selective import (
    SelectiveConfig,
    SelectiveDeepConfig,
    SelectiveGPLVMConfig,
    fit_selective,
    fit_selective_deep,
    fit_selective_gplvm,
)
from ppl_sparsegp.recipes.sgpmc import SGPMCConfig, fit_sgpmc

X = np.random.default_rng(0).normal(size=(20, 2))
Y = X[:, 0] + 0.1 * X[:, 1]


@pytest.fixture
def no_compilation(monkeypatch):
    """Replace ``jax.jit`` by a trap: anything raised under this fixture was raised before compilation."""

    def trap(*args, **kwargs):
        raise AssertionError("jax.jit was reached before the bad setting was refused")

    monkeypatch.setattr(jax, "jit", trap)


def _sgpmc(**overrides):
    return fit_sgpmc(X, Y, kernel=RBF(), likelihood=Gaussian(), Z=X[:4], key=jax.random.PRNGKey(0), **overrides)


CALLS = [
    (_sgpmc, "svi_steps", -1),
    (_sgpmc, "fixed_z_steps", -1),
    (_sgpmc, "num_warmup", -1),
    (_sgpmc, "num_samples", -5),
    (_sgpmc, "num_chains", 0),
    (_sgpmc, "thinning", 0),
    (_sgpmc, "chunk_size", -1),
    (lambda **kw: fit_bsgp(X, Y, key=jax.random.PRNGKey(0), **kw), "num_iterations", -1),
    (lambda **kw: fit_bsgp(X, Y, key=jax.random.PRNGKey(0), **kw), "num_kept", -2),
    (lambda **kw: fit_bsgp(X, Y, key=jax.random.PRNGKey(0), **kw), "num_warmup", -1),
    (lambda **kw: fit_bsgp(X, Y, key=jax.random.PRNGKey(0), **kw), "num_samples", -1),
    (lambda **kw: fit_bsgp(X, Y, key=jax.random.PRNGKey(0), **kw), "num_chains", -1),
    (lambda **kw: bsgp_schedule(**kw), "num_iterations", -1),
    (lambda **kw: bsgp_schedule(**kw), "num_kept", -1),
    (lambda **kw: fit_selective(X, Y, candidates=5, **kw), "pre_steps", -1),
    (lambda **kw: fit_selective(X, Y, candidates=5, **kw), "post_steps", -1),
    (lambda **kw: fit_selective(X, Y, candidates=5, **kw), "selection_steps", -1),
    (lambda **kw: fit_selective_deep(X, Y, candidates=5, **kw), "pre_steps", -1),
    (lambda **kw: fit_selective_deep(X, Y, candidates=5, **kw), "post_steps", -3),
    (lambda **kw: fit_selective_gplvm(np.c_[X, Y], **kw), "steps", -1),
    (lambda **kw: fit_selective_gplvm(np.c_[X, Y], **kw), "pre_steps", -1),
]


@pytest.mark.parametrize("call, name, value", CALLS, ids=[f"{n}={v}-{i}" for i, (_, n, v) in enumerate(CALLS)])
def test_negative_counts_are_refused_by_name_before_compiling(call, name, value, no_compilation):
    with pytest.raises(ValueError, match=f"^{name}: expected"):
        call(**{name: value})


@pytest.mark.parametrize(
    "config", [SGPMCConfig, BSGPConfig, SelectiveConfig, SelectiveDeepConfig, SelectiveGPLVMConfig]
)
def test_a_config_is_frozen_and_refuses_unknown_settings(config):
    built = config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.pre_steps = 1  # any field: a config is never changed in place
    with pytest.raises(TypeError, match="no_such_setting"):
        dataclasses.replace(built, no_such_setting=1)


def test_a_recipe_takes_a_config_and_overrides_of_it(no_compilation):
    config = SelectiveConfig(pre_steps=-0, post_steps=0)
    with pytest.raises(ValueError, match="^selection_steps: expected a positive integer, got 0"):
        fit_selective(X, Y, config, selection_steps=0)


def test_bsgp_schedule_reads_the_config_defaults():
    schedule, config = bsgp_schedule(), BSGPConfig()
    assert (schedule.step_size, schedule.mdecay) == (config.step_size, config.mdecay)
    assert schedule.num_warmup == 21 * config.num_iterations and schedule.num_samples == 32 * config.num_kept
