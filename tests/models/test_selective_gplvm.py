"""Selective GP-LVM: the latent grid, the masked bound against the pruned model, gradients, the fit, bad input."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _selective_problems import (
    B7_SETTINGS,
    assert_keeps_few_grid_points_near_the_latents,
    curve_in_3d,
    manifold_in_4d,
)
from numpyro import handlers
from numpyro.infer import TraceMeanField_ELBO

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.models.numpyro.gplvm import BayesianGPLVM, CollapsedGPLVM, pca_latents
from ppl_sparsegp.models.numpyro.selective import INCLUSION_PARAM
from ppl_sparsegp.models.numpyro.selective_gplvm import SelectiveCollapsedGPLVM, SelectiveGPLVM
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.recipes import selective as selective_gplvm
from ppl_sparsegp.recipes.selective import TRACE_FILE, fit_selective_gplvm, gplvm_on_grid, latent_grid
from ppl_sparsegp.results import write_npz

N, D, Q, SIZE = 30, 3, 2, 3
K = SIZE**Q


@pytest.fixture(scope="module")
def data():
    return curve_in_3d(N, Q)


@pytest.fixture(scope="module")
def selective(data):
    """A SelectiveGPLVM over a 3 × 3 grid and random values of every parameter (q(u) over all 9 candidates)."""
    model = gplvm_on_grid(data, latent_grid(SIZE, latents=pca_latents(data, Q)), alpha=0.5, noise_variance=0.1)
    rng = np.random.default_rng(3)
    tril = np.tril(0.3 * rng.normal(size=(D, K, K)), -1) + np.eye(K) * rng.uniform(0.2, 0.6, size=(D, 1, K))
    params = {
        "kernel.variance": jnp.asarray(1.2),
        "kernel.lengthscale": jnp.asarray([0.9, 1.3]),
        "u_loc": jnp.asarray(rng.normal(size=(D, K))),
        "u_scale_tril": jnp.asarray(tril),
        "X_loc": jnp.asarray(model.ordinary.X_init + 0.1 * rng.normal(size=(N, Q))),
        "X_scale": jnp.asarray(rng.uniform(0.05, 0.3, size=(N, Q))),
        INCLUSION_PARAM: jnp.asarray(rng.uniform(0.2, 0.8, size=K)),
    }
    return model, params


def test_latent_grid_covers_the_padded_range_or_the_given_extent():
    latents = np.array([[0.0, -1.0], [2.0, 3.0], [1.0, 0.0]])
    grid = latent_grid(4, latents=latents, margin=0.5)
    assert grid.shape == (16, 2)
    np.testing.assert_allclose(grid.min(axis=0), [-1.0, -3.0])
    np.testing.assert_allclose(grid.max(axis=0), [3.0, 5.0])
    np.testing.assert_allclose(np.unique(grid[:, 0]), [-1.0, 1 / 3, 5 / 3, 3.0])
    explicit = latent_grid(3, extent=[[-1, 1], [0, 2]])
    np.testing.assert_allclose(explicit[:3], [[-1, 0], [-1, 1], [-1, 2]])
    np.testing.assert_allclose(latent_grid(3, extent=(0, 1)), [[0.0], [0.5], [1.0]])
    for kwargs, name in (
        ({"size": 1, "extent": (0, 1)}, "size"),
        ({}, "extent"),
        ({"extent": [[1, 0]]}, "extent"),
        ({"extent": [[0, 1, 2]]}, "extent"),
        ({"latents": latents, "margin": -1.0}, "margin"),
        ({"latents": latents[:, 0]}, "latents"),
    ):
        with pytest.raises(ValueError, match=name):
            latent_grid(**kwargs)


def test_masked_bound_equals_the_pruned_models_bound_for_the_same_latent_draws(selective, data):
    """L(s) of the selective model (mask and latent draw fixed) is the bound of the ordinary GP-LVM on the selected
    grid points with q(u_s) = N(m_s, S_ss); the candidates left out, and their q(u) entries, do not matter."""
    model, params = selective
    mask = np.array([1, 0, 1, 1, 0, 0, 1, 0, 1], dtype=float)
    pruned, pruned_params = model.prune(params, mask)
    assert isinstance(pruned, BayesianGPLVM) and not isinstance(pruned, SelectiveGPLVM)
    np.testing.assert_allclose(pruned.Z, model.ordinary.Z[mask == 1])
    draw = np.asarray(params["X_loc"]) + np.asarray(params["X_scale"]) * np.random.default_rng(4).normal(size=(N, Q))
    kl_selection = float(model.kl_selection(params))

    def bound(m, p, fixed):
        fix = {"X": jnp.asarray(draw), **fixed}
        model_fn, guide_fn = handlers.substitute(m.model, data=fix), handlers.substitute(m.guide, data=fix)
        return -TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), p, model_fn, guide_fn, jnp.asarray(data))

    masked = jax.jit(lambda p: bound(model, p, {"inclusion": jnp.asarray(mask)}) + kl_selection)
    expected = float(jax.jit(lambda p: bound(pruned, p, {}))(pruned_params))
    np.testing.assert_allclose(float(masked(params)), expected, rtol=1e-9)
    excluded = mask == 0
    scrambled = {**params, "u_loc": params["u_loc"].at[:, excluded].set(5.0)}
    np.testing.assert_allclose(float(masked(scrambled)), expected, rtol=1e-9)


def test_collapsed_masked_bound_equals_the_pruned_collapsed_models_bound_for_the_same_latent_draw(data):
    """The collapsed L(s) (mask and latent draw fixed) is Titsias' bound of the CollapsedGPLVM on the selected grid
    points; the prune keeps q(X) and the hyperparameters and has no q(u) to carry."""
    grid = latent_grid(SIZE, latents=pca_latents(data, Q))
    model = gplvm_on_grid(data, grid, alpha=0.5, noise_variance=0.1, bound="collapsed")
    assert isinstance(model, SelectiveCollapsedGPLVM)
    rng = np.random.default_rng(5)
    params = {
        "kernel.variance": jnp.asarray(1.2),
        "kernel.lengthscale": jnp.asarray([0.9, 1.3]),
        "X_loc": jnp.asarray(model.ordinary.X_init + 0.1 * rng.normal(size=(N, Q))),
        "X_scale": jnp.asarray(rng.uniform(0.05, 0.3, size=(N, Q))),
        INCLUSION_PARAM: jnp.asarray(rng.uniform(0.2, 0.8, size=K)),
    }
    mask = np.array([0, 1, 1, 0, 1, 0, 1, 1, 0], dtype=float)
    pruned, pruned_params = model.prune(params, mask)
    assert type(pruned) is CollapsedGPLVM and set(pruned_params) == set(params) - {INCLUSION_PARAM} | {"Z"}
    np.testing.assert_allclose(pruned.Z, grid[mask == 1])
    draw = jnp.asarray(np.asarray(params["X_loc"]) + np.asarray(params["X_scale"]) * rng.normal(size=(N, Q)))

    def bound(m, p, fixed):
        fix = {"X": draw, **fixed}
        model_fn, guide_fn = handlers.substitute(m.model, data=fix), handlers.substitute(m.guide, data=fix)
        return -TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), p, model_fn, guide_fn, jnp.asarray(data))

    masked = float(jax.jit(lambda p: bound(model, p, {"inclusion": jnp.asarray(mask)}))(params))
    expected = float(jax.jit(lambda p: bound(pruned, p, {}))(pruned_params))
    np.testing.assert_allclose(masked + float(model.kl_selection(params)), expected, rtol=1e-9)
    # L(s) with point-mass latents: Titsias' bound of the selected grid points at μ, minus the latent KL
    point = {**params, "X_scale": jnp.full((N, Q), 1e-9)}
    kernel = RBF(variance=1.2, lengthscale=np.array([0.9, 1.3]))
    titsias = SGPR.collapsed_bound(kernel, Gaussian(0.1), grid[mask == 1], point["X_loc"], jnp.asarray(data))
    latent_kl = float(model.ordinary.latents.kl(point))
    subset = float(model.subset_bound(point, data, mask, jax.random.PRNGKey(1), 2))
    np.testing.assert_allclose(subset, float(titsias) - latent_kl, rtol=1e-9)


def test_selective_elbo_with_every_candidate_kept_is_the_all_grid_bound_minus_the_selection_kl(data):
    """λ = 1: every draw keeps all K candidates, so E_q[L(s)] − KL[q_λ ‖ p_α] is the all-grid collapsed GP-LVM's
    bound minus KL[q_λ ‖ p_α] = αK² + log C, C = Σ_n binom(K, n) exp(−α n²) (no entropy). Point-mass latents, so
    that the two estimators' different latent draws coincide."""
    alpha = 0.5
    grid = latent_grid(SIZE, latents=pca_latents(data, Q))
    selective = gplvm_on_grid(data, grid, alpha=alpha, noise_variance=0.1, bound="collapsed")
    everything = gplvm_on_grid(data, grid, noise_variance=0.1, bound="collapsed")
    params = {
        "kernel.variance": jnp.asarray(0.8),
        "kernel.lengthscale": jnp.asarray([1.1, 0.7]),
        "X_loc": jnp.asarray(selective.ordinary.X_init),
        "X_scale": jnp.full((N, Q), 1e-9),
        INCLUSION_PARAM: jnp.ones(K),
    }
    log_c = math.log(sum(math.comb(K, n) * math.exp(-alpha * n**2) for n in range(K + 1)))
    kl = float(selective.kl_selection(params))
    np.testing.assert_allclose(kl, alpha * K**2 + log_c, rtol=1e-9)
    key = jax.random.PRNGKey(2)
    everything_params = {k: v for k, v in params.items() if k != INCLUSION_PARAM}  # a model refuses others' sites
    expected = float(everything.elbo(everything_params, data, key, 3)) - kl
    np.testing.assert_allclose(float(selective.elbo(params, data, key, 3)), expected, rtol=1e-9)


@pytest.mark.slow
def test_collapsed_fit_trains_jointly_and_prunes_to_a_collapsed_gplvm(data):
    fit = fit_selective_gplvm(
        data, grid_size=3, alpha=0.5, steps=6, pre_steps=3, record_every=3, key=1, prune=True, bound="collapsed"
    )
    assert isinstance(fit.model, SelectiveCollapsedGPLVM) and type(fit.pruned) is CollapsedGPLVM
    assert not any(name.startswith("u_") for name in fit.params)
    for name, value in {"kernel.variance": 1.0, "kernel.lengthscale": 1.0, "X_scale": 0.1}.items():
        assert np.all(np.isfinite(fit.params[name])) and not np.allclose(fit.params[name], value), name
    assert fit.pre_losses.shape == (3,) and fit.losses.shape == (6,) and np.all(np.isfinite(fit.losses))
    assert not np.allclose(fit.inclusion_probs, 0.5)
    key = jax.random.PRNGKey(0)
    np.testing.assert_allclose(
        float(fit.model.subset_bound(fit.params, data, fit.mask, key, 4)),
        float(fit.pruned.elbo(fit.pruned_params, data, key, 4)),
        rtol=1e-12,
    )
    mean, _ = fit.pruned.reconstruct(fit.pruned_params, data)
    assert mean.shape == (N, D)


@pytest.mark.slow
def test_fit_trains_every_parameter_jointly_records_the_inclusion_trace_and_prunes(data):
    """Joint training (paper §5.3): λ, latents, kernel and q(u) all move in one run; the grid stays fixed."""
    fit = fit_selective_gplvm(data, grid_size=3, alpha=0.5, steps=6, record_every=3, key=1, prune=True)
    initial = {"kernel.variance": 1.0, "kernel.lengthscale": 1.0, "u_loc": 0.0, "u_scale_tril": np.eye(K)}
    for name, value in {**initial, "X_loc": fit.latent_trace[0], "X_scale": 0.1}.items():
        assert np.all(np.isfinite(fit.params[name])) and not np.allclose(fit.params[name], value), name
    assert "Z" not in fit.params and fit.model.ordinary.Z.shape == (K, Q)
    np.testing.assert_array_equal(fit.trace_steps, [0, 3, 6])
    assert fit.inclusion_trace.shape == (3, K) and fit.latent_trace.shape == (3, N, Q)
    np.testing.assert_allclose(fit.inclusion_trace[0], 0.5)
    np.testing.assert_allclose(fit.inclusion_trace[-1], fit.inclusion_probs)
    assert not np.allclose(fit.inclusion_probs, 0.5)
    assert not np.allclose(fit.latent_trace[-1], fit.latent_trace[0])
    assert fit.losses.shape == (6,) and np.all(np.isfinite(fit.losses))
    assert fit.expected_count == pytest.approx(fit.inclusion_probs.sum())
    assert 0 < fit.count_variance <= K / 4
    assert fit.pruned.Z.shape == (int(fit.mask.sum()), Q)
    assert "likelihood.variance" not in fit.params  # fixed at 0.01, as the released code
    mean, _ = fit.pruned.reconstruct(fit.pruned_params)
    assert mean.shape == (N, D)


@pytest.mark.slow
def test_pre_training_on_every_grid_point_starts_the_joint_phase(data):
    """pre_steps: the all-grid GP-LVM trains first; the joint phase starts from its latents with λ = λ₀."""
    fit = fit_selective_gplvm(data, grid_size=3, alpha=0.5, steps=3, pre_steps=5, record_every=3, key=1)
    assert fit.pre_losses.shape == (5,) and np.all(np.isfinite(fit.pre_losses))
    assert fit.pre_losses[-1] < fit.pre_losses[0]
    np.testing.assert_allclose(fit.inclusion_trace[0], 0.5)
    assert not np.allclose(fit.latent_trace[0], pca_latents(data, Q))
    assert fit.losses.shape == (3,) and np.all(np.isfinite(fit.losses))


@pytest.mark.slow  # about 30 s; `make test-slow` runs it in CI
def test_a_resumed_fit_ends_where_an_uninterrupted_one_ends_trace_included(data, tmp_path):
    """Checkpoints: a fit stopped after 6 joint steps and called again for 12 equals one that ran 12 (parameters,
    losses, λ and latent trace, pruned subset); trace records past the checkpoint, as a run killed between writing
    its trace and its checkpoint leaves them, are replaced; a finished fit called again runs nothing."""
    settings = {"grid_size": 3, "alpha": 0.5, "pre_steps": 3, "record_every": 3, "key": 1, "prune": True}
    settings.update(bound="collapsed", checkpoint_every=3)
    whole = fit_selective_gplvm(data, steps=12, **settings)
    fit_selective_gplvm(data, steps=6, checkpoint_dir=tmp_path, **settings)
    trace = tmp_path / TRACE_FILE
    with np.load(trace) as stored:
        ahead = {name: np.asarray(stored[name]) for name in ("steps", "inclusion", "latents")}
    np.testing.assert_array_equal(ahead["steps"], [0, 3, 6])
    write_npz(
        trace,
        {
            "steps": np.append(ahead["steps"], 9),
            "inclusion": np.concatenate([ahead["inclusion"], np.zeros((1, K))]),
            "latents": np.concatenate([ahead["latents"], np.zeros((1, N, Q))]),
        },
    )
    resumed = fit_selective_gplvm(data, steps=12, checkpoint_dir=tmp_path, **settings)
    again = fit_selective_gplvm(data, steps=12, checkpoint_dir=tmp_path, **settings)
    for fit in (resumed, again):
        np.testing.assert_array_equal(fit.trace_steps, [0, 3, 6, 9, 12])
        np.testing.assert_allclose(fit.inclusion_trace, whole.inclusion_trace, rtol=1e-12)
        np.testing.assert_allclose(fit.latent_trace, whole.latent_trace, rtol=1e-12)
        np.testing.assert_allclose(fit.losses, whole.losses, rtol=1e-12)
        np.testing.assert_array_equal(fit.mask, whole.mask)
        for name, value in whole.params.items():
            np.testing.assert_allclose(fit.params[name], value, rtol=1e-12, err_msg=name)


@pytest.mark.slow  # about 25 s; `make test-slow` runs it in CI
def test_the_trace_is_written_with_each_checkpoint_and_on_ctrl_c(data, tmp_path, monkeypatch):
    """Recorded every step with checkpoints every 3 steps, the trace file is written at steps 3, 6 and 7 (the end),
    not at every record; a Ctrl-C after step 4's record (fit_svi then checkpoints step 4) writes it too, and the
    resumed fit ends where an uninterrupted one ends."""
    settings = {"grid_size": 3, "alpha": 0.5, "pre_steps": 0, "record_every": 1, "key": 2, "bound": "collapsed"}
    settings.update(checkpoint_every=3, steps=7)
    whole = fit_selective_gplvm(data, **settings)
    written, real_write, real_fit = [], selective_gplvm.write_npz, selective_gplvm.fit_svi

    def counting_write(path, arrays):
        written.append(int(arrays["steps"][-1]))
        real_write(path, arrays)

    def interrupted_fit(*args, callback, **kwargs):
        def interrupt_after_step_4(step, losses, params):
            callback(step, losses, params)
            if step == 4:
                raise KeyboardInterrupt

        return real_fit(*args, callback=interrupt_after_step_4, **kwargs)

    monkeypatch.setattr(selective_gplvm, "write_npz", counting_write)
    fit_selective_gplvm(data, checkpoint_dir=tmp_path / "whole", **settings)
    assert written == [3, 6, 7]
    written.clear()
    monkeypatch.setattr(selective_gplvm, "fit_svi", interrupted_fit)
    with pytest.raises(KeyboardInterrupt):
        fit_selective_gplvm(data, checkpoint_dir=tmp_path / "cut", **settings)
    assert written == [3, 4]
    monkeypatch.setattr(selective_gplvm, "fit_svi", real_fit)
    resumed = fit_selective_gplvm(data, checkpoint_dir=tmp_path / "cut", **settings)
    np.testing.assert_array_equal(resumed.trace_steps, np.arange(8))
    np.testing.assert_allclose(resumed.inclusion_trace, whole.inclusion_trace, rtol=1e-12)
    np.testing.assert_allclose(resumed.latent_trace, whole.latent_trace, rtol=1e-12)
    np.testing.assert_allclose(resumed.losses, whole.losses, rtol=1e-12)


def test_a_file_as_checkpoint_folder_is_refused(data, tmp_path):
    taken = tmp_path / "file"
    taken.write_text("")
    with pytest.raises(ValueError, match="checkpoint_dir"):
        fit_selective_gplvm(data, checkpoint_dir=taken)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"latent_dim": 0}, "latent_dim"),
        ({"latent_dim": 4}, "latent_dim"),
        ({"grid_size": 1}, "grid_size"),
        ({"alpha": -1.0}, "alpha"),
        ({"initial_inclusion": 1.0}, "initial_inclusion"),
        ({"steps": 0}, "steps"),
        ({"pre_steps": -1}, "pre_steps"),
        ({"num_particles": 0}, "num_particles"),
        ({"baseline_decay": 1.0}, "baseline_decay"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"selection_learning_rate": -0.2}, "selection_learning_rate"),
        ({"batch_size": 0}, "batch_size"),
        ({"record_every": 0}, "record_every"),
        ({"noise_variance": -0.01}, "noise_variance"),
        ({"latent_scale": 0.0}, "latent_scale"),
        ({"extent": [[1.0, 0.0], [0.0, 1.0]]}, "extent"),
        ({"extent": [[0.0, 1.0]]}, "extent"),
        ({"key": "seed"}, "key"),
        ({"prune": "yes"}, "prune"),
        ({"bound": "psi"}, "bound"),
        ({"bound": "collapsed", "batch_size": 10}, "batch_size"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
    ],
)
def test_bad_arguments_fail_before_compiling_and_name_the_argument(data, kwargs, name):
    with pytest.raises(ValueError, match=name):
        fit_selective_gplvm(data, **kwargs)


def test_bad_data_is_rejected(data):
    with pytest.raises(ValueError, match="Y"):
        fit_selective_gplvm(data[:, 0])
    with pytest.raises(ValueError, match="Y"):
        fit_selective_gplvm(np.where(data > 1, np.inf, data))


@pytest.mark.slow
@pytest.mark.parametrize("bound", ["uncollapsed", "collapsed"])
def test_fit_keeps_far_fewer_than_all_grid_points_and_those_near_the_latents(bound):
    """Spec check B7 in small: 80 points on a 2-D manifold in 4-D, an 8 × 8 grid, α = 3, 300 joint steps."""
    fit = fit_selective_gplvm(manifold_in_4d(), key=0, bound=bound, **B7_SETTINGS)
    assert_keeps_few_grid_points_near_the_latents(fit)
