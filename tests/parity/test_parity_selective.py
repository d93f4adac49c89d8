"""The Pyro selection of inducing points (ppl_sparsegp.pyro.subset_prior, models/pyro/selective.py) against the NumPyro
originals in float64 at the same inclusion mask, parameters and u: the subset prior's and the inclusion guide's
log-densities, entropy, size marginal and closed-form KL; every site of the selective models and guides; the subset
bound L(s), the KL of the selection and the exact objective E_q[L(s)] − KL by enumeration; and the predictions of the
pruned models. A perturbation on the Pyro side moves each compared value, so the comparison can fail.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
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
    fixed_params,
    numpyro_terms,
    problem,
    pyro_terms,
)
from pyro import poutine
from torch.distributions.kl import kl_divergence as torch_kl

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.infer.score_function import ScoreFunctionELBO
from ppl_sparsegp.models.numpyro import deep_svgp as np_deep
from ppl_sparsegp.models.numpyro import gplvm as np_gplvm
from ppl_sparsegp.models.numpyro import selective as np_selective
from ppl_sparsegp.models.numpyro import selective_deep as np_sel_deep
from ppl_sparsegp.models.numpyro import selective_gplvm as np_sel_gplvm
from ppl_sparsegp.models.numpyro import sgpr as np_sgpr
from ppl_sparsegp.models.numpyro import svgp as np_svgp
from ppl_sparsegp.models.pyro import deep_svgp as pyro_deep
from ppl_sparsegp.models.pyro import gplvm as pyro_gplvm
from ppl_sparsegp.models.pyro import selective as pyro_selective
from ppl_sparsegp.models.pyro import selective_deep as pyro_sel_deep
from ppl_sparsegp.models.pyro import selective_gplvm as pyro_sel_gplvm
from ppl_sparsegp.models.pyro import sgpr as pyro_sgpr
from ppl_sparsegp.models.pyro import svgp as pyro_svgp
from ppl_sparsegp.models.pyro._base import twin_of
from ppl_sparsegp.numpyro import subset_prior as np_subset
from ppl_sparsegp.pyro import subset_prior as pyro_subset

pytestmark = pytest.mark.filterwarnings("ignore:pyro.module data did not find params")

MASK = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
ALPHA = 0.15


def every_mask(K: int) -> np.ndarray:
    """All 2^K masks [2^K, K]."""
    return np.array(list(itertools.product([0.0, 1.0], repeat=K)))


def selection_params(p: dict, q_diag: bool = False) -> dict[str, np.ndarray]:
    """fixed_params of the problem plus λ away from its initial 0.5."""
    return {**fixed_params(p, q_diag=q_diag), "inclusion_probs": p["rng"].uniform(0.15, 0.85, M)}


@pytest.mark.parametrize("K, alpha", [(1, 0.0), (6, 0.15), (80, 0.05)])
def test_subset_prior_and_inclusion_densities_and_kl_agree(K, alpha):
    rng = np.random.default_rng(K)
    probs = rng.uniform(0.05, 0.95, (3, K))
    masks = (rng.uniform(size=(5, 3, K)) < 0.5).astype(np.float64)
    np_p, py_p = np_subset.SubsetPointProcess(K, alpha), pyro_subset.SubsetPointProcess(K, alpha)
    np_q, py_q = np_subset.IndependentInclusion(probs), pyro_subset.IndependentInclusion(probs)
    close(np_p.log_normalizer, py_p.log_normalizer)
    close(np_p.size_log_probs(), py_p.size_log_probs())
    close(np_p.log_prob(masks), py_p.log_prob(torch.as_tensor(masks)))
    close(np_q.log_prob(masks), py_q.log_prob(torch.as_tensor(masks)))
    close(np_q.entropy(), py_q.entropy())
    close(np_q.expected_count, py_q.expected_count)
    close(np_q.count_variance, py_q.count_variance)
    close(numpyro_kl(np_q, np_p), torch_kl(py_q, py_p))
    moved = pyro_subset.IndependentInclusion(probs * 0.999)
    apart(numpyro_kl(np_q, np_p), torch_kl(moved, py_p))
    apart(np_q.log_prob(masks), moved.log_prob(torch.as_tensor(masks)))
    if alpha > 0:
        apart(np_p.log_prob(masks), pyro_subset.SubsetPointProcess(K, alpha * 1.001).log_prob(torch.as_tensor(masks)))


def test_subset_prior_rejects_bad_arguments():
    for bad in (-0.1, float("nan"), np.ones(2), "a"):
        with pytest.raises(ValueError, match="alpha"):
            pyro_subset.SubsetPointProcess(3, bad)
    for bad in (0, 2.0, True):
        with pytest.raises(ValueError, match="num_candidates"):
            pyro_subset.SubsetPointProcess(bad, 0.1)
    for bad in (np.array([0.5, 1.2]), np.array(0.5), np.array([np.nan])):
        with pytest.raises(ValueError, match="probs"):
            pyro_subset.IndependentInclusion(bad)
    with pytest.raises(ValueError, match="mask"):
        pyro_subset.SubsetPointProcess(3, 0.1).log_prob(torch.ones(4))
    with pytest.raises(ValueError, match="same candidates"):
        torch_kl(pyro_subset.IndependentInclusion(torch.full((2,), 0.5)), pyro_subset.SubsetPointProcess(3, 0.1))


def test_selective_sgpr_sites_objective_and_pruned_predictions_agree():
    p = problem("gaussian")
    params = {k: v for k, v in selection_params(p).items() if not k.startswith("u_")}
    npm = np_selective.SelectiveSGPR(np_sgpr.SGPR(p["kernel"], p["likelihood"], Z=p["Z"]), alpha=ALPHA)
    pym = pyro_selective.SelectiveSGPR(pyro_sgpr.SGPR(p["kernel"], p["likelihood"], Z=p["Z"]), alpha=ALPHA)
    args, s = (p["X"], p["y"]), {"inclusion": MASK}

    terms = assert_same_terms(npm.model, pym.model, params, s, *args)
    assert set(terms) == {"inclusion", "collapsed_bound"}
    guide_terms = assert_same_terms(npm.guide, pym.guide, params, s, *args)
    assert set(guide_terms) == {"inclusion"}
    assert_perturbation_moves(pym.model, params, s, *args, site="Z")
    assert_perturbation_moves(pym.guide, params, s, *args, site="inclusion_probs")
    drawn = {**s, "f": p["rng"].standard_normal(p["X"].shape[0]), "y": p["y"]}  # the y=None branch (Predictive)
    assert set(assert_same_terms(npm.model, pym.model, params, drawn, p["X"])) == {"inclusion", "f", "y"}
    _, np_guide = numpyro_terms(npm.guide, params, s, *args)
    _, np_model = numpyro_terms(npm.model, params, s, *args)
    _, py_guide = pyro_terms(pym.guide, params, s, *args)
    _, py_model = pyro_terms(pym.model, params, s, *args)
    close(
        numpyro_kl(np_guide["inclusion"]["fn"], np_model["inclusion"]["fn"]),
        torch_kl(py_guide.nodes["inclusion"]["fn"], py_model.nodes["inclusion"]["fn"]),
    )

    close(npm.kl_selection(params), pym.kl_selection(params))
    close(npm.inclusion_probabilities(params), pym.inclusion_probabilities(params))
    masks = every_mask(M)
    np_bounds = np.array([npm.subset_bound(params, *args, m) for m in masks])
    py_bounds = np.array([float(pym.subset_bound(params, *args, m)) for m in masks])
    close(np_bounds, py_bounds)
    log_q = np_subset.IndependentInclusion(params["inclusion_probs"]).log_prob(masks)
    close(
        np.sum(np.exp(log_q) * np_bounds) - npm.kl_selection(params),
        np.sum(np.exp(log_q) * py_bounds) - float(pym.kl_selection(params)),
    )
    apart(npm.subset_bound(params, *args, MASK), pym.subset_bound({**params, "Z": params["Z"] * 1.001}, *args, MASK))

    (np_pruned, np_sparse), (py_pruned, py_sparse) = npm.prune(params, MASK), pym.prune(params, MASK)
    assert set(np_sparse) == set(py_sparse) == {"kernel.variance", "kernel.lengthscale", "likelihood.variance", "Z"}
    close(np_sparse["Z"], py_sparse["Z"])
    close(np_pruned.elbo(np_sparse, *args), py_pruned.elbo(py_sparse, *args))
    close(np_pruned.elbo(np_sparse, *args), pym.subset_bound(params, *args, MASK))
    np_sparse = {k: np.array(v) for k, v in np_sparse.items()}
    assert_same_predictions(np_pruned, py_pruned, np_sparse, p["X_new"], X=p["X"], y=p["y"])


@pytest.mark.parametrize(
    "case",
    [{}, {"q_diag": True}, {"data_term": "sampled"}, {"likelihood": "bernoulli"}],
    ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default",
)
@pytest.mark.slow
def test_selective_svgp_sites_objective_and_pruned_predictions_agree(case):
    case = dict(case)
    p = problem(case.pop("likelihood", "gaussian"))
    params = selection_params(p, q_diag=case.get("q_diag", False))
    npm = np_selective.SelectiveSVGP(
        np_svgp.SVGP(p["kernel"], p["likelihood"], Z=p["Z"], whiten=False, **case), alpha=ALPHA
    )
    pym = pyro_selective.SelectiveSVGP(
        pyro_svgp.SVGP(p["kernel"], p["likelihood"], Z=p["Z"], whiten=False, **case), alpha=ALPHA
    )
    args = (p["X"], p["y"])
    latents = {"inclusion": MASK, "u": p["rng"].standard_normal((1, M))}  # the same s and u on both sides

    terms = assert_same_terms(npm.model, pym.model, params, latents, *args)
    assert set(terms) == {"inclusion", "u", "y"}
    guide_terms = assert_same_terms(npm.guide, pym.guide, params, latents, *args)
    assert set(guide_terms) == {"inclusion", "u"}
    assert_perturbation_moves(pym.model, params, latents, *args)
    assert_perturbation_moves(pym.guide, params, latents, *args, site="u_loc")
    # the y=None branch (Predictive): f and y at every row of X given s and u, at the same values of f and y
    f = p["rng"].standard_normal(p["X"].shape[0])
    drawn = {
        **latents,
        "f": f,
        "y": (f > 0).astype(np.float64) if isinstance(p["likelihood"], likelihoods.Bernoulli) else f + 0.1,
    }
    predictive = assert_same_terms(npm.model, pym.model, params, drawn, p["X"])
    assert set(predictive) == {"inclusion", "u", "f", "y"}
    assert_perturbation_moves(pym.model, params, drawn, p["X"], site="u")

    close(npm.kl_selection(params), pym.kl_selection(params))
    for mask in (MASK, np.eye(M)[2], np.ones(M)):
        close(npm.subset_bound(params, *args, mask), pym.subset_bound(params, *args, mask))
    (np_pruned, np_sparse), (py_pruned, py_sparse) = npm.prune(params, MASK), pym.prune(params, MASK)
    assert set(np_sparse) == set(py_sparse)
    for name in np_sparse:
        close(np_sparse[name], py_sparse[name])
    np_sparse = {k: np.array(v) for k, v in np_sparse.items()}
    assert_same_predictions(np_pruned, py_pruned, np_sparse, p["X_new"])


def test_prune_drops_the_selection_and_the_baseline():
    p = problem("gaussian")
    params = selection_params(p)
    params[pyro_selective.BASELINE_PARAM] = np.array(-3.0)
    pym = pyro_selective.SelectiveSVGP(pyro_svgp.SVGP(p["kernel"], p["likelihood"], Z=p["Z"], whiten=False))
    _, sparse = pym.prune(params, MASK)
    assert "inclusion_probs" not in sparse and pyro_selective.BASELINE_PARAM not in sparse
    assert sparse["u_loc"].shape == (1, int(MASK.sum()))
    with pytest.raises(ValueError, match="selects no candidate"):
        pym.prune(params, np.zeros(M))
    with pytest.raises(ValueError, match="whiten"):
        pyro_selective.SelectiveSVGP(pyro_svgp.SVGP(p["kernel"], p["likelihood"], Z=p["Z"]))


Q, D_OUT = 2, 3


def gplvm_problem(likelihood: str = "gaussian") -> dict:
    """Y [N, 3] from a 2-D latent manifold, PCA-started latents, K = M candidates, and values away from the initial
    ones for every param of the selective GP-LVMs."""
    rng = np.random.default_rng(5)
    t = rng.uniform(-2, 2, (N, Q))
    F = np.stack([np.sin(t[:, 0]), np.cos(t[:, 1]), t[:, 0] * t[:, 1]], axis=1)
    if likelihood == "gaussian":
        Y, lik = F + 0.1 * rng.standard_normal(F.shape), likelihoods.Gaussian(variance=0.2)
    else:
        Y, lik = (F > 0).astype(np.float64), likelihoods.Bernoulli()
    X_init = np_gplvm.pca_latents(Y, Q)
    params = {
        "kernel.variance": np.array(0.9),
        "kernel.lengthscale": np.array([0.8, 1.1]),
        "Z": rng.standard_normal((M, Q)),
        "u_loc": rng.standard_normal((D_OUT, M)),
        "u_scale_tril": np.tril(0.2 * rng.standard_normal((D_OUT, M, M))) + 0.7 * np.eye(M),
        "X_loc": X_init + 0.1 * rng.standard_normal((N, Q)),
        "X_scale": rng.uniform(0.1, 0.5, (N, Q)),
        "inclusion_probs": rng.uniform(0.15, 0.85, M),
    }
    if likelihood == "gaussian":
        params["likelihood.variance"] = np.array(0.25)
    kernel = kernels.RBF(variance=1.3, lengthscale=np.array([0.7, 1.4]))
    latents = {"inclusion": MASK, "u": rng.standard_normal((D_OUT, M)), "X": rng.standard_normal((N, Q))}
    return {"Y": Y, "kernel": kernel, "likelihood": lik, "Z": params["Z"] - 0.1, "X_init": X_init,
            "params": params, "latents": latents, "X_new": rng.uniform(-2, 2, (7, Q))}  # fmt: skip


def numpyro_objective(model, guide, params: dict, latents: dict, *args) -> float:
    """The value of NumPyro's ScoreFunctionELBO (what the selective models are fitted with and ``elbo`` estimates:
    closed-form KLs) with the guide's draws held at ``latents``."""
    data = {k: jnp.asarray(v) for k, v in {**params, **latents}.items()}
    loss = ScoreFunctionELBO(num_particles=1).loss(
        jax.random.PRNGKey(0), {}, handlers.substitute(model, data=data), handlers.substitute(guide, data=data), *args
    )
    return -float(loss)


def pyro_objective(model, guide, params: dict, latents: dict, *args) -> float:
    """The twin of :func:`numpyro_objective`: Pyro's TraceMeanField value (validation off: s is not
    reparameterisable) with the guide replaying itself at ``latents``, as ``elbo`` computes it."""
    _, trace = pyro_terms(guide, params, latents, *args)
    for name in latents:
        trace.nodes[name]["is_observed"] = False
    tensors = {k: torch.as_tensor(v) for k, v in params.items()}
    replayed = poutine.replay(poutine.substitute(guide, data=tensors), trace=trace)
    with pyro.validation_enabled(False):
        return -pyro.infer.TraceMeanField_ELBO().loss(poutine.substitute(model, data=tensors), replayed, *args)


@pytest.mark.parametrize("case", [{}, {"q_diag": True}, {"likelihood": "bernoulli"}, {"collapsed": True}],
                         ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")  # fmt: skip
@pytest.mark.slow
def test_selective_gplvm_sites_objective_elbo_and_pruned_predictions_agree(case):
    case = dict(case)
    p = gplvm_problem(case.pop("likelihood", "gaussian"))
    params, latents, args = dict(p["params"]), dict(p["latents"]), (p["Y"],)
    common = {"Z": p["Z"], "X_init": p["X_init"], "X_scale_init": 0.2}
    if case.pop("collapsed", False):
        params = {k: v for k, v in params.items() if not k.startswith("u_")}
        del latents["u"]
        npm = np_sel_gplvm.SelectiveCollapsedGPLVM(np_gplvm.CollapsedGPLVM(p["kernel"], p["likelihood"], **common))
        pym = pyro_sel_gplvm.SelectiveCollapsedGPLVM(pyro_gplvm.CollapsedGPLVM(p["kernel"], p["likelihood"], **common))
        sites = {"inclusion", "X", "collapsed_bound"}
    else:
        if case.get("q_diag"):
            params["u_scale"] = np.random.default_rng(1).uniform(0.3, 1.0, (D_OUT, M))
            del params["u_scale_tril"]
        common.update(num_latent=D_OUT, **case)
        npm = np_sel_gplvm.SelectiveGPLVM(np_gplvm.BayesianGPLVM(p["kernel"], p["likelihood"], **common), alpha=ALPHA)
        pym = pyro_sel_gplvm.SelectiveGPLVM(
            pyro_gplvm.BayesianGPLVM(p["kernel"], p["likelihood"], **common), alpha=ALPHA
        )
        sites = {"inclusion", "u", "X", "y"}

    terms = assert_same_terms(npm.model, pym.model, params, latents, *args)
    assert set(terms) == sites
    guide_terms = assert_same_terms(npm.guide, pym.guide, params, latents, *args)
    assert set(guide_terms) == sites & {"inclusion", "u", "X"}
    assert_perturbation_moves(pym.model, params, latents, *args, site="X")
    expected = numpyro_objective(npm.model, npm.guide, params, latents, *args)
    close(expected, pyro_objective(pym.model, pym.guide, params, latents, *args))
    apart(
        expected, pyro_objective(pym.model, pym.guide, {**params, "X_scale": params["X_scale"] * 1.01}, latents, *args)
    )

    # elbo at the same draws: Pyro's from torch's generator, replayed into NumPyro's objective
    pyro.set_rng_seed(0)
    got = pym.elbo(params, p["Y"])
    pyro.set_rng_seed(0)
    tensors = {k: torch.as_tensor(v) for k, v in params.items()}
    trace = poutine.trace(poutine.substitute(pym.guide, data=tensors)).get_trace(torch.as_tensor(p["Y"]))
    draws = {name: site["value"].detach().numpy() for name, site in trace.nodes.items() if name in latents}
    close(numpyro_objective(npm.model, npm.guide, params, draws, *args), got)
    close(npm.kl_selection(params), pym.kl_selection(params))

    (np_pruned, np_sparse), (py_pruned, py_sparse) = npm.prune(params, MASK), pym.prune(params, MASK)
    assert set(np_sparse) == set(py_sparse)
    for name in np_sparse:
        close(np_sparse[name], py_sparse[name])
    np_sparse = {k: np.array(v) for k, v in np_sparse.items()}
    data = {"X": np_sparse["X_loc"], "y": p["Y"]} if np_pruned.predicts_from_data else {}
    assert_same_predictions(np_pruned, py_pruned, np_sparse, p["X_new"], **data)
    pyro.set_rng_seed(1)
    got = pym.subset_bound(params, p["Y"], MASK, num_samples=2)
    pyro.set_rng_seed(1)
    X_draws = py_pruned.latents.q(py_sparse).sample((2,)).numpy()
    bound = np_pruned.svgp.elbo if hasattr(np_pruned, "svgp") else np_pruned.sgpr.elbo
    gp = {k: v for k, v in np_sparse.items() if not k.startswith("X_")}
    close(np.mean([bound(gp, X, p["Y"]) for X in X_draws]) - np_pruned.latents.kl(np_sparse), got)


DEEP_MASKS = [np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0]), np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0])]


def same_noise(npm, pym) -> None:
    """One fixed draw of ε^ℓ per layer and shape for both deep GPs (their ``_noise`` replaced)."""

    def fixed(i, shape):
        return np.random.default_rng([200 + i, *shape]).standard_normal(shape)

    npm._noise = lambda key: lambda i, shape, dtype: jnp.asarray(fixed(i, shape), dtype=dtype)
    pym._noise = lambda: lambda i, shape, dtype: torch.as_tensor(fixed(i, shape), dtype=dtype)


@pytest.mark.slow
def test_selective_deep_sites_kl_bound_and_pruned_model_agree():
    p = problem("gaussian")
    rng = p["rng"]
    settings = {
        "Z": [p["Z"], p["Z"][::-1] * 0.8], "widths": [2, 1], "likelihood": p["likelihood"],
        "kernels": [kernels.RBF(variance=0.3, lengthscale=np.ones(2)), p["kernel"]],
        "mean_weights": [np.eye(2)], "num_samples": 3,
    }  # fmt: skip
    params = {"layer0.kernel.variance": np.array(0.4), "layer0.kernel.lengthscale": np.array([1.2, 0.9]),
              "layer1.kernel.variance": np.array(1.1), "layer1.kernel.lengthscale": np.array([0.8, 1.3]),
              "likelihood.variance": np.array(0.2)}  # fmt: skip
    latents = {}
    for i, width in enumerate(settings["widths"]):
        params[f"layer{i}.Z"] = settings["Z"][i] + 0.05
        params[f"layer{i}.u_loc"] = 0.3 * rng.standard_normal((width, M))
        params[f"layer{i}.u_scale_tril"] = np.tril(0.1 * rng.standard_normal((width, M, M))) + 0.5 * np.eye(M)
        params[f"layer{i}.inclusion_probs"] = rng.uniform(0.2, 0.8, M)
        latents[f"layer{i}.u"] = rng.standard_normal((width, M))
        latents[f"layer{i}.inclusion"] = DEEP_MASKS[i]
    options = {"alpha": [0.1, 0.05], "alpha_per_output": True}
    npm = np_sel_deep.SelectiveDeepSVGP(np_deep.DeepSVGP(**settings), **options)
    pym = pyro_sel_deep.SelectiveDeepSVGP(pyro_deep.DeepSVGP(**settings), **options)
    same_noise(npm.ordinary, pym.ordinary)
    args = (p["X"], p["y"])

    names = {"layer0.inclusion", "layer1.inclusion", "layer0.u", "layer1.u"}
    assert set(assert_same_terms(npm.model, pym.model, params, latents, *args)) == names | {"y"}
    assert set(assert_same_terms(npm.guide, pym.guide, params, latents, *args)) == names
    assert_perturbation_moves(pym.model, params, latents, *args, site="layer1.Z")
    assert_perturbation_moves(pym.guide, params, latents, *args, site="layer1.inclusion_probs")
    drawn = {**latents, "f": rng.standard_normal(N), "y": p["y"]}  # the y=None branch (Predictive)
    assert set(assert_same_terms(npm.model, pym.model, params, drawn, p["X"])) == names | {"f", "y"}

    close(npm.kl_selection(params), pym.kl_selection(params))
    for e, g in zip(npm.inclusion_probabilities(params), pym.inclusion_probabilities(params), strict=True):
        close(e, g)
    key = jax.random.PRNGKey(4)
    expected = npm.subset_bound(params, *args, DEEP_MASKS, key)
    close(expected, pym.subset_bound(params, *args, DEEP_MASKS))
    apart(expected, pym.subset_bound({**params, "layer0.u_loc": params["layer0.u_loc"] * 1.01}, *args, DEEP_MASKS))
    (np_pruned, np_sparse), (py_pruned, py_sparse) = npm.prune(params, DEEP_MASKS), pym.prune(params, DEEP_MASKS)
    assert set(np_sparse) == set(py_sparse)
    for name in np_sparse:
        close(np_sparse[name], py_sparse[name])
    same_noise(np_pruned, py_pruned)
    np_sparse = {k: np.array(v) for k, v in np_sparse.items()}
    close(np_pruned.elbo(np_sparse, *args, key), py_pruned.elbo(np_sparse, *args))
    close(np_pruned.elbo(np_sparse, *args, key), expected)
    got = py_pruned.predict_y(np_sparse, p["X_new"])
    for e, g in zip(np_pruned.predict_y(np_sparse, p["X_new"], key=key), got, strict=True):
        close(e, g.numpy())


def test_twin_of_builds_each_selective_twin_over_the_twin_of_its_ordinary_model():
    p = problem("gaussian")
    params = {k: v for k, v in selection_params(p).items() if not k.startswith("u_")}
    npm = np_selective.SelectiveSGPR(np_sgpr.SGPR(p["kernel"], p["likelihood"], Z=p["Z"]), alpha=ALPHA)
    pym = twin_of(npm)
    assert type(pym) is pyro_selective.SelectiveSGPR and type(pym.ordinary) is pyro_sgpr.SGPR
    assert pym.alpha == ALPHA and pym.initial_inclusion == npm.initial_inclusion
    assert_same_terms(npm.model, pym.model, params, {"inclusion": MASK}, p["X"], p["y"])
    deep = np_deep.DeepSVGP(Z=[p["Z"]], widths=[1], likelihood=p["likelihood"])
    twin = twin_of(np_sel_deep.SelectiveDeepSVGP(deep, alpha=0.2))
    assert type(twin) is pyro_sel_deep.SelectiveDeepSVGP and type(twin.ordinary) is pyro_deep.DeepSVGP
    assert twin.alpha == [0.2]
