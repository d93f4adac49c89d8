"""The Pyro twin of fit_selective_deep (recipes/selective_pyro.py): every phase runs and prunes every layer to its
drawn subset; from the same seed it starts on the NumPyro recipe's candidates, and at the same params (and the same
inner-layer noise) both selective deep GPs give the same bound to 1e-8; where the bound is deterministic (one layer,
full batch) the pre-training and layer 0's layer-wise fit take the NumPyro recipe's Adam steps; in layer-wise
pre-training layer ℓ's phase moves only layer ℓ's params and the likelihood's; a fit interrupted in the layer-wise or
the selection phase and resumed from its checkpoints ends where an uninterrupted fit ends; a frozen selection from an
earlier fit's pre-trained params keeps them; bad input is refused before anything runs or is written. Float64
(tests/conftest.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pyro
import pytest
import torch
from _selective_problems import ctrl_c_at_call, trap_phases

from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.models.pyro._base import twin_of
from ppl_sparsegp.models.pyro.deep_svgp import DeepSVGP
from ppl_sparsegp.models.pyro.selective_deep import SelectiveDeepSVGP
from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.pyro.score_function import ScoreFunctionELBO
from ppl_sparsegp.recipes import selective, selective_pyro
from ppl_sparsegp.recipes.phases import PHASES, PhaseCheckpoints

X = np.linspace(0.0, 10.0, 30)[:, None]
Y = np.round(0.5 * np.sin(X[:, 0]) + 0.5)
TINY = {"candidates": 6, "num_layers": 2, "alpha": 0.5, "batch_size": None, "pre_steps": 6, "selection_steps": 6,
        "post_steps": 4, "checkpoint_every": 3, "jitter": 1e-3, "num_particles": 1}  # fmt: skip
LAYERWISE = {**TINY, "inner_mean": "zero", "pretraining": "layerwise", "layerwise_steps": 5}


def _fit(**settings):
    return selective_pyro.fit_selective_deep(X, Y, seed=3, progress=False, **{**TINY, **settings})


def _layer(name: str) -> int | None:
    return int(name[len("layer") : name.index(".")]) if name.startswith("layer") else None


def test_every_phase_runs_and_each_layer_is_pruned_to_its_drawn_subset():
    fit = _fit(selection="joint")
    assert isinstance(fit.selective, SelectiveDeepSVGP) and isinstance(fit.model, DeepSVGP)
    assert {phase: len(fit.losses[phase]) for phase in PHASES} == {"pre": 6, "selection": 6, "post": 4}
    assert all(np.all(np.isfinite(losses)) for losses in fit.losses.values())
    assert [p.shape for p in fit.inclusion_probs] == [(6,), (6,)]
    assert not np.allclose(np.concatenate([np.asarray(p) for p in fit.inclusion_probs]), 0.5)
    assert fit.layerwise_params == [] and set(fit.seconds) == set(PHASES)
    for i, mask in enumerate(fit.masks):
        assert set(np.unique(mask)) <= {0.0, 1.0} and mask.any()
        kept = np.asarray(fit.selective_params[f"layer{i}.Z"])[mask == 1]
        np.testing.assert_array_equal(fit.model.Z[i].numpy(), kept)
        assert fit.params[f"layer{i}.u_scale_tril"].shape == (fit.model.widths[i], mask.sum(), mask.sum())
    assert fit.model.batch_size is None and not any("inclusion" in name for name in fit.params)
    mean, var = fit.model.predict_y(fit.params, X[:5])
    assert mean.shape == var.shape == (5,) and torch.all(var > 0)


def _fixed_noise(i: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng([7 + i, *shape]).standard_normal(shape)


def test_same_candidates_as_numpyro_and_the_same_bound_at_the_same_params():
    fit = _fit(pre_steps=3, selection_steps=3, post_steps=0)
    built = selective.build_selective_deep(X, Y, selective.SelectiveDeepConfig(**TINY), likelihood=None, key=3)
    for z_pyro, z_numpyro in zip(fit.selective.ordinary.Z, built.selective.ordinary.Z, strict=True):
        np.testing.assert_array_equal(z_pyro.numpy(), np.asarray(z_numpyro))
    # both engines' inner-layer noise replaced by one fixed draw, as tests/parity/test_parity_deep_svgp.py does
    numpyro_deep, pyro_deep = built.selective.ordinary, fit.selective.ordinary
    numpyro_deep._noise = lambda key: lambda i, shape, dtype: jnp.asarray(_fixed_noise(i, shape), dtype=dtype)
    pyro_deep._noise = lambda: lambda i, shape, dtype: torch.as_tensor(_fixed_noise(i, shape), dtype=dtype)
    params = {name: np.asarray(v) for name, v in fit.selective_params.items() if not name.startswith("__")}
    masks = [np.asarray(m) for m in fit.masks]
    by_pyro = float(fit.selective.subset_bound(params, X, Y, masks))
    numpyro_bound = jax.jit(lambda p: built.selective.subset_bound(p, X, Y, masks, key=None))  # eager: 4x slower
    by_numpyro = float(numpyro_bound(params))
    assert np.isfinite(by_pyro) and abs(by_pyro - by_numpyro) <= 1e-8 * abs(by_numpyro)
    moved = {**params, "layer1.u_loc": params["layer1.u_loc"] + 0.1}
    assert abs(float(fit.selective.subset_bound(moved, X, Y, masks)) - by_pyro) > 1e-4  # the comparison can fail


def test_a_deterministic_bound_takes_the_numpyro_layerwise_steps():
    """One layer and the full batch: no propagated noise, the Gaussian data term in closed form. Both engines'
    layer-wise fits of layer 0 start from the recipe's candidates and the model's start, so their first losses are
    the same bound at the same params (to 1e-8); Adam in torch and in optax then takes the same steps, the traces
    drifting apart by float64 rounding and the engines' unconstrained parameterisations (observed: 7e-6 relative
    after 15 steps)."""
    config = selective.SelectiveDeepConfig(**{**TINY, "num_layers": 1, "inner_mean": "zero"}, layerwise_steps=15)
    built = selective.build_selective_deep(X, Y, config, likelihood=None, key=3)
    keys, checkpoints = selective.layerwise_keys(built.init_key, 1), PhaseCheckpoints(None, 1)
    *_, numpyro_losses = selective.fit_layerwise(
        built.base, X, Y, steps=15, learning_rate=config.learning_rate, keys=keys, checkpoints=checkpoints,
    )  # fmt: skip
    *_, pyro_losses = selective_pyro.fit_layerwise(
        twin_of(built.base), X, Y, steps=15, learning_rate=config.learning_rate, keys=[(keys[0][0], 7)],
        checkpoints=checkpoints, numpyro_model=built.base,
    )  # fmt: skip
    by_pyro, by_numpyro = pyro_losses["layer0"], numpyro_losses["layer0"]
    np.testing.assert_allclose(by_pyro[0], by_numpyro[0], rtol=1e-8)
    np.testing.assert_allclose(by_pyro, by_numpyro, rtol=1e-4)
    assert by_numpyro[-1] < by_numpyro[0] - 0.1  # the steps went somewhere


@pytest.fixture(scope="module")
def layerwise_fit():
    pyro.clear_param_store()
    with default_dtype("float64"):
        return _fit(**LAYERWISE)


def test_each_layerwise_phase_moves_only_its_own_layer_and_the_likelihood(layerwise_fit):
    stages = layerwise_fit.layerwise_params
    assert len(stages) == 2 and "layerwise" in layerwise_fit.seconds
    for layer, params in enumerate(stages):
        assert layerwise_fit.losses[f"layer{layer}"].shape == (5,)
        assert {_layer(n) for n in params} == {*range(layer + 1), None}
        if layer:
            before = stages[layer - 1]
            for name, value in before.items():
                if _layer(name) is not None:  # every lower layer's param: the same bits
                    assert torch.as_tensor(params[name]).numpy().tobytes() == torch.as_tensor(value).numpy().tobytes()
            own = [n for n in params if _layer(n) == layer]
            assert {n.split(".", 1)[1] for n in own} >= {"Z", "u_loc", "u_scale_tril", "kernel.variance"}
        assert not torch.equal(torch.as_tensor(params["likelihood.variance"]), torch.ones(()))
    for name, value in stages[-1].items():  # the joint pre-training starts where the layer-wise phase ended
        assert np.all(np.isfinite(np.asarray(value))), name
    assert len(layerwise_fit.losses["pre"]) == 6


@pytest.mark.parametrize(
    ("elbo", "kill_at", "written"),
    [
        (pyro.infer.TraceMeanField_ELBO, 9, {"layer0", "layer1"}),  # layer 1's 4th step, after its checkpoint at 3
        (ScoreFunctionELBO, 5, {"layer0", "layer1", "pre", "selection"}),
    ],
    ids=["layerwise", "selection"],
)
def test_an_interrupted_fit_resumed_from_its_checkpoints_ends_as_an_uninterrupted_one(
    layerwise_fit, elbo, kill_at, written, tmp_path, monkeypatch
):
    with ctrl_c_at_call(monkeypatch, elbo, kill_at):
        _fit(**LAYERWISE, checkpoint_dir=tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {f"selective_{name}.npz" for name in written}
    resumed = _fit(**LAYERWISE, checkpoint_dir=tmp_path)
    straight = layerwise_fit
    assert {p.name for p in tmp_path.iterdir()} == {f"selective_{n}.npz" for n in ("layer0", "layer1",
                                                                                   *PHASES)}  # fmt: skip
    for got, expected in zip(resumed.masks, straight.masks, strict=True):
        np.testing.assert_array_equal(got, expected)
    assert set(resumed.losses) == set(straight.losses)
    for phase, losses in straight.losses.items():
        np.testing.assert_array_equal(resumed.losses[phase], losses)
    assert set(resumed.params) == set(straight.params)
    for name, value in straight.params.items():
        assert torch.equal(resumed.params[name], value), name


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        ({"seed": True}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"likelihood": "gaussian"}, "likelihood"),
        ({"candidates": 31}, "candidates"),
        ({"candidates": [X[:4]]}, "candidates"),
        ({"pretraining": "greedy"}, "pretraining"),
        ({"pretraining": "layerwise"}, "pretraining"),  # needs inner_mean="zero"
        ({**LAYERWISE, "init_params": {"likelihood.variance": 0.5}}, "init_params"),
        ({**LAYERWISE, "y": np.stack([Y, Y], axis=1)}, "y"),
        ({"layerwise_steps": 0}, "layerwise_steps"),
        ({"selection_steps": 0}, "selection_steps"),
        ({"y": Y[:-1]}, "y|X"),
    ],
)
def test_bad_input_is_refused_before_anything_runs_or_is_written(arguments, name, tmp_path, monkeypatch):
    trap_phases(monkeypatch, selective_pyro)
    folder = tmp_path / "checkpoints"
    arguments = {**TINY, "seed": 3, **arguments}
    y = arguments.pop("y", Y)
    with pytest.raises(ValueError, match=name):
        selective_pyro.fit_selective_deep(X, y, progress=False, checkpoint_dir=folder, **arguments)
    assert not folder.exists()


def test_an_empty_joint_subset_is_redrawn_then_refused():
    with pytest.raises(ValueError, match="left some layer empty"):
        selective_pyro.sample_joint_subset([np.full(3, 0.5), np.full(4, 1e-12)], 0)
    masks = selective_pyro.sample_joint_subset([np.array([1e-12, 0.5]), np.array([0.5, 1e-12])], 1)
    assert [m.tolist() for m in masks] == [[0.0, 1.0], [1.0, 0.0]]
    state = torch.get_rng_state()
    first, again = (selective_pyro.sample_joint_subset([np.full(5, 0.5)] * 2, 7) for _ in range(2))
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert torch.equal(torch.get_rng_state(), state)  # torch's global generator is left alone


def test_a_given_likelihood_is_the_pyro_models():
    fit = _fit(likelihood=Gaussian(0.3), pre_steps=0, post_steps=0, selection_steps=1)
    assert float(fit.selective_params["likelihood.variance"]) == pytest.approx(0.3)


def test_a_frozen_selection_from_earlier_pretrained_params_starts_and_stays_there(layerwise_fit):
    pretrained = layerwise_fit.pretrained_params
    again = _fit(**{**LAYERWISE, "pretraining": "joint", "pre_steps": 0, "selection_steps": 2}, init_params=pretrained)
    assert "pre" not in again.losses and again.layerwise_params == []
    for name, value in pretrained.items():
        np.testing.assert_allclose(again.selective_params[name].numpy(), value.numpy(), rtol=1e-12, err_msg=name)
    assert not all(np.allclose(p, 0.5) for p in again.inclusion_probs)
