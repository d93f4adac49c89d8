"""Python values among a model's arguments (a plate size, a prior scale, an option string) reach the model as they
are in every engine: the compiled programs hold them as constants and take only the arrays as arguments."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from numpyro.infer import NUTS
from numpyro.infer.autoguide import AutoNormal

from ppl_sparsegp.infer.hot_path import split_static
from ppl_sparsegp.infer.mcmc import init_from_svi, run_mcmc
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.posterior.predict import guide_draws


def _with_options(y, n, prior_scale=1.0, family="normal"):
    """A plate of Python size ``n`` (``numpyro.plate`` refuses a traced size), a Python float and a string option."""
    mu = numpyro.sample("mu", dist.Normal(0.0, prior_scale))
    with numpyro.plate("data", n):
        likelihood = dist.Normal(mu, 0.5) if family == "normal" else dist.StudentT(4.0, mu, 0.5)
        numpyro.sample("y", likelihood, obs=y)


def _fixed(y):
    """The same model with the options of the calls below written in."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 3.0))
    with numpyro.plate("data", 30):
        numpyro.sample("y", dist.StudentT(4.0, mu, 0.5), obs=y)


OPTIONS = {"n": 30, "prior_scale": 3.0, "family": "student"}


@pytest.fixture(scope="module")
def y():
    return jnp.asarray(np.random.default_rng(0).normal(1.5, 0.5, 30))


def test_split_static_keeps_arrays_as_arguments_and_gives_the_rest_back():
    X, y = np.ones((3, 2)), jnp.zeros(3)
    (args, kwargs), static = split_static((X, 5), {"y": y, "family": "student", "scale": np.float64(2.0)})
    assert args[0] is X and args[1] is None and kwargs["y"] is y and kwargs["family"] is None
    assert kwargs["scale"] == 2.0  # a numpy scalar is an array
    full_args, full_kwargs = static.full((args, kwargs))
    assert full_args == (X, 5) and full_kwargs == {"y": y, "family": "student", "scale": 2.0}


def test_nuts_with_python_options_draws_what_the_model_with_them_written_in_draws(y):
    settings = dict(num_warmup=100, num_samples=100, key=jax.random.PRNGKey(3), num_chains=2)
    with_options = run_mcmc(NUTS(_with_options), y, **OPTIONS, **settings)
    fixed = run_mcmc(NUTS(_fixed), y, **settings)
    np.testing.assert_allclose(with_options.samples["mu"], fixed.samples["mu"], rtol=1e-6)
    other = run_mcmc(NUTS(_with_options), y, **{**OPTIONS, "family": "normal"}, **settings)
    assert not np.allclose(other.samples["mu"], fixed.samples["mu"])  # the option is read, not a stale constant


def test_sequential_chains_and_a_positional_python_value(y):
    settings = dict(num_warmup=50, num_samples=50, key=jax.random.PRNGKey(4), num_chains=2, chain_method="sequential")
    positional = run_mcmc(NUTS(_with_options), y, 30, 3.0, "student", **settings)
    fixed = run_mcmc(NUTS(_fixed), y, **settings)
    np.testing.assert_allclose(positional.samples["mu"], fixed.samples["mu"], rtol=1e-6)


def test_svi_init_from_svi_and_guide_draws_take_python_options(y):
    settings = dict(num_steps=200, optimizer=optax.adam(0.05), key=jax.random.PRNGKey(5))
    guide, fixed_guide = AutoNormal(_with_options), AutoNormal(_fixed)
    with_options = fit_svi(_with_options, guide, y, **OPTIONS, **settings)
    fixed = fit_svi(_fixed, fixed_guide, y, **settings)
    np.testing.assert_allclose(with_options.losses, fixed.losses, rtol=1e-6)
    for name, value in fixed.params.items():
        np.testing.assert_allclose(with_options.params[name], value, rtol=1e-6)

    key = jax.random.PRNGKey(6)
    starts = init_from_svi(_with_options, guide, with_options.params, y, **OPTIONS, key=key, num_chains=3)
    fixed_starts = init_from_svi(_fixed, fixed_guide, fixed.params, y, key=key, num_chains=3)
    np.testing.assert_allclose(starts["mu"], fixed_starts["mu"], rtol=1e-6)
    draws = guide_draws(guide, with_options.params, 500, y, **OPTIONS, key=key)
    fixed_draws = guide_draws(fixed_guide, fixed.params, 500, y, key=key)
    np.testing.assert_allclose(draws["mu"], fixed_draws["mu"], rtol=1e-6)
