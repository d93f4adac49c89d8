"""Natural gradients for q(u) (thesis §4.3; Hensman et al. 2013): with a Gaussian likelihood one step of size 1 lands
on Titsias' optimal q*(u), whitened or not, full or diagonal families aside; otherwise small steps alternated with
Adam on the hyperparameters reach what Adam alone reaches, on minibatches too."""

import jax
import numpy as np
import optax
import pytest

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Bernoulli, Gaussian
from ppl_sparsegp.infer.natural_gradients import NaturalGradient
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP

jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(0)
X = RNG.uniform(-3, 3, (120, 1))
Y = np.sin(2 * X[:, 0]) + 0.2 * RNG.standard_normal(120)
LABELS = (Y > 0).astype(float)
Z = np.linspace(-3, 3, 12)[:, None]
HYPERPARAMETERS = ["kernel.lengthscale", "kernel.variance", "likelihood.variance"]


@pytest.mark.parametrize("whiten", [True, False])
@pytest.mark.slow
def test_one_step_of_size_one_reaches_the_optimal_q_u_of_a_gaussian_likelihood(whiten):
    kernel, likelihood = RBF(variance=1.3, lengthscale=0.7), Gaussian(variance=0.05)
    gp = SVGP(kernel, likelihood, Z=Z, whiten=whiten, learn_Z=False, fixed=HYPERPARAMETERS)
    fit = fit_svi(gp.model, gp.guide, X, Y, optimizer=optax.adam(0.01), num_steps=1, progress=False,
                  natural_gradient=NaturalGradient(step_size=1.0))  # fmt: skip
    sgpr = SGPR(kernel, likelihood, Z=Z, fixed=HYPERPARAMETERS)
    q_mu, q_sqrt = sgpr.optimal_qu({}, X, Y, whiten=whiten)
    np.testing.assert_allclose(fit.params["u_loc"], q_mu, rtol=1e-6, atol=1e-8)
    S, S_opt = (L @ np.swapaxes(L, -1, -2) for L in (np.asarray(fit.params["u_scale_tril"]), np.asarray(q_sqrt)))
    np.testing.assert_allclose(S, S_opt, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gp.elbo(fit.params, X, Y), sgpr.elbo({}, X, Y), rtol=1e-9)


def test_the_diagonal_family_takes_its_own_natural_step():
    """For q_diag the step is the natural gradient within the mean-field family: repeated unit steps converge (the
    coordinate-wise fixed point, slowly: 200 steps of 0.5 are 0.04 nats short) to the ELBO that Adam reaches on the
    same family."""
    gp = SVGP(RBF(variance=1.3, lengthscale=0.7), Gaussian(variance=0.05), Z=Z, q_diag=True, learn_Z=False,
              fixed=HYPERPARAMETERS)  # fmt: skip
    natural = fit_svi(gp.model, gp.guide, X, Y, optimizer=optax.adam(0.01), num_steps=1500, progress=False,
                      natural_gradient=NaturalGradient(scale="u_scale", step_size=0.5, diagonal=True))  # fmt: skip
    adam = fit_svi(gp.model, gp.guide, X, Y, optimizer=optax.adam(0.05), num_steps=3000, progress=False)
    assert float(gp.elbo(natural.params, X, Y)) == pytest.approx(float(gp.elbo(adam.params, X, Y)), rel=1e-5)


@pytest.mark.parametrize("batch_size", [None, 40])
@pytest.mark.slow
def test_natural_steps_with_adam_on_the_hyperparameters_reach_what_adam_reaches(batch_size):
    gp = SVGP(RBF(), Bernoulli(), Z=Z, batch_size=batch_size)
    natural = fit_svi(gp.model, gp.guide, X, LABELS, optimizer=optax.adam(0.02), num_steps=1500, progress=False,
                      natural_gradient=NaturalGradient(step_size=0.1))  # fmt: skip
    adam = fit_svi(gp.model, gp.guide, X, LABELS, optimizer=optax.adam(0.02), num_steps=1500, progress=False)
    full = SVGP(RBF(), Bernoulli(), Z=Z)
    elbo_natural, elbo_adam = (float(full.elbo(f.params, X, LABELS)) for f in (natural, adam))
    assert elbo_natural == pytest.approx(elbo_adam, abs=0.5)  # of about -50: the same optimum within noise


def test_bad_settings_are_refused_before_compiling():
    gp = SVGP(RBF(), Gaussian(), Z=Z)
    with pytest.raises(ValueError, match="step_size"):
        NaturalGradient(step_size=0.0)
    with pytest.raises(ValueError, match="natural_gradient: expected a NaturalGradient"):
        fit_svi(gp.model, gp.guide, X, Y, optimizer=optax.adam(0.01), num_steps=1, natural_gradient={"step_size": 1})
