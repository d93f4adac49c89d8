"""The Pyro selection of inducing points run by Pyro's own engine: the samplers of the subset prior and the inclusion
guide against their densities, the registered KL against brute-force enumeration, the score-function gradient that
``TraceGraph_ELBO`` gives λ through the guide's baseline against the exact gradient of E_q[L(s)] − KL by enumeration
(unbiasedness, within the Monte Carlo error), and short SVI runs that lower the loss.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyro
import pyro.optim
import pytest
import torch
from pyro.infer import SVI, Predictive, TraceGraph_ELBO
from torch.distributions.kl import kl_divergence

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.models.pyro.deep_svgp import DeepSVGP
from ppl_sparsegp.models.pyro.gplvm import BayesianGPLVM, CollapsedGPLVM, pca_latents
from ppl_sparsegp.models.pyro.selective import BASELINE_PARAM, SelectiveSGPR, SelectiveSVGP
from ppl_sparsegp.models.pyro.selective_deep import SelectiveDeepSVGP
from ppl_sparsegp.models.pyro.selective_gplvm import SelectiveCollapsedGPLVM, SelectiveGPLVM
from ppl_sparsegp.models.pyro.sgpr import SGPR
from ppl_sparsegp.models.pyro.svgp import SVGP
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.sites import param_store_values
from ppl_sparsegp.pyro.subset_prior import IndependentInclusion, SubsetPointProcess


def every_mask(K: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product([0.0, 1.0], repeat=K)))


@pytest.fixture(autouse=True)
def fresh_param_store():
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    yield
    pyro.clear_param_store()


def regression(N: int, K: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (N, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(N)
    return X, y, np.linspace(-3, 3, K)[:, None]


def test_samplers_follow_their_densities():
    K, n = 6, 20000
    prior = SubsetPointProcess(K, 0.2)
    sizes = prior.sample((n,)).sum(-1).long()
    frequency = torch.bincount(sizes, minlength=K + 1).double() / n
    expected = prior.size_log_probs().exp()
    assert torch.all((frequency - expected).abs() < 5 * torch.sqrt(expected * (1 - expected) / n) + 1e-12)
    subsets = prior.sample((n,))
    assert torch.all((subsets[sizes == 2].mean(0) - 1 / 3).abs() < 0.05)  # uniform given the size
    probs = torch.tensor([0.1, 0.5, 0.9, 0.0, 1.0, 0.3])
    draws = IndependentInclusion(probs).sample((n,))
    assert draws.dtype == probs.dtype and set(draws.unique().tolist()) <= {0.0, 1.0}
    assert torch.all((draws.mean(0) - probs).abs() < 5 * torch.sqrt(probs * (1 - probs) / n) + 1e-12)


def test_kl_equals_enumeration():
    K = 5
    masks = every_mask(K)
    q = IndependentInclusion(torch.tensor([0.1, 0.35, 0.5, 0.7, 0.95]))
    p = SubsetPointProcess(K, 0.3)
    log_q, log_p = q.log_prob(masks), p.log_prob(masks)
    torch.testing.assert_close(torch.logsumexp(log_p, 0), torch.zeros(()), rtol=0, atol=1e-12)
    brute = torch.sum(log_q.exp() * (log_q - log_p))
    torch.testing.assert_close(kl_divergence(q, p), brute, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(q.entropy(), -torch.sum(log_q.exp() * log_q), rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_tracegraph_gradient_of_inclusion_logits_is_unbiased():
    """The mean of n single-draw gradients of −loss w.r.t. the logits of λ equals the exact gradient of
    F(λ) = Σ_s q_λ(s) L(s) − KL[q_λ ‖ p_α] (L(s) by enumeration of the 2^K masks) within 4.5 standard errors; the
    exact gradient is many standard errors away from 0, so an estimator without the score term would fail."""
    X, y, Z = regression(N=12, K=3)
    model = SelectiveSGPR(SGPR(kernels.RBF(lengthscale=0.8), likelihoods.Gaussian(variance=0.05), Z=Z), alpha=0.2)
    pyro.param(
        "inclusion_probs", torch.tensor([0.3, 0.6, 0.8]), constraint=torch.distributions.constraints.unit_interval
    )
    elbo, n = TraceGraph_ELBO(), 600
    draws = []
    for _ in range(n):
        elbo.loss_and_grads(model.model, model.guide, X, y)
        logits = pyro.param("inclusion_probs").unconstrained()
        draws.append(-logits.grad.clone())
        for name in pyro.get_param_store().keys():
            pyro.param(name).unconstrained().grad = None
    draws = torch.stack(draws)
    assert BASELINE_PARAM in pyro.get_param_store()  # the guide declared Pyro's decaying-average baseline

    params = param_store_values()
    logits = pyro.param("inclusion_probs").unconstrained().detach().clone().requires_grad_(True)
    masks = every_mask(3)
    bounds = torch.stack([model.subset_bound(params, X, y, m) for m in masks])
    q = IndependentInclusion(torch.sigmoid(logits))
    objective = torch.sum(q.log_prob(masks).exp() * bounds) - kl_divergence(q, model.selection.prior())
    (exact,) = torch.autograd.grad(objective, logits)

    mean, se = draws.mean(0), draws.std(0) / n**0.5
    assert torch.all((mean - exact).abs() < 4.5 * se), (mean, exact, se)
    assert torch.max(exact.abs() / se) > 8, (exact, se)


@pytest.mark.parametrize("selective", ["sgpr", "svgp"])
@pytest.mark.slow
def test_svi_with_the_score_function_estimator_lowers_the_loss(selective):
    X, y, Z = regression(N=30, K=8)
    kernel, likelihood = kernels.RBF(lengthscale=2.0, variance=0.3), likelihoods.Gaussian(variance=1.0)
    if selective == "sgpr":
        model = SelectiveSGPR(SGPR(kernel, likelihood, Z=Z), alpha=0.05)
    else:
        model = SelectiveSVGP(SVGP(kernel, likelihood, Z=Z, whiten=False), alpha=0.05)
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 0.05}), TraceGraph_ELBO(num_particles=2))
    losses = [svi.step(X, y) for _ in range(150)]
    assert np.mean(losses[-20:]) < np.mean(losses[:20]) - 10, (losses[:20], losses[-20:])
    assert np.all(np.isfinite(losses))
    probs = model.inclusion_probabilities(param_store_values())
    assert probs.shape == (8,) and torch.max((probs - 0.5).abs()) > 0.05  # λ learned through the score function


@pytest.mark.parametrize("collapsed", [False, True], ids=["uncollapsed", "collapsed"])
def test_svi_on_the_selective_gplvm_raises_its_elbo(collapsed):
    rng = np.random.default_rng(2)
    t = rng.uniform(-2, 2, (20, 1))
    Y = np.concatenate([np.sin(2 * t), np.cos(t), t], axis=1) + 0.05 * rng.standard_normal((20, 3))
    X0, grid = pca_latents(Y, 1), np.linspace(-2, 2, 6)[:, None]
    kernel, likelihood = kernels.RBF(lengthscale=2.0), likelihoods.Gaussian(variance=1.0)
    if collapsed:
        model = SelectiveCollapsedGPLVM(CollapsedGPLVM(kernel, likelihood, Z=grid, X_init=X0), alpha=0.1)
    else:
        lvm = BayesianGPLVM(kernel, likelihood, Z=grid, X_init=X0, num_latent=3, learn_Z=False)
        model = SelectiveGPLVM(lvm, alpha=0.1)
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 0.03}), TraceGraph_ELBO())
    svi.step(Y)
    before = model.elbo(param_store_values(), Y, num_samples=30)
    for _ in range(120):
        svi.step(Y)
    after = model.elbo(param_store_values(), Y, num_samples=30)
    assert torch.isfinite(after) and after > before + 10, (before, after)


def test_predictive_draws_the_mask_u_f_and_y():
    X, y, Z = regression(N=10, K=4)
    model = SelectiveSVGP(SVGP(kernels.RBF(), likelihoods.Gaussian(variance=0.1), Z=Z, whiten=False))
    draws = Predictive(model.model, guide=model.guide, num_samples=5)(torch.as_tensor(X))
    assert draws["inclusion"].shape == (5, 4) and set(draws["inclusion"].unique().tolist()) <= {0.0, 1.0}
    assert draws["u"].shape == (5, 1, 4) and draws["f"].shape == (5, 10) and draws["y"].shape == (5, 10)
    excluded = draws["inclusion"] == 0  # the guide left some candidates out (λ₀ = 0.5)
    assert torch.all(torch.isfinite(draws["y"])) and excluded.any()


def test_the_distributions_expand_under_a_plate():
    probs = torch.tensor([0.2, 0.5, 0.9])

    def program():
        with pyro.plate("layers", 2):
            s = pyro.sample("s", SubsetPointProcess(3, 0.1))
            return s, pyro.sample("t", IndependentInclusion(probs))

    trace = pyro.poutine.trace(program).get_trace()
    trace.compute_log_prob()
    s, t = trace.nodes["s"], trace.nodes["t"]
    assert s["value"].shape == t["value"].shape == (2, 3)
    torch.testing.assert_close(s["log_prob"], SubsetPointProcess(3, 0.1).log_prob(s["value"]))
    torch.testing.assert_close(t["log_prob"], IndependentInclusion(probs).log_prob(t["value"]))


@pytest.mark.slow
def test_svi_on_the_selective_deep_gp_lowers_the_loss():
    X, y, Z = regression(N=30, K=6)
    deep = DeepSVGP(
        Z=[Z, Z], widths=[1, 1], likelihood=likelihoods.Gaussian(variance=1.0), mean_weights=[np.eye(1)],
        kernels=[kernels.RBF(variance=0.1, lengthscale=np.ones(1)), kernels.RBF(lengthscale=np.ones(1))],
    )  # fmt: skip
    model = SelectiveDeepSVGP(deep, alpha=0.05)
    svi = SVI(model.model, model.guide, pyro.optim.Adam({"lr": 0.05}), TraceGraph_ELBO(num_particles=2))
    losses = [svi.step(X, y) for _ in range(120)]
    assert np.all(np.isfinite(losses)) and np.mean(losses[-20:]) < np.mean(losses[:20]) - 10, (losses[:5], losses[-5:])
    probs = model.inclusion_probabilities(param_store_values())
    assert len(probs) == 2 and max(float(torch.max((p - 0.5).abs())) for p in probs) > 0.05
    assert sites.baseline_param_name("layer1.inclusion") in pyro.get_param_store()  # one baseline per layer
