"""Layer-wise pre-training of the selective deep GP (paper App. C.4, ``pretraining="layerwise"``): in layer ℓ's phase
only layer ℓ's params (and the shared likelihood's) move, the others stay bitwise as they were; the bound of the
whole deep GP after the phase is finite and above the bound at the model's start; the option is checked."""

import jax
import numpy as np
import pytest
from numpyro import handlers

from ppl_sparsegp.recipes.selective import SelectiveDeepConfig, fit_selective_deep

LAYERS = 3


@pytest.fixture(scope="module")
def square_wave():
    """40 points of the released notebook's square wave y = round(0.5 sin x + 0.5) on [0, 20], float64."""
    X = np.linspace(0.0, 20.0, 40)[:, None]
    return X, np.round(0.5 * np.sin(X[:, 0]) + 0.5)


@pytest.fixture(scope="module")
def layerwise(square_wave):
    X, y = square_wave
    return fit_selective_deep(
        X, y, candidates=8, num_layers=LAYERS, inner_mean="zero", pretraining="layerwise", layerwise_steps=300,
        jitter=1e-3, pre_steps=0, selection_steps=1, post_steps=0, batch_size=None, alpha=0.5, key=3, progress=False,
    )  # fmt: skip


def _layer(name: str) -> int | None:
    return int(name[len("layer") : name.index(".")]) if name.startswith("layer") else None


def test_each_layer_phase_moves_only_its_own_layer(layerwise):
    stages = layerwise.layerwise_params
    assert len(stages) == LAYERS
    assert set(layerwise.losses) >= {f"layer{i}" for i in range(LAYERS)}
    for layer, params in enumerate(stages):
        assert {_layer(n) for n in params} == {*range(layer + 1), None}  # layers above are not there yet
        assert all(n.startswith("likelihood.") for n in params if _layer(n) is None)
        if layer == 0:
            continue
        before = stages[layer - 1]
        for name, value in before.items():
            if _layer(name) is not None:  # every lower layer's param: the same bits
                assert np.asarray(params[name]).tobytes() == np.asarray(value).tobytes(), name
        losses = layerwise.losses[f"layer{layer}"]
        assert losses.shape == (300,) and losses[-10:].mean() < losses[:10].mean()
        own = [n for n in params if _layer(n) == layer]
        assert {n.split(".", 1)[1] for n in own} >= {"Z", "u_loc", "u_scale_tril", "kernel.variance"}
    last = stages[-1]
    assert all(np.all(np.isfinite(np.asarray(v))) for v in last.values())
    # the selection starts where the layer-wise phase ended (pre_steps=0)
    for name, value in last.items():
        np.testing.assert_array_equal(np.asarray(layerwise.pretrained_params[name]), np.asarray(value))


def _initial_params(model, X, y) -> dict:
    """Every param of ``model`` at its own start, read from traces of its guide and model."""
    out = {}
    for program in (model.guide, model.model):
        trace = handlers.trace(handlers.seed(program, 0)).get_trace(X, y)
        out |= {name: site["value"] for name, site in trace.items() if site["type"] == "param"}
    return out


@pytest.mark.slow
def test_the_bound_after_the_layerwise_phase_is_finite_and_above_the_start(square_wave, layerwise):
    X, y = square_wave
    model = layerwise.selective.ordinary
    key = jax.random.PRNGKey(0)
    bound = jax.jit(lambda params: model.elbo(params, X, y, key, num_samples=64))
    start, after = (float(bound(p)) for p in (_initial_params(model, X, y), layerwise.layerwise_params[-1]))
    assert np.isfinite(start) and np.isfinite(after)
    assert after > start + 10.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"pretraining": "greedy"}, "pretraining"),
        ({"pretraining": "layerwise", "layerwise_steps": 0}, "layerwise_steps"),
        ({"pretraining": "layerwise"}, "inner_mean"),  # the default inner mean is linear
        ({"jitter": -1.0}, "jitter"),
    ],
)
def test_bad_layerwise_settings_are_named(overrides, message):
    with pytest.raises(ValueError, match=message):
        SelectiveDeepConfig(**overrides)


def test_layerwise_refuses_init_params_and_several_outputs(square_wave):
    X, y = square_wave
    options = {"inner_mean": "zero", "pretraining": "layerwise", "candidates": 4, "batch_size": None}
    with pytest.raises(ValueError, match="init_params"):
        fit_selective_deep(X, y, init_params={}, **options)
    with pytest.raises(ValueError, match="y: layer-wise"):
        fit_selective_deep(X, np.stack([y, y], axis=1), **options)


@pytest.mark.slow
def test_layerwise_phases_checkpoint_and_a_second_call_resumes_them(square_wave, tmp_path):
    X, y = square_wave
    options = {
        "candidates": 4, "num_layers": 2, "inner_mean": "zero", "pretraining": "layerwise", "layerwise_steps": 20,
        "jitter": 1e-3, "pre_steps": 0, "selection_steps": 1, "post_steps": 0, "batch_size": None, "key": 1,
        "progress": False, "checkpoint_dir": tmp_path,
    }  # fmt: skip
    first = fit_selective_deep(X, y, **options)
    layers = [tmp_path / f"selective_layer{i}.npz" for i in range(2)]
    written = [path.stat().st_mtime_ns for path in layers]
    again = fit_selective_deep(X, y, **options)
    assert [path.stat().st_mtime_ns for path in layers] == written  # read back, not run again
    for before, after in zip(first.layerwise_params, again.layerwise_params, strict=True):
        assert before.keys() == after.keys()
        for name in before:
            np.testing.assert_array_equal(np.asarray(after[name]), np.asarray(before[name]))
