"""Likelihoods against scipy.stats, Monte Carlo, adaptive quadrature and their own closed forms.

Oracles: ``scipy.stats`` log densities and conditional moments; Monte Carlo with 10^6 draws of
``f ~ N(mean, var)`` (tolerance 4 standard errors, fixed seeds); ``scipy.integrate.quad`` for the
quadrature-convergence checks; finite differences for gradients.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from ppl_sparsegp.core.likelihoods import (
    Bernoulli,
    Beta,
    Exponential,
    Gamma,
    Gaussian,
    Likelihood,
    Poisson,
    StudentT,
    likelihood_from_name,
)

jax.config.update("jax_enable_x64", True)

N_MC = 1_000_000
N_SE = 4.0

GAUSS = Gaussian(variance=0.3)
PROBIT = Bernoulli(link="probit")
LOGIT = Bernoulli(link="logit")
POISSON = Poisson(binsize=0.5)
STUDENT = StudentT(df=3.0, scale=1.0)
GAMMA = Gamma(shape=2.5)
EXPONENTIAL = Exponential()
BETA = Beta(scale=4.0)
ALL = {"gaussian": GAUSS, "probit": PROBIT, "logit": LOGIT, "poisson": POISSON, "studentt": STUDENT,
       "gamma": GAMMA, "exponential": EXPONENTIAL, "beta": BETA}  # fmt: skip


def beta_means(f):
    """The Beta likelihood's (Phi(f), Phi(-f)), each at least the smallest normal float64 as the class documents."""
    tiny = np.finfo(np.float64).smallest_normal
    return np.maximum(stats.norm.cdf(f), tiny), np.maximum(stats.norm.sf(f), tiny)


def oracle_logpdf(lik: Likelihood, y, f):
    """scipy.stats log p(y | f) for the likelihoods above (Bernoulli in a tail-accurate form)."""
    if isinstance(lik, Gaussian):
        return stats.norm.logpdf(y, loc=f, scale=np.sqrt(lik.variance))
    if isinstance(lik, Bernoulli):
        signed = np.where(y == 1.0, f, -f)
        return stats.norm.logcdf(signed) if lik.link == "probit" else -np.logaddexp(0.0, -signed)
    if isinstance(lik, Poisson):
        return stats.poisson.logpmf(y, lik.binsize * np.exp(f))
    if isinstance(lik, Gamma):
        return stats.gamma.logpdf(y, lik.shape, scale=np.exp(f))
    if isinstance(lik, Beta):
        m, rest = beta_means(f)
        return stats.beta.logpdf(y, lik.scale * m, lik.scale * rest)
    return stats.t.logpdf(y, lik.df, loc=f, scale=lik.scale)


def oracle_moments(lik: Likelihood, f):
    """scipy.stats (E[y | f], Var[y | f])."""
    if isinstance(lik, Gaussian):
        return stats.norm.mean(loc=f), stats.norm.var(loc=f, scale=np.sqrt(lik.variance))
    if isinstance(lik, Bernoulli):
        p = stats.norm.cdf(f) if lik.link == "probit" else special.expit(f)
        return stats.bernoulli.mean(p), stats.bernoulli.var(p)
    if isinstance(lik, Poisson):
        rate = lik.binsize * np.exp(f)
        return stats.poisson.mean(rate), stats.poisson.var(rate)
    if isinstance(lik, Gamma):
        return stats.gamma.mean(lik.shape, scale=np.exp(f)), stats.gamma.var(lik.shape, scale=np.exp(f))
    if isinstance(lik, Beta):
        a, b = (lik.scale * m for m in beta_means(f))
        return stats.beta.mean(a, b), stats.beta.var(a, b)
    return stats.t.mean(lik.df, loc=f, scale=lik.scale), stats.t.var(lik.df, loc=f, scale=lik.scale)


def draws(mean, var, seed):
    return mean + np.sqrt(var) * np.random.default_rng(seed).standard_normal(N_MC)


# (likelihood, y, mean, var); the last case of each likelihood has a large var. Gauss-Hermite needs
# more nodes than the default 20 when p(y | f) is narrow next to sqrt(var) (module docstring):
# those cases set quadrature_order explicitly.
MC_CASES = [
    (GAUSS, 0.5, -0.2, 0.1),
    (GAUSS, 1.3, 0.4, 2.0),
    (GAUSS, -2.0, 1.0, 25.0),
    (PROBIT, 1.0, 0.3, 0.5),
    (PROBIT, 0.0, 1.5, 2.0),
    (PROBIT, 1.0, -2.0, 9.0),
    (PROBIT, 0.0, -0.5, 25.0),
    (LOGIT, 1.0, 0.3, 0.5),
    (LOGIT, 0.0, 1.5, 2.0),
    (LOGIT, 1.0, -2.0, 9.0),
    (Bernoulli("logit", quadrature_order=60), 0.0, -0.5, 25.0),
    (POISSON, 0.0, 0.2, 0.3),
    (POISSON, 3.0, 1.0, 0.5),
    (POISSON, 3.0, 1.0, 1.0),
    (Poisson(binsize=0.5, quadrature_order=100), 7.0, 1.5, 4.0),
    (STUDENT, 0.3, 0.0, 0.2),
    (STUDENT, 2.5, 0.0, 1.0),
    (STUDENT, 0.3, 0.0, 4.0),
    (StudentT(df=3.0, scale=1.0, quadrature_order=100), -1.0, 1.0, 9.0),
    (GAMMA, 1.7, 0.2, 0.3),
    (Gamma(shape=2.5, quadrature_order=100), 0.4, -0.5, 2.0),
    (EXPONENTIAL, 0.8, 0.0, 0.5),
    (Exponential(quadrature_order=100), 3.0, 1.0, 2.0),
    (BETA, 0.3, -0.4, 0.2),
    (BETA, 0.85, 0.5, 1.0),
    (Beta(scale=4.0, quadrature_order=100), 0.1, 0.0, 4.0),
]
MC_IDS = [f"{type(c[0]).__name__}-{i}" for i, c in enumerate(MC_CASES)]


# ----------------------------------------------------------------------------- log_prob vs scipy


@pytest.mark.parametrize("name", list(ALL))
def test_log_prob_matches_scipy_and_broadcasts(name):
    lik = ALL[name]
    f = np.linspace(-3.0, 3.0, 13)
    y = {
        "gaussian": np.array([-1.0, 0.2, 2.5]),
        "probit": np.array([0.0, 1.0]),
        "logit": np.array([0.0, 1.0]),
        "poisson": np.array([0.0, 1.0, 4.0, 11.0]),
        "studentt": np.array([-4.0, 0.2, 2.5]),
        "gamma": np.array([0.1, 1.0, 6.0]),
        "exponential": np.array([0.1, 1.0, 6.0]),
        "beta": np.array([0.01, 0.5, 0.97]),
    }[name][:, None]
    got = lik.log_prob(y, f)
    assert got.shape == (y.shape[0], f.shape[0])
    np.testing.assert_allclose(got, oracle_logpdf(lik, y, f), rtol=1e-12, atol=1e-14)
    if isinstance(lik, Bernoulli):
        p = stats.norm.cdf(f) if lik.link == "probit" else special.expit(f)
        np.testing.assert_allclose(got, stats.bernoulli.logpmf(y, p), rtol=1e-12, atol=1e-14)


def test_studentt_log_prob_other_df_and_scale():
    lik = StudentT(df=7.5, scale=0.2)
    y, f = np.array([-0.3, 0.0, 1.7]), np.array([0.1, 0.0, -0.4])
    np.testing.assert_allclose(lik.log_prob(y, f), stats.t.logpdf(y, 7.5, f, 0.2), rtol=1e-12)


def test_bernoulli_log_prob_is_accurate_in_the_tails():
    f = np.array([-40.0, -800.0])
    np.testing.assert_allclose(PROBIT.log_prob(1.0, f[:1]), stats.norm.logcdf(-40.0), rtol=1e-12)
    np.testing.assert_allclose(LOGIT.log_prob(1.0, f), -np.logaddexp(0.0, -f), rtol=1e-12)
    np.testing.assert_allclose(LOGIT.log_prob(0.0, -f), -np.logaddexp(0.0, -f), rtol=1e-12)


def test_integer_labels_and_counts_are_cast_to_the_latent_dtype():
    f = np.array([0.3, -1.2])
    np.testing.assert_allclose(POISSON.log_prob(np.array([2, 0]), f), POISSON.log_prob(np.array([2.0, 0.0]), f))
    out = PROBIT.log_prob(np.array([1, 0]), f.astype(np.float32))
    assert out.dtype == np.float32


# ------------------------------------------------------------------------ expectations vs MC


@pytest.mark.parametrize(("seed", "case"), list(enumerate(MC_CASES)), ids=MC_IDS)
def test_variational_expectation_and_log_predictive_density_vs_monte_carlo(seed, case):
    lik, y, mean, var = case
    lp = oracle_logpdf(lik, y, draws(mean, var, seed))
    ve_mc, ve_se = lp.mean(), lp.std() / np.sqrt(N_MC)
    p = np.exp(lp - lp.max())
    lpd_mc = np.log(p.mean()) + lp.max()
    lpd_se = p.std() / p.mean() / np.sqrt(N_MC)

    ve = float(lik.variational_expectation(y, mean, var))
    lpd = float(lik.log_predictive_density(y, mean, var))
    assert abs(ve - ve_mc) < N_SE * ve_se, (ve, ve_mc, ve_se)
    assert abs(lpd - lpd_mc) < N_SE * lpd_se, (lpd, lpd_mc, lpd_se)
    assert lpd >= ve  # Jensen: log E[p] >= E[log p]


PREDICT_CASES = [
    (GAUSS, 0.4, 2.0),
    (PROBIT, -0.5, 0.4),
    (PROBIT, 1.0, 16.0),
    (LOGIT, 0.7, 1.0),
    (LOGIT, -1.0, 16.0),
    (POISSON, 1.2, 0.3),
    (POISSON, 0.5, 1.0),
    (StudentT(df=4.0, scale=0.5), -1.0, 3.0),
    (GAMMA, 0.3, 0.5),
    (EXPONENTIAL, -0.2, 0.3),
    (BETA, 0.4, 1.5),
]


@pytest.mark.parametrize(("lik", "mean", "var"), PREDICT_CASES)
def test_predict_mean_and_var_vs_monte_carlo(lik, mean, var):
    cm, cv = oracle_moments(lik, draws(mean, var, seed=100))
    m_mc, m_se = cm.mean(), cm.std() / np.sqrt(N_MC)
    h = cv + (cm - m_mc) ** 2  # law of total variance: Var[y] = E[Var[y|f] + (E[y|f] - E[y])^2]
    v_mc, v_se = h.mean(), h.std() / np.sqrt(N_MC)

    m, v = lik.predict_mean_and_var(mean, var)
    assert abs(float(m) - m_mc) < N_SE * m_se + 1e-12, (m, m_mc, m_se)
    assert abs(float(v) - v_mc) < N_SE * v_se + 1e-12, (v, v_mc, v_se)


def test_studentt_predictive_moments_for_small_df():
    """Var[y] = var + scale^2 Var[t_df] (inf for df <= 2 as in scipy); no mean for df <= 1."""
    for df in (1.0, 1.5, 2.0, 2.5):
        m, v = StudentT(df=df, scale=0.7).predict_mean_and_var(np.array(0.3), np.array(0.2))
        np.testing.assert_equal(float(m), 0.3 if df > 1.0 else np.nan)
        if df > 1.0:
            np.testing.assert_allclose(float(v), stats.t.var(df, scale=0.7) + 0.2, rtol=1e-12)
        else:
            np.testing.assert_equal(float(v), np.nan)


def test_bernoulli_predictive_probabilities_sum_to_one():
    mean, var = np.array([-3.0, 0.0, 0.8, 4.0]), np.array([0.1, 1.0, 9.0, 30.0])
    for lik in (PROBIT, LOGIT):
        p1 = np.exp(lik.log_predictive_density(1.0, mean, var))
        p0 = np.exp(lik.log_predictive_density(0.0, mean, var))
        np.testing.assert_allclose(p1 + p0, 1.0, atol=1e-12)
        m, v = lik.predict_mean_and_var(mean, var)
        np.testing.assert_allclose(m, p1, rtol=1e-12)
        np.testing.assert_allclose(v, p1 * p0, rtol=1e-12)
    np.testing.assert_allclose(
        np.exp(PROBIT.log_predictive_density(1.0, mean, var)),
        stats.norm.cdf(mean / np.sqrt(1.0 + var)),
        rtol=1e-12,
    )


# ------------------------------------------------- closed forms vs the base-class quadrature

MEAN = np.array([-1.5, -0.2, 0.0, 0.7, 2.0])
VAR = np.array([0.05, 0.5, 1.0, 2.0, 4.0])


def generic(lik: Likelihood, order: int) -> Likelihood:
    return dataclasses.replace(lik, quadrature_order=order)


Y_REAL = np.array([0.3, -1.0, 2.0, 0.0, 1.1])
Y_COUNT = np.array([0.0, 1.0, 3.0, 2.0, 9.0])
Y_BINARY = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
Y_POSITIVE = np.array([0.2, 1.5, 0.9, 4.0, 0.05])
CLOSED_FORMS = [
    (Gaussian(variance=1.5), Y_REAL, "variational_expectation"),
    (Gaussian(variance=1.5), Y_REAL, "log_predictive_density"),
    (Gaussian(variance=1.5), Y_REAL, "predict_mean_and_var"),
    (POISSON, Y_COUNT, "variational_expectation"),
    (POISSON, Y_COUNT, "predict_mean_and_var"),
    (PROBIT, Y_BINARY, "log_predictive_density"),
    (PROBIT, Y_BINARY, "predict_mean_and_var"),
    (StudentT(df=5.0, scale=0.8), Y_REAL, "predict_mean_and_var"),
    (GAMMA, Y_POSITIVE, "variational_expectation"),
    (GAMMA, Y_POSITIVE, "predict_mean_and_var"),
    (EXPONENTIAL, Y_POSITIVE, "variational_expectation"),
    (EXPONENTIAL, Y_POSITIVE, "predict_mean_and_var"),
]


@pytest.mark.parametrize(("lik", "y", "method"), CLOSED_FORMS)
def test_closed_forms_equal_high_order_generic_quadrature(lik, y, method):
    args = () if method == "predict_mean_and_var" else (y,)
    closed = getattr(lik, method)(*args, MEAN, VAR)
    quad = getattr(Likelihood, method)(generic(lik, 100), *args, MEAN, VAR)
    np.testing.assert_allclose(closed, quad, rtol=1e-8, atol=1e-10)


def test_default_order_accuracy_of_the_thesis_checks():
    """Matthews (2016) test list, item 9, with the default 20 nodes."""
    assert Likelihood.quadrature_order == 20
    np.testing.assert_allclose(
        Likelihood.variational_expectation(POISSON, Y_COUNT, MEAN, VAR),
        POISSON.variational_expectation(Y_COUNT, MEAN, VAR),
        rtol=1e-6,
    )
    mean, var = np.linspace(-3.0, 3.0, 13), np.linspace(0.05, 1.0, 13)  # GH20 error 1e-4 at var=4
    for label in (0.0, 1.0):
        np.testing.assert_allclose(
            Likelihood.log_predictive_density(PROBIT, label, mean, var),
            PROBIT.log_predictive_density(label, mean, var),
            atol=1e-8,
        )
    np.testing.assert_allclose(
        Likelihood.variational_expectation(GAUSS, Y_REAL, MEAN, VAR),
        GAUSS.variational_expectation(Y_REAL, MEAN, VAR),
        atol=1e-10,
    )


# ------------------------------------------------------------------ quadrature order


def quad_reference(lik: Likelihood, y: float, mean: float, var: float):
    """(E[log p], log E[p]) by adaptive quadrature."""
    sd = np.sqrt(var)

    def density(f):
        return stats.norm.pdf(f, mean, sd)

    lo, hi = mean - 14 * sd, mean + 14 * sd
    opts = {"points": [y], "limit": 400, "epsabs": 1e-15, "epsrel": 1e-13}
    ve = integrate.quad(lambda f: oracle_logpdf(lik, y, f) * density(f), lo, hi, **opts)[0]
    pd = integrate.quad(lambda f: np.exp(oracle_logpdf(lik, y, f)) * density(f), lo, hi, **opts)[0]
    return ve, np.log(pd)


@pytest.mark.parametrize(
    ("lik", "y", "mean", "var"),
    [(LOGIT, 1.0, -2.0, 9.0), (STUDENT, 0.3, 0.0, 4.0), (StudentT(df=4.0, scale=2.0), -3.0, 1.0, 9.0)],
)
def test_quadrature_converges_as_the_order_grows(lik, y, mean, var):
    ve_ref, lpd_ref = quad_reference(lik, y, mean, var)
    orders = [5, 10, 20, 40, 80, 160]
    ve_err = [abs(float(generic(lik, q).variational_expectation(y, mean, var)) - ve_ref) for q in orders]
    lpd_err = [abs(float(generic(lik, q).log_predictive_density(y, mean, var)) - lpd_ref) for q in orders]
    assert all(b < a for a, b in zip(ve_err, ve_err[1:], strict=False)), ve_err
    assert all(b < a for a, b in zip(lpd_err, lpd_err[1:], strict=False)), lpd_err
    assert ve_err[0] > 1e-4 and lpd_err[0] > 1e-4  # a low order is visibly wrong ...
    assert ve_err[-1] < 1e-7 and lpd_err[-1] < 1e-7  # ... and a high one agrees with quad


def test_gauss_hermite_underestimates_exp_and_converges_from_above_for_poisson():
    """GH error for E[g] is -g^(2n)(xi) n! / (2n)! < 0 when every derivative of g is positive.

    For ``g = exp(f)`` GH underestimates ``E[exp f]``, so the generic Poisson expectation
    ``E[y f - binsize exp f]`` lies above the closed form and decreases to it as the order grows.
    """
    y, mean, var = 4.0, 0.5, 4.0
    closed = float(POISSON.variational_expectation(y, mean, var))
    gh = [float(Likelihood.variational_expectation(generic(POISSON, q), y, mean, var)) for q in (2, 4, 6, 8, 12)]
    assert all(v > closed for v in gh), (gh, closed)
    assert all(b < a for a, b in zip(gh, gh[1:], strict=False)), gh
    np.testing.assert_allclose(gh[-1], closed, rtol=1e-6)


def test_quadrature_order_is_validated_and_configurable():
    assert StudentT(quadrature_order=7).quadrature_order == 7
    assert likelihood_from_name("logit", quadrature_order=3).quadrature_order == 3
    with pytest.raises(ValueError, match="quadrature_order"):
        Bernoulli(quadrature_order=0)
    with pytest.raises(TypeError):
        Bernoulli(quadrature_order=2.5)


# ------------------------------------------------------------------------- backends


def all_outputs(lik: Likelihood, y, mean, var):
    return [
        lik.log_prob(y, mean),
        lik.variational_expectation(y, mean, var),
        lik.log_predictive_density(y, mean, var),
        *lik.predict_mean_and_var(mean, var),
    ]


def data_for(name: str, rng):
    mean = rng.normal(size=6)
    var = rng.uniform(0.1, 3.0, size=6)
    y = {
        "gaussian": rng.normal(size=6),
        "probit": rng.integers(0, 2, size=6).astype(float),
        "logit": rng.integers(0, 2, size=6).astype(float),
        "poisson": rng.poisson(2.0, size=6).astype(float),
        "studentt": rng.standard_t(3.0, size=6),
        "gamma": rng.gamma(2.5, size=6),
        "exponential": rng.exponential(size=6),
        "beta": rng.uniform(0.05, 0.95, size=6),
    }[name]
    return y, mean, var


@pytest.mark.parametrize("name", list(ALL))
def test_same_numbers_on_numpy_jax_and_torch(name):
    lik = ALL[name]
    y, mean, var = data_for(name, np.random.default_rng(1))
    expected = all_outputs(lik, y, mean, var)
    on_jax = jax.jit(lambda *a: all_outputs(lik, *a))  # compiled once: eager log_ndtr is slow
    on_torch = [torch.asarray(a, dtype=torch.float64) for a in (y, mean, var)]
    for got, array_type in [
        (on_jax(*(jnp.asarray(a) for a in (y, mean, var))), jax.Array),
        (all_outputs(lik, *on_torch), torch.Tensor),
    ]:
        for g, e in zip(got, expected, strict=True):
            assert isinstance(g, array_type)
            np.testing.assert_allclose(np.asarray(g), e, rtol=1e-12, atol=1e-14)
    # numpy labels with float32 jax latents: computed in jax, in float32
    float32 = jax.jit(lambda m, v: all_outputs(lik, y, m, v))(
        jnp.asarray(mean, jnp.float32), jnp.asarray(var, jnp.float32)
    )
    for g, e in zip(float32, expected, strict=True):
        assert g.dtype == jnp.float32
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(ALL))
def test_jax_gradients_wrt_mean_and_var_are_finite_and_match_finite_differences(name):
    lik = ALL[name]
    y, mean, var = data_for(name, np.random.default_rng(2))

    def total(m, v):
        pm, pv = lik.predict_mean_and_var(m, v)
        ve, lpd = lik.variational_expectation(y, m, v), lik.log_predictive_density(y, m, v)
        return jnp.sum(ve + lpd + pm + pv)

    gm, gv = jax.jit(jax.grad(total, argnums=(0, 1)))(jnp.asarray(mean), jnp.asarray(var))
    assert np.all(np.isfinite(gm)) and np.all(np.isfinite(gv))
    h = 1e-6
    for k in range(6):
        e = np.zeros(6)
        e[k] = h
        fd_m = (total(mean + e, var) - total(mean - e, var)) / (2 * h)
        fd_v = (total(mean, var + e) - total(mean, var - e)) / (2 * h)
        np.testing.assert_allclose(gm[k], fd_m, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(gv[k], fd_v, rtol=1e-6, atol=1e-8)


def test_closed_form_gradients():
    y, mean, var = 1.3, 0.4, 0.7
    gm, gv = jax.jit(jax.grad(GAUSS.variational_expectation, argnums=(1, 2)))(y, mean, var)
    np.testing.assert_allclose([gm, gv], [(y - mean) / 0.3, -0.5 / 0.3], rtol=1e-12)
    gm, gv = jax.jit(jax.grad(POISSON.variational_expectation, argnums=(1, 2)))(y, mean, var)
    rate = 0.5 * np.exp(mean + var / 2)
    np.testing.assert_allclose([gm, gv], [y - rate, -rate / 2], rtol=1e-12)


# ------------------------------------------------------------------- hyperparameters


def test_parameters_and_with_parameters():
    assert GAUSS.parameters() == {"variance": 0.3}
    assert STUDENT.parameters() == {"scale": 1.0}
    assert PROBIT.parameters() == {} and POISSON.parameters() == {}
    assert GAMMA.parameters() == {"shape": 2.5} and BETA.parameters() == {"scale": 4.0}
    assert EXPONENTIAL.parameters() == {} and EXPONENTIAL.shape == 1.0
    with pytest.raises(TypeError):
        Exponential(shape=2.0)  # the Exponential is the Gamma of shape 1, not a Gamma of another shape
    with pytest.raises(ValueError, match="positive"):
        Gamma(shape=0.0)
    new = STUDENT.with_parameters({"scale": 2.0})
    assert isinstance(new, StudentT) and new.scale == 2.0 and new.df == 3.0 and STUDENT.scale == 1.0
    with pytest.raises(ValueError, match="df"):
        STUDENT.with_parameters({"df": 5.0})
    with pytest.raises(ValueError, match="binsize"):
        POISSON.with_parameters({"binsize": 2.0})
    with pytest.raises(dataclasses.FrozenInstanceError):
        GAUSS.variance = 1.0


def test_positivity_is_validated_for_concrete_values_only():
    for bad in (
        lambda: Gaussian(variance=-1.0),
        lambda: Gaussian(variance=np.array([0.5, 0.0])),
        lambda: StudentT(scale=0.0),
        lambda: StudentT(df=-2.0),
        lambda: Poisson(binsize=np.nan),
        lambda: GAUSS.with_parameters({"variance": -0.1}),
    ):
        with pytest.raises(ValueError, match="positive"):
            bad()
    # a concrete jax array is inspected like a numpy one (issue 20: it used to pass unchecked)
    with pytest.raises(ValueError, match="positive"):
        Gaussian(variance=jnp.asarray(-1.0))
    # a traced value has no entries to inspect, and torch tensors are not read (no device sync)
    assert float(jax.jit(lambda v: Gaussian(variance=v).variance)(-1.0)) == -1.0
    assert float(Gaussian(variance=torch.asarray(-1.0)).variance) == -1.0


def test_hyperparameters_as_traced_jax_values():
    y, mean, var = jnp.array([0.3, -1.0]), jnp.array([0.1, 0.5]), jnp.array([0.4, 2.0])

    @jax.jit
    def elbo_term(log_scale):
        lik = STUDENT.with_parameters({"scale": jnp.exp(log_scale)})
        return jnp.sum(lik.variational_expectation(y, mean, var))

    eager = np.sum(StudentT(df=3.0, scale=np.exp(0.2)).variational_expectation(*map(np.asarray, (y, mean, var))))
    np.testing.assert_allclose(elbo_term(0.2), eager, rtol=1e-12)
    g = jax.grad(elbo_term)(0.2)
    fd = (elbo_term(0.2 + 1e-6) - elbo_term(0.2 - 1e-6)) / 2e-6
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_per_output_numpy_hyperparameters_broadcast():
    lik = Gaussian(variance=np.array([0.1, 1.0]))
    got = lik.variational_expectation(jnp.zeros((3, 1)), jnp.zeros((3, 1)), jnp.ones((3, 1)))
    assert got.shape == (3, 2)
    np.testing.assert_allclose(got[0], -0.5 * np.log(2 * np.pi * lik.variance) - 0.5 / lik.variance)


def test_torch_hyperparameter_gradient():
    s2 = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    y, mean, var = 1.3, torch.tensor(0.4, dtype=torch.float64), torch.tensor(0.7, dtype=torch.float64)
    GAUSS.with_parameters({"variance": s2}).variational_expectation(y, mean, var).backward()
    expected = -0.5 / 0.3 + ((1.3 - 0.4) ** 2 + 0.7) / (2 * 0.3**2)
    np.testing.assert_allclose(s2.grad.item(), expected, rtol=1e-12)


def test_broadcasting_of_quadrature_and_closed_forms():
    y = np.array([[0.0], [1.0], [3.0]])
    mean, var = np.linspace(-1.0, 1.0, 4), 0.5
    for lik in ALL.values():
        for out in all_outputs(lik, y, mean, var)[:3]:
            assert out.shape == (3, 4)


# ----------------------------------------------------------------------------- factory


def test_likelihood_from_name():
    assert isinstance(likelihood_from_name("gaussian", variance=0.2), Gaussian)
    assert likelihood_from_name("Bernoulli").link == "probit"
    assert likelihood_from_name("bernoulli", link="logit").link == "logit"
    assert likelihood_from_name("probit").link == "probit"
    assert likelihood_from_name("logit").link == "logit"
    assert likelihood_from_name("poisson", binsize=0.1).binsize == 0.1
    assert likelihood_from_name("studentt", df=4.0).df == 4.0
    assert isinstance(likelihood_from_name("exponential"), Exponential)
    assert likelihood_from_name("gamma", shape=3.0).shape == 3.0
    assert likelihood_from_name("beta", scale=2.0).scale == 2.0
    with pytest.raises(ValueError, match="gaussian, bernoulli, probit, logit, poisson, studentt"):
        likelihood_from_name("laplace")
    with pytest.raises(ValueError, match="cloglog"):
        Bernoulli(link="cloglog")
