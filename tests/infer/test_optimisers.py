"""fit_svi with full-batch L-BFGS (the thesis' optimiser for chapter 4's tables) and with sites frozen for the first
steps (the thesis' hyperparameter freeze), as one fit."""

import jax
import numpy as np
import optax
import pytest

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Bernoulli, Gaussian
from ppl_sparsegp.infer.optimisers import LBFGS
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.svgp import SVGP

jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(1)
X = RNG.uniform(-3, 3, (150, 1))
Y = np.sin(2 * X[:, 0]) + 0.2 * RNG.standard_normal(150)
Z = np.linspace(-3, 3, 10)[:, None]
HYPERPARAMETERS = ("kernel.lengthscale", "kernel.variance")


@pytest.mark.parametrize(
    "likelihood",
    [pytest.param(Gaussian(variance=0.5), marks=pytest.mark.slow), Bernoulli()],
    ids=["gaussian", "probit"],
)
def test_lbfgs_reaches_adams_optimum_and_never_goes_uphill(likelihood):
    y = Y if isinstance(likelihood, Gaussian) else (Y > 0).astype(float)
    gp = SVGP(RBF(), likelihood, Z=Z)
    lbfgs = fit_svi(gp.model, gp.guide, X, y, optimizer=LBFGS(), num_steps=600, progress=False)
    adam = fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.02), num_steps=4000, progress=False)
    elbo_lbfgs, elbo_adam = (float(gp.elbo(f.params, X, y)) for f in (lbfgs, adam))
    assert elbo_lbfgs >= elbo_adam - 0.02, (elbo_lbfgs, elbo_adam)  # 600 L-BFGS steps against 4000 of Adam
    assert np.all(np.diff(lbfgs.losses) <= 1e-8)  # the line search never goes uphill


def test_lbfgs_refuses_a_loss_that_changes_with_the_key():
    gp = SVGP(RBF(), Gaussian(), Z=Z, batch_size=50)
    with pytest.raises(ValueError, match="optimizer: LBFGS needs a deterministic loss"):
        fit_svi(gp.model, gp.guide, X, Y, optimizer=LBFGS(), num_steps=5, progress=False)


@pytest.mark.parametrize(
    "optimizer", [optax.adam(0.05), pytest.param(LBFGS(), marks=pytest.mark.slow)], ids=["adam", "lbfgs"]
)  # L-BFGS: about 25 s, run by `make test-slow` in CI
def test_frozen_params_keep_their_initial_values_for_their_steps_then_move(optimizer):
    gp = SVGP(RBF(variance=1.0, lengthscale=1.0), Gaussian(variance=0.5), Z=Z)
    freeze = dict.fromkeys(HYPERPARAMETERS, 20)
    held = fit_svi(gp.model, gp.guide, X, Y, optimizer=optimizer, num_steps=20, freeze=freeze, progress=False)
    for name in HYPERPARAMETERS:
        np.testing.assert_allclose(held.params[name], 1.0, rtol=1e-12)
    assert not np.allclose(held.params["u_loc"], 0.0) and float(held.params["likelihood.variance"]) != 0.5
    thawed = fit_svi(gp.model, gp.guide, X, Y, optimizer=optimizer, num_steps=40, freeze=freeze, progress=False)
    assert all(abs(float(thawed.params[name]) - 1.0) > 1e-3 for name in HYPERPARAMETERS)


@pytest.mark.parametrize(
    "likelihood",
    [pytest.param(Gaussian(variance=0.5), marks=pytest.mark.slow), pytest.param(Bernoulli(), marks=pytest.mark.slow)],
    ids=["gaussian", "probit"],
)  # without the restart the probit fit's loss jumps at the thaw
def test_lbfgs_restarts_when_a_freeze_ends_and_never_goes_uphill(likelihood):
    y = Y if isinstance(likelihood, Gaussian) else (Y > 0).astype(float)
    gp = SVGP(RBF(variance=1.0, lengthscale=3.0), likelihood, Z=X[::3], learn_Z=False)
    freeze = dict.fromkeys(HYPERPARAMETERS, 30)
    fit = fit_svi(gp.model, gp.guide, X, y, optimizer=LBFGS(), num_steps=200, freeze=freeze, progress=False,
                  steps_per_dispatch=10)  # fmt: skip
    assert np.all(np.diff(fit.losses) <= 1e-8), np.max(np.diff(fit.losses))  # across the thaw too
    free = fit_svi(gp.model, gp.guide, X, y, optimizer=LBFGS(), num_steps=200, progress=False)
    assert fit.losses[-1] <= free.losses[-1] + 0.05


def test_bad_freeze_and_combinations_are_refused_by_name():
    gp = SVGP(RBF(), Gaussian(), Z=Z)
    bad = [
        ({"kernel.lengthscal": 5}, r"freeze: no params \['kernel.lengthscal'\]"),
        ({"kernel.lengthscale": -1}, "freeze"),
        (["kernel.lengthscale"], "freeze: expected"),
    ]
    for freeze, message in bad:
        with pytest.raises(ValueError, match=message):
            fit_svi(gp.model, gp.guide, X, Y, optimizer=optax.adam(0.01), num_steps=1, freeze=freeze, progress=False)
    with pytest.raises(ValueError, match="memory_size"):
        LBFGS(memory_size=0)
