"""The Pyro twin of ScoreFunctionELBO (ppl_sparsegp/pyro/score_function.py) and the joint phase of the Pyro selective
GP-LVM recipe, which trains with it: at the same params, the same baseline and the same draws of the inclusion mask s
and the latents X, the loss and the gradient of every param equal those of the NumPyro recipe's ScoreFunctionELBO (to
1e-8), the KLs of q(u), q(X) and q_λ in closed form on both sides (Pyro's TraceGraph_ELBO, which the recipe used
before, estimates them from the draws and differs by thousands of nats here); its baseline starts as the leave-one-out
mean and then follows the NumPyro twin's normalised decaying average at the configured β. Float64
(tests/conftest.py)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pyro
import pytest
import torch
from _score_function_checks import captured_loss, numpyro_loss_and_grads, pyro_loss_and_grads
from _selective_problems import curve_in_3d
from numpyro import handlers
from pyro import poutine

from ppl_sparsegp.infer.score_function import ScoreFunctionELBO as NumPyroScoreFunctionELBO
from ppl_sparsegp.models.pyro._base import twin_of
from ppl_sparsegp.pyro.score_function import BASELINE_TOTAL, BASELINE_WEIGHT, ScoreFunctionELBO
from ppl_sparsegp.recipes import selective, selective_pyro
from ppl_sparsegp.recipes.selective import SelectiveGPLVMConfig

N, Q, SIZE, PARTICLES = 30, 2, 3, 2
K = SIZE**Q
SETTINGS = {"grid_size": SIZE, "alpha": 0.5, "num_particles": PARTICLES, "baseline_decay": 0.8, "pre_steps": 0}
BASELINE = -250.0


def _recipe_loss(Y, monkeypatch):
    """The ELBO that the Pyro recipe's joint phase hands to ``fit_svi``."""
    return captured_loss(monkeypatch, selective_pyro, selective_pyro.fit_selective_gplvm, Y, seed=0, **SETTINGS)


def _problem():
    """Y [N, 3], the NumPyro selective GP-LVM over the grid and its Pyro twin, params away from their start (q(u) not
    the prior, λ not uniform), and draws of s [K] and X [N, Q]."""
    Y = curve_in_3d(N, Q)
    _, numpyro_model = selective.grid_model(Y, SelectiveGPLVMConfig(**SETTINGS))
    params = {}
    for program in (numpyro_model.model, numpyro_model.guide):
        sites = handlers.trace(handlers.seed(program, 0)).get_trace(jnp.asarray(Y))
        params.update({name: np.asarray(site["value"]) for name, site in sites.items() if site["type"] == "param"})
    params.update({name: np.asarray(v) for name, v in numpyro_model.ordinary.initial_params().items()})
    rng = np.random.default_rng(3)
    params["u_loc"] = params["u_loc"] + 0.3 * rng.normal(size=params["u_loc"].shape)
    params["u_scale_tril"] = 0.7 * params["u_scale_tril"]
    params["inclusion_probs"] = rng.uniform(0.2, 0.8, size=K)
    params["X_loc"] = params["X_loc"] + 0.1 * rng.normal(size=params["X_loc"].shape)
    params["kernel.lengthscale"] = np.array([0.8, 1.3])
    draws = {"inclusion": (rng.uniform(size=K) < 0.6).astype(float), "X": rng.normal(size=(N, Q))}
    draws["inclusion"][0] = 1.0
    return Y, numpyro_model, twin_of(numpyro_model), params, draws


@pytest.mark.starts_first
def test_the_joint_phase_has_the_numpyro_recipes_loss_and_gradients_at_the_same_draws(monkeypatch):
    Y, numpyro_model, pyro_model, params, draws = _problem()
    elbo = _recipe_loss(Y, monkeypatch)
    by_numpyro, numpyro_grads = numpyro_loss_and_grads(
        NumPyroScoreFunctionELBO(PARTICLES), numpyro_model, params, draws, (Y,), BASELINE
    )
    by_pyro, pyro_grads = pyro_loss_and_grads(elbo, pyro_model, params, draws, (Y,), BASELINE)
    assert np.isfinite(by_numpyro) and by_pyro == pytest.approx(by_numpyro, rel=1e-8)
    assert set(pyro_grads) == set(numpyro_grads)
    for name, grad in numpyro_grads.items():
        assert np.any(grad != 0), name  # every param is in the comparison
        np.testing.assert_allclose(
            pyro_grads[name].numpy(), grad, rtol=1e-8, atol=1e-8 * np.max(np.abs(grad)), err_msg=name
        )
    moved = {**params, "u_loc": params["u_loc"] * 1.01}
    by_pyro_moved = pyro_loss_and_grads(elbo, pyro_model, moved, draws, (Y,), BASELINE)[0]
    assert abs(by_pyro_moved - by_pyro) > 1e-6  # it can fail


def test_the_baseline_is_the_normalised_decaying_average_at_the_given_decay():
    """After step 1 the sums hold total = β L̄₁ and weight = β, so the baseline of step 2 is L̄₁ whatever β (the same
    draws for both β), and after step 2 weight = β(β + 1)."""
    Y, _, pyro_model, params, _ = _problem()
    values = {name: torch.as_tensor(v) for name, v in params.items()}
    model = poutine.substitute(pyro_model.model, data=values)
    guide = poutine.substitute(pyro_model.guide, data=values)
    means = {}
    for decay in (0.8, 0.5):
        elbo = ScoreFunctionELBO(PARTICLES, baseline_decay=decay)
        pyro.clear_param_store()
        pyro.set_rng_seed(0)
        first = elbo.loss_and_grads(model, guide, torch.as_tensor(Y))
        store = pyro.get_param_store()
        assert float(store[BASELINE_WEIGHT]) == pytest.approx(decay, rel=1e-12)
        means[decay] = float(store[BASELINE_TOTAL]) / float(store[BASELINE_WEIGHT])
        assert np.isfinite(first) and np.isfinite(means[decay])
        elbo.loss_and_grads(model, guide, torch.as_tensor(Y))
        assert float(store[BASELINE_WEIGHT]) == pytest.approx(decay * (decay + 1), rel=1e-12)
    assert means[0.8] == pytest.approx(means[0.5], rel=1e-12)


def test_bad_settings_are_refused_naming_them():
    with pytest.raises(ValueError, match="num_particles"):
        ScoreFunctionELBO(0)
    with pytest.raises(ValueError, match="baseline_decay"):
        ScoreFunctionELBO(2, baseline_decay=1.0)
