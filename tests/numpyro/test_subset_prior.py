"""Subset point-process prior, independent-inclusion guide and their KL, against enumeration and the spec's tables."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
import scipy.optimize
from numpyro.distributions.kl import kl_divergence
from numpyro.infer import TraceMeanField_ELBO
from scipy.special import comb, logsumexp

from ppl_sparsegp.numpyro.subset_prior import (
    IndependentInclusion,
    SubsetPointProcess,
    kl_inclusion_point_process,
    no_signal_inclusion_probability,
)

# spec §2.2: (K, α, prior mean |S|, log C)
PRIOR_TABLE = [
    (80, 0.05, 14.7, -26.96),
    (80, 0.1, 9.7, -19.64),
    (100, 0.01, 33.7, -52.36),
    (100, 0.05, 16.3, -30.75),
    (100, 0.1, 10.6, -22.04),
    (100, 0.2, 6.5, -14.98),
    (150, 1.0, 2.05, -5.80),
    (225, 3.0, 0.93, -2.51),
]
# spec §2.6: (K, α, λ*, E|S| = K λ*)
FIXED_POINT_TABLE = [
    (80, 0.05, 0.183, 14.6),
    (80, 0.1, 0.120, 9.6),
    (100, 0.01, 0.337, 33.7),
    (100, 0.2, 0.063, 6.3),
    (225, 3.0, 0.0023, 0.52),
]


def all_masks(K: int) -> np.ndarray:
    return np.array(list(itertools.product([0.0, 1.0], repeat=K)))


def brute_force_log_normalizer(K: int, alpha: float) -> float:
    sizes = all_masks(K).sum(axis=1)
    return -float(logsumexp(-alpha * sizes**2))


def half_decimal(value: float) -> float:
    """Half a unit in the last decimal printed in the spec's tables."""
    decimals = len(f"{value}".split(".")[1])
    return 0.5 * 10.0**-decimals + 1e-12


@pytest.mark.parametrize("K", [1, 4, 9, 12])
@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.7, 3.0])
def test_log_normalizer_matches_enumeration(K, alpha):
    p = SubsetPointProcess(K, alpha)
    np.testing.assert_allclose(float(p.log_normalizer), brute_force_log_normalizer(K, alpha), rtol=0, atol=1e-10)
    if alpha == 0.0:
        np.testing.assert_allclose(float(p.log_normalizer), -K * np.log(2.0), atol=1e-12)


@pytest.mark.parametrize(("K", "alpha", "mean_size", "log_c"), PRIOR_TABLE)
def test_prior_matches_spec_table(K, alpha, mean_size, log_c):
    p = SubsetPointProcess(K, alpha)
    assert float(p.log_normalizer) == pytest.approx(log_c, abs=half_decimal(log_c))
    size_probs = np.exp(np.asarray(p.size_log_probs()))
    assert size_probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert size_probs @ np.arange(K + 1) == pytest.approx(mean_size, abs=half_decimal(mean_size))


def test_size_log_probs_are_binomial_weighted():
    K, alpha = 7, 0.3
    n = np.arange(K + 1)
    expected = np.log(comb(K, n)) - alpha * n**2 + brute_force_log_normalizer(K, alpha)
    np.testing.assert_allclose(np.asarray(SubsetPointProcess(K, alpha).size_log_probs()), expected, atol=1e-12)


@pytest.mark.parametrize(("K", "alpha"), [(1, 0.5), (6, 0.0), (10, 0.2), (10, 2.5)])
def test_log_prob_normalised_over_all_masks(K, alpha):
    log_p = np.asarray(SubsetPointProcess(K, alpha).log_prob(jnp.asarray(all_masks(K))))
    assert log_p.shape == (2**K,)
    assert logsumexp(log_p) == pytest.approx(0.0, abs=1e-12)


def test_large_candidate_sets_are_finite():
    p = SubsetPointProcess(5000, 0.001)
    assert np.isfinite(float(p.log_normalizer))
    assert np.all(np.isfinite(np.asarray(p.size_log_probs())))


@pytest.mark.parametrize(("K", "alpha"), [(1, 0.3), (5, 0.0), (8, 0.4), (12, 0.05)])
def test_kl_matches_enumeration(rng, K, alpha):
    probs = rng.uniform(0.02, 0.98, size=K)
    q, p = IndependentInclusion(probs), SubsetPointProcess(K, alpha)
    masks = jnp.asarray(all_masks(K))
    log_q, log_p = np.asarray(q.log_prob(masks)), np.asarray(p.log_prob(masks))
    assert logsumexp(log_q) == pytest.approx(0.0, abs=1e-12)
    expected = np.sum(np.exp(log_q) * (log_q - log_p))
    assert float(kl_inclusion_point_process(q, p)) == pytest.approx(expected, abs=1e-10)
    sizes = np.asarray(masks).sum(axis=1)
    assert float(q.expected_count) == pytest.approx(np.exp(log_q) @ sizes, abs=1e-12)
    second_moment = float(q.count_variance) + float(q.expected_count) ** 2
    assert second_moment == pytest.approx(np.exp(log_q) @ sizes**2, abs=1e-10)
    entropy = -np.sum(np.exp(log_q) * log_q)
    assert float(q.entropy()) == pytest.approx(entropy, abs=1e-10)


def test_kl_at_degenerate_probabilities():
    probs = np.array([0.0, 1.0, 0.3, 1.0])
    q, p = IndependentInclusion(probs), SubsetPointProcess(4, 0.2)
    masks = jnp.asarray(all_masks(4))
    log_q, log_p = np.asarray(q.log_prob(masks)), np.asarray(p.log_prob(masks))
    support = np.isfinite(log_q)
    expected = np.sum(np.exp(log_q[support]) * (log_q[support] - log_p[support]))
    assert float(kl_divergence(q, p)) == pytest.approx(expected, abs=1e-12)
    grad = jax.grad(lambda lam: kl_inclusion_point_process(IndependentInclusion(lam), p))(jnp.asarray(probs))
    assert np.all(np.isfinite(np.asarray(grad)))


def test_kl_divergence_dispatches_to_closed_form(rng):
    assert kl_divergence.dispatch(IndependentInclusion, SubsetPointProcess) is kl_inclusion_point_process
    q, p = IndependentInclusion(rng.uniform(size=(3, 20))), SubsetPointProcess(20, 0.1)
    kl = kl_divergence(q, p)
    assert kl.shape == (3,)
    np.testing.assert_allclose(np.asarray(kl), np.asarray(kl_inclusion_point_process(q, p)), rtol=1e-14)
    assert np.all(np.asarray(kl) > 0)


def test_trace_mean_field_elbo_uses_the_closed_form(rng):
    K, alpha = 30, 0.1
    probs = jnp.asarray(rng.uniform(0.05, 0.95, size=K))

    def model():
        numpyro.sample("mask", SubsetPointProcess(K, alpha))

    def guide():
        lam = numpyro.param("lam", probs)
        numpyro.sample("mask", IndependentInclusion(lam))

    loss = TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), {}, model, guide)
    expected = kl_inclusion_point_process(IndependentInclusion(probs), SubsetPointProcess(K, alpha))
    assert float(loss) == pytest.approx(float(expected), abs=1e-10)


def test_kl_gradient_matches_spec_formula(rng):
    K, alpha = 15, 0.3
    probs = rng.uniform(0.05, 0.95, size=K)
    p = SubsetPointProcess(K, alpha)
    grad = jax.grad(lambda lam: kl_inclusion_point_process(IndependentInclusion(lam), p))(jnp.asarray(probs))
    expected = alpha * (1 - 2 * probs + 2 * probs.sum()) + np.log(probs / (1 - probs))
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-10)


def test_prior_sampler_size_and_uniformity():
    K, alpha, num = 10, 0.1, 40_000
    p = SubsetPointProcess(K, alpha)
    masks = np.asarray(p.sample(jax.random.PRNGKey(1), (num,)))
    assert masks.shape == (num, K)
    assert masks.dtype == np.float64
    assert set(np.unique(masks)) <= {0.0, 1.0}
    size_probs = np.exp(np.asarray(p.size_log_probs()))
    sizes = masks.sum(axis=1).astype(int)
    freq = np.bincount(sizes, minlength=K + 1) / num
    np.testing.assert_array_less(np.abs(freq - size_probs), 4 * np.sqrt(size_probs * (1 - size_probs) / num) + 1e-12)
    expected_inclusion = size_probs @ np.arange(K + 1) / K
    inclusion_se = np.sqrt(expected_inclusion * (1 - expected_inclusion) / num)
    np.testing.assert_array_less(np.abs(masks.mean(axis=0) - expected_inclusion), 4 * inclusion_se)
    n = int(np.argmax(size_probs))
    of_size_n = masks[sizes == n]
    se = np.sqrt((n / K) * (1 - n / K) / len(of_size_n))
    np.testing.assert_array_less(np.abs(of_size_n.mean(axis=0) - n / K), 4 * se)


def test_guide_sampler_and_log_prob(rng):
    K, num = 6, 40_000
    probs = rng.uniform(0.1, 0.9, size=K)
    q = IndependentInclusion(probs)
    masks = np.asarray(q.sample(jax.random.PRNGKey(2), (num,)))
    assert masks.shape == (num, K)
    assert set(np.unique(masks)) <= {0.0, 1.0}
    np.testing.assert_array_less(np.abs(masks.mean(axis=0) - probs), 4 * np.sqrt(probs * (1 - probs) / num))
    reference = numpyro.distributions.Bernoulli(probs=jnp.asarray(probs)).to_event(1)
    np.testing.assert_allclose(np.asarray(q.log_prob(masks[:50])), np.asarray(reference.log_prob(masks[:50])))
    np.testing.assert_allclose(float(q.entropy()), float(reference.entropy()), rtol=1e-12)
    assert IndependentInclusion(rng.uniform(size=(2, 3, K))).sample(jax.random.PRNGKey(0), (4,)).shape == (4, 2, 3, K)


@pytest.mark.parametrize(("K", "alpha", "lam_star", "mean_size"), FIXED_POINT_TABLE)
def test_no_signal_fixed_point_matches_spec(K, alpha, lam_star, mean_size):
    lam = no_signal_inclusion_probability(K, alpha)
    assert lam == pytest.approx(lam_star, abs=half_decimal(lam_star))
    assert K * lam == pytest.approx(mean_size, abs=half_decimal(mean_size))
    assert np.log(lam / (1 - lam)) == pytest.approx(-alpha * (1 + 2 * (K - 1) * lam), abs=1e-10)


def test_no_signal_fixed_point_edge_cases():
    assert no_signal_inclusion_probability(50, 0.0) == 0.5
    assert no_signal_inclusion_probability(1, 0.7) == pytest.approx(1 / (1 + np.exp(0.7)), abs=1e-15)


def test_minimising_kl_alone_reaches_the_fixed_point(rng):
    K, alpha = 80, 0.05
    p = SubsetPointProcess(K, alpha)
    objective = jax.jit(
        jax.value_and_grad(lambda r: kl_inclusion_point_process(IndependentInclusion(jax.nn.sigmoid(r)), p))
    )

    def fun(r):
        value, grad = objective(jnp.asarray(r))
        return float(value), np.asarray(grad)

    result = scipy.optimize.minimize(fun, rng.normal(0.0, 2.0, size=K), jac=True, method="L-BFGS-B", tol=1e-14)
    lam = 1 / (1 + np.exp(-result.x))
    lam_star = no_signal_inclusion_probability(K, alpha)
    np.testing.assert_allclose(lam, lam_star, atol=1e-6)
    assert lam_star == pytest.approx(0.183, abs=0.002)  # spec U6 tolerance
    assert lam.sum() == pytest.approx(14.6, abs=0.2)


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "5", None])
def test_bad_num_candidates(bad):
    with pytest.raises(ValueError, match="num_candidates"):
        SubsetPointProcess(bad, 0.1)
    with pytest.raises(ValueError, match="num_candidates"):
        no_signal_inclusion_probability(bad, 0.1)


@pytest.mark.parametrize("bad", [-0.1, np.inf, np.nan, np.array([0.1, 0.2]), "a"])
def test_bad_alpha(bad):
    with pytest.raises(ValueError, match="alpha"):
        SubsetPointProcess(5, bad)
    with pytest.raises(ValueError, match="alpha"):
        no_signal_inclusion_probability(5, bad)


@pytest.mark.parametrize("bad", [np.array([0.2, 1.2]), np.array([-0.1, 0.5]), np.array([np.nan, 0.5]), 0.5, []])
def test_bad_probs(bad):
    with pytest.raises(ValueError, match="probs"):
        IndependentInclusion(bad)


def test_bad_mask_shape_and_mismatched_kl():
    with pytest.raises(ValueError, match="mask"):
        SubsetPointProcess(4, 0.1).log_prob(jnp.ones(5))
    with pytest.raises(ValueError, match="mask"):
        IndependentInclusion(jnp.full(4, 0.5)).log_prob(jnp.ones(3))
    with pytest.raises(ValueError, match="same candidates"):
        kl_divergence(IndependentInclusion(jnp.full(4, 0.5)), SubsetPointProcess(5, 0.1))


def test_works_under_jit_and_grad():
    def kl(lam, alpha):
        return kl_inclusion_point_process(IndependentInclusion(lam), SubsetPointProcess(6, alpha))

    lam = jnp.full(6, 0.4)
    np.testing.assert_allclose(float(jax.jit(kl)(lam, 0.2)), float(kl(lam, 0.2)), rtol=1e-14)
    d_alpha = jax.grad(kl, argnums=1)(lam, 0.2)
    prior_mean_sq = np.exp(np.asarray(SubsetPointProcess(6, 0.2).size_log_probs())) @ np.arange(7) ** 2
    assert float(d_alpha) == pytest.approx(float(6 * 0.4 * 0.6 + 2.4**2) - prior_mean_sq, abs=1e-10)


def test_float32():
    with jax.enable_x64(False):
        p, q = SubsetPointProcess(80, 0.05), IndependentInclusion(np.full(80, 0.183, dtype=np.float32))
        assert float(p.log_normalizer) == pytest.approx(-26.9626, abs=1e-3)
        kl = kl_divergence(q, p)
        grad = jax.grad(lambda lam: kl_inclusion_point_process(IndependentInclusion(lam), p))(q.probs)
        key = jax.random.PRNGKey(0)
        assert {kl.dtype, grad.dtype, q.sample(key).dtype, p.sample(key, (2,)).dtype} == {jnp.dtype(jnp.float32)}
        assert np.all(np.isfinite(np.asarray(grad)))
    with jax.enable_x64(True):
        kl64 = kl_divergence(IndependentInclusion(np.full(80, 0.183)), SubsetPointProcess(80, 0.05))
    assert float(kl) == pytest.approx(float(kl64), rel=1e-4)
