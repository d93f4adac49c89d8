"""Robust-max and softmax (J latent functions per label) against Monte Carlo, adaptive quadrature and each other.

Oracles: Monte Carlo with 10^6 draws of f ~ N(mean, diag(var)) (tolerance 4 standard errors, fixed seeds);
``scipy.integrate.quad`` for robust-max's 1-D integral; finite differences for gradients.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from ppl_sparsegp.core import ops
from ppl_sparsegp.core.likelihoods import RobustMax, Softmax, likelihood_from_name, likelihood_with_noise

jax.config.update("jax_enable_x64", True)

N_MC = 1_000_000
N_SE = 4.0
J = 4
MEAN = np.array([0.3, -0.5, 1.2, 0.0])
VAR = np.array([0.4, 1.5, 0.2, 2.5])


def latent_draws(mean, var, seed, n=N_MC):
    return mean + np.sqrt(var) * np.random.default_rng(seed).standard_normal((n, len(mean)))


def oracle_log_prob(lik, y, f):
    """log p(y | f) written from the definitions: f [n, J] -> [n]."""
    if isinstance(lik, RobustMax):
        top = np.argmax(f, axis=-1) == y
        return np.where(top, np.log(1 - lik.epsilon), np.log(lik.epsilon / (lik.num_classes - 1)))
    return f[:, y] - special.logsumexp(f, axis=-1)


@pytest.mark.parametrize("lik", [RobustMax(J), RobustMax(J, epsilon=0.05), Softmax(J, num_samples=20_000)])
@pytest.mark.parametrize("y", [0, 2, 3])
def test_variational_expectation_and_log_predictive_density_vs_monte_carlo(lik, y):
    lp = oracle_log_prob(lik, y, latent_draws(MEAN, VAR, seed=y))
    ve_mc, ve_se = lp.mean(), lp.std() / np.sqrt(N_MC)
    p = np.exp(lp)
    lpd_mc, lpd_se = np.log(p.mean()), p.std() / p.mean() / np.sqrt(N_MC)
    ve, lpd = float(lik.variational_expectation(y, MEAN, VAR)), float(lik.log_predictive_density(y, MEAN, VAR))
    if isinstance(lik, Softmax):  # its own S = 20 000 fixed draws carry Monte Carlo error too
        ve_se, lpd_se = ve_se * np.sqrt(1 + N_MC / lik.num_samples), lpd_se * np.sqrt(1 + N_MC / lik.num_samples)
    assert abs(ve - ve_mc) < N_SE * ve_se, (ve, ve_mc, ve_se)
    assert abs(lpd - lpd_mc) < N_SE * lpd_se, (lpd, lpd_mc, lpd_se)
    assert lpd >= ve  # Jensen


def test_robustmax_max_probability_converges_to_adaptive_quadrature():
    """P_k = int N(x | mean_k, var_k) prod_{j != k} Phi((x - mean_j) / sd_j) dx (thesis eq 3.41): Gauss-Hermite's
    error falls as the order grows (1e-3 at the default 20 nodes, where the sds differ 3.5-fold)."""
    sd = np.sqrt(VAR)
    reference = []
    for k in range(J):

        def integrand(x, k=k):
            others = [stats.norm.cdf((x - MEAN[j]) / sd[j]) for j in range(J) if j != k]
            return stats.norm.pdf(x, MEAN[k], sd[k]) * np.prod(others)

        lo, hi = MEAN[k] - 12 * sd[k], MEAN[k] + 12 * sd[k]
        reference.append(integrate.quad(integrand, lo, hi, epsabs=1e-14, limit=200)[0])
    np.testing.assert_allclose(sum(reference), 1.0, atol=1e-12)
    errors = []
    for order in (20, 40, 80, 160):
        P = RobustMax(J, quadrature_order=order)._max_probability(np.eye(J), MEAN, VAR)
        errors.append(np.max(np.abs(P - reference)))
    lik = RobustMax(J, quadrature_order=160)
    expected = np.array(reference) * (1 - lik.epsilon) + (1 - np.array(reference)) * lik.epsilon / (J - 1)
    np.testing.assert_allclose(lik.class_probabilities(MEAN, VAR), expected, rtol=1e-9)
    assert all(b < a / 5 for a, b in zip(errors, errors[1:], strict=False)), errors
    assert errors[0] < 5e-3 and errors[-1] < 1e-9, errors


def test_predictive_probabilities_sum_to_one_and_match_monte_carlo():
    rng = np.random.default_rng(3)
    mean, var = rng.normal(size=(5, J)), rng.uniform(0.05, 3.0, size=(5, J))
    codes = np.eye(J)
    for order, tolerance in ((20, 2e-3), (80, 1e-6)):  # the P_k of quadrature (1e-3 off where sds differ 8-fold)
        P = RobustMax(J, quadrature_order=order)._max_probability(codes, mean[:, None, :], var[:, None, :])
        np.testing.assert_allclose(P.sum(-1), 1.0, atol=tolerance)
    np.testing.assert_allclose(RobustMax(J).class_probabilities(mean, var).sum(-1), 1.0, rtol=1e-12)  # normalised
    np.testing.assert_allclose(Softmax(J).class_probabilities(mean, var).sum(-1), 1.0, rtol=1e-12)
    for lik in (RobustMax(J, quadrature_order=80), Softmax(J, num_samples=20_000)):
        f = latent_draws(mean[1], var[1], seed=7)
        cm = lik.conditional_mean(f)
        np.testing.assert_allclose(cm.sum(-1), 1.0, rtol=1e-12)
        se = cm.std(0) / np.sqrt(N_MC) * (np.sqrt(1 + N_MC / lik.num_samples) if isinstance(lik, Softmax) else 1)
        p, v = lik.predict_mean_and_var(mean[1], var[1])
        assert np.all(np.abs(p - cm.mean(0)) < N_SE * se + 1e-9), (p, cm.mean(0))
        np.testing.assert_allclose(v, p * (1 - p), rtol=1e-12)


def test_log_prob_and_conditional_mean_from_the_definitions():
    f = np.random.default_rng(4).normal(size=(6, J))
    labels = np.array([0, 1, 2, 3, 1, 0])
    for lik in (RobustMax(J, epsilon=0.1), Softmax(J)):
        expected = np.array([oracle_log_prob(lik, y, row[None])[0] for y, row in zip(labels, f, strict=True)])
        np.testing.assert_allclose(lik.log_prob(labels, f), expected, rtol=1e-12)
        p = lik.conditional_mean(f)
        np.testing.assert_allclose(np.log(p[np.arange(6), labels]), expected, rtol=1e-12)


def test_softmax_draws_are_fixed_by_the_seed_and_converge():
    y = 1
    lp = oracle_log_prob(Softmax(J), y, latent_draws(MEAN, VAR, seed=11))
    reference = lp.mean()
    a, b = Softmax(J, seed=0), Softmax(J, seed=1)
    assert float(a.variational_expectation(y, MEAN, VAR)) == float(
        Softmax(J, seed=0).variational_expectation(y, MEAN, VAR)
    )
    assert float(a.variational_expectation(y, MEAN, VAR)) != float(b.variational_expectation(y, MEAN, VAR))
    errors = [
        np.mean([abs(float(Softmax(J, num_samples=S, seed=s).variational_expectation(y, MEAN, VAR)) - reference)
                 for s in range(20)])
        for S in (10, 1000)
    ]  # fmt: skip
    assert errors[1] < errors[0] / 4, errors  # 1/sqrt(S): about 10x


def test_expectation_by_output_takes_the_latent_axis_first():
    rng = np.random.default_rng(5)
    mean, var, y = rng.normal(size=(J, 7)), rng.uniform(0.1, 2.0, size=(J, 7)), rng.integers(0, J, size=7)
    for lik in (RobustMax(J), Softmax(J)):
        got = lik.expectation_by_output(y[None].astype(float), mean, var)
        assert got.shape == (1, 7)
        np.testing.assert_allclose(got[0], lik.variational_expectation(y, mean.T, var.T), rtol=1e-12)


def all_outputs(lik, y, mean, var):
    return [lik.log_prob(y, mean), lik.variational_expectation(y, mean, var),
            lik.log_predictive_density(y, mean, var), *lik.predict_mean_and_var(mean, var)]  # fmt: skip


@pytest.mark.parametrize("lik", [RobustMax(J), Softmax(J)], ids=["robustmax", "softmax"])
def test_same_numbers_on_numpy_jax_and_torch_and_finite_gradients(lik):
    rng = np.random.default_rng(6)
    y, mean, var = rng.integers(0, J, size=5), rng.normal(size=(5, J)), rng.uniform(0.1, 2.0, size=(5, J))
    expected = all_outputs(lik, y, mean, var)
    on_jax = jax.jit(lambda *a: all_outputs(lik, *a))(jnp.asarray(y), jnp.asarray(mean), jnp.asarray(var))
    on_torch = all_outputs(lik, *(torch.asarray(a) for a in (y, mean, var)))
    for got in (on_jax, on_torch):
        for g, e in zip(got, expected, strict=True):
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-10, atol=1e-13)

    def total(m, v):
        return jnp.sum(lik.variational_expectation(y, m, v) + lik.log_predictive_density(y, m, v))

    gm, gv = jax.jit(jax.grad(total, argnums=(0, 1)))(jnp.asarray(mean), jnp.asarray(var))
    assert np.all(np.isfinite(gm)) and np.all(np.isfinite(gv))
    h, e = 1e-6, np.zeros((5, J))
    e[2, 1] = h
    np.testing.assert_allclose(gm[2, 1], (total(mean + e, var) - total(mean - e, var)) / (2 * h), rtol=1e-5)
    np.testing.assert_allclose(gv[2, 1], (total(mean, var + e) - total(mean, var - e)) / (2 * h), rtol=1e-5)


def test_bad_settings_are_refused_by_name():
    bad_settings = [
        (lambda: RobustMax(1), "num_classes"), (lambda: Softmax(2.5), "num_classes"),
        (lambda: RobustMax(3, epsilon=0.0), "epsilon"), (lambda: RobustMax(3, epsilon=1.0), "epsilon"),
        (lambda: Softmax(3, num_samples=0), "num_samples"), (lambda: Softmax(3, seed=-1), "seed"),
    ]  # fmt: skip
    for bad, name in bad_settings:
        with pytest.raises(ValueError, match=name):
            bad()


def test_by_name_and_latent_dim():
    assert likelihood_from_name("robustmax", num_classes=5).latent_dim == 5
    assert likelihood_from_name("Softmax", num_classes=3).num_classes == 3
    assert likelihood_with_noise("robustmax", None, np.float64, num_classes=10).latent_dim == 10
    assert likelihood_from_name("gaussian").latent_dim is None


def test_normal_cdf_keeps_the_left_tail_on_every_backend():
    x = np.array([-30.0, -10.0, -1.0, 3.0])
    expected = special.ndtr(x)
    for arr in (jnp.asarray(x), torch.asarray(x)):
        np.testing.assert_allclose(np.asarray(ops.normal_cdf(arr)), expected, rtol=1e-12)
