"""Pyro's engines on the Pyro twins: SVI fits SVGP on diabetes as well as NumPyro's SVI fits the NumPyro SVGP with
the same settings (test NLPD within 0.02), and NUTS samples SGPMC under the NumPyro site names."""

import numpy as np
import optax
import pyro
import pyro.infer
import pyro.optim
import pytest
import torch

from ppl_sparsegp import metrics
from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.data import load_embedded, standardize
from ppl_sparsegp.inducing.initialise import kmeans
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro import svgp as np_svgp
from ppl_sparsegp.models.pyro import sgpmc as pyro_sgpmc
from ppl_sparsegp.models.pyro import svgp as pyro_svgp
from ppl_sparsegp.pyro import sites

STEPS, LEARNING_RATE, NUM_INDUCING = 300, 0.03, 32


def _diabetes_nlpd(gp, params, ds, scaler) -> float:
    mean, var = gp.predict_y(params, ds.X_test)
    y = scaler.inverse_mean(ds.y_test)
    return metrics.nlpd_gaussian(y, scaler.inverse_mean(np.asarray(mean)), scaler.inverse_var(np.asarray(var)))


@pytest.mark.slow
def test_pyro_svi_fits_svgp_on_diabetes_as_well_as_numpyro():
    ds, scaler = standardize(load_embedded("diabetes"))
    Z = kmeans(ds.X_train, NUM_INDUCING)
    kernel = kernels.RBF(lengthscale=np.ones(ds.X_train.shape[1]))
    likelihood = likelihoods.Gaussian(variance=0.1)

    npm = np_svgp.SVGP(kernel, likelihood, Z=Z)
    fit = fit_svi(npm.model, npm.guide, ds.X_train, ds.y_train, optimizer=optax.adam(LEARNING_RATE), num_steps=STEPS)
    numpyro_nlpd = _diabetes_nlpd(npm, fit.params, ds, scaler)

    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    pym = pyro_svgp.SVGP(kernel, likelihood, Z=Z)
    svi = pyro.infer.SVI(pym.model, pym.guide, pyro.optim.Adam({"lr": LEARNING_RATE}), pyro.infer.TraceMeanField_ELBO())
    X, y = torch.as_tensor(ds.X_train), torch.as_tensor(ds.y_train)
    losses = [svi.step(X, y) for _ in range(STEPS)]
    pyro_nlpd = _diabetes_nlpd(pym, sites.param_store_values(), ds, scaler)

    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    print(f"diabetes test NLPD: NumPyro {numpyro_nlpd:.4f}, Pyro {pyro_nlpd:.4f}")
    assert abs(pyro_nlpd - numpyro_nlpd) < 0.02


def test_pyro_nuts_samples_sgpmc_under_the_numpyro_site_names():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (15, 1))
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.standard_normal(15)
    kernel, likelihood = kernels.RBF(lengthscale=1.0), likelihoods.Gaussian(variance=0.1)
    gp = pyro_sgpmc.SGPMC(kernel, likelihood, Z=X[:4], priors=pyro_sgpmc.default_priors(kernel, likelihood))
    pyro.set_rng_seed(0)
    mcmc = pyro.infer.MCMC(pyro.infer.NUTS(gp.model), num_samples=20, warmup_steps=20, disable_progbar=True)
    mcmc.run(torch.as_tensor(X), torch.as_tensor(y))
    draws = mcmc.get_samples()
    assert set(draws) == {"kernel.variance", "kernel.lengthscale", "likelihood.variance", "u"}
    assert draws["u"].shape == (20, 1, 4)
    assert all(torch.isfinite(v).all() for v in draws.values())
    mean, var = gp.predict_f({name: value[-1] for name, value in draws.items()}, X)
    assert torch.isfinite(mean).all() and (var > 0).all()
