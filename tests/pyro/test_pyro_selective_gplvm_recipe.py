"""The Pyro twin of fit_selective_gplvm (recipes/selective_pyro.py): with either bound it pre-trains, trains
everything jointly, records λ and the latent means, and prunes to an ordinary Pyro GP-LVM on the kept grid points; it
builds the NumPyro recipe's grid and model, and at the same params both give the same bound of the kept subset at
the same latent draws (to 1e-8), and its all-grid GP-LVM (gplvm_on_grid) is the NumPyro one's twin, with the same
start and the same bound at the same params and draws; a fit interrupted in either phase and resumed from its
checkpoints ends where an uninterrupted fit ends, the trace included; the joint phase's baseline (of the Pyro
ScoreFunctionELBO, tests/pyro/test_pyro_score_function.py) takes ``baseline_decay``; bad input is refused before
anything runs or is written; (slow) on a 2-D manifold it keeps far fewer than all grid points, those near the
latents. Float64 (tests/conftest.py)."""

from __future__ import annotations

import jax
import numpy as np
import pyro
import pytest
import torch
from _selective_problems import (
    B7_SETTINGS,
    assert_keeps_few_grid_points_near_the_latents,
    ctrl_c_at_call,
    curve_in_3d,
    manifold_in_4d,
    trap_phases,
)

from ppl_sparsegp.models.pyro import gplvm as pyro_gplvm
from ppl_sparsegp.models.pyro.selective import INCLUSION_PARAM
from ppl_sparsegp.models.pyro.selective_gplvm import SelectiveCollapsedGPLVM, SelectiveGPLVM
from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.pyro.score_function import BASELINE_TOTAL, BASELINE_WEIGHT, ScoreFunctionELBO
from ppl_sparsegp.recipes import selective, selective_pyro
from ppl_sparsegp.recipes.selective import TRACE_FILE, SelectiveGPLVMConfig

N, D, Q, SIZE = 30, 3, 2, 3
K = SIZE**Q
TINY = {"grid_size": SIZE, "alpha": 0.5, "pre_steps": 3, "steps": 6, "record_every": 3, "num_particles": 2}


@pytest.fixture(scope="module")
def data():
    return curve_in_3d(N, Q)


def _fit(Y, **settings):
    return selective_pyro.fit_selective_gplvm(Y, seed=1, progress=False, **{**TINY, **settings})


@pytest.fixture(scope="module", params=["uncollapsed", "collapsed"])
def pruned_fit(request, data):
    """A fit with each bound and ``prune=True`` (the bound: ``fit.bound``), in float64 as every test here (module
    fixtures run outside tests/conftest.py's per-test float64)."""
    with default_dtype("float64"):
        fit = _fit(data, bound=request.param, prune=True)
    fit.bound = request.param
    return fit


CLASSES = {
    "uncollapsed": (SelectiveGPLVM, pyro_gplvm.BayesianGPLVM),
    "collapsed": (SelectiveCollapsedGPLVM, pyro_gplvm.CollapsedGPLVM),
}


def _numpyro_bound(model, params, X_draws, data, bound: str) -> float:
    """A NumPyro GP-LVM's bound at given latent draws [S, N, Q]: the mean data term (the svgp or sgpr bound by
    ``bound``) minus the latents' KL, to compare with the Pyro twin's estimate from the same draws."""
    data_bound = jax.jit(model.svgp.elbo if bound == "uncollapsed" else model.sgpr.elbo)
    gp = {name: v for name, v in params.items() if not name.startswith("X_")}
    return float(np.mean([float(data_bound(gp, X, data)) for X in X_draws]) - float(model.latents.kl(params)))


def test_both_phases_run_record_the_trace_and_prune_to_an_ordinary_gplvm(data, pruned_fit):
    fit = pruned_fit
    assert (type(fit.model), type(fit.pruned)) == CLASSES[fit.bound]
    assert fit.pre_losses.shape == (3,) and fit.losses.shape == (6,)
    assert np.all(np.isfinite(fit.pre_losses)) and np.all(np.isfinite(fit.losses))
    np.testing.assert_array_equal(fit.trace_steps, [0, 3, 6])
    assert fit.inclusion_trace.shape == (3, K) and fit.latent_trace.shape == (3, N, Q)
    np.testing.assert_allclose(fit.inclusion_trace[0], 0.5)
    np.testing.assert_array_equal(fit.inclusion_trace[-1], fit.inclusion_probs)
    np.testing.assert_array_equal(fit.latent_trace[-1], fit.params["X_loc"].numpy())
    assert not np.allclose(fit.inclusion_probs, 0.5)
    # the joint phase starts where the pre-training left the latents and moves them
    assert not np.allclose(fit.latent_trace[0], pyro_gplvm.pca_latents(data, Q))
    assert not np.allclose(fit.latent_trace[-1], fit.latent_trace[0])
    for name, initial in {"kernel.variance": 1.0, "kernel.lengthscale": 1.0, "X_scale": 0.1}.items():
        assert not np.allclose(fit.params[name].numpy(), initial), name
    assert "likelihood.variance" not in fit.params  # fixed at 0.01, as the NumPyro recipe
    assert set(np.unique(fit.mask)) <= {0.0, 1.0} and fit.mask.any()
    np.testing.assert_array_equal(fit.pruned.Z.numpy(), fit.grid[fit.mask == 1])
    assert not any("inclusion" in name for name in fit.pruned_params)
    mean, var = fit.pruned.reconstruct(fit.pruned_params, data)
    assert mean.shape == var.shape == (N, D) and torch.all(var > 0)


def test_the_numpyro_recipes_grid_and_the_same_bound_at_the_same_params(data, pruned_fit):
    fit, bound = pruned_fit, pruned_fit.bound
    grid, numpyro_model = selective.grid_model(data, SelectiveGPLVMConfig(**TINY, bound=bound))
    np.testing.assert_array_equal(fit.grid, grid)
    np.testing.assert_array_equal(fit.model.ordinary.Z.numpy(), np.asarray(numpyro_model.ordinary.Z))
    np.testing.assert_array_equal(fit.model.ordinary.X_init, np.asarray(numpyro_model.ordinary.X_init))
    params = {name: v.numpy() for name, v in fit.params.items() if not name.startswith("__")}

    def pyro_bound(values):
        pyro.set_rng_seed(5)
        return float(fit.model.subset_bound(values, data, fit.mask, num_samples=2))

    pyro.set_rng_seed(5)  # the latent draws that subset_bound takes, replayed into the NumPyro bound
    pruned, sparse = fit.model.prune(params, fit.mask)
    X_draws = pruned.latents.q(sparse).sample((2,)).numpy()
    numpyro_pruned, numpyro_sparse = numpyro_model.prune(params, fit.mask)
    by_numpyro = _numpyro_bound(numpyro_pruned, numpyro_sparse, X_draws, data, bound)
    by_pyro = pyro_bound(params)
    assert np.isfinite(by_pyro) and abs(by_pyro - by_numpyro) <= 1e-8 * abs(by_numpyro)
    np.testing.assert_allclose(
        float(fit.model.kl_selection(params)), float(numpyro_model.kl_selection(params)), rtol=1e-8
    )
    moved = {**params, "kernel.lengthscale": params["kernel.lengthscale"] * 1.01}
    assert abs(pyro_bound(moved) - by_pyro) > 1e-6 * abs(by_pyro)  # the comparison can fail


@pytest.mark.parametrize(
    ("elbo", "kill_at"),
    [(pyro.infer.TraceMeanField_ELBO, 2), (ScoreFunctionELBO, 6)],
    ids=["pre", "joint"],
)
def test_an_interrupted_fit_resumed_from_its_checkpoints_ends_as_an_uninterrupted_one(data, elbo, kill_at, tmp_path,
                                                                                      monkeypatch):  # fmt: skip
    """Recorded every 2 steps and checkpointed every 3 (rounded up to records: at 4, 8 and 9), a run stopped by
    Ctrl-C in its pre-training (after 1 step) or in its joint phase (after 5 steps, between records) resumes to the
    uninterrupted fit's params, losses, trace and subset, bit for bit."""
    settings = {"bound": "collapsed", "steps": 9, "record_every": 2, "checkpoint_every": 3, "prune": True}
    straight = _fit(data, **settings)
    with ctrl_c_at_call(monkeypatch, elbo, kill_at):
        _fit(data, checkpoint_dir=tmp_path, **settings)
    if elbo is ScoreFunctionELBO:
        with np.load(tmp_path / TRACE_FILE) as trace:
            np.testing.assert_array_equal(trace["steps"], [0, 2, 4])
    resumed = _fit(data, checkpoint_dir=tmp_path, **settings)
    np.testing.assert_array_equal(resumed.trace_steps, [0, 2, 4, 6, 8, 9])
    np.testing.assert_array_equal(resumed.trace_steps, straight.trace_steps)
    np.testing.assert_array_equal(resumed.inclusion_trace, straight.inclusion_trace)
    np.testing.assert_array_equal(resumed.latent_trace, straight.latent_trace)
    np.testing.assert_array_equal(resumed.pre_losses, straight.pre_losses)
    np.testing.assert_array_equal(resumed.losses, straight.losses)
    np.testing.assert_array_equal(resumed.mask, straight.mask)
    assert set(resumed.params) == set(straight.params)
    for name, value in straight.params.items():
        assert torch.equal(resumed.params[name], value), name


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        ({"seed": True}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"Y": "first column"}, "Y"),
        ({"Y": "inf"}, "Y"),
        ({"latent_dim": 4}, "latent_dim"),
        ({"grid_size": 1}, "grid_size"),
        ({"extent": [[0.0, 1.0]]}, "extent"),
        ({"bound": "psi"}, "bound"),
        ({"bound": "collapsed", "batch_size": 10}, "batch_size"),
        ({"baseline_decay": 1.0}, "baseline_decay"),
        ({"record_every": 0}, "record_every"),
        ({"steps": 0}, "steps"),
        ({"prune": "yes"}, "prune"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
    ],
)
def test_bad_input_is_refused_before_anything_runs_or_is_written(data, arguments, name, tmp_path, monkeypatch):
    trap_phases(monkeypatch, selective_pyro)
    folder = tmp_path / "checkpoints"
    arguments = {**TINY, "seed": 1, **arguments}
    Y = {"first column": data[:, 0], "inf": np.where(data > 1, np.inf, data)}.get(arguments.pop("Y", None), data)
    with pytest.raises(ValueError, match=name):
        selective_pyro.fit_selective_gplvm(Y, progress=False, checkpoint_dir=folder, **arguments)
    assert not folder.exists()


def test_the_joint_phase_takes_the_configured_baseline_decay(data):
    """The joint phase's ScoreFunctionELBO keeps its baseline at β = baseline_decay: after one step its running
    weight is β and its running total β times that step's mean bound, the same bound for both decays."""
    means = {}
    for decay in (0.95, 0.5):
        fit = _fit(data, bound="collapsed", pre_steps=0, steps=1, record_every=1, num_particles=1, baseline_decay=decay)
        assert float(fit.params[BASELINE_WEIGHT]) == pytest.approx(decay, rel=1e-12)
        means[decay] = float(fit.params[BASELINE_TOTAL]) / decay
    assert means[0.5] == pytest.approx(means[0.95], rel=1e-9)
    assert INCLUSION_PARAM in fit.params


@pytest.mark.slow  # about 55 s (2 cores, shared)
def test_a_collapsed_fit_keeps_far_fewer_than_all_grid_points_and_those_near_the_latents():
    """The NumPyro recipe's check B7 in small (tests/models/test_selective_gplvm.py) on the Pyro twin: 80 points on
    a 2-D manifold in 4-D, an 8 × 8 grid, α = 3, 300 joint steps of the collapsed bound."""
    fit = selective_pyro.fit_selective_gplvm(manifold_in_4d(), seed=0, bound="collapsed", progress=False, **B7_SETTINGS)
    assert_keeps_few_grid_points_near_the_latents(fit)


@pytest.mark.parametrize("noise_variance", [0.01, None], ids=["fixed noise", "learned noise"])
@pytest.mark.parametrize("bound", ["uncollapsed", "collapsed"])
def test_the_all_grid_gplvm_is_the_numpyro_ones_twin_with_its_initial_values_and_bound(data, bound, noise_variance):
    """selective_pyro.gplvm_on_grid builds the twin of the NumPyro all-grid GP-LVM (selective.gplvm_on_grid): the
    same class, grid, PCA-started latents and q(u) = p(u) start, and at the same params and the same latent draws
    the same bound (to 1e-10); a moved lengthscale moves it, so the comparison can fail. With ``alpha`` it is the
    selective GP-LVM over the grid, as the NumPyro function's."""
    grid = selective.latent_grid(SIZE, latents=pyro_gplvm.pca_latents(data, Q))
    settings = {"latent_dim": Q, "noise_variance": noise_variance, "latent_scale": 0.2, "bound": bound}
    numpyro_model = selective.gplvm_on_grid(data, grid, **settings)
    model = selective_pyro.gplvm_on_grid(data, grid, **settings)
    assert type(model) is CLASSES[bound][1]
    np.testing.assert_array_equal(model.Z.numpy(), grid)
    np.testing.assert_array_equal(model.X_init, np.asarray(numpyro_model.X_init))
    assert set(model.fixed) == set(numpyro_model.fixed) == ({"likelihood.variance"} if noise_variance else set())
    start = model.initial_params()
    assert set(start) == set(numpyro_model.initial_params())
    for name, value in numpyro_model.initial_params().items():
        np.testing.assert_allclose(start[name].numpy(), np.asarray(value), rtol=1e-12, atol=1e-12)

    rng = np.random.default_rng(4)
    params = {
        "kernel.variance": np.array(0.9),
        "kernel.lengthscale": np.array([0.8, 1.2]),
        "X_loc": model.X_init + 0.05 * rng.standard_normal((N, Q)),
        "X_scale": rng.uniform(0.1, 0.3, (N, Q)),
        "likelihood.variance": np.array(0.01 if noise_variance else 0.3),
    }
    if bound == "uncollapsed":
        params |= {"u_loc": 0.1 * rng.standard_normal((D, K)), **{k: v.numpy() for k, v in start.items()}}

    def pyro_bound(values):
        pyro.set_rng_seed(7)
        return float(model.elbo(values, data, num_samples=3))

    pyro.set_rng_seed(7)  # the latent draws that elbo takes, replayed into the NumPyro bound
    X_draws = model.latents.q(params).rsample((3,)).numpy()
    by_numpyro = _numpyro_bound(numpyro_model, params, X_draws, data, bound)
    by_pyro = pyro_bound(params)
    assert np.isfinite(by_pyro) and abs(by_pyro - by_numpyro) <= 1e-10 * abs(by_numpyro)
    moved = {**params, "kernel.lengthscale": params["kernel.lengthscale"] * 1.01}
    assert abs(pyro_bound(moved) - by_pyro) > 1e-6 * abs(by_pyro)

    selection = {"alpha": 3.0, "initial_inclusion": 0.4}
    on_grid = selective_pyro.gplvm_on_grid(data, grid, **settings, **selection)
    assert type(on_grid) is CLASSES[bound][0]
    assert type(on_grid.ordinary) is CLASSES[bound][1]
    np.testing.assert_allclose(on_grid.inclusion_probabilities({}).numpy(), 0.4)
