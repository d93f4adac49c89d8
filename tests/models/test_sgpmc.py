"""SGPMC (thesis ch. 5): the exact-GP oracle at Z = X, NUTS health on classification, and the model's checks."""

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer import NUTS

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Bernoulli, Gaussian
from ppl_sparsegp.infer.mcmc import run_mcmc
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.recipes.sgpmc import fit_sgpmc

ALL_FIXED = ["kernel.lengthscale", "kernel.variance", "likelihood.variance"]


@pytest.mark.slow
def test_gaussian_sgpmc_with_z_equal_x_samples_the_exact_gp_posterior():
    """With Z = X the potentials are the exact likelihood terms (thesis §3.5), so the draws of f(X) = L v follow
    exact GP regression's posterior for the same fixed hyperparameters."""
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(-3, 3, (12, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.3 * rng.standard_normal(12)
    kernel, likelihood = RBF(lengthscale=1.0, variance=1.0), Gaussian(variance=0.09)
    model = SGPMC(kernel=kernel, likelihood=likelihood, Z=X, fixed=ALL_FIXED)
    res = run_mcmc(NUTS(model.model), jnp.asarray(X), jnp.asarray(y), num_warmup=300, num_samples=1000,
                   num_chains=2, key=jax.random.PRNGKey(0))  # fmt: skip
    f = jax.jit(jax.vmap(lambda v: model.predict_f({"u": v}, jnp.asarray(X))[0]))(res.flat_samples()["u"])
    mean, var = GPR(kernel=kernel, likelihood=likelihood).predict_f({}, jnp.asarray(X), X=X, y=y)
    sd = np.sqrt(np.asarray(var))
    # 2000 draws with ESS in the hundreds: mean errors are a few % of the posterior sd, variances within 15 %
    np.testing.assert_array_less(np.abs(np.mean(f, axis=0) - mean), 0.2 * sd)
    np.testing.assert_allclose(np.var(f, axis=0), var, rtol=0.15)
    assert res.extra_fields["diverging"].sum() == 0


@pytest.fixture(scope="module")
def classification_fit():
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, (60, 1))
    y = (np.sin(1.5 * X[:, 0]) + 0.3 * rng.standard_normal(60) > 0).astype(float)
    Z = np.linspace(-3, 3, 6)[:, None]
    fit = fit_sgpmc(X, y, kernel=RBF(lengthscale=1.0, variance=1.0), likelihood=Bernoulli(), Z=Z,
                    key=jax.random.PRNGKey(4), svi_steps=600, fixed_z_steps=100, learning_rate=0.03,
                    num_warmup=400, num_samples=500, num_chains=4)  # fmt: skip
    return X, y, fit


@pytest.mark.slow  # about 60 s (SVI fit and four NUTS chains); `make test-slow` runs it in CI
def test_bernoulli_sgpmc_recipe_runs_four_healthy_chains(classification_fit):
    X, y, fit = classification_fit
    assert fit.mcmc.samples["u"].shape == (4, 500, 1, 6)
    assert fit.mcmc.extra_fields["diverging"].sum() == 0
    idata = diagnostics.from_mcmc(fit.mcmc, fit.model, X, y, posterior_predictive=False)
    rhat = az.rhat(idata)
    assert max(float(rhat[v].max()) for v in rhat.data_vars) < 1.01
    # Z was learnt by the Gaussian fit (after the fixed-Z phase) and is held fixed in SGPMC
    assert not np.allclose(fit.model.Z, np.linspace(-3, 3, 6)[:, None])
    np.testing.assert_array_equal(fit.model.Z, fit.svi.params["Z"])


@pytest.mark.slow  # shares the fixture above
def test_recipe_starts_the_chains_at_the_gaussian_fit(classification_fit):
    """θ starts at its MAP: the chains' hyperparameter draws stay in the region of the SVGP point estimate."""
    _, _, fit = classification_fit
    ell_map = float(fit.svi.params["kernel.lengthscale_map"])
    draws = fit.mcmc.samples["kernel.lengthscale"]
    assert np.quantile(draws, 0.02) < ell_map < np.quantile(draws, 0.98)


def test_default_priors_cover_every_site_with_the_value_shape():
    kernel = RBF(lengthscale=np.ones(3), variance=1.0)
    priors = default_priors(kernel, Gaussian(variance=0.1), family="lognormal")
    assert set(priors) == {"kernel.lengthscale", "kernel.variance", "likelihood.variance"}
    assert priors["kernel.lengthscale"].event_shape == (3,) and priors["kernel.variance"].event_shape == ()
    assert isinstance(default_priors(kernel, Bernoulli())["kernel.variance"], dist.Gamma)
    with pytest.raises(ValueError, match="family"):
        default_priors(kernel, Bernoulli(), family="cauchy")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "no prior for \\['kernel.variance'\\]"),
        ({"whiten": False}, "whiten"),
        ({"learn_Z": True}, "learn_Z"),
    ],
)
def test_sgpmc_rejects_what_the_sampler_cannot_handle(kwargs, match):
    """SGPMC is whitened with Z fixed by construction: it has no ``whiten`` or ``learn_Z`` to set (TypeError)."""
    priors = {"kernel.lengthscale": dist.Gamma(1.1, 1.0)}
    with pytest.raises(TypeError if kwargs else ValueError, match=match):
        SGPMC(kernel=RBF(), likelihood=Bernoulli(), Z=np.zeros((3, 1)), priors=priors, **kwargs)


@pytest.mark.slow
def test_no_svi_steps_samples_from_the_initial_values_and_keeps_the_draws(tmp_path):
    """svi_steps=0 skips the Gaussian fit: the chains start at the initial kernel, likelihood and a draw of q(v), and
    the result (and the checkpoint) hold the draws (the recipe used to fail after sampling, losing them)."""
    rng = np.random.default_rng(5)
    X = rng.uniform(-3, 3, (15, 1))
    y = np.sin(X[:, 0]) + 0.2 * rng.standard_normal(15)
    kernel, likelihood = RBF(lengthscale=1.0, variance=1.0), Gaussian(variance=0.1)
    Z = np.linspace(-3, 3, 4)[:, None]
    fit = fit_sgpmc(X, y, kernel=kernel, likelihood=likelihood, Z=Z, key=jax.random.PRNGKey(0), svi_steps=0,
                    fixed_z_steps=0, num_warmup=20, num_samples=10, checkpoint=str(tmp_path / "mcmc.ckpt"))  # fmt: skip
    assert fit.svi is None and fit.mcmc.samples["u"].shape == (1, 10, 1, 4)
    assert np.all(np.isfinite(fit.mcmc.samples["u"]))
    np.testing.assert_array_equal(fit.model.Z, Z)  # Z stays at its initial value without a fit
    with np.load(tmp_path / "mcmc.ckpt", allow_pickle=False) as stored:
        assert int(stored["draws_done"]) == 10
    with pytest.raises(ValueError, match="svi_steps"):
        fit_sgpmc(X, y, kernel=kernel, likelihood=likelihood, Z=Z, key=jax.random.PRNGKey(0), svi_steps=-1)
