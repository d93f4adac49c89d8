"""The Pyro twins (models/pyro) against the NumPyro models (models/numpyro) at the same fixed parameters, in float64:
every site's log-density (the data term, the inducing prior, q(u), the hyperparameter priors), the closed-form KL of
q(u) from p(u), the TraceMeanField ELBO and the predictive moments of f and y agree to 1e-10 (relative to the
value's size). The same sites exist on both sides under the same names, and a perturbed parameter on the Pyro side
moves the value, so the comparison can fail.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.infer
import pyro
import pyro.infer
import pytest
import torch
from numpyro import handlers
from numpyro.distributions.kl import kl_divergence as numpyro_kl
from pyro import poutine
from torch.distributions.kl import kl_divergence as torch_kl

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.numpyro import gpr as np_gpr
from ppl_sparsegp.models.numpyro import sgpmc as np_sgpmc
from ppl_sparsegp.models.numpyro import sgpr as np_sgpr
from ppl_sparsegp.models.numpyro import svgp as np_svgp
from ppl_sparsegp.models.pyro import gpr as pyro_gpr
from ppl_sparsegp.models.pyro import sgpmc as pyro_sgpmc
from ppl_sparsegp.models.pyro import sgpr as pyro_sgpr
from ppl_sparsegp.models.pyro import svgp as pyro_svgp

TOLERANCE = 1e-10
"""|NumPyro − Pyro| <= TOLERANCE · max(1, |NumPyro|) for every compared number."""
N, M, D = 25, 6, 2
# a guide reads only some of the params that both traces are given
pytestmark = pytest.mark.filterwarnings("ignore:pyro.module data did not find params")


def close(a, b) -> None:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    np.testing.assert_array_less(np.abs(a - b), TOLERANCE * np.maximum(1.0, np.abs(a)))


def apart(a, b) -> None:
    """A perturbed parameter moved the value well beyond the tolerance."""
    assert np.max(np.abs(np.asarray(a) - np.asarray(b))) > 1e3 * TOLERANCE * max(1.0, np.max(np.abs(np.asarray(a))))


def problem(likelihood: str, num_latent: int = 1, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (N, D))
    f = np.sin(2 * X[:, :1]) + X[:, 1:] * np.arange(1, num_latent + 1)
    if likelihood == "gaussian":
        y, lik = f + 0.2 * rng.standard_normal(f.shape), likelihoods.Gaussian(variance=0.3)
    else:
        y, lik = (f > 0).astype(np.float64), likelihoods.Bernoulli()
    return {
        "X": X,
        "y": y[:, 0] if num_latent == 1 else y,
        "Z": X[:M] + 0.05,
        "kernel": kernels.RBF(variance=1.3, lengthscale=np.array([0.7, 1.4])),
        "likelihood": lik,
        "X_new": rng.uniform(-2.5, 2.5, (7, D)),
        "rng": rng,
    }


def fixed_params(p: dict, num_latent: int = 1, q_diag: bool = False) -> dict[str, np.ndarray]:
    """Values away from the initial ones for every param of the models (hyperparameters, Z, q(u))."""
    rng = p["rng"]
    params = {"kernel.variance": np.array(0.9), "kernel.lengthscale": np.array([0.8, 1.1]), "Z": p["Z"] + 0.1}
    if isinstance(p["likelihood"], likelihoods.Gaussian):
        params["likelihood.variance"] = np.array(0.25)
    params["u_loc"] = rng.standard_normal((num_latent, M))
    if q_diag:
        params["u_scale"] = rng.uniform(0.3, 1.0, (num_latent, M))
    else:
        params["u_scale_tril"] = np.tril(0.2 * rng.standard_normal((num_latent, M, M))) + 0.7 * np.eye(M)
    return params


def numpyro_terms(model, params: dict, latents: dict, *args) -> tuple[dict[str, float], dict]:
    """Site name -> its scaled log-density summed, of ``model`` run with ``params`` and sample sites at
    ``latents``; and the trace."""
    data = {k: jnp.asarray(v) for k, v in {**params, **latents}.items()}
    trace = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=data)).get_trace(*args)
    terms = {}
    for name, site in trace.items():
        if site["type"] == "sample" and not site.get("is_auxiliary") and not name == "data":
            scale = 1.0 if site["scale"] is None else site["scale"]
            terms[name] = float(jnp.sum(site["fn"].log_prob(site["value"])) * scale)
    return terms, trace


def pyro_terms(model, params: dict, latents: dict, *args) -> tuple[dict[str, float], object]:
    """The Pyro twin of :func:`numpyro_terms`."""
    tensors = {k: torch.as_tensor(v) for k, v in params.items()}
    conditioned = poutine.condition(
        poutine.substitute(model, data=tensors), data={k: torch.as_tensor(v) for k, v in latents.items()}
    )
    trace = poutine.trace(conditioned).get_trace(*args)
    trace.compute_log_prob()
    terms = {
        name: float(site["log_prob_sum"])
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and name != "data"
    }
    return terms, trace


def assert_same_terms(np_model, pyro_model, params: dict, latents: dict, *args) -> dict[str, float]:
    expected, _ = numpyro_terms(np_model, params, latents, *args)
    got, _ = pyro_terms(pyro_model, params, latents, *args)
    assert set(got) == set(expected), (sorted(got), sorted(expected))
    for name in expected:
        close(expected[name], got[name])
    return got


def assert_perturbation_moves(pyro_model, params: dict, latents: dict, *args, site: str = "kernel.lengthscale") -> None:
    """Scaling one param or latent value by 1.001 on the Pyro side moves its log joint."""
    before, _ = pyro_terms(pyro_model, params, latents, *args)
    params, latents = ({**d, site: d[site] * 1.001} if site in d else d for d in (params, latents))
    after, _ = pyro_terms(pyro_model, params, latents, *args)
    apart(sum(before.values()), sum(after.values()))


def assert_same_predictions(np_model, pyro_model, params: dict, X_new, **data) -> None:
    for method in ("predict_f", "predict_y"):
        expected = getattr(np_model, method)(params, X_new, **data)
        got = getattr(pyro_model, method)(params, X_new, **data)
        for e, g in zip(expected, got, strict=True):
            close(e, g.numpy())
    changed = {**params, "kernel.variance": params["kernel.variance"] * 1.001}
    apart(np_model.predict_f(params, X_new, **data)[1], pyro_model.predict_f(changed, X_new, **data)[1].numpy())


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
