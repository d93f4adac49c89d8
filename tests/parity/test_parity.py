"""The Pyro twins (models/pyro) against the NumPyro models (models/numpyro) at the same fixed parameters, in float64:
every site's log-density (the data term, the inducing prior, q(u), the hyperparameter priors), the closed-form KL of
q(u) from p(u), the TraceMeanField ELBO and the predictive moments of f and y agree to 1e-10 (relative to the
value's size). The same sites exist on both sides under the same names, and a perturbed parameter on the Pyro side
moves the value, so the comparison can fail.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro
import numpyro.infer
import pyro
import pyro.infer
import pytest
import torch
from numpyro import handlers
from numpyro.distributions.kl import kl_divergence as numpyro_kl
from parity_checks import (
    M,
    assert_perturbation_moves,
    assert_same_predictions,
    assert_same_terms,
    close,
    fixed_params,
    numpyro_terms,
    problem,
    pyro_terms,
)
from pyro import poutine
from torch.distributions.kl import kl_divergence as torch_kl

from ppl_sparsegp.models.numpyro import gpr as np_gpr
from ppl_sparsegp.models.numpyro import sgpmc as np_sgpmc
from ppl_sparsegp.models.numpyro import sgpr as np_sgpr
from ppl_sparsegp.models.numpyro import svgp as np_svgp
from ppl_sparsegp.models.pyro import gpr as pyro_gpr
from ppl_sparsegp.models.pyro import sgpmc as pyro_sgpmc
from ppl_sparsegp.models.pyro import sgpr as pyro_sgpr
from ppl_sparsegp.models.pyro import svgp as pyro_svgp

# a guide reads only some of the params that both traces are given
pytestmark = pytest.mark.filterwarnings("ignore:pyro.module data did not find params")


@pytest.mark.slow
def test_gpr_marginal_likelihood_and_predictions_agree():
    p = problem("gaussian", num_latent=2)
    hyper = {k: v for k, v in fixed_params(p).items() if k.startswith(("kernel", "likelihood"))}
    npm = np_gpr.GPR(p["kernel"], p["likelihood"])
    pym = pyro_gpr.GPR(p["kernel"], p["likelihood"])
    for y in (p["y"], p["y"][:, 0]):
        terms = assert_same_terms(npm.model, pym.model, hyper, {}, p["X"], y)
        assert set(terms) == {"y"}
        close(npm.log_marginal_likelihood(hyper, p["X"], y), pym.log_marginal_likelihood(hyper, p["X"], y))
        assert_perturbation_moves(pym.model, hyper, {}, p["X"], y)
        assert_same_predictions(npm, pym, hyper, p["X_new"], X=p["X"], y=y)


def test_sgpr_collapsed_bound_and_predictions_agree():
    p = problem("gaussian")
    params = {k: v for k, v in fixed_params(p).items() if not k.startswith("u_")}
    npm = np_sgpr.SGPR(p["kernel"], p["likelihood"], Z=p["Z"])
    pym = pyro_sgpr.SGPR(p["kernel"], p["likelihood"], Z=p["Z"])
    terms = assert_same_terms(npm.model, pym.model, params, {}, p["X"], p["y"])
    assert set(terms) == {"collapsed_bound"}
    close(npm.elbo(params, p["X"], p["y"]), pym.elbo(params, p["X"], p["y"]))
    assert_perturbation_moves(pym.model, params, {}, p["X"], p["y"], site="Z")
    assert_same_predictions(npm, pym, params, p["X_new"], X=p["X"], y=p["y"])


SVGP_CASES = [
    {"likelihood": "gaussian", "whiten": True},
    {"likelihood": "gaussian", "whiten": False},
    {"likelihood": "bernoulli", "whiten": True},
    {"likelihood": "bernoulli", "whiten": False},
    {"likelihood": "gaussian", "whiten": True, "data_term": "sampled"},
    {"likelihood": "bernoulli", "whiten": False, "data_term": "sampled"},
    {"likelihood": "gaussian", "whiten": False, "q_diag": True},
    {"likelihood": "gaussian", "whiten": True, "num_latent": 2},
    {"likelihood": "gaussian", "whiten": True, "num_data": 100},
]


@pytest.mark.parametrize("case", SVGP_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_svgp_log_densities_kl_elbo_and_predictions_agree(case):
    case = dict(case)
    p = problem(case.pop("likelihood"), case.get("num_latent", 1))
    params = fixed_params(p, case.get("num_latent", 1), case.get("q_diag", False))
    npm = np_svgp.SVGP(p["kernel"], p["likelihood"], Z=p["Z"], **case)
    pym = pyro_svgp.SVGP(p["kernel"], p["likelihood"], Z=p["Z"], **case)
    u = {"u": p["rng"].standard_normal(params["u_loc"].shape)}  # the same draw of u on both sides
    args = (p["X"], p["y"])

    terms = assert_same_terms(npm.model, pym.model, params, u, *args)
    assert set(terms) == {"u", "y"}
    guide_terms = assert_same_terms(npm.guide, pym.guide, params, u, *args)
    assert set(guide_terms) == {"u"}
    assert_perturbation_moves(pym.model, params, u, *args)

    _, np_model_trace = numpyro_terms(npm.model, params, u, *args)
    _, np_guide_trace = numpyro_terms(npm.guide, params, u, *args)
    _, pyro_model_trace = pyro_terms(pym.model, params, u, *args)
    _, pyro_guide_trace = pyro_terms(pym.guide, params, u, *args)
    close(
        numpyro_kl(np_guide_trace["u"]["fn"], np_model_trace["u"]["fn"]),
        torch_kl(pyro_guide_trace.nodes["u"]["fn"], pyro_model_trace.nodes["u"]["fn"]),
    )
    if case.get("data_term", "analytic") == "analytic" and "num_data" not in case:
        # the ELBO is exact here (analytic data term, closed-form KL): the engines' losses, and the models' elbo()
        data = {k: jnp.asarray(v) for k, v in params.items()}
        np_loss = numpyro.infer.TraceMeanField_ELBO().loss(
            jax.random.PRNGKey(0),
            {},
            handlers.substitute(npm.model, data=data),
            handlers.substitute(npm.guide, data=data),
            *args,
        )
        tensors = {k: torch.as_tensor(v) for k, v in params.items()}
        pyro_loss = pyro.infer.TraceMeanField_ELBO().loss(
            poutine.substitute(pym.model, data=tensors), poutine.substitute(pym.guide, data=tensors), *args
        )
        close(np_loss, pyro_loss)
        close(-np_loss, pym.elbo(params, *args))
    assert_same_predictions(npm, pym, params, p["X_new"])
    assert_same_predictions(npm, pym, {**params, **u}, p["X_new"])  # at a draw of u


@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli"])
def test_sgpmc_log_joint_and_predictions_agree(likelihood):
    p = problem(likelihood)
    npm = np_sgpmc.SGPMC(
        p["kernel"], p["likelihood"], Z=p["Z"], priors=np_sgpmc.default_priors(p["kernel"], p["likelihood"])
    )
    pym = pyro_sgpmc.SGPMC(
        p["kernel"], p["likelihood"], Z=p["Z"], priors=pyro_sgpmc.default_priors(p["kernel"], p["likelihood"])
    )
    draw = {k: v for k, v in fixed_params(p).items() if k.startswith(("kernel", "likelihood"))}
    draw["u"] = p["rng"].standard_normal((1, M))
    terms = assert_same_terms(npm.model, pym.model, {}, draw, p["X"], p["y"])
    assert set(terms) == set(draw) | {"y"}
    assert_perturbation_moves(pym.model, {}, draw, p["X"], p["y"])
    assert_same_predictions(npm, pym, draw, p["X_new"])


def test_gpr_and_sgpr_as_svgp_and_the_cached_factor_agree():
    p = problem("gaussian")
    params = {k: v for k, v in fixed_params(p).items() if not k.startswith("u_")}
    hyper = {k: v for k, v in params.items() if k.startswith(("kernel", "likelihood"))}
    X, y = p["X"], p["y"]
    for np_model, pyro_model, values in (
        (np_gpr.GPR(p["kernel"], p["likelihood"]), pyro_gpr.GPR(p["kernel"], p["likelihood"]), hyper),
        (
            np_sgpr.SGPR(p["kernel"], p["likelihood"], Z=p["Z"]),
            pyro_sgpr.SGPR(p["kernel"], p["likelihood"], Z=p["Z"]),
            params,
        ),
    ):
        np_svgp, np_params = np_model.as_svgp(values, X, y)
        pyro_svgp, pyro_params = pyro_model.as_svgp(values, X, y)
        assert set(np_params) == set(pyro_params)
        for name, value in np_params.items():
            close(value, pyro_params[name])
        assert_same_predictions(np_svgp, pyro_svgp, np_params, p["X_new"])
        for model in (np_model, pyro_model):
            with pytest.raises(NotImplementedError, match="does not factorise over data points"):
                model.pointwise_log_likelihood(values, X, y)
    np_model, pyro_model = np_gpr.GPR(p["kernel"], p["likelihood"]), pyro_gpr.GPR(p["kernel"], p["likelihood"])
    cached = pyro_model.with_posterior_factor(hyper, X, y)
    for name, value in np_model.with_posterior_factor(hyper, X, y).items():
        close(value, cached[name])
    direct = pyro_model.predict_f(hyper, p["X_new"], X=X, y=y)
    for e, g in zip(direct, pyro_model.predict_f(cached, p["X_new"], X=X, y=y), strict=True):
        close(e.numpy(), g.numpy())
