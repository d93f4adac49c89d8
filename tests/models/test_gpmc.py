"""GPMC (thesis ch. 5-6): its density written out, the exact-GP posterior for a Gaussian likelihood, ArviZ's
pointwise log-likelihood, and the model's checks."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer import NUTS
from numpyro.infer.util import log_density
from scipy import stats

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.infer.mcmc import run_mcmc
from ppl_sparsegp.models.numpyro.gpmc import GPMC
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.sgpmc import default_priors
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.posterior.predict import posterior_predictive

ALL_FIXED = ("kernel.variance", "kernel.lengthscale", "likelihood.variance")


def _data(rng, N=15):
    X = np.sort(rng.uniform(-3, 3, (N, 1)), axis=0)
    return X, np.sin(1.5 * X[:, 0]) + 0.2 * rng.standard_normal(N)


def test_density_is_the_prior_of_theta_and_v_and_the_exact_log_likelihood(rng):
    """log p(θ) + log N(v | 0, I) + Σ_n log p(y_n | f_n) with f = L_θ v (digest §3.8), here Poisson counts."""
    X, y = _data(rng)
    counts = np.round(np.exp(y))
    kernel = kernels.RBF(variance=1.0, lengthscale=1.0)
    priors = default_priors(kernel, likelihoods.Poisson())
    gp = GPMC(kernel, likelihoods.Poisson(), priors=priors)
    v, theta = rng.standard_normal((1, len(X))), {"kernel.variance": 0.7, "kernel.lengthscale": 1.4}
    logp, _ = log_density(gp.model, (X, counts), {}, {"v": v, **theta})
    K = kernels.RBF(variance=0.7, lengthscale=1.4)(X)
    f = np.linalg.cholesky(K + 1e-8 * np.mean(np.diag(K)) * np.eye(len(X))) @ v[0]
    expected = (
        sum(stats.gamma(1.1, scale=1.0).logpdf(value) for value in theta.values())
        + stats.norm.logpdf(v).sum()
        + stats.poisson(np.exp(f)).logpmf(counts).sum()
    )
    np.testing.assert_allclose(logp, expected, rtol=1e-9)
    np.testing.assert_allclose(gp.pointwise_log_likelihood({"v": v, **theta}, X, counts),
                               stats.poisson(np.exp(f)).logpmf(counts), rtol=1e-9)  # fmt: skip


@pytest.mark.slow  # about 15 s (two NUTS chains); `make test-slow` runs it in CI
def test_gaussian_gpmc_samples_the_exact_gp_posterior_and_predicts_it(rng):
    """With the hyperparameters fixed and a Gaussian likelihood the target is the exact posterior: the mixture over
    the draws predicts what GPR does, at the training inputs and between them."""
    X, y = _data(rng)
    kernel, lik = kernels.RBF(variance=1.0, lengthscale=1.0), likelihoods.Gaussian(variance=0.04)
    gp = GPMC(kernel, lik, fixed=ALL_FIXED)
    res = run_mcmc(NUTS(gp.model), jnp.asarray(X), jnp.asarray(y), num_warmup=300, num_samples=600, num_chains=2,
                   key=jax.random.PRNGKey(0), progress=False)  # fmt: skip
    assert res.extra_fields["diverging"].sum() == 0
    Xs = np.linspace(-3.5, 3.5, 9)[:, None]
    got = posterior_predictive(gp, res.flat_samples(), Xs, X=X, y=y)
    mean, var = GPR(kernel, lik).predict_f({}, Xs, X=X, y=y)
    sd = np.sqrt(np.asarray(var))
    np.testing.assert_array_less(np.abs(got.f_mean - mean), 0.25 * sd)  # 1200 draws, ESS in the hundreds
    np.testing.assert_allclose(got.f_var, var, rtol=0.2)
    idata = diagnostics.from_mcmc(res, gp, X, y, posterior_predictive=False)
    assert idata["log_likelihood"]["y"].shape == (2, 600, len(X))


def test_checks_name_the_argument(rng):
    X, y = _data(rng)
    kernel, lik = kernels.RBF(), likelihoods.Gaussian(0.1)
    with pytest.raises(ValueError, match="priors: GPMC samples its hyperparameters"):
        GPMC(kernel, lik, fixed=("kernel.variance",))
    with pytest.raises(ValueError, match="num_latent"):
        GPMC(kernel, lik, fixed=ALL_FIXED, num_latent=0)
    with pytest.raises(ValueError, match="GPMC takes an elementwise likelihood"):
        GPMC(kernel, likelihoods.RobustMax(3), priors={"kernel.variance": dist.Gamma(2.0, 1.0)},
             fixed=("kernel.lengthscale",), num_latent=3)  # fmt: skip
    with pytest.raises(ValueError, match="X and y"):
        GPMC(kernel, lik, fixed=ALL_FIXED).predict_f({"v": np.zeros((1, len(X)))}, X)
    with pytest.raises(NotImplementedError, match="VGP"):
        GPMC(kernel, lik, fixed=ALL_FIXED).guide(X, y)
