"""Point-estimated positive hyperparameters live on the real line through softplus on both sides (NumPyro and Pyro):
the kernel and likelihood params, the guide's ``"<site>_map"`` point masses and a deep model's per-layer params.
Through exp, Adam drifted an MNIST fit's kernel variance to e^83 and float32 overflowed (README, "Conventions")."""

from __future__ import annotations

import jax
import numpy as np
import numpyro.distributions as npdist
import optax
import pyro
import pyro.distributions as pydist
import pyro.distributions.constraints as pyro_constraints
import pytest
import torch
from numpyro import handlers
from numpyro.distributions import constraints as numpyro_constraints
from numpyro.infer import SVI, Trace_ELBO
from pyro import poutine

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.numpyro import deep_svgp as np_deep
from ppl_sparsegp.models.numpyro import svgp as np_svgp
from ppl_sparsegp.models.pyro import deep_svgp as pyro_deep
from ppl_sparsegp.models.pyro import svgp as pyro_svgp

RNG = np.random.default_rng(0)
X = RNG.uniform(-2.0, 2.0, (20, 2))
Y = np.sin(X[:, 0]) + 0.1 * RNG.normal(size=20)
HYPERPARAMETERS = {"kernel.variance", "kernel.lengthscale", "likelihood.variance", "kernel.lengthscale_map"}
DEEP = {"layer0.kernel.variance", "layer0.kernel.lengthscale", "likelihood.variance"}


def _svgp(module, prior):
    kernel = kernels.RBF(variance=2.0, lengthscale=np.array([0.5, 3.0]))
    return module.SVGP(kernel, likelihoods.Gaussian(0.1), Z=X[:4], priors={"kernel.lengthscale": prior})


def _numpyro_params(program, *args) -> dict:
    trace = handlers.trace(handlers.seed(program, jax.random.PRNGKey(0))).get_trace(*args)
    return {name: site for name, site in trace.items() if site["type"] == "param"}


def _pyro_params(program, *args) -> dict:
    pyro.clear_param_store()
    trace = poutine.trace(program).get_trace(*args)
    return {name: site for name, site in trace.nodes.items() if site["type"] == "param"}


def _numpyro_svgp():
    prior = npdist.LogNormal(0.0, 1.0).expand([2]).to_event(1)
    gp = _svgp(np_svgp, prior)
    return {**_numpyro_params(gp.model, X, Y), **_numpyro_params(gp.guide, X, Y)}


def _pyro_svgp():
    prior = pydist.LogNormal(torch.tensor(0.0), torch.tensor(1.0)).expand([2]).to_event(1)
    gp = _svgp(pyro_svgp, prior)
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)
    return {**_pyro_params(gp.model, Xt, Yt), **_pyro_params(gp.guide, Xt, Yt)}


def _numpyro_deep():
    gp = np_deep.DeepSVGP(Z=[X[:4]], widths=[1], likelihood=likelihoods.Gaussian(0.1))
    return {**_numpyro_params(gp.model, X, Y), **_numpyro_params(gp.guide, X, Y)}


def _pyro_deep():
    gp = pyro_deep.DeepSVGP(Z=[X[:4]], widths=[1], likelihood=likelihoods.Gaussian(0.1))
    Xt, Yt = torch.as_tensor(X), torch.as_tensor(Y)
    return {**_pyro_params(gp.model, Xt, Yt), **_pyro_params(gp.guide, Xt, Yt)}


NUMPYRO_SOFTPLUS = type(numpyro_constraints.softplus_positive)


@pytest.mark.parametrize(
    "params, expected, softplus",
    [
        (_numpyro_svgp, HYPERPARAMETERS - {"kernel.lengthscale"}, lambda c: isinstance(c, NUMPYRO_SOFTPLUS)),
        (_pyro_svgp, HYPERPARAMETERS - {"kernel.lengthscale"}, lambda c: c is pyro_constraints.softplus_positive),
        (_numpyro_deep, DEEP, lambda c: isinstance(c, NUMPYRO_SOFTPLUS)),
        (_pyro_deep, DEEP, lambda c: c is pyro_constraints.softplus_positive),
    ],
    ids=["numpyro-svgp", "pyro-svgp", "numpyro-deep", "pyro-deep"],
)
def test_point_estimated_hyperparameters_are_softplus_params(params, expected, softplus):
    sites = params()
    assert expected <= set(sites), sorted(sites)
    for name in expected:
        assert softplus(sites[name]["kwargs"]["constraint"]), (name, sites[name]["kwargs"]["constraint"])
    others = {name: site["kwargs"].get("constraint") for name, site in sites.items() if name not in expected}
    assert not any(softplus(c) for c in others.values()), others  # the variational params keep theirs


def test_the_optimiser_sees_the_softplus_inverse_of_the_initial_values():
    gp = _svgp(np_svgp, npdist.LogNormal(0.0, 1.0).expand([2]).to_event(1))
    svi = SVI(gp.model, gp.guide, optax.adam(0.01), Trace_ELBO())
    raw = svi.optim.get_params(svi.init(jax.random.PRNGKey(0), X, Y).optim_state)
    np.testing.assert_allclose(raw["kernel.variance"], np.log(np.expm1(2.0)), rtol=1e-12)
    np.testing.assert_allclose(raw["likelihood.variance"], np.log(np.expm1(0.1)), rtol=1e-12)
    np.testing.assert_allclose(raw["kernel.lengthscale_map"], np.log(np.expm1([0.5, 3.0])), rtol=1e-12)
