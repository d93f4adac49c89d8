"""pandas DataFrames and Series work wherever the Python API takes arrays, with the results of numpy arrays."""

from __future__ import annotations

import jax
import numpy as np
import optax
import pandas as pd
import pytest
from numpyro.infer import NUTS

from ppl_sparsegp import validation
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.mcmc import run_mcmc
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.gplvm import BayesianGPLVM
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.recipes.selective import fit_selective

RNG = np.random.default_rng(0)
X = RNG.uniform(-2.0, 2.0, (40, 2))
Y = np.sin(X[:, 0]) + 0.1 * RNG.normal(size=40)
FRAME, SERIES = pd.DataFrame(X, columns=["a", "b"]), pd.Series(Y, name="y")


def _gp(model_class, **fields):
    return model_class(RBF(1.0, np.ones(2)), Gaussian(0.1), **fields)


def test_as_array_converts_pandas_only():
    assert isinstance(validation.as_array(FRAME), np.ndarray) and validation.as_array(SERIES).shape == (40,)
    assert validation.as_array(X) is X and validation.as_array(None) is None and validation.as_array(3) == 3


def test_svi_fit_and_predictions_from_a_dataframe_equal_those_from_arrays():
    def fitted(X_, y_, Z_):
        gp = _gp(SVGP, Z=Z_)
        fit = fit_svi(gp.model, gp.guide, X_, y_, optimizer=optax.adam(0.01), num_steps=30, validate=gp.check_data)
        return gp, fit

    (gp, from_numpy), (gp_pd, from_pandas) = fitted(X, Y, X[:6]), fitted(FRAME, SERIES, FRAME.iloc[:6])
    np.testing.assert_array_equal(from_pandas.losses, from_numpy.losses)
    np.testing.assert_array_equal(
        gp_pd.predict_y(from_pandas.params, FRAME.iloc[:5])[0], gp.predict_y(from_numpy.params, X[:5])[0]
    )


@pytest.mark.parametrize("model_class", [GPR, SGPR])
def test_models_predicting_from_the_training_data_take_it_as_pandas(model_class):
    gp = _gp(model_class) if model_class is GPR else _gp(model_class, Z=FRAME.iloc[:6])
    mean, var = gp.predict_y({}, FRAME.iloc[:5], X=FRAME, y=SERIES)
    expected = (_gp(GPR) if model_class is GPR else _gp(SGPR, Z=X[:6])).predict_y({}, X[:5], X=X, y=Y)
    np.testing.assert_allclose(mean, expected[0])
    np.testing.assert_allclose(var, expected[1])
    assert np.shape(gp.predict_log_density({}, FRAME.iloc[:5], SERIES.iloc[:5], X=FRAME, y=SERIES)) == (5,)


@pytest.mark.slow
def test_mcmc_takes_a_dataframe():
    kernel, likelihood = RBF(1.0, np.ones(2)), Gaussian(0.1)
    gp = SGPMC(kernel, likelihood, Z=X[:5], priors=default_priors(kernel, likelihood))
    run = {"num_warmup": 20, "num_samples": 10, "key": jax.random.PRNGKey(0), "validate": gp.check_data}
    from_pandas, from_numpy = run_mcmc(NUTS(gp.model), FRAME, SERIES, **run), run_mcmc(NUTS(gp.model), X, Y, **run)
    np.testing.assert_array_equal(from_pandas.samples["u"], from_numpy.samples["u"])


@pytest.mark.slow
def test_the_selection_recipe_takes_a_dataframe():
    settings = {"candidates": 8, "pre_steps": 5, "selection_steps": 5, "post_steps": 5, "key": 0}
    from_pandas, from_numpy = fit_selective(FRAME, SERIES, **settings), fit_selective(X, Y, **settings)
    np.testing.assert_array_equal(from_pandas.mask, from_numpy.mask)


@pytest.mark.slow
def test_a_gplvm_takes_its_initial_latents_and_observations_as_dataframes():
    def elbo(X_init, Y):
        gp = BayesianGPLVM(RBF(1.0, np.ones(2)), Gaussian(0.1), Z=X[:5], num_latent=2, X_init=X_init)
        fit = fit_svi(gp.model, gp.guide, Y, optimizer=optax.adam(0.01), num_steps=5, validate=gp.check_data)
        return fit.losses

    Y_obs = np.column_stack([Y, -Y])
    np.testing.assert_array_equal(elbo(FRAME, pd.DataFrame(Y_obs)), elbo(X, Y_obs))
