"""Pyro's SVI on the Pyro twin of the doubly-stochastic deep GP: minibatched steps, each with fresh noise from torch's
generator, raise the full-batch bound and give a predictive mixture that fits the training function."""

import numpy as np
import pyro
import pyro.infer
import pyro.optim
import torch

from ppl_sparsegp.core import likelihoods
from ppl_sparsegp.models.pyro import deep_svgp as pyro_deep
from ppl_sparsegp.pyro import sites


def test_pyro_svi_raises_the_deep_svgp_bound_with_minibatches():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(40)
    gp = pyro_deep.deep_svgp(
        X, 1, likelihoods.Gaussian(variance=0.1), Z=np.linspace(-2, 2, 8)[:, None], num_samples=2, batch_size=16
    )
    X, y = torch.as_tensor(X), torch.as_tensor(y)
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    svi = pyro.infer.SVI(gp.model, gp.guide, pyro.optim.Adam({"lr": 0.03}), pyro.infer.TraceMeanField_ELBO())
    svi.evaluate_loss(X, y)  # registers every param at its initial value

    def bound() -> float:
        pyro.set_rng_seed(1)
        return float(gp.elbo(sites.param_store_values(), X, y, num_samples=20))

    before = bound()
    losses = [svi.step(X, y) for _ in range(200)]
    after = bound()
    assert np.isfinite(losses).all()
    assert after > before + 100.0
    mean, var = gp.predict_y(sites.param_store_values(), X, num_samples=10)
    assert float(torch.sqrt(torch.mean((mean - torch.sin(2 * X[:, 0])) ** 2))) < 0.2
    assert (var > 0).all()
