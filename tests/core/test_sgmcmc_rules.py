"""The SG-MCMC update rules of the core (ppl_sparsegp/core/sgmcmc.py) against the papers' formulas written out in
numpy, on numpy, jax and torch; and the Normal Z prior's density against scipy, on all three."""

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from scipy import stats

from ppl_sparsegp.core import point_processes
from ppl_sparsegp.core import sgmcmc as rules

BACKENDS = [(np.asarray, np.asarray), (jnp.asarray, np.asarray), (torch.as_tensor, lambda t: t.numpy())]


@pytest.fixture
def arrays():
    r = np.random.default_rng(0)
    z, m, g, xi = r.normal(size=(4, 3, 2))
    return z, m, g, xi, r.uniform(0.5, 2.0, (3, 2)), r.uniform(-1.0, 1.0, (3, 2)), r.uniform(0.1, 3.0, (3, 2))


@pytest.mark.parametrize("conv, back", BACKENDS)
def test_sgld_and_sghmc_steps(arrays, conv, back):
    z, r, g, xi, *_ = arrays
    eps, c, inv_mass = 0.01, 3.0, 0.5
    np.testing.assert_allclose(back(rules.sgld_step(conv(z), conv(g), conv(xi), eps)), z - eps / 2 * g + 0.1 * xi)
    r_new = r - eps * g - eps * c * inv_mass * r + np.sqrt(2 * eps * c) * xi
    z_new, r_got = rules.sghmc_step(conv(z), conv(r), conv(g), conv(xi), eps, c, inv_mass)
    np.testing.assert_allclose(back(r_got), r_new, rtol=1e-12)
    np.testing.assert_allclose(back(z_new), z + eps * inv_mass * r_new, rtol=1e-12)


@pytest.mark.parametrize("conv, back", BACKENDS)
def test_scale_adapted_step_and_moments(arrays, conv, back):
    z, p, g, xi, tau, g_bar, v_hat = arrays
    eps, alpha = 0.1, 0.05
    h = eps**2 / (np.sqrt(v_hat + 1e-16) + 1e-16)
    p_new = (1 - alpha) * p - h * g + np.sqrt(2 * alpha * h) * xi
    z_got, p_got = rules.adaptive_sghmc_step(conv(z), conv(p), conv(g), conv(xi), conv(v_hat), eps, alpha)
    np.testing.assert_allclose(back(p_got), p_new, rtol=1e-12)
    np.testing.assert_allclose(back(z_got), z + p_new, rtol=1e-12)
    w = 1 / (tau + 1)
    expected = (1 + tau * (1 - g_bar**2 / (v_hat + 1e-16)), (1 - w) * g_bar + w * g, (1 - w) * v_hat + w * g**2)
    for got, e in zip(rules.adapt_moments(conv(tau), conv(g_bar), conv(v_hat), conv(g)), expected, strict=True):
        np.testing.assert_allclose(back(got), e, rtol=1e-12)
    tiny = rules.adaptive_sghmc_step(conv(z), conv(p), conv(g), conv(xi), conv(np.full((3, 2), 1e40)), eps, alpha)
    assert np.all(np.isfinite(back(tiny[1])))  # the noise variance is floored at 1e-16, never 0 or NaN


@pytest.mark.parametrize("conv, back", BACKENDS)
def test_normal_z_prior_density(conv, back):
    Z = np.random.default_rng(1).normal(size=(2, 4, 3))
    expected = stats.norm(0.0, 0.7).logpdf(Z).sum(axis=(-2, -1))
    np.testing.assert_allclose(back(point_processes.normal_log_density(conv(Z), 0.7)), expected, rtol=1e-12)
