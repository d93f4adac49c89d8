"""The Pyro twins of the Bayesian GP-LVMs (models/pyro/gplvm.py) against the NumPyro models at the same fixed
parameters and the same latent draws (u, X and, with minibatches, the plate's indices), in float64: every site's
log-density in the model and the guide, the closed-form KLs of q(u) and q(X), the TraceMeanField ELBO with the
guide's draws held at those values, the Monte Carlo ``elbo`` at the same draws of X, the latent KL and the
predictions agree to 1e-10; a perturbed parameter on the Pyro side moves the value, so the comparison can fail. The
amortised Bayesian GP-LVM (q(x_n | y_n) from an encoder) is compared at the same encoder weights: NumPyro's
``"encoder$params"`` pytree against Pyro's ``"encoder.<parameter>"`` tensors of its torch twin.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.infer
import pyro
import pyro.infer
import pytest
import torch
from numpyro import handlers
from numpyro.distributions.kl import kl_divergence as numpyro_kl
from parity_checks import (
    M,
    N,
    apart,
    assert_perturbation_moves,
    assert_same_predictions,
    assert_same_terms,
    close,
    numpyro_terms,
    pyro_terms,
)
from pyro import poutine
from torch.distributions.kl import kl_divergence as torch_kl

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.numpyro import gplvm as np_gplvm
from ppl_sparsegp.models.numpyro import sgpmc as np_sgpmc
from ppl_sparsegp.models.pyro import gplvm as pyro_gplvm
from ppl_sparsegp.models.pyro import sgpmc as pyro_sgpmc
from ppl_sparsegp.models.pyro._base import twin_of
from ppl_sparsegp.numpyro import nn as np_nn
from ppl_sparsegp.pyro import nn as pyro_nn

# a guide reads only some of the params that both traces are given
pytestmark = pytest.mark.filterwarnings("ignore:pyro.module data did not find params")

Q, D, B = 2, 3, 10


def _problem(likelihood: str) -> dict:
    """Y [N, D] from a 2-D latent manifold, PCA-started latents, and values away from the initial ones for every
    param and latent site."""
    rng = np.random.default_rng(3)
    t = rng.uniform(-2, 2, (N, Q))
    F = np.stack([np.sin(t[:, 0]), np.cos(t[:, 1]), t[:, 0] * t[:, 1]], axis=1)
    if likelihood == "gaussian":
        Y, lik = F + 0.1 * rng.standard_normal((N, D)), likelihoods.Gaussian(variance=0.2)
    else:
        Y, lik = (F > 0).astype(np.float64), likelihoods.Bernoulli()
    X_init = np_gplvm.pca_latents(Y, Q)
    params = {
        "kernel.variance": np.array(0.9),
        "kernel.lengthscale": np.array([0.8, 1.1]),
        "Z": rng.standard_normal((M, Q)),
        "u_loc": rng.standard_normal((D, M)),
        "u_scale_tril": np.tril(0.2 * rng.standard_normal((D, M, M))) + 0.7 * np.eye(M),
        "X_loc": X_init + 0.1 * rng.standard_normal((N, Q)),
        "X_scale": rng.uniform(0.1, 0.5, (N, Q)),
    }
    if likelihood == "gaussian":
        params["likelihood.variance"] = np.array(0.25)
    return {
        "Y": Y,
        "kernel": kernels.RBF(variance=1.3, lengthscale=np.array([0.7, 1.4])),
        "likelihood": lik,
        "Z": params["Z"] - 0.1,
        "X_init": X_init,
        "params": params,
        "X_new": rng.uniform(-2, 2, (7, Q)),
        "rng": rng,
    }


def _numpyro_loss(model, guide, params: dict, latents: dict, *args) -> float:
    """NumPyro's TraceMeanField loss with the guide's draws held at ``latents`` (the model replays them)."""
    data = {k: jnp.asarray(v) for k, v in {**params, **latents}.items()}
    return float(
        numpyro.infer.TraceMeanField_ELBO().loss(
            jax.random.PRNGKey(0), {}, handlers.substitute(model, data=data), handlers.substitute(guide, data=data),
            *args,
        )
    )  # fmt: skip


def _pyro_loss(model, guide, params: dict, latents: dict, *args) -> float:
    """Pyro's TraceMeanField loss with the guide's draws held at ``latents``: the guide replays a trace of itself
    with those values as unobserved sample sites (the model replays the guide, as under SVI)."""
    _, trace = pyro_terms(guide, params, latents, *args)
    for name in latents:
        trace.nodes[name]["is_observed"] = False
    tensors = {k: torch.as_tensor(v) for k, v in params.items()}
    replayed = poutine.replay(poutine.substitute(guide, data=tensors), trace=trace)
    return float(pyro.infer.TraceMeanField_ELBO().loss(poutine.substitute(model, data=tensors), replayed, *args))


BAYESIAN_CASES = [
    {"likelihood": "gaussian"},
    {"likelihood": "bernoulli"},
    {"likelihood": "gaussian", "q_diag": True},
    {"likelihood": "gaussian", "data_term": "sampled"},
    {"likelihood": "gaussian", "batch_size": B},
    {"likelihood": "bernoulli", "priors": True, "learn_Z": False},
]


@pytest.mark.parametrize("case", BAYESIAN_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_bayesian_gplvm_log_densities_kls_elbo_and_predictions_agree(case):
    case = dict(case)
    p = _problem(case.pop("likelihood"))
    priors = case.pop("priors", False)
    np_priors = np_sgpmc.default_priors(p["kernel"], p["likelihood"]) if priors else {}
    pyro_priors = pyro_sgpmc.default_priors(p["kernel"], p["likelihood"]) if priors else {}
    common = {"Z": p["Z"], "num_latent": D, "X_init": p["X_init"], "X_scale_init": 0.2, **case}
    npm = np_gplvm.BayesianGPLVM(p["kernel"], p["likelihood"], priors=np_priors, **common)
    pym = pyro_gplvm.BayesianGPLVM(p["kernel"], p["likelihood"], priors=pyro_priors, **common)
    rng, params = p["rng"], dict(p["params"])
    if case.get("q_diag"):
        params["u_scale"] = rng.uniform(0.3, 1.0, (D, M))
        del params["u_scale_tril"]
    hyper = {k: v for k, v in params.items() if k.startswith(("kernel", "likelihood"))}
    if priors:  # the hyperparameters are sample sites: their MAP params and the same values as latents
        params = {**{k: v for k, v in params.items() if k not in hyper}, **{f"{k}_map": v for k, v in hyper.items()}}
    if not case.get("learn_Z", True):
        del params["Z"]
    rows = N if "batch_size" not in case else B
    latents = {"u": rng.standard_normal((D, M)), "X": rng.standard_normal((rows, Q)), **(hyper if priors else {})}
    if "batch_size" in case:
        latents["data"] = rng.choice(N, B)  # the plate's indices, the same on both sides
    args = (p["Y"],)

    terms = assert_same_terms(npm.model, pym.model, params, latents, *args)
    assert set(terms) == {"u", "X", "y"} | (set(hyper) if priors else set())
    guide_terms = assert_same_terms(npm.guide, pym.guide, params, latents, *args)
    assert set(guide_terms) == {"u", "X"} | (set(hyper) if priors else set())
    assert_perturbation_moves(pym.model, params, latents, *args, site="X")
    assert_perturbation_moves(pym.guide, params, latents, *args, site="X_scale")

    _, np_model_trace = numpyro_terms(npm.model, params, latents, *args)
    _, np_guide_trace = numpyro_terms(npm.guide, params, latents, *args)
    _, pyro_model_trace = pyro_terms(pym.model, params, latents, *args)
    _, pyro_guide_trace = pyro_terms(pym.guide, params, latents, *args)
    for site in ("u", "X"):
        close(
            jnp.sum(numpyro_kl(np_guide_trace[site]["fn"], np_model_trace[site]["fn"])),
            torch.sum(torch_kl(pyro_guide_trace.nodes[site]["fn"], pyro_model_trace.nodes[site]["fn"])),
        )
    np_loss = _numpyro_loss(npm.model, npm.guide, params, latents, *args)
    close(np_loss, _pyro_loss(pym.model, pym.guide, params, latents, *args))
    moved = {**latents, "X": latents["X"] * 1.01}
    apart(np_loss, _pyro_loss(pym.model, pym.guide, params, moved, *args))

    fitted = {**hyper, **{k: v for k, v in params.items() if not k.endswith("_map")}}
    close(npm.latents.kl(fitted), pym.latents.kl(fitted))
    # the Monte Carlo elbo at the same draws of X: Pyro's from torch's generator, NumPyro's SVGP ELBO at those
    pyro.set_rng_seed(0)
    got = pym.elbo(fitted, p["Y"], num_samples=3)
    pyro.set_rng_seed(0)
    draws = pym.latents.q(fitted).sample((3,)).numpy()
    gp = {k: v for k, v in fitted.items() if not k.startswith("X_")}
    expected = np.mean([npm.svgp.elbo(gp, X, p["Y"]) for X in draws]) - npm.latents.kl(fitted)
    close(expected, got)
    assert_same_predictions(npm, pym, fitted, p["X_new"])
    close(npm.reconstruct(fitted)[0], pym.reconstruct(fitted)[0].numpy())


def test_collapsed_gplvm_log_densities_kl_elbo_and_predictions_agree():
    p = _problem("gaussian")
    common = {"Z": p["Z"], "X_init": p["X_init"], "X_scale_init": 0.2}
    npm = np_gplvm.CollapsedGPLVM(p["kernel"], p["likelihood"], **common)
    pym = pyro_gplvm.CollapsedGPLVM(p["kernel"], p["likelihood"], **common)
    params = {k: v for k, v in p["params"].items() if not k.startswith("u_")}
    latents = {"X": p["rng"].standard_normal((N, Q))}
    args = (p["Y"],)

    terms = assert_same_terms(npm.model, pym.model, params, latents, *args)
    assert set(terms) == {"X", "collapsed_bound"}
    guide_terms = assert_same_terms(npm.guide, pym.guide, params, latents, *args)
    assert set(guide_terms) == {"X"}
    assert_perturbation_moves(pym.model, params, latents, *args, site="X")
    np_loss = _numpyro_loss(npm.model, npm.guide, params, latents, *args)
    close(np_loss, _pyro_loss(pym.model, pym.guide, params, latents, *args))

    pyro.set_rng_seed(0)
    got = pym.elbo(params, p["Y"], num_samples=2)
    pyro.set_rng_seed(0)
    draws = pym.latents.q(params).sample((2,)).numpy()
    gp = {k: v for k, v in params.items() if not k.startswith("X_")}
    close(np.mean([npm.sgpr.elbo(gp, X, p["Y"]) for X in draws]) - npm.latents.kl(params), got)
    mu = params["X_loc"]
    assert_same_predictions(npm, pym, params, p["X_new"], X=mu, y=p["Y"])
    close(npm.reconstruct(params, p["Y"])[1], pym.reconstruct(params, p["Y"])[1].numpy())


ENCODER_CASES = [
    {"likelihood": "gaussian"},
    {"likelihood": "bernoulli", "q_diag": True},
    {"likelihood": "gaussian", "batch_size": B},
]


def _encoder_weights(encoder, rng: np.random.Generator):
    """The weights pytree of an equinox encoder (as NumPyro's ``"encoder$params"`` holds it), every array moved at
    random away from its initial value."""
    weights, _ = eqx.partition(encoder, eqx.is_inexact_array)
    return jax.tree_util.tree_map(lambda a: a + 0.3 * jnp.asarray(rng.standard_normal(a.shape)), weights)


@pytest.mark.parametrize("case", ENCODER_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_amortised_bayesian_gplvm_log_densities_kls_loss_and_encodings_agree(case):
    case = dict(case)
    p = _problem(case.pop("likelihood"))
    rng, Y = p["rng"], p["Y"]
    encoder = np_nn.gaussian_encoder(D, Q, (5,), "tanh", jax.random.PRNGKey(0), jnp.float64)
    common = {"Z": p["Z"], "num_latent": D, "X_init": p["X_init"], **case}
    npm = np_gplvm.BayesianGPLVM(p["kernel"], p["likelihood"], encoder=encoder, **common)
    pym = twin_of(npm)  # the equinox encoder becomes its torch twin, with the same initial weights
    assert isinstance(pym.encoder, pyro_nn.GaussianEncoder)
    close(npm.encode({}, Y), pym.encode({}, Y))

    site = np_gplvm.ENCODER_PARAMS
    weights = _encoder_weights(npm.encoder, rng)
    fitted_encoder = np_nn.fitted(npm.encoder, {site: weights}, site)  # the equinox module at those weights
    networks = pyro_nn.param_values(pyro_gplvm.ENCODER, pyro_nn.encoder_twin(fitted_encoder))
    params = {k: v for k, v in p["params"].items() if not k.startswith("X_")}
    if case.get("q_diag"):
        params["u_scale"] = rng.uniform(0.3, 1.0, (D, M))
        del params["u_scale_tril"]
    params.update({k: v.numpy() for k, v in networks.items()})
    assert set(networks) <= pym.parameter_names() and site in npm.parameter_names()
    rows = N if "batch_size" not in case else B
    latents = {"u": rng.standard_normal((D, M)), "X": rng.standard_normal((rows, Q))}
    if "batch_size" in case:
        latents["data"] = rng.choice(N, B)  # the plate's indices, the same on both sides
    np_guide = handlers.substitute(npm.guide, data={site: weights})

    assert set(assert_same_terms(npm.model, pym.model, params, latents, Y)) == {"u", "X", "y"}
    assert set(assert_same_terms(np_guide, pym.guide, params, latents, Y)) == {"u", "X"}
    assert_perturbation_moves(pym.guide, params, latents, Y, site="encoder.mean.0.weight")
    assert_perturbation_moves(pym.guide, params, latents, Y, site="encoder.variance.2.bias")
    _, np_model_trace = numpyro_terms(npm.model, params, latents, Y)
    _, np_guide_trace = numpyro_terms(np_guide, params, latents, Y)
    _, pyro_model_trace = pyro_terms(pym.model, params, latents, Y)
    _, pyro_guide_trace = pyro_terms(pym.guide, params, latents, Y)
    for name in ("u", "X"):
        close(
            jnp.sum(numpyro_kl(np_guide_trace[name]["fn"], np_model_trace[name]["fn"])),
            torch.sum(torch_kl(pyro_guide_trace.nodes[name]["fn"], pyro_model_trace.nodes[name]["fn"])),
        )
    np_loss = _numpyro_loss(npm.model, np_guide, params, latents, Y)
    close(np_loss, _pyro_loss(pym.model, pym.guide, params, latents, Y))
    moved = {**params, "encoder.variance.0.weight": params["encoder.variance.0.weight"] * 1.01}
    apart(np_loss, _pyro_loss(pym.model, pym.guide, moved, latents, Y))

    # the Monte Carlo elbo with q(x_n | y_n) from the encoder, at the same draws of X (torch's generator)
    hyper = {k: v for k, v in params.items() if not k.startswith("encoder.") and not k.endswith("_map")}
    np_params = {**hyper, site: weights}
    q_x = npm.latent_posterior(np_params, Y)
    close(q_x["X_loc"], pym.latent_posterior(params, Y)["X_loc"].detach())
    close(q_x["X_scale"], pym.latent_posterior(params, Y)["X_scale"].detach())
    pyro.set_rng_seed(0)
    got = pym.elbo({k: v for k, v in params.items() if not k.endswith("_map")}, Y, num_samples=2)
    pyro.set_rng_seed(0)
    draws = pym.latents.q(pym.latent_posterior(params, Y)).sample((2,)).numpy()
    expected = np.mean([npm.svgp.elbo(hyper, X, Y) for X in draws]) - npm.latents.kl(q_x)
    close(expected, got.detach())
    pyro.set_rng_seed(0)
    moved = {k: v for k, v in params.items() if not k.endswith("_map")}
    moved["encoder.mean.0.bias"] = params["encoder.mean.0.bias"] + 0.1
    apart(expected, pym.elbo(moved, Y, num_samples=2).detach())
    assert np.isfinite(npm.elbo(np_params, Y, jax.random.PRNGKey(0), num_samples=2))

    Y_new = rng.standard_normal((6, D))
    expected = npm.encode({site: weights}, Y_new)
    close(expected, pym.encode(params, Y_new))
    apart(expected, pym.encode({**params, "encoder.mean.2.bias": params["encoder.mean.2.bias"] + 0.01}, Y_new))
    close(expected, twin_of(npm, encoder=fitted_encoder).encode({}, Y_new))  # a NumPyro fit's weights carried over
    hyper = {k: v for k, v in params.items() if not k.startswith("encoder.")}
    for e, g in zip(npm.reconstruct({**hyper, site: weights}, Y_new), pym.reconstruct(params, Y_new), strict=True):
        close(e, g.numpy())


def test_the_encoder_twin_needs_the_equinox_module_and_a_free_gplvm_has_nothing_to_encode_with():
    p = _problem("gaussian")
    encoder = np_nn.gaussian_encoder(D, Q, (4,), "relu", jax.random.PRNGKey(1), jnp.float64)
    common = {"Z": p["Z"], "num_latent": D, "X_init": p["X_init"]}
    with pytest.raises(ValueError, match="its activation is unknown"):
        pyro_gplvm.BayesianGPLVM(p["kernel"], p["likelihood"], encoder=eqx.partition(encoder, eqx.is_inexact_array)[0],
                                 **common)  # fmt: skip
    with pytest.raises(ValueError, match="encoder: expected a GaussianEncoder"):
        pyro_gplvm.BayesianGPLVM(p["kernel"], p["likelihood"], encoder=pyro_nn.encoder_network(D, Q, (4,), "relu"),
                                 **common)  # fmt: skip
    with pytest.raises(ValueError, match="encoder: this GP-LVM has free latent means"):
        pyro_gplvm.BayesianGPLVM(p["kernel"], p["likelihood"], **common).encode({}, p["Y"])
