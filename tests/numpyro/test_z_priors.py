"""Priors over inducing inputs Z [M, D] (BSGP Eqs. 7-9) and their samplers, against mathematical oracles."""

import itertools
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
import scipy.stats
from numpyro.infer.util import initialize_model, potential_energy

from ppl_sparsegp.core import kernels, ops
from ppl_sparsegp.inducing import samplers
from ppl_sparsegp.numpyro import z_priors as zp


def rbf_numpy(X, variance, lengthscale):
    """Independent oracle for the RBF Gram matrix [N, N]."""
    A = np.asarray(X) / np.asarray(lengthscale)
    r2 = np.sum((A[:, None, :] - A[None, :, :]) ** 2, axis=-1)
    return variance * np.exp(-0.5 * r2)


def brute_force_pair_count(Z, radius):
    Z = np.asarray(Z)
    return sum(
        1 for i in range(len(Z)) for j in range(len(Z)) if i < j and np.sqrt(np.sum((Z[i] - Z[j]) ** 2)) <= radius
    )


def pair_counts_numpy(Z, prior):
    """S_R (hard or smooth, as configured in ``prior``) for Z [..., M, D], vectorised, in numpy."""
    d = np.sqrt(np.sum((Z[..., :, None, :] - Z[..., None, :, :]) ** 2, axis=-1))
    i, j = np.triu_indices(Z.shape[-2], k=1)
    return samplers._strauss_terms(d[..., i, j], prior).sum(axis=-1)


GRID_Z = np.array([[x, y] for x in (-1.5, 0.0, 1.5) for y in (-1.0, 1.0)])  # [6, 2], well separated


# --------------------------------------------------------------------------------------------------
# Normal
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 1.7])
def test_normal_log_prob_matches_scipy(rng, scale):
    prior = zp.NormalZPrior(4, 3, scale=scale)
    Z = rng.normal(size=(2, 4, 3))
    expected = scipy.stats.norm.logpdf(Z, scale=scale).sum(axis=(-2, -1))
    np.testing.assert_allclose(prior.log_prob(Z), expected, rtol=1e-12)
    np.testing.assert_allclose(prior.log_prob(Z[0]), expected[0], rtol=1e-12)
    np.testing.assert_allclose(jax.grad(prior.log_prob)(Z[0]), -Z[0] / scale**2, rtol=1e-12)


def test_normal_sample_moments():
    prior = zp.NormalZPrior(5, 3, scale=2.0)
    Z = np.asarray(prior.sample(jax.random.key(0), (4000,)))
    assert Z.shape == (4000, 5, 3)
    n = Z.size
    assert abs(Z.mean()) < 4 * 2.0 / math.sqrt(n)
    assert abs(Z.var() - 4.0) < 4 * 4.0 * math.sqrt(2.0 / n)


# --------------------------------------------------------------------------------------------------
# DPP
# --------------------------------------------------------------------------------------------------


def test_dpp_log_prob_matches_slogdet():
    variance, lengthscale = 1.3, np.array([0.7, 1.1])
    prior = zp.DeterminantalZPrior(kernels.RBF(variance=variance, lengthscale=lengthscale), 6, 2)
    sign, expected = np.linalg.slogdet(rbf_numpy(GRID_Z, variance, lengthscale))
    assert sign > 0
    np.testing.assert_allclose(prior.log_prob(GRID_Z), expected, rtol=1e-6)
    batch = np.stack([GRID_Z, GRID_Z[::-1]])  # a permutation leaves det K_zz unchanged
    np.testing.assert_allclose(prior.log_prob(batch), [expected, expected], rtol=1e-6)


def test_dpp_gradients_finite_and_match_finite_differences():
    def log_prob(Z, lengthscale, variance=0.8):
        kernel = kernels.RBF(variance=variance, lengthscale=lengthscale)
        return zp.DeterminantalZPrior(kernel, 6, 2).log_prob(Z)

    Z, ell, h = jnp.asarray(GRID_Z), jnp.asarray(0.9), 1e-5
    g_Z, g_ell = jax.jit(jax.grad(log_prob, argnums=(0, 1)))(Z, ell)
    assert np.all(np.isfinite(g_Z)) and np.isfinite(g_ell)

    def oracle(lengthscale):
        return np.linalg.slogdet(rbf_numpy(GRID_Z, 0.8, lengthscale))[1]

    np.testing.assert_allclose(g_ell, (oracle(0.9 + h) - oracle(0.9 - h)) / (2 * h), rtol=1e-5)
    step = np.zeros_like(GRID_Z)
    step[2, 1] = h
    fd = (
        np.linalg.slogdet(rbf_numpy(GRID_Z + step, 0.8, 0.9))[1]
        - np.linalg.slogdet(rbf_numpy(GRID_Z - step, 0.8, 0.9))[1]
    ) / (2 * h)
    np.testing.assert_allclose(g_Z[2, 1], fd, rtol=1e-5)


def test_dpp_coincident_points_use_the_jitter_and_nan_raises():
    prior = zp.DeterminantalZPrior(kernels.RBF(lengthscale=0.7), 6, 2)
    Z = GRID_Z.copy()
    Z[1] = Z[0]
    assert np.isfinite(prior.log_prob(Z))
    Z[0, 0] = np.nan
    with warnings.catch_warnings(), pytest.raises(ops.CholeskyError, match="DPP"):
        warnings.simplefilter("ignore", ops.JitterWarning)
        prior.log_prob(Z)


def test_dpp_has_no_continuous_sampler():
    prior = zp.DeterminantalZPrior(kernels.RBF(), 3, 1)
    with pytest.raises(NotImplementedError, match="sample_from_candidates"):
        prior.sample(jax.random.key(0))


def test_k_dpp_subset_frequencies_match_enumeration():
    candidates = np.array([[0.0], [0.15], [0.4], [0.5], [0.9], [1.6]])
    kernel = kernels.RBF(variance=1.0, lengthscale=0.35)
    k, n_draws = 3, 4000
    K = rbf_numpy(candidates, 1.0, 0.35)
    subsets = list(itertools.combinations(range(len(candidates)), k))
    dets = np.array([np.linalg.det(K[np.ix_(s, s)]) for s in subsets])
    expected = dets / dets.sum()

    draws = samplers.sample_k_dpp(np.random.default_rng(1), candidates, kernel, k, num_samples=n_draws)
    assert draws.shape == (n_draws, k)
    index = {s: i for i, s in enumerate(subsets)}
    observed = np.bincount([index[tuple(row)] for row in draws], minlength=len(subsets)) / n_draws
    assert np.max(np.abs(observed - expected)) < 0.02
    chi2 = n_draws * np.sum((observed - expected) ** 2 / expected)
    assert chi2 < scipy.stats.chi2.ppf(0.999, df=len(subsets) - 1)


def test_k_dpp_key_and_candidates():
    candidates = np.random.default_rng(0).normal(size=(8, 2))
    prior = zp.DeterminantalZPrior(kernels.RBF(lengthscale=0.5), 3, 2)
    first = samplers.sample_k_dpp(jax.random.key(3), candidates, prior.kernel, 3)
    again = samplers.sample_k_dpp(jax.random.key(3), candidates, prior.kernel, 3)
    np.testing.assert_array_equal(first, again)
    assert len(set(first.tolist())) == 3
    Z = prior.sample_from_candidates(jax.random.key(3), candidates)
    np.testing.assert_array_equal(Z, candidates[first])
    with pytest.raises(ValueError, match="candidates"):
        prior.sample_from_candidates(jax.random.key(3), candidates[:, :1])
    with pytest.raises(ValueError, match="k must be at most"):
        samplers.sample_k_dpp(jax.random.key(0), candidates, prior.kernel, 9)
    with pytest.raises(ValueError, match="rank"):
        samplers.sample_k_dpp(jax.random.key(0), np.array([[0.0], [0.0], [1.0]]), prior.kernel, 3)
    with pytest.raises(ValueError, match="key_or_rng"):
        samplers.sample_k_dpp("seed", candidates, prior.kernel, 2)


# --------------------------------------------------------------------------------------------------
# Strauss
# --------------------------------------------------------------------------------------------------


def test_strauss_hard_count_matches_brute_force(rng):
    Z = rng.uniform(-1.0, 1.0, size=(12, 2))
    Z[5] = Z[3]  # coincident points count as a pair
    prior = zp.StraussZPrior(12, 2, beta=2.0, gamma=0.3, radius=0.5)
    count = brute_force_pair_count(Z, 0.5)
    assert 5 < count < 60
    assert float(prior.pair_count(Z)) == count
    np.testing.assert_allclose(prior.log_prob(Z), 12 * math.log(2.0) + count * math.log(0.3), rtol=1e-12)
    np.testing.assert_allclose(prior.log_prob(np.stack([Z, Z[:, ::-1]])), [prior.log_prob(Z)] * 2, rtol=1e-12)


def test_strauss_hard_gradient_is_zero_and_smooth_is_not(rng):
    Z = rng.uniform(-1.0, 1.0, size=(12, 2))
    Z[1] = Z[0]
    hard = zp.StraussZPrior(12, 2)
    smooth = zp.StraussZPrior(12, 2, smoothness=0.1)
    g_hard = jax.grad(hard.log_prob)(Z)
    g_smooth = jax.grad(smooth.log_prob)(Z)
    assert np.all(np.asarray(g_hard) == 0.0)
    assert np.all(np.isfinite(g_smooth)) and np.max(np.abs(g_smooth)) > 1e-3


def test_strauss_smooth_count_tends_to_hard_count(rng):
    Z = rng.uniform(-1.0, 1.0, size=(12, 2))
    d = np.sqrt(np.sum((Z[:, None] - Z[None]) ** 2, axis=-1))
    assert np.min(np.abs(d[np.triu_indices(12, 1)] - 0.5)) > 1e-3  # no pair sits on the radius
    hard = brute_force_pair_count(Z, 0.5)
    errors = [abs(float(zp.StraussZPrior(12, 2, smoothness=s).pair_count(Z)) - hard) for s in (1e-1, 1e-2, 1e-6)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-10


def strauss_chain_mean(prior, window, seed, num_draws=1000, thin=20, burn_in=2000):
    """Mean pair count over a thinned MH chain, with a batch-means standard error."""
    rng = np.random.default_rng(seed)
    Z = samplers.sample_strauss(rng, prior, window, burn_in)
    counts = []
    for _ in range(num_draws):
        Z = samplers.sample_strauss(rng, prior, window, thin, init=Z)
        assert np.all((Z >= window[0]) & (Z <= window[1]))
        counts.append(pair_counts_numpy(Z, prior))
    batches = np.asarray(counts).reshape(25, -1).mean(axis=1)
    return batches.mean(), batches.std(ddof=1) / math.sqrt(len(batches))


@pytest.mark.parametrize(("gamma", "smoothness"), [(0.5, None), (1.0, None), (0.3, 0.02)])
def test_strauss_sampler_pair_statistic_matches_importance_weighting(gamma, smoothness):
    M, D, radius = 10, 2, 0.2
    prior = zp.StraussZPrior(M, D, gamma=gamma, radius=radius, smoothness=smoothness)
    window = (np.zeros(D), np.ones(D))
    uniform = np.random.default_rng(7).random((50_000, M, D))
    S = pair_counts_numpy(uniform, prior)
    weights = np.exp(math.log(gamma) * (S - S.min()))  # p(Z) / uniform(Z), up to a constant
    expected = np.sum(weights * S) / np.sum(weights)  # E_strauss[S] = E_unif[S gamma^S] / E_unif[gamma^S]
    if gamma == 1.0:
        assert expected == pytest.approx(S.mean())
    else:
        assert S.mean() - expected > 1.5  # the repulsion is visible against the tolerance below

    mean, stderr = strauss_chain_mean(prior, window, seed=0)
    assert stderr < 0.1
    assert abs(mean - expected) < 4 * stderr + 0.03


def test_strauss_sampler_arguments():
    prior = zp.StraussZPrior(4, 2)
    window = (np.zeros(2), np.ones(2))
    with pytest.raises(NotImplementedError, match="window"):
        prior.sample(jax.random.key(0))
    Z = samplers.sample_strauss(jax.random.key(0), prior, window, 100)
    np.testing.assert_array_equal(Z, samplers.sample_strauss(jax.random.key(0), prior, window, 100))
    np.testing.assert_array_equal(samplers.sample_strauss(jax.random.key(0), prior, window, 0, init=Z), Z)
    with pytest.raises(ValueError, match="window"):
        samplers.sample_strauss(jax.random.key(0), prior, (np.ones(2), np.zeros(2)), 10)
    with pytest.raises(ValueError, match="window"):
        samplers.sample_strauss(jax.random.key(0), prior, (np.zeros(3), np.ones(3)), 10)
    with pytest.raises(ValueError, match="init"):
        samplers.sample_strauss(jax.random.key(0), prior, window, 10, init=Z + 2.0)
    with pytest.raises(ValueError, match="num_steps"):
        samplers.sample_strauss(jax.random.key(0), prior, window, -1)


# --------------------------------------------------------------------------------------------------
# Uniform, factory, shapes, dtypes
# --------------------------------------------------------------------------------------------------


def test_uniform_is_flat_and_improper(rng):
    prior = zp.UniformZPrior(3, 2)
    Z = rng.normal(size=(3, 2))
    value = prior.log_prob(Z)
    assert value.shape == () and value.dtype == jnp.float64 and float(value) == 0.0
    assert prior.log_prob(np.stack([Z, Z])).shape == (2,)
    np.testing.assert_array_equal(jax.grad(prior.log_prob)(Z), np.zeros_like(Z))
    with pytest.raises(NotImplementedError, match="improper"):
        prior.sample(jax.random.key(0))


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("normal", zp.NormalZPrior),
        ("dpp", zp.DeterminantalZPrior),
        ("Strauss", zp.StraussZPrior),
        ("uniform", zp.UniformZPrior),
    ],
)
def test_factory_names(name, cls):
    prior = zp.z_prior(name, 5, 2, kernel=kernels.RBF())
    assert type(prior) is cls
    assert prior.event_shape == (5, 2) and prior.batch_shape == ()
    assert prior.support == dist.constraints.independent(dist.constraints.real, 2)
    assert tuple(zp.Z_PRIORS) == ("normal", "dpp", "strauss", "uniform")


def test_factory_options_reach_the_prior():
    prior = zp.z_prior("strauss", 5, 2, beta=3.0, gamma=0.2, radius=0.7, smoothness=0.05)
    assert (prior.beta, prior.gamma, prior.radius, prior.smoothness) == (3.0, 0.2, 0.7, 0.05)
    assert zp.z_prior("normal", 5, 2, scale=0.5).scale == 0.5


@pytest.mark.parametrize(
    ("args", "options", "match"),
    [
        (("gaussian", 5, 2), {}, "name"),
        (("dpp", 5, 2), {}, "kernel"),
        (("normal", 0, 2), {}, "num_inducing"),
        (("normal", 5, -1), {}, "input_dim"),
        (("normal", 2.5, 2), {}, "num_inducing"),
        (("normal", 5, 2), {"scale": 0.0}, "scale"),
        (("strauss", 5, 2), {"gamma": 1.5}, "gamma"),
        (("strauss", 5, 2), {"gamma": 0.0}, "gamma"),
        (("strauss", 5, 2), {"beta": -1.0}, "beta"),
        (("strauss", 5, 2), {"radius": 0.0}, "radius"),
        (("strauss", 5, 2), {"smoothness": -0.1}, "smoothness"),
        (("strauss", 5, 2), {"scale": 1.0}, "scale"),
        (("uniform", 5, 2), {"gamma": 0.5}, "gamma"),
    ],
)
def test_factory_rejects_bad_arguments(args, options, match):
    with pytest.raises(ValueError, match=match):
        zp.z_prior(*args, **options)


ALL_PRIORS = [
    zp.NormalZPrior(6, 2),
    zp.DeterminantalZPrior(kernels.RBF(lengthscale=0.7), 6, 2),
    zp.StraussZPrior(6, 2),
    zp.StraussZPrior(6, 2, smoothness=0.1),
    zp.UniformZPrior(6, 2),
]


@pytest.mark.parametrize("prior", ALL_PRIORS, ids=lambda p: type(p).__name__)
def test_log_prob_rejects_wrong_shape(prior):
    with pytest.raises(ValueError, match="Z must have shape"):
        prior.log_prob(np.zeros((6, 3)))
    with pytest.raises(ValueError, match="Z must have shape"):
        prior.log_prob(np.zeros(6))


@pytest.mark.parametrize("prior", ALL_PRIORS, ids=lambda p: type(p).__name__)
def test_float32_and_pytree_round_trip(prior):
    Z = GRID_Z.astype(np.float32)
    value = prior.log_prob(Z)
    assert value.dtype == jnp.float32 and np.isfinite(value)
    leaves, treedef = jax.tree_util.tree_flatten(prior)
    np.testing.assert_allclose(jax.tree_util.tree_unflatten(treedef, leaves).log_prob(Z), value)


@pytest.mark.parametrize("prior", ALL_PRIORS, ids=lambda p: type(p).__name__)
def test_potential_energy_is_minus_log_prob(prior):
    def model():
        numpyro.sample("Z", prior)

    Z = GRID_Z * 0.3  # Strauss pairs within R = 0.5 included
    np.testing.assert_allclose(potential_energy(model, (), {}, {"Z": Z}), -prior.log_prob(Z), rtol=1e-12)


def test_initialize_model_does_not_sample_an_improper_prior():
    prior = zp.UniformZPrior(6, 2)

    def model():
        numpyro.sample("Z", prior)

    info = initialize_model(jax.random.key(0), model)
    z_init = info.param_info.z
    assert z_init["Z"].shape == (6, 2)
    np.testing.assert_allclose(info.potential_fn(z_init), -prior.log_prob(z_init["Z"]), rtol=1e-12)


def test_dpp_inside_a_model_with_sampled_lengthscale():
    def model():
        lengthscale = numpyro.sample("lengthscale", dist.LogNormal(0.0, 1.0))
        numpyro.sample("Z", zp.z_prior("dpp", 6, 2, kernel=kernels.RBF(variance=1.0, lengthscale=lengthscale)))

    # the potential takes unconstrained values (log lengthscale), hence the Jacobian term log(0.8)
    params = {"lengthscale": jnp.log(0.8), "Z": jnp.asarray(GRID_Z)}
    expected = -(
        scipy.stats.lognorm.logpdf(0.8, s=1.0) + np.log(0.8) + np.linalg.slogdet(rbf_numpy(GRID_Z, 1.0, 0.8))[1]
    )
    np.testing.assert_allclose(potential_energy(model, (), {}, params), expected, rtol=1e-6)
