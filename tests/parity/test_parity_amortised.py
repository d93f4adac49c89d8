"""The amortised models' Pyro twins against NumPyro in float64: the networks (:mod:`ppl_sparsegp.pyro.nn` against
:mod:`ppl_sparsegp.numpyro.nn`) at the same weights, copied by :func:`ppl_sparsegp.pyro.nn.load_numpyro_weights`;
IDSGP's, the VAE's and SAS-GP's per-site log-densities under the same params, latent values, minibatch and active
set, their objectives and predictions. A perturbed parameter on the Pyro side moves the value, so agreement can fail.
"""

from __future__ import annotations

from functools import partial

import equinox as eqx
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
    apart,
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

from ppl_sparsegp.models.numpyro import idsgp as np_idsgp
from ppl_sparsegp.models.numpyro import sas_gplvm as np_sas
from ppl_sparsegp.models.numpyro import vae as np_vae
from ppl_sparsegp.models.pyro import idsgp as pyro_idsgp
from ppl_sparsegp.models.pyro import sas_gplvm as pyro_sas
from ppl_sparsegp.models.pyro import vae as pyro_vae
from ppl_sparsegp.numpyro import nn as np_nn
from ppl_sparsegp.pyro import nn as pyro_nn

# a guide reads only some of the params that both traces are given
pytestmark = pytest.mark.filterwarnings("ignore:pyro.module data did not find params")


def perturbed_weights(network, rng: np.random.Generator, size: float = 0.3):
    """The weights pytree of an equinox network (as NumPyro's params dict holds it), every array moved at random, so
    that no array (e.g. a bias started at zero) is left at a special value."""
    weights, _ = eqx.partition(network, eqx.is_inexact_array)
    return jax.tree_util.tree_map(lambda a: a + size * jnp.asarray(rng.standard_normal(a.shape)), weights)


def with_weights(model, site: str, weights):
    """``model`` with the NumPyro param ``site`` held at the pytree ``weights`` (which the parity helpers' array
    substitution cannot carry)."""
    return handlers.substitute(model, data={site: weights})


class NumPyroView:
    """A NumPyro model whose public methods take the Pyro twin's ``params``: its networks' entries under Pyro's names
    (``"<name>.<parameter>"``) give way to NumPyro's weights pytrees ``weights`` (site -> pytree)."""

    def __init__(self, model, weights: dict, pyro_names: set[str]) -> None:
        self.model, self.weights, self.pyro_names = model, weights, pyro_names

    def __getattr__(self, method: str):
        def call(params, *args, **kwargs):
            kept = {k: v for k, v in params.items() if k not in self.pyro_names}
            return getattr(self.model, method)({**kept, **self.weights}, *args, **kwargs)

        return call


class Drawn(poutine.messenger.Messenger):
    """Sample sites of these names take these values as if drawn (``poutine.condition`` would make them observed,
    which a model cannot replay)."""

    def __init__(self, values: dict) -> None:
        super().__init__()
        self.values = values

    def _pyro_sample(self, msg: dict) -> None:
        if msg["name"] in self.values:
            msg["value"], msg["done"] = self.values[msg["name"]], True


NETWORKS = {
    "inducing-sigmoid": (np_nn.inducing_network, pyro_nn.inducing_network, (3, 4, (6, 6), "sigmoid")),
    "inducing-softplus-linear": (np_nn.inducing_network, pyro_nn.inducing_network, (2, 3, (), "softplus")),
    "encoder-relu": (np_nn.encoder_network, pyro_nn.encoder_network, (5, 2, (7, 4), "relu")),
    "encoder-tanh": (np_nn.encoder_network, pyro_nn.encoder_network, (5, 3, (4,), "tanh")),
    "gaussian-encoder": (np_nn.gaussian_encoder, pyro_nn.gaussian_encoder, (5, 2, (6, 3), "softplus")),
}


@pytest.mark.parametrize("name", NETWORKS)
def test_networks_agree_at_the_same_weights(name):
    build_np, build_pyro, args = NETWORKS[name]
    rng = np.random.default_rng(1)
    net = build_np(*args, jax.random.PRNGKey(0), jnp.float64)
    weights = perturbed_weights(net, rng)
    fitted = eqx.combine(weights, eqx.partition(net, eqx.is_inexact_array)[1])
    x = 3.0 * rng.standard_normal((9, args[0]))
    expected = jax.vmap(fitted)(jnp.asarray(x))
    expected = expected if isinstance(expected, tuple) else (expected,)

    module = build_pyro(*args, seed=0)
    before = module(torch.as_tensor(x))
    pyro_nn.load_numpyro_weights(module, weights)
    got = module(torch.as_tensor(x))
    got, before = (got, before) if isinstance(got, tuple) else ((got,), (before,))
    for e, g, b in zip(expected, got, before, strict=True):
        assert g.dtype == torch.float64
        close(e, g.detach().numpy())
        apart(e, b.detach().numpy())  # the torch module's own initial weights give other outputs
    # the whole module loads as its weights do, and a registered network evaluates at the param store's values
    pyro.clear_param_store()
    reloaded = pyro_nn.load_numpyro_weights(build_pyro(*args, seed=3), fitted)
    registered = pyro_nn.module("net", reloaded)(torch.as_tensor(x))
    for e, g in zip(expected, registered if isinstance(registered, tuple) else (registered,), strict=True):
        close(e, g.detach().numpy())
    assert set(pyro.get_param_store()) == set(pyro_nn.param_values("net", reloaded))


def test_loading_another_architecture_raises():
    net = np_nn.encoder_network(5, 2, (7, 4), "relu", jax.random.PRNGKey(0), jnp.float64)
    with pytest.raises(ValueError, match="do not match the torch module"):
        pyro_nn.load_numpyro_weights(pyro_nn.encoder_network(5, 2, (7,), "relu"), net)


def test_inducing_outputs_have_a_positive_diagonal_on_both_backends():
    out = 40.0 * np.random.default_rng(0).standard_normal((4, pyro_nn.inducing_output_size(3, 2)))
    Z, m, L = pyro_nn.split_inducing_outputs(torch.as_tensor(out), 3, 2)
    expected = np_nn.split_inducing_outputs(jnp.asarray(out), 3, 2)
    for e, g in zip(expected, (Z, m, L), strict=True):
        close(e, g.numpy())
    assert (torch.diagonal(L, dim1=-2, dim2=-1) > 0).all() and (torch.triu(L, 1) == 0).all()


def latent_kls(np_pair, pyro_pair, params: dict, latents: dict, *args, site: str = "X") -> tuple[float, float]:
    """KL[q ‖ p] of the latent ``site`` in closed form, from the distributions of the NumPyro (model, guide) and the
    Pyro (model, guide) traced at ``params`` and ``latents``."""
    np_fns = [numpyro_terms(f, params, latents, *args)[1][site]["fn"] for f in np_pair]
    pyro_fns = [pyro_terms(f, params, latents, *args)[1].nodes[site]["fn"] for f in pyro_pair]
    return float(jnp.sum(numpyro_kl(np_fns[1], np_fns[0]))), float(torch.sum(torch_kl(pyro_fns[1], pyro_fns[0])))


# --- IDSGP ----------------------------------------------------------------------------------------------------

IDSGP_M = 3


def idsgp_pair(likelihood: str, **settings):
    """The NumPyro and Pyro IDSGP on the shared problem; the params (hyperparameters away from their initial values
    and the network's perturbed weights under Pyro's names, which NumPyro ignores); those weights as NumPyro's
    pytree (the Pyro network built with them); a draw of every input's u."""
    p = problem(likelihood)
    config = dict(input_dim=2, num_inducing=IDSGP_M, hidden=(8,), **settings)
    npm = np_idsgp.IDSGP(p["kernel"], p["likelihood"], **config)
    hyper = {k: v for k, v in fixed_params(p).items() if k.startswith(("kernel", "likelihood"))}
    weights = perturbed_weights(npm.network, p["rng"])
    pym = pyro_idsgp.IDSGP(p["kernel"], p["likelihood"], network=weights, **config)  # the weights carried over
    network = {k: v.numpy() for k, v in pyro_nn.param_values(pyro_idsgp.NETWORK, pym.network).items()}
    u = {"u": p["rng"].standard_normal((p["X"].shape[0], IDSGP_M))}
    return p, npm, pym, {**hyper, **network}, weights, u


IDSGP_CASES = [("gaussian", {}), ("bernoulli", {}), ("gaussian", {"num_data": 100}), ("bernoulli", {"batch_size": 10}),
               ("gaussian", {"dropout": 0.5}), ("bernoulli", {"batch_size": 10, "dropout": 0.3})]  # fmt: skip


@pytest.mark.parametrize("likelihood, settings", IDSGP_CASES, ids=str)
@pytest.mark.slow
def test_idsgp_log_densities_elbo_and_predictions_agree(likelihood, settings):
    p, npm, pym, params, weights, u = idsgp_pair(likelihood, **settings)
    args = (p["X"], p["y"])
    if "batch_size" in settings:  # the same minibatch on both sides: the "data" plate's indices, and its u
        idx = p["rng"].integers(0, p["X"].shape[0], settings["batch_size"])
        u = {"data": idx, "u": u["u"][: settings["batch_size"]]}
    dropout = set()
    if settings.get("dropout"):  # the same keep mask on both sides
        rows = settings.get("batch_size", p["X"].shape[0])
        u[np_idsgp.DROPOUT] = (p["rng"].uniform(size=(rows, pyro_nn.inducing_output_size(IDSGP_M, 2))) > 0.4) * 1.0
        dropout = {np_idsgp.DROPOUT}
    train = {"train": True} if dropout else {}  # the training step's programs, with the dropout
    np_model, np_guide = (
        with_weights(partial(f, **train), np_idsgp.NETWORK_PARAMS, weights) for f in (npm.model, npm.guide)
    )
    py_model, py_guide = partial(pym.model, **train), partial(pym.guide, **train)
    assert set(assert_same_terms(np_model, py_model, params, u, *args)) == {"u", "y"} | dropout
    assert set(assert_same_terms(np_guide, py_guide, params, u, *args)) == {"u"} | dropout
    assert_perturbation_moves(py_model, params, u, *args)
    assert_perturbation_moves(py_guide, params, u, *args, site="network.0.weight")
    close(*latent_kls((np_model, np_guide), (py_model, py_guide), params, u, *args, site="u"))

    if "batch_size" not in settings:  # the loss is exact (analytic data term, closed-form KL) at the full batch
        mask = {k: v for k, v in u.items() if k == np_idsgp.DROPOUT}  # given the same mask, with dropout
        np_params = {**params, np_idsgp.NETWORK_PARAMS: weights, **mask}
        np_model, np_guide = (handlers.substitute(partial(f, **train), data=np_params) for f in (npm.model, npm.guide))
        np_loss = numpyro.infer.TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), {}, np_model, np_guide, *args)
        tensors = {k: torch.as_tensor(v) for k, v in params.items()}
        pyro_model, pyro_guide = (poutine.substitute(f, data=tensors) for f in (py_model, py_guide))
        given = Drawn({k: torch.as_tensor(v) for k, v in mask.items()})(pyro_guide)  # the model replays it
        close(np_loss, pyro.infer.TraceMeanField_ELBO().loss(pyro_model, given, *args))
        if not settings:
            close(-np_loss, pym.elbo(params, *args).detach())
    view = NumPyroView(npm, {np_idsgp.NETWORK_PARAMS: weights}, set(pyro_nn.param_values("network", pym.network)))
    close(view.elbo(params, *args), pym.elbo(params, *args).detach())
    close(view.pointwise_log_likelihood(params, *args), pym.pointwise_log_likelihood(params, *args).detach())
    for e, g in zip(view.inducing_sets(params, p["X_new"]), pym.inducing_sets(params, p["X_new"]), strict=True):
        close(e, g)
    assert_same_predictions(view, pym, params, p["X_new"])
    draw = {"u": p["rng"].standard_normal((p["X_new"].shape[0], IDSGP_M))}
    assert_same_predictions(view, pym, {**params, **draw}, p["X_new"])  # at a draw of every input's u


# --- VAE --------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_vae_log_densities_loss_and_reconstructions_agree():
    rng = np.random.default_rng(2)
    N, D, Q = 12, 5, 2
    Y = rng.standard_normal((N, D))
    config = dict(data_dim=D, latent_dim=Q, hidden=(6, 4), activation="tanh", batch_size=None)
    npm, pym = np_vae.VAE(**config), pyro_vae.VAE(**config)
    weights = {
        f"{np_vae.ENCODER}$params": perturbed_weights(npm.encoder, rng),
        f"{np_vae.DECODER}$params": perturbed_weights(npm.decoder, rng),
    }
    pyro_nn.load_numpyro_weights(pym.encoder, weights["encoder$params"])
    pyro_nn.load_numpyro_weights(pym.decoder, weights["decoder$params"])
    networks = {**pyro_nn.param_values("encoder", pym.encoder), **pyro_nn.param_values("decoder", pym.decoder)}
    params = {np_vae.NOISE: np.array(0.3), **{k: v.numpy() for k, v in networks.items()}}
    latents = {"X": rng.standard_normal((N, Q))}

    np_model, np_guide = (handlers.substitute(f, data=weights) for f in (npm.model, npm.guide))
    assert set(assert_same_terms(np_model, pym.model, params, latents, Y)) == {"X", "y"}
    assert set(assert_same_terms(np_guide, pym.guide, params, latents, Y)) == {"X"}
    assert_perturbation_moves(pym.model, params, latents, Y, site=np_vae.NOISE)
    assert_perturbation_moves(pym.model, params, latents, Y, site="decoder.2.weight")
    assert_perturbation_moves(pym.guide, params, latents, Y, site="encoder.variance.0.bias")
    close(*latent_kls((np_model, np_guide), (pym.model, pym.guide), params, latents, Y))

    view = NumPyroView(npm, weights, set(networks))
    Y_new = rng.standard_normal((4, D))
    close(view.encode(params, Y_new), pym.encode(params, Y_new))
    for e, g in zip(view.reconstruct(params, Y_new), pym.reconstruct(params, Y_new), strict=True):
        close(e, g)
    moved = {**params, "decoder.0.bias": params["decoder.0.bias"] + 0.01}
    apart(view.reconstruct(params, Y_new)[0], pym.reconstruct(moved, Y_new)[0].numpy())


# --- SAS-GP -----------------------------------------------------------------------------------------------------

SAS_N, SAS_D, SAS_Q, SAS_A = 14, 3, 2, 4


def fix_active_split(monkeypatch, active, held) -> None:
    """Both twins split their batches at the positions ``active`` and ``held`` instead of at random."""
    monkeypatch.setattr(np_sas, "split_active", lambda key, B, A: (jnp.asarray(active), jnp.asarray(held)))
    monkeypatch.setattr(pyro_sas, "split_active", lambda B, A: (torch.as_tensor(active), torch.as_tensor(held)))


@pytest.mark.parametrize("bayesian", [False, True], ids=["deterministic", "bayesian"])
@pytest.mark.parametrize("batch_size", [None, 10], ids=["all-rows", "batch"])
@pytest.mark.slow
def test_sas_gplvm_log_densities_estimates_and_reconstructions_agree(monkeypatch, bayesian, batch_size):
    p = problem("gaussian")
    rng = np.random.default_rng(3)
    Y = rng.standard_normal((SAS_N, SAS_D))
    config = dict(
        data_dim=SAS_D, latent_dim=SAS_Q, num_active=SAS_A, batch_size=batch_size, bayesian=bayesian, hidden=(6,),
        activation="tanh",
    )  # fmt: skip
    npm = np_sas.SASGPLVM(p["kernel"], p["likelihood"], **config)
    weights = {np_sas.ENCODER_PARAMS: perturbed_weights(npm.encoder, rng)}
    encoder = eqx.combine(weights[np_sas.ENCODER_PARAMS], eqx.partition(npm.encoder, eqx.is_inexact_array)[1])
    pym = pyro_sas.SASGPLVM(p["kernel"], p["likelihood"], encoder=encoder, **config)  # the whole module carried over
    networks = pyro_nn.param_values(pyro_sas.ENCODER, pym.encoder)
    params = {k: v for k, v in fixed_params(p).items() if k.startswith(("kernel", "likelihood"))}
    params.update({k: v.numpy() for k, v in networks.items()})

    B = batch_size or SAS_N
    latents = {} if batch_size is None else {"data": rng.permutation(SAS_N)[:B]}
    if bayesian:
        latents["X"] = rng.standard_normal((B, SAS_Q))
    order = rng.permutation(B)
    fix_active_split(monkeypatch, order[:SAS_A], order[SAS_A:])
    np_model, np_guide = (handlers.substitute(f, data=weights) for f in (npm.model, npm.guide))
    terms = assert_same_terms(np_model, pym.model, params, latents, Y)
    assert set(terms) == ({"sas", "X"} if bayesian else {"sas"})
    assert_perturbation_moves(pym.model, params, latents, Y)
    if bayesian:
        assert set(assert_same_terms(np_guide, pym.guide, params, latents, Y)) == {"X"}
        assert_perturbation_moves(pym.guide, params, latents, Y, site="encoder.variance.0.weight")
        close(*latent_kls((np_model, np_guide), (pym.model, pym.guide), params, latents, Y))
    else:
        assert_perturbation_moves(pym.model, params, latents, Y, site="encoder.0.weight")
    if batch_size is not None:  # another batch moves the estimate
        moved = {**latents, "data": np.roll(latents["data"], 1) if bayesian else rng.permutation(SAS_N)[:B]}
        apart(sum(pyro_terms(pym.model, params, latents, Y)[0].values()),
              sum(pyro_terms(pym.model, params, moved, Y)[0].values()))  # fmt: skip

    view = NumPyroView(npm, weights, set(networks))
    close(view.encode(params, Y), pym.encode(params, Y))
    close(view.exact_log_marginal(params, Y), pym.exact_log_marginal(params, Y))
    order = rng.permutation(SAS_N)
    fix_active_split(monkeypatch, order[:SAS_A], order[SAS_A:])
    estimate = pym.sas_estimate(params, Y)
    close(view.sas_estimate(params, Y, jax.random.PRNGKey(0)), estimate)
    fix_active_split(monkeypatch, order[1 : SAS_A + 1], np.concatenate([order[:1], order[SAS_A + 1 :]]))
    apart(estimate, pym.sas_estimate(params, Y))  # another active set moves it

    Y_new = rng.standard_normal((5, SAS_D))
    for e, g in zip(view.reconstruct(params, Y_new, Y), pym.reconstruct(params, Y_new, Y), strict=True):
        close(e, g)
    assert_same_predictions(view, pym, params, rng.standard_normal((5, SAS_Q)), X=pym.encode(params, Y).numpy(), y=Y)


def test_prior_and_predictive_branches_agree():
    """model(X) / model(Y=None), the branches that ``Predictive`` runs, at the same draws of every sample site."""
    p, npm, pym, params, weights, u = idsgp_pair("gaussian")
    N = p["X"].shape[0]
    draws = {**u, "f": p["rng"].standard_normal(N), "y": p["rng"].standard_normal(N)}
    np_model = with_weights(npm.model, np_idsgp.NETWORK_PARAMS, weights)
    assert set(assert_same_terms(np_model, pym.model, params, draws, p["X"])) == {"u", "f", "y"}
    assert_perturbation_moves(pym.model, params, draws, p["X"], site="f")

    rng = np.random.default_rng(4)
    vae = {"data_dim": 3, "latent_dim": 2, "hidden": (4,), "num_data": 6}
    npv, pyv = np_vae.VAE(**vae), pyro_vae.VAE(**vae)
    weights = {f"{np_vae.DECODER}$params": perturbed_weights(npv.decoder, rng)}
    pyro_nn.load_numpyro_weights(pyv.decoder, weights["decoder$params"])
    vae_params = {k: v.numpy() for k, v in pyro_nn.param_values("decoder", pyv.decoder).items()}
    draws = {"X": rng.standard_normal((6, 2)), "y": rng.standard_normal((6, 3))}
    np_model = handlers.substitute(npv.model, data=weights)
    assert set(assert_same_terms(np_model, pyv.model, vae_params, draws, None)) == {"X", "y"}
    assert_perturbation_moves(pyv.model, vae_params, draws, None, site="decoder.0.weight")

    sas = {"data_dim": 3, "latent_dim": 2, "num_active": 2, "num_data": 6, "hidden": (4,)}
    nps, pys = (m.SASGPLVM(p["kernel"], p["likelihood"], **sas) for m in (np_sas, pyro_sas))
    hyper = {k: v for k, v in params.items() if k.startswith(("kernel", "likelihood"))}
    draws = {"X": rng.standard_normal((6, 2)), "f": rng.standard_normal((3, 6)), "y": rng.standard_normal((6, 3))}
    assert set(assert_same_terms(nps.model, pys.model, hyper, draws, None)) == {"X", "f", "y"}
    assert_perturbation_moves(pys.model, hyper, draws, None)
