"""Masked sparse GP algebra equals the algebra on the selected sub-blocks (spec 000 §3.3, checks U4 and U5)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from numpyro import handlers
from numpyro.infer import TraceMeanField_ELBO

from ppl_sparsegp.core import bounds, conditionals, ops
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Bernoulli, Gaussian
from ppl_sparsegp.core.masking import (
    masked_cholesky,
    masked_conditional,
    masked_mean,
    masked_q,
    masked_scale,
    masked_sgpr_elbo,
)
from ppl_sparsegp.models.numpyro.selective import SelectiveSGPR, SelectiveSVGP
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP

K = 9
MASKS = [
    np.array([1, 0, 1, 1, 0, 0, 1, 0, 1.0]),
    np.array([0, 0, 0, 0, 1, 0, 0, 0, 0.0]),
    np.ones(K),
]


def data(rng, n=40):
    X = rng.uniform(-3, 3, size=(n, 2))
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    Z = rng.uniform(-3, 3, size=(K, 2))
    return X, y, Z


def kernel():
    return RBF(variance=1.3, lengthscale=np.array([0.9, 1.4]))


def random_q(rng, P=1):
    q_mu = rng.normal(size=(P, K))
    R = np.tril(0.3 * rng.normal(size=(P, K, K)), -1) + np.stack([np.diag(rng.uniform(0.3, 1.0, K))] * P)
    return q_mu, R


@pytest.mark.parametrize("mask", MASKS)
def test_masked_cholesky_is_the_factor_of_the_included_block(rng, mask):
    _, _, Z = data(rng)
    Kmm = np.asarray(kernel()(jnp.asarray(Z)))
    L = np.asarray(masked_cholesky(jnp.asarray(Kmm), jnp.asarray(mask)))
    index, out = np.flatnonzero(mask), np.flatnonzero(mask == 0)
    np.testing.assert_allclose(L[np.ix_(index, index)], np.asarray(ops.cholesky(Kmm[np.ix_(index, index)])), atol=1e-14)
    np.testing.assert_array_equal(L[np.ix_(out, out)], np.eye(out.size))
    np.testing.assert_array_equal(L[np.ix_(out, index)], 0.0)
    np.testing.assert_array_equal(L[np.ix_(index, out)], 0.0)


@pytest.mark.parametrize("mask", MASKS)
def test_masked_scale_factors_the_marginal_covariance(rng, mask):
    q_mu, R = random_q(rng, P=2)
    index = np.flatnonzero(mask)
    S_II = (R @ np.swapaxes(R, -1, -2))[:, index][:, :, index]
    got = np.asarray(masked_scale(jnp.asarray(R), jnp.asarray(mask)))
    np.testing.assert_allclose(got[:, index][:, :, index], np.linalg.cholesky(S_II), atol=1e-13)
    np.testing.assert_allclose(got @ np.swapaxes(got, -1, -2), _masked_covariance(R, mask), atol=1e-13)
    diag = np.abs(rng.normal(size=(2, K))) + 0.1
    np.testing.assert_array_equal(masked_scale(jnp.asarray(diag), jnp.asarray(mask)), diag * mask + (1 - mask))
    np.testing.assert_array_equal(masked_mean(jnp.asarray(q_mu), jnp.asarray(mask)), q_mu * mask)


def _masked_covariance(R, mask):
    S = R @ np.swapaxes(R, -1, -2)
    return mask[:, None] * S * mask[None, :] + np.diag(1 - mask)


def test_masking_gives_the_same_numbers_on_jax_and_torch(rng):
    _, _, Z = data(rng)
    Kmm = np.asarray(kernel()(jnp.asarray(Z)))
    _, R = random_q(rng, P=2)
    mask = MASKS[0]
    for fn, arg in ((masked_cholesky, Kmm), (masked_scale, R)):
        on_jax = np.asarray(fn(jnp.asarray(arg), jnp.asarray(mask)))
        on_torch = fn(torch.tensor(arg), torch.tensor(mask)).numpy()
        np.testing.assert_allclose(on_torch, on_jax, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("full_cov", [False, True], ids=["marginals", "full-cov"])
@pytest.mark.parametrize("q_form", ["tril", "diag", "draw"])
@pytest.mark.parametrize("mask", MASKS)
def test_masked_conditional_is_the_conditional_of_the_pruned_model(rng, mask, q_form, full_cov):
    """Oracle: q(f) at fixed shapes over all K candidates equals the unwhitened conditional of the selected ones
    alone (K_In, chol K_II, m_I, S_II); for a draw u of q(u_s) (q_sqrt None) the excluded entries do not matter."""
    X, _, Z = data(rng)
    k = kernel()
    Kmm, Kmn = np.asarray(k(jnp.asarray(Z))), np.asarray(k(jnp.asarray(Z), jnp.asarray(X)))
    Knn = np.asarray(k(jnp.asarray(X)) if full_cov else k.diag(jnp.asarray(X)))
    q_mu, R = random_q(rng, P=2)
    R = np.abs(R[:, np.arange(K), np.arange(K)]) if q_form == "diag" else R
    index = np.flatnonzero(mask)
    b = jnp.asarray(mask)
    Lmm = masked_cholesky(jnp.asarray(Kmm), b)
    if q_form == "draw":
        masked_args, direct_args = (jnp.asarray(q_mu), None), (q_mu[:, index], None)
    else:
        masked_args = masked_q(jnp.asarray(q_mu), jnp.asarray(R), b)
        if q_form == "diag":
            direct_sqrt = R[:, index]
        else:
            direct_sqrt = np.linalg.cholesky((R @ np.swapaxes(R, -1, -2))[:, index][:, :, index])
        direct_args = (q_mu[:, index], direct_sqrt)
    got = masked_conditional(jnp.asarray(Kmn), Lmm, jnp.asarray(Knn), b, *masked_args, full_cov=full_cov)
    L_II = ops.cholesky(jnp.asarray(Kmm[np.ix_(index, index)]))
    expected = conditionals.conditional(
        jnp.asarray(Kmn[index]), L_II, jnp.asarray(Knn), *map(_as_jax, direct_args), whiten=False, full_cov=full_cov
    )
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-10, atol=1e-12)
    on_torch = masked_conditional(
        torch.tensor(Kmn), torch.tensor(np.asarray(Lmm)), torch.tensor(Knn), torch.tensor(mask),
        *(None if a is None else torch.tensor(np.asarray(a)) for a in masked_args), full_cov=full_cov,
    )  # fmt: skip
    for t, g in zip(on_torch, got, strict=True):
        np.testing.assert_allclose(t.numpy(), np.asarray(g), rtol=1e-12, atol=1e-14)


def test_masked_conditional_of_the_empty_subset_is_the_prior(rng):
    X, _, Z = data(rng)
    k = kernel()
    b = jnp.zeros(K)
    q_mu, R = random_q(rng)
    Lmm = masked_cholesky(k(jnp.asarray(Z)), b)
    mean, var = masked_conditional(
        k(jnp.asarray(Z), jnp.asarray(X)),
        Lmm,
        k.diag(jnp.asarray(X)),
        b,
        *masked_q(jnp.asarray(q_mu), jnp.asarray(R), b),
    )
    np.testing.assert_array_equal(mean, 0.0)
    np.testing.assert_allclose(var, 1.3, rtol=1e-12)


def _as_jax(a):
    return None if a is None else jnp.asarray(a)


@pytest.mark.parametrize("mask", MASKS)
def test_masked_sgpr_elbo_is_the_sgpr_bound_of_the_selected_candidates(rng, mask):
    X, y, Z = data(rng)
    k, index = kernel(), np.flatnonzero(mask)
    Zj, Xj = jnp.asarray(Z), jnp.asarray(X)
    got = masked_sgpr_elbo(k(Zj, Xj), k(Zj), k.diag(Xj), y, 0.05, jnp.asarray(mask))
    expected = bounds.sgpr_elbo(k(Zj[index], Xj), k(Zj[index]), k.diag(Xj), y, 0.05)
    assert float(got) == pytest.approx(float(expected), rel=1e-10)


@pytest.mark.parametrize("mask", MASKS)
def test_collapsed_masked_bound_is_the_sgpr_bound_of_the_subset(rng, mask):
    X, y, Z = data(rng)
    selective = SelectiveSGPR(SGPR(kernel=kernel(), likelihood=Gaussian(variance=0.05), Z=Z), alpha=0.1)
    masked = float(selective.subset_bound({}, X, y, mask))
    sgpr, params = selective.prune({}, mask)
    direct = float(sgpr.elbo(params, X, y))
    assert masked == pytest.approx(direct, rel=1e-9)


def test_collapsed_bound_of_the_empty_subset_is_the_prior_only_bound(rng):
    X, y, Z = data(rng)
    selective = SelectiveSGPR(SGPR(kernel=kernel(), likelihood=Gaussian(variance=0.05), Z=Z), alpha=0.1)
    got = float(selective.subset_bound({}, X, y, np.zeros(K)))
    noise = 0.05
    expected = -0.5 * len(y) * np.log(2 * np.pi * noise) - 0.5 * np.sum(y**2) / noise - 0.5 * len(y) * 1.3 / noise
    assert got == pytest.approx(expected, rel=1e-12)


def test_collapsed_bound_does_not_decrease_when_a_point_is_added(rng):
    """Spec check U7: at fixed hyperparameters every extra inducing point can only tighten Titsias' bound."""
    X, y, Z = data(rng)
    selective = SelectiveSGPR(SGPR(kernel=kernel(), likelihood=Gaussian(variance=0.05), Z=Z), alpha=0.1)
    mask = np.zeros(K)
    previous = float(selective.subset_bound({}, X, y, mask))
    for k in rng.permutation(K):
        mask[k] = 1.0
        current = float(selective.subset_bound({}, X, y, mask))
        assert current >= previous - 1e-9
        previous = current


def _masked_elbo(selective, params, X, y, mask):
    """The selective SVGP's ELBO with the inclusion mask fixed (its model and guide given the mask: the site
    "inclusion" substituted and hidden, so that its own KL term is left out)."""

    def given_mask(fn):
        return handlers.block(handlers.substitute(fn, data={"inclusion": jnp.asarray(mask)}), hide=["inclusion"])

    model, guide = given_mask(selective.model), given_mask(selective.guide)
    return -float(TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), params, model, guide, X, y))


@pytest.mark.parametrize("q_diag", [False, True])
@pytest.mark.parametrize("likelihood", [Gaussian(variance=0.05), Bernoulli(link="probit")], ids=["gauss", "probit"])
@pytest.mark.parametrize("mask", MASKS)
def test_uncollapsed_masked_elbo_is_the_svgp_elbo_of_the_subset(rng, mask, likelihood, q_diag):
    """Spec check U4: q(u | s) = the Gaussian marginal N(m_s, S_ss) of one unwhitened q over all candidates."""
    X, y, Z = data(rng)
    if isinstance(likelihood, Bernoulli):
        y = (y > 0).astype(float)
    selective = SelectiveSVGP(SVGP(kernel=kernel(), likelihood=likelihood, Z=Z, whiten=False, q_diag=q_diag), alpha=0.1)
    q_mu, R = random_q(rng)
    params = {"u_loc": jnp.asarray(q_mu)}
    params.update({"u_scale": jnp.asarray(np.abs(R[:, np.arange(K), np.arange(K)]))} if q_diag else {})
    params.update({} if q_diag else {"u_scale_tril": jnp.asarray(R)})
    masked = _masked_elbo(selective, params, X, y, mask)
    index = np.flatnonzero(mask)
    svgp = SVGP(kernel=kernel(), likelihood=likelihood, Z=Z[index], whiten=False, q_diag=q_diag)
    sub = {"u_loc": jnp.asarray(q_mu[:, index])}
    if q_diag:
        sub["u_scale"] = params["u_scale"][:, index]
    else:
        S_II = (R @ np.swapaxes(R, -1, -2))[:, index][:, :, index]
        sub["u_scale_tril"] = jnp.asarray(np.linalg.cholesky(S_II))
    direct = float(svgp.elbo(sub, X, y))
    assert masked == pytest.approx(direct, rel=1e-10)
    assert float(selective.subset_bound(params, X, y, mask)) == pytest.approx(direct, rel=1e-10)


def test_selective_svgp_refuses_whitened_parameters(rng):
    _, _, Z = data(rng)
    with pytest.raises(ValueError, match="whiten"):
        SelectiveSVGP(SVGP(kernel=kernel(), likelihood=Gaussian(), Z=Z, whiten=True))


def test_pruned_sgpr_keeps_fitted_values_and_predicts(rng):
    X, y, Z = data(rng)
    selective = SelectiveSGPR(SGPR(kernel=kernel(), likelihood=Gaussian(variance=0.05), Z=Z), alpha=0.1)
    params = {"kernel.variance": jnp.asarray(0.7), "Z": jnp.asarray(Z + 0.1), "inclusion_probs": jnp.full(K, 0.3)}
    sgpr, sub = selective.prune(params, MASKS[0])
    index = np.flatnonzero(MASKS[0])
    np.testing.assert_array_equal(sgpr.Z, Z[index] + 0.1)
    assert "inclusion_probs" not in sub and float(sub["kernel.variance"]) == 0.7
    mean, var = sgpr.predict_f(sub, X[:5], X=X, y=y)
    assert mean.shape == (5,) and np.all(np.asarray(var) > 0)
    Kmn = sgpr.fitted(sub)[0](jnp.asarray(Z[index] + 0.1), jnp.asarray(X))
    assert np.asarray(Kmn).shape == (index.size, len(X))
    with pytest.raises(ValueError, match="mask"):
        selective.prune(params, np.zeros(K))
    with pytest.raises(ValueError, match="mask"):
        selective.prune(params, np.full(K, 0.5))


def test_conditionals_accept_a_precomputed_factor(rng):
    X, y, Z = data(rng)
    k = kernel()
    Kmm, Kmn = k(jnp.asarray(Z)), k(jnp.asarray(Z), jnp.asarray(X))
    plain = bounds.sgpr_elbo(Kmn, Kmm, k.diag(jnp.asarray(X)), y, 0.05)
    given = bounds.sgpr_elbo(Kmn, Kmm, k.diag(jnp.asarray(X)), y, 0.05, Lmm=ops.cholesky(Kmm))
    assert float(given) == float(plain)
