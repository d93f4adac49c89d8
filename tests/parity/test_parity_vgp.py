"""The Pyro twins of VGP and GPMC (models/pyro/vgp.py, gpmc.py) against the NumPyro models at the same fixed
parameters, in float64: every site's log-density (the data term, the whitened prior of v, the Opper-Archambeau
q(v), the hyperparameter priors and point masses), the closed-form KL of q(v) from N(0, I), the TraceMeanField ELBO
and the models' ``elbo``, the pointwise log-likelihoods and the predictive moments agree to 1e-10; a perturbed
parameter on the Pyro side moves the value, so the comparison can fail.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.infer
import pyro.infer
import pytest
import torch
from numpyro import handlers
from numpyro.distributions.kl import kl_divergence as numpyro_kl
from parity_checks import (
    N,
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

from ppl_sparsegp.core import likelihoods
from ppl_sparsegp.models.numpyro import gpmc as np_gpmc
from ppl_sparsegp.models.numpyro import sgpmc as np_sgpmc
from ppl_sparsegp.models.numpyro import vgp as np_vgp
from ppl_sparsegp.models.pyro import gpmc as pyro_gpmc
from ppl_sparsegp.models.pyro import sgpmc as pyro_sgpmc
from ppl_sparsegp.models.pyro import vgp as pyro_vgp

# a guide reads only some of the params that both traces are given
pytestmark = pytest.mark.filterwarnings("ignore:pyro.module data did not find params")

CLASSES = 3


def _problem(likelihood: str, num_latent: int) -> dict:
    """The shared problem; ``"robustmax"``: labels in {0, 1, 2} from the Gaussian problem's inputs."""
    if likelihood != "robustmax":
        return problem(likelihood, num_latent)
    p = problem("gaussian")
    p["y"] = np.digitize(p["X"][:, 0], [-0.7, 0.7]).astype(np.float64)
    p["likelihood"] = likelihoods.RobustMax(CLASSES)
    return p


def _hyperparameters(p: dict) -> dict[str, np.ndarray]:
    return {k: v for k, v in fixed_params(p).items() if k.startswith(("kernel", "likelihood"))}


VGP_CASES = [
    {"likelihood": "gaussian"},
    {"likelihood": "bernoulli"},
    {"likelihood": "gaussian", "num_latent": 2},
    {"likelihood": "robustmax", "num_latent": CLASSES},
    {"likelihood": "bernoulli", "priors": True},
]


@pytest.mark.parametrize("case", VGP_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_vgp_log_densities_kl_elbo_and_predictions_agree(case):
    P = case.get("num_latent", 1)
    p = _problem(case["likelihood"], P)
    priors = {}
    if case.get("priors"):
        priors = {"numpyro": np_sgpmc.default_priors(p["kernel"], p["likelihood"]),
                  "pyro": pyro_sgpmc.default_priors(p["kernel"], p["likelihood"])}  # fmt: skip
    npm = np_vgp.VGP(p["kernel"], p["likelihood"], priors=priors.get("numpyro", {}), num_latent=P)
    pym = pyro_vgp.VGP(p["kernel"], p["likelihood"], priors=priors.get("pyro", {}), num_latent=P)
    rng = p["rng"]
    hyper = _hyperparameters(p)
    q = {"q_alpha": 0.3 * rng.standard_normal((P, N)), "q_lambda": rng.uniform(0.5, 2.0, (P, N))}
    # with priors the hyperparameters are sample sites: their MAP params and the same values as latents
    params = {**q, **({f"{k}_map": v for k, v in hyper.items()} if priors else hyper)}
    latents = {"v": rng.standard_normal((P, N)), **(hyper if priors else {})}
    args = (p["X"], p["y"])

    terms = assert_same_terms(npm.model, pym.model, params, latents, *args)
    assert set(terms) == {"v", "y"} | (set(hyper) if priors else set())
    guide_terms = assert_same_terms(npm.guide, pym.guide, params, latents, *args)
    assert set(guide_terms) == {"v"} | (set(hyper) if priors else set())
    assert_perturbation_moves(pym.model, params, latents, *args, site="q_lambda")
    assert_perturbation_moves(pym.guide, params, latents, *args, site="q_alpha")

    _, np_model_trace = numpyro_terms(npm.model, params, latents, *args)
    _, np_guide_trace = numpyro_terms(npm.guide, params, latents, *args)
    _, pyro_model_trace = pyro_terms(pym.model, params, latents, *args)
    _, pyro_guide_trace = pyro_terms(pym.guide, params, latents, *args)
    close(
        numpyro_kl(np_guide_trace["v"]["fn"], np_model_trace["v"]["fn"]),
        torch_kl(pyro_guide_trace.nodes["v"]["fn"], pyro_model_trace.nodes["v"]["fn"]),
    )
    # the ELBO is exact (analytic data term, closed-form KL, point masses): the engines' losses and elbo()
    data = {k: jnp.asarray(v) for k, v in params.items()}
    np_loss = numpyro.infer.TraceMeanField_ELBO().loss(
        jax.random.PRNGKey(0), {}, handlers.substitute(npm.model, data=data), handlers.substitute(npm.guide, data=data),
        *args,
    )  # fmt: skip
    tensors = {k: torch.as_tensor(v) for k, v in params.items()}
    pyro_loss = pyro.infer.TraceMeanField_ELBO().loss(
        poutine.substitute(pym.model, data=tensors), poutine.substitute(pym.guide, data=tensors), *args
    )
    close(np_loss, pyro_loss)
    if not priors:  # elbo() leaves out the hyperparameter priors, which the loss counts
        close(-np_loss, pym.elbo(params, *args))
    close(npm.elbo(params, *args), pym.elbo(params, *args))
    for fitted in ({**q, **hyper}, {**hyper, "v": latents["v"]}):  # q(v), and a draw of v
        close(npm.pointwise_log_likelihood(fitted, *args), pym.pointwise_log_likelihood(fitted, *args).numpy())
        assert_same_predictions(npm, pym, fitted, p["X_new"], X=p["X"], y=p["y"])


@pytest.mark.parametrize("case", [("gaussian", 1), ("bernoulli", 1), ("gaussian", 2)], ids=str)
def test_gpmc_log_joint_pointwise_log_likelihood_and_predictions_agree(case):
    likelihood, P = case
    p = problem(likelihood, P)
    npm = np_gpmc.GPMC(
        p["kernel"], p["likelihood"], priors=np_sgpmc.default_priors(p["kernel"], p["likelihood"]), num_latent=P
    )
    pym = pyro_gpmc.GPMC(
        p["kernel"], p["likelihood"], priors=pyro_sgpmc.default_priors(p["kernel"], p["likelihood"]), num_latent=P
    )
    draw = {**_hyperparameters(p), "v": p["rng"].standard_normal((P, N))}
    args = (p["X"], p["y"])
    terms = assert_same_terms(npm.model, pym.model, {}, draw, *args)
    assert set(terms) == set(draw) | {"y"}
    assert_perturbation_moves(pym.model, {}, draw, *args)
    assert_perturbation_moves(pym.model, {}, draw, *args, site="v")
    close(npm.pointwise_log_likelihood(draw, *args), pym.pointwise_log_likelihood(draw, *args).numpy())
    assert_same_predictions(npm, pym, draw, p["X_new"], X=p["X"], y=p["y"])
