"""The Pyro twin of fit_selective: both bounds run the three phases and prune to an ordinary Pyro SGPR / SVGP on the
drawn subset; frozen selection moves only λ, joint selection the GP too; a phase interrupted and resumed from its
checkpoint ends where an uninterrupted fit ends; from the same seed it starts on the NumPyro recipe's candidates and
its deterministic pre-training takes the NumPyro recipe's steps (collapsed bound: losses to 1e-6 in float64); bad
settings are refused before anything runs or is written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from _selective_problems import trap_phases

from ppl_sparsegp.core.kernels import RBF, Linear
from ppl_sparsegp.core.likelihoods import Bernoulli
from ppl_sparsegp.models.pyro.sgpr import SGPR
from ppl_sparsegp.models.pyro.svgp import SVGP
from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.pyro.score_function import ScoreFunctionELBO
from ppl_sparsegp.recipes import selective, selective_pyro
from ppl_sparsegp.recipes.phases import PHASES

RNG = np.random.default_rng(0)
X = RNG.uniform(0.0, 10.0, (40, 1))
Y = np.sin(X[:, 0]) + 0.1 * RNG.standard_normal(40)
TINY = {"candidates": 8, "alpha": 0.5, "pre_steps": 15, "selection_steps": 10, "post_steps": 10, "checkpoint_every": 5}


@pytest.fixture(autouse=True)
def float64():
    with default_dtype("float64"):
        yield


def _fit(**settings):
    return selective_pyro.fit_selective(X, Y, seed=3, progress=False, **{**TINY, **settings})


@pytest.mark.parametrize(("bound", "ordinary"), [("collapsed", SGPR), ("uncollapsed", SVGP)])
def test_both_bounds_run_every_phase_and_prune_to_the_drawn_subset(bound, ordinary):
    fit = _fit(bound=bound)
    assert isinstance(fit.model, ordinary) and isinstance(fit.selective.ordinary, ordinary)
    assert {phase: len(fit.losses[phase]) for phase in PHASES} == {"pre": 15, "selection": 10, "post": 10}
    assert all(np.all(np.isfinite(losses)) for losses in fit.losses.values())
    assert fit.inclusion_probs.shape == (8,) and not np.allclose(fit.inclusion_probs, 0.5)
    assert set(np.unique(fit.mask)) <= {0.0, 1.0} and fit.selected_count >= 1
    assert fit.model.Z.shape == (fit.selected_count, 1)
    kept = np.asarray(fit.selective_params["Z"])[fit.mask == 1]
    np.testing.assert_array_equal(fit.model.Z.numpy(), kept)
    assert fit.params["Z"].shape == (fit.selected_count, 1)
    if bound == "uncollapsed":
        assert fit.params["u_loc"].shape == (1, fit.selected_count)
        assert fit.params["u_scale_tril"].shape == (1, fit.selected_count, fit.selected_count)
    assert not any(name.startswith("__baseline") or name == "inclusion_probs" for name in fit.params)
    mean, var = fit.model.predict_y(fit.params, X[:5], X=X, y=Y)
    assert mean.shape == var.shape == (5,) and torch.all(var > 0)


def test_frozen_selection_moves_only_lambda_and_joint_selection_the_gp_too():
    candidates = np.linspace(0.0, 10.0, 8)[:, None]
    settings = {"candidates": candidates, "pre_steps": 0, "post_steps": 0}
    frozen, joint = (_fit(selection=selection, **settings) for selection in ("frozen", "joint"))
    for fit in (frozen, joint):
        assert not torch.allclose(fit.selective_params["inclusion_probs"], torch.full((8,), 0.5, dtype=torch.float64))
    np.testing.assert_array_equal(frozen.selective_params["Z"].numpy(), candidates)
    assert torch.equal(frozen.selective_params["kernel.lengthscale"], torch.ones(1, dtype=torch.float64))
    assert not np.allclose(joint.selective_params["Z"].numpy(), candidates)
    assert not torch.allclose(joint.selective_params["kernel.lengthscale"], torch.ones(1, dtype=torch.float64))


@pytest.mark.parametrize("bound", ["collapsed", "uncollapsed"])
def test_an_interrupted_phase_resumed_from_its_checkpoint_ends_as_an_uninterrupted_fit(bound, tmp_path, monkeypatch):
    straight = _fit(bound=bound)
    steps = []
    step = ScoreFunctionELBO.loss_and_grads

    def killed(elbo, *args, **kwargs):
        steps.append(1)
        if len(steps) == 7:  # in the selection phase, after its checkpoint at step 5
            raise KeyboardInterrupt
        return step(elbo, *args, **kwargs)

    monkeypatch.setattr(ScoreFunctionELBO, "loss_and_grads", killed)
    with pytest.raises(KeyboardInterrupt):
        _fit(bound=bound, checkpoint_dir=tmp_path)
    monkeypatch.setattr(ScoreFunctionELBO, "loss_and_grads", step)
    assert {p.name for p in tmp_path.iterdir()} == {"selective_pre.npz", "selective_selection.npz"}
    resumed = _fit(bound=bound, checkpoint_dir=tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {f"selective_{phase}.npz" for phase in PHASES}
    np.testing.assert_array_equal(resumed.mask, straight.mask)
    np.testing.assert_array_equal(resumed.inclusion_probs, straight.inclusion_probs)
    for phase in PHASES:
        np.testing.assert_array_equal(resumed.losses[phase], straight.losses[phase])
    assert set(resumed.params) == set(straight.params)
    for name, value in straight.params.items():
        assert torch.equal(resumed.params[name], value), name


def test_a_checkpoint_of_other_settings_is_refused(tmp_path):
    _fit(checkpoint_dir=tmp_path, post_steps=0)
    with pytest.raises(ValueError, match="selective.alpha"):
        _fit(checkpoint_dir=tmp_path, alpha=0.6)


def test_the_collapsed_pre_training_takes_the_numpyro_recipes_steps_from_the_same_candidates():
    settings = {**TINY, "pre_steps": 30, "selection_steps": 1, "post_steps": 0}
    by_pyro = selective_pyro.fit_selective(X, Y, seed=3, progress=False, **settings)
    by_numpyro = selective.fit_selective(X, Y, key=3, progress=False, **settings)
    np.testing.assert_array_equal(by_pyro.selective.ordinary.Z.numpy(), by_numpyro.selective.ordinary.Z)
    # Adam on the same deterministic bound, in torch and in optax
    np.testing.assert_allclose(by_pyro.losses["pre"], by_numpyro.losses["pre"], rtol=1e-6)
    assert by_numpyro.losses["pre"][-1] < by_numpyro.losses["pre"][0] - 1.0  # the steps went somewhere


@pytest.mark.slow
def test_the_lengthscale_restarts_choose_as_the_numpyro_recipe_does():
    """The constructed all-noise trap of ``tests/recipes/test_selective.py`` (an RBF started at lengthscale 5 on a
    sine of period 2.1): both recipes pre-train from both starts with the same steps and go on from the spacing."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, size=(100, 1))
    y = np.sin(3 * x[:, 0]) + 0.1 * np.random.default_rng(1).normal(size=100)
    settings = {"candidates": np.linspace(0, 10, 20)[:, None], "alpha": 0.01, "pre_steps": 200, "selection_steps": 1,
                "post_steps": 0, "lengthscale_starts": ("given", "spacing"), "progress": False}  # fmt: skip
    by_pyro = selective_pyro.fit_selective(x, y, kernel=RBF(1.0, 5.0), seed=0, **settings)
    by_numpyro = selective.fit_selective(x, y, kernel=RBF(1.0, 5.0), key=0, **settings)
    assert by_pyro.pre_start == by_numpyro.pre_start == "spacing"
    for name in ("given", "spacing"):
        np.testing.assert_allclose(by_pyro.pre_start_losses[name], by_numpyro.pre_start_losses[name], rtol=1e-6)
    assert float(by_pyro.selective_params["likelihood.variance"]) < 0.2


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ({"bound": "titsias"}, "bound"),
        ({"selection": "both"}, "selection"),
        ({"selection_steps": 0}, "selection_steps"),
        ({"initial_inclusion": 1.0}, "initial_inclusion"),
        ({"candidates": 41}, "candidates|num_inducing|M"),
        ({"likelihood": Bernoulli()}, "likelihood"),
        ({"batch_size": 8}, "batch_size"),
        ({"seed": 1.5}, "seed"),
        ({"seed": True}, "seed"),
        ({"lengthscale_starts": ("given", "spacing"), "pre_steps": 0}, "lengthscale_starts"),
        ({"lengthscale_starts": ("spacing",), "kernel": Linear()}, "lengthscale_starts"),
    ],
)
def test_bad_settings_are_refused_before_anything_runs(overrides, name, tmp_path, monkeypatch):
    trap_phases(monkeypatch, selective_pyro)
    folder = tmp_path / "checkpoints"
    settings = {**TINY, "seed": 3, **overrides}
    with pytest.raises(ValueError, match=name):
        selective_pyro.fit_selective(X, Y, progress=False, checkpoint_dir=folder, **settings)
    assert not folder.exists()


def test_an_empty_q_is_redrawn_then_refused():
    with pytest.raises(ValueError, match="lower alpha"):
        selective_pyro.sample_subset(np.full(5, 1e-12), 0)
    mask = selective_pyro.sample_subset(np.array([1e-12, 1e-12, 0.5]), 0)
    assert mask.tolist() == [0.0, 0.0, 1.0]
    state = torch.get_rng_state()
    np.testing.assert_array_equal(selective_pyro.sample_subset(np.full(6, 0.5), 7), selective_pyro.sample_subset(
        np.full(6, 0.5), 7))  # fmt: skip
    assert torch.equal(torch.get_rng_state(), state)  # torch's global generator is left alone
