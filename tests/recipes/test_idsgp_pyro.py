"""The Pyro twin of fit_idsgp: it refuses bad input before any step; a checkpointed fit resumed with more epochs
takes the steps of an uninterrupted one; full batch it starts at the NumPyro recipe's weights and takes the NumPyro
recipe's steps (losses to 1e-8 in float64); a minibatch fit predicts sensibly; and the fit, converted to NumPyro's
names, predicts through the NumPyro model as the Pyro model does."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ppl_sparsegp.cli.pyro_backend import numpyro_params
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.models.numpyro.idsgp import NETWORK
from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.recipes import idsgp, idsgp_pyro

RNG = np.random.default_rng(1)
X = RNG.uniform(-2.0, 2.0, (45, 2))
Y = np.sin(X[:, 0]) + 0.1 * RNG.standard_normal(45)
SMALL = idsgp.IDSGPConfig(num_inducing=3, hidden=(6,), batch_size=10, num_epochs=2, learning_rate=0.02)


@pytest.fixture(autouse=True)
def float64():
    with default_dtype("float64"):
        yield


def _fit(**kwargs):
    return idsgp_pyro.fit_idsgp(X, Y, SMALL, likelihood=Gaussian(0.1), progress=False, **kwargs)


@pytest.mark.parametrize(
    "arguments, match",
    [({"hidden": (0,)}, "hidden"), ({"num_epochs": 0}, "num_epochs"), ({"y": np.c_[Y, Y]}, "y: expected 1 output")],
)
def test_bad_input_is_refused_before_any_step(arguments, match, tmp_path):
    checkpoint = tmp_path / "idsgp.npz"
    y = arguments.pop("y", Y)
    with pytest.raises(ValueError, match=match):
        idsgp_pyro.fit_idsgp(X, y, SMALL, likelihood=Gaussian(0.1), checkpoint=str(checkpoint), **arguments)
    assert not checkpoint.exists()


@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_a_resumed_fit_takes_the_steps_of_an_uninterrupted_one(dropout, tmp_path):
    checkpoint = str(tmp_path / "idsgp.npz")
    first = _fit(checkpoint=checkpoint, dropout=dropout)
    assert first.steps_per_epoch == 5 and len(first.svi.losses) == 10 and first.epochs_run == 2
    resumed = _fit(checkpoint=checkpoint, num_epochs=3, dropout=dropout)
    straight = _fit(num_epochs=3, dropout=dropout)
    assert resumed.svi.resumed_from == 10 and resumed.epochs_run == 1
    np.testing.assert_array_equal(resumed.svi.losses, straight.svi.losses)
    assert set(resumed.params) == set(straight.params)
    for name, value in straight.params.items():
        assert torch.equal(resumed.params[name], value), name


@pytest.mark.slow
def test_full_batch_it_takes_the_numpyro_recipes_steps_from_the_same_weights():
    config = idsgp.IDSGPConfig(num_inducing=3, hidden=(6,), batch_size=100, num_epochs=15, learning_rate=0.02)
    by_numpyro = idsgp.fit_idsgp(X, Y, config, likelihood=Gaussian(0.1), seed=3, progress=False)
    by_pyro = idsgp_pyro.fit_idsgp(X, Y, config, likelihood=Gaussian(0.1), seed=3, progress=False)
    assert by_pyro.steps_per_epoch == by_numpyro.steps_per_epoch == 1
    assert by_pyro.svi.losses[0] == pytest.approx(by_numpyro.svi.losses[0], rel=1e-10)  # the same initial ELBO
    np.testing.assert_allclose(by_pyro.svi.losses, by_numpyro.svi.losses, rtol=1e-8)
    assert by_pyro.svi.losses[-1] < by_pyro.svi.losses[0] - 50.0  # and it moved
    # the fit under NumPyro's names: the NumPyro model predicts as the Pyro model, and as the NumPyro fit
    params = numpyro_params(by_pyro.params, {NETWORK: (by_pyro.model.network, by_numpyro.model.network)})
    mean, var = by_numpyro.model.predict_y(params, X[:7])
    pyro_mean, pyro_var = by_pyro.model.predict_y(by_pyro.params, X[:7])
    np.testing.assert_allclose(mean, pyro_mean.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var, pyro_var.numpy(), rtol=1e-10)
    np.testing.assert_allclose(mean, by_numpyro.model.predict_y(by_numpyro.params, X[:7])[0], rtol=1e-7, atol=1e-9)


def test_a_minibatch_fit_predicts_better_than_the_mean():
    fit = _fit(num_epochs=20, seed=1)
    mean, var = fit.model.predict_y(fit.params, X)
    rmse = float(np.sqrt(np.mean((mean.numpy() - Y) ** 2)))
    assert rmse < 0.6 * float(np.std(Y)) and bool(torch.all(var > 0))


def test_a_float32_fit_runs_in_float32():
    with default_dtype("float32"):
        fit = _fit(num_epochs=1, seed=2)
    assert np.all(np.isfinite(fit.svi.losses)) and len(fit.svi.losses) == 5
    assert {value.dtype for value in fit.params.values()} == {torch.float32}
