"""The selection phase of the Pyro twins of fit_selective and fit_selective_deep (recipes/selective_pyro.py) trains
with the Pyro ScoreFunctionELBO set as the NumPyro recipes set theirs (S, β, ``pathwise`` only for joint selection):
at the same params, the same baseline and the same draws of the inclusion masks (and, for the deep GP, the same
inner-layer noise) the loss and the gradient of every param equal the NumPyro recipe's to 1e-8, KL[q_λ ‖ p_α] and the
KL of q(u) in closed form on both sides (Pyro's TraceGraph_ELBO, which the recipes used before, estimates them from
the draws). With the GP frozen (``pathwise=False``) only λ gets a gradient: the NumPyro twin's is exactly zero for
every other param, the Pyro one's ``.grad`` stays None. The deep GP's layers share one baseline, as on the NumPyro
side, and the recipes checkpoint its running sums with the selection's params. Float64 (tests/conftest.py)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _score_function_checks import captured_loss, numpyro_loss_and_grads, pyro_loss_and_grads
from numpyro import handlers

from ppl_sparsegp.infer import checkpoint
from ppl_sparsegp.infer.score_function import ScoreFunctionELBO as NumPyroScoreFunctionELBO
from ppl_sparsegp.models.pyro._base import twin_of
from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.pyro.score_function import BASELINE_TOTAL, BASELINE_WEIGHT, ScoreFunctionELBO
from ppl_sparsegp.recipes import phases, selective, selective_pyro
from ppl_sparsegp.recipes.phases import phase_checkpoint

RNG = np.random.default_rng(0)
X = RNG.uniform(0.0, 10.0, (40, 1))
Y = np.sin(X[:, 0]) + 0.1 * RNG.standard_normal(40)
SHALLOW = {"candidates": 8, "alpha": 0.5, "num_particles": 3, "pre_steps": 0, "selection_steps": 4, "post_steps": 0}
DEEP = {"candidates": 6, "num_layers": 2, "alpha": 0.5, "batch_size": None, "jitter": 1e-3, "num_particles": 3,
        "pre_steps": 0, "selection_steps": 4, "post_steps": 0}  # fmt: skip
BASELINE = -60.0
SEED = 3


@pytest.fixture(autouse=True)
def float64():
    with default_dtype("float64"):
        yield


@pytest.mark.parametrize("selection", ["frozen", "joint"])
@pytest.mark.parametrize("deep", [False, True], ids=["fit_selective", "fit_selective_deep"])
def test_the_selection_loss_is_set_as_the_numpyro_recipes(deep, selection, monkeypatch):
    settings = {**(DEEP if deep else SHALLOW), "selection": selection}
    name = "fit_selective_deep" if deep else "fit_selective"
    by_pyro = captured_loss(monkeypatch, selective_pyro, getattr(selective_pyro, name), X, Y, seed=0, **settings)
    by_numpyro = captured_loss(monkeypatch, phases, getattr(selective, name), X, Y, key=0, **settings)
    assert isinstance(by_pyro, ScoreFunctionELBO) and isinstance(by_numpyro, NumPyroScoreFunctionELBO)
    assert by_pyro.pathwise is (selection == "joint") and by_numpyro.pathwise is (selection == "joint")
    assert (by_pyro.num_particles, by_pyro.baseline_decay) == (by_numpyro.num_particles, by_numpyro.baseline_decay)
    assert by_pyro.num_particles == 3


def _params(numpyro_model, *args):
    """Every param of the NumPyro model and guide at its start, λ of each layer moved off λ₀ to U(0.2, 0.8)."""
    params = {}
    for program in (numpyro_model.model, numpyro_model.guide):
        sites = handlers.trace(handlers.seed(program, 0)).get_trace(*args)
        params.update({name: np.asarray(site["value"]) for name, site in sites.items() if site["type"] == "param"})
    rng = np.random.default_rng(5)
    for name in params:
        if name.endswith("inclusion_probs"):
            params[name] = rng.uniform(0.2, 0.8, size=params[name].shape)
        elif name.endswith("u_loc"):
            params[name] = params[name] + 0.3 * rng.normal(size=params[name].shape)
    return params


def _draws(params):
    """A fixed mask s [K] of every inclusion site (the first candidate kept), which every particle draws."""
    rng = np.random.default_rng(6)
    draws = {}
    for name, value in params.items():
        if name.endswith("inclusion_probs"):
            mask = (rng.uniform(size=value.shape) < 0.6).astype(float)
            mask[0] = 1.0
            draws[name.replace("inclusion_probs", "inclusion")] = mask
    return draws


def _fixed_noise(i: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng([7 + i, *shape]).standard_normal(shape)


def _problem(deep, settings):
    """The NumPyro selective model of the recipe (from key=SEED) and its Pyro twin; the deep GP's inner-layer noise
    on both replaced by one fixed draw, as tests/pyro/test_pyro_selective_deep_recipe.py does."""
    if deep:
        built = selective.build_selective_deep(
            X, Y, selective.SelectiveDeepConfig(**settings), likelihood=None, key=SEED
        )
        numpyro_model = built.selective
        pyro_model = twin_of(numpyro_model)
        numpyro_model.ordinary._noise = lambda key: lambda i, shape, dtype: jnp.asarray(_fixed_noise(i, shape), dtype)
        pyro_model.ordinary._noise = lambda: (
            lambda i, shape, dtype: torch.as_tensor(_fixed_noise(i, shape), dtype=dtype)
        )
    else:
        _, numpyro_model = selective.build_selective(
            X, Y, selective.SelectiveConfig(**settings), likelihood=None, kernel=None, key=SEED
        )
        pyro_model = twin_of(numpyro_model)
    return numpyro_model, pyro_model


@pytest.mark.parametrize(
    ("deep", "bound", "selection"),
    [
        (False, "collapsed", "frozen"),
        (False, "uncollapsed", "frozen"),
        (False, "uncollapsed", "joint"),
        (True, None, "frozen"),
        (True, None, "joint"),
    ],
    ids=["sgpr-frozen", "svgp-frozen", "svgp-joint", "deep-frozen", "deep-joint"],
)
def test_the_selection_phase_has_the_numpyro_recipes_loss_and_gradients_at_the_same_draws(
    deep, bound, selection, monkeypatch
):
    settings = {**(DEEP if deep else {**SHALLOW, "bound": bound}), "selection": selection}
    fit = selective_pyro.fit_selective_deep if deep else selective_pyro.fit_selective
    elbo = captured_loss(monkeypatch, selective_pyro, fit, X, Y, seed=SEED, **settings)
    numpyro_fit = selective.fit_selective_deep if deep else selective.fit_selective
    numpyro_elbo = captured_loss(monkeypatch, phases, numpyro_fit, X, Y, key=SEED, **settings)
    numpyro_model, pyro_model = _problem(deep, settings)
    args = (X, Y)
    params = _params(numpyro_model, *map(jnp.asarray, args))
    draws = _draws(params)
    assert len(draws) == (2 if deep else 1)
    by_numpyro, numpyro_grads = numpyro_loss_and_grads(numpyro_elbo, numpyro_model, params, draws, args, BASELINE)
    by_pyro, pyro_grads = pyro_loss_and_grads(elbo, pyro_model, params, draws, args, BASELINE)
    assert np.isfinite(by_numpyro) and by_pyro == pytest.approx(by_numpyro, rel=1e-8)
    assert set(pyro_grads) == set(numpyro_grads)
    for name, grad in numpyro_grads.items():
        learns = name.endswith("inclusion_probs") or selection == "joint"
        if not learns:
            assert np.all(grad == 0) and pyro_grads[name] is None, name
            continue
        assert np.any(grad != 0), name  # a param that learns is in the comparison
        by_torch = pyro_grads[name].numpy()
        np.testing.assert_allclose(by_torch, grad, rtol=1e-8, atol=1e-8 * np.max(np.abs(grad)), err_msg=name)
    moved = {name: 0.9 * v if name.endswith("inclusion_probs") else v for name, v in params.items()}
    assert abs(pyro_loss_and_grads(elbo, pyro_model, moved, draws, args, BASELINE)[0] - by_pyro) > 1e-6  # it can fail


@pytest.mark.parametrize("deep", [False, True], ids=["fit_selective", "fit_selective_deep"])
def test_the_recipes_checkpoint_one_baseline_with_the_selection(deep, tmp_path):
    """After n selection steps the weight is Σ_{j=1..n} β^j at β = 0.95 (both engines' default), and the running
    sums, one pair for all layers, are in the returned params and the selection's checkpoint; TraceGraph_ELBO's
    per-site averages are not."""
    settings = DEEP if deep else SHALLOW
    fit = (selective_pyro.fit_selective_deep if deep else selective_pyro.fit_selective)(
        X, Y, seed=SEED, progress=False, checkpoint_dir=tmp_path, **settings
    )
    n = settings["selection_steps"]
    weight = sum(0.95**j for j in range(1, n + 1))
    assert float(fit.selective_params[BASELINE_WEIGHT]) == pytest.approx(weight, rel=1e-12)
    assert np.isfinite(float(fit.selective_params[BASELINE_TOTAL]))
    assert not any(name.startswith("__baseline_avg") for name in fit.selective_params)
    saved = checkpoint.read(phase_checkpoint(tmp_path, "selection"))
    later = saved.groups["later"]
    assert float(later[BASELINE_WEIGHT]) == pytest.approx(weight, rel=1e-12)
    assert not any(name.startswith("__baseline_avg") for name in later)


def test_pathwise_must_be_a_bool():
    with pytest.raises(ValueError, match="pathwise: expected True or False, got 'no'"):
        ScoreFunctionELBO(2, pathwise="no")
    with pytest.raises(ValueError, match="pathwise: expected True or False, got 'no'"):
        NumPyroScoreFunctionELBO(2, pathwise="no")
