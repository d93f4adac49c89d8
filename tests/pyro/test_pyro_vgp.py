"""Pyro's engines on the Pyro twins of VGP and GPMC: SVI with TraceMeanField_ELBO climbs VGP's ELBO towards, and
never above, the exact log marginal likelihood; NUTS samples GPMC under the NumPyro site names, and its draws are
finite, move and predict."""

import numpy as np
import pyro
import pyro.infer
import pyro.optim
import torch

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.pyro import gpmc as pyro_gpmc
from ppl_sparsegp.models.pyro import gpr as pyro_gpr
from ppl_sparsegp.models.pyro import sgpmc as pyro_sgpmc
from ppl_sparsegp.models.pyro import vgp as pyro_vgp
from ppl_sparsegp.pyro import sites


def _data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (n, 1))
    return torch.as_tensor(X), torch.as_tensor(np.sin(2 * X[:, 0]) + 0.2 * rng.standard_normal(n))


def test_pyro_svi_raises_the_vgp_elbo_towards_the_marginal_likelihood():
    X, y = _data(12)
    kernel, likelihood = kernels.RBF(lengthscale=0.8), likelihoods.Gaussian(variance=0.1)
    fixed = ("kernel.variance", "kernel.lengthscale", "likelihood.variance")
    gp = pyro_vgp.VGP(kernel, likelihood, fixed=fixed)
    lml = float(pyro_gpr.GPR(kernel, likelihood).log_marginal_likelihood({}, X, y))
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    svi = pyro.infer.SVI(gp.model, gp.guide, pyro.optim.Adam({"lr": 0.05}), pyro.infer.TraceMeanField_ELBO())
    losses = [svi.step(X, y) for _ in range(150)]
    elbo = float(gp.elbo(sites.param_store_values(), X, y))
    assert np.isfinite(losses).all()
    assert np.isclose(-svi.evaluate_loss(X, y), elbo, rtol=1e-10)  # the loss is the exact negative ELBO
    assert -losses[0] < lml - 5.0  # far below log p(y) at the start
    assert lml - 0.2 < elbo <= lml + 1e-8  # close to it, never above it, after 150 steps


def test_pyro_nuts_samples_gpmc_under_the_numpyro_site_names():
    X, y = _data(8)
    kernel, likelihood = kernels.RBF(lengthscale=1.0), likelihoods.Gaussian(variance=0.1)
    gp = pyro_gpmc.GPMC(kernel, likelihood, priors=pyro_sgpmc.default_priors(kernel, likelihood))
    pyro.set_rng_seed(0)
    mcmc = pyro.infer.MCMC(pyro.infer.NUTS(gp.model), num_samples=10, warmup_steps=10, disable_progbar=True)
    mcmc.run(X, y)
    draws = mcmc.get_samples()
    assert set(draws) == {"kernel.variance", "kernel.lengthscale", "likelihood.variance", "v"}
    assert draws["v"].shape == (10, 1, 8)
    assert all(torch.isfinite(d).all() for d in draws.values())
    assert all(len(torch.unique(d.reshape(10, -1), dim=0)) > 1 for d in draws.values())  # the chain moves
    mean, var = gp.predict_f({name: d[-1] for name, d in draws.items()}, X, X=X, y=y)
    assert torch.isfinite(mean).all() and (var >= 0).all()
