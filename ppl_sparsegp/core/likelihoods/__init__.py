"""Likelihoods p(y | f) with their Gaussian expectations.

The likelihoods of :mod:`.scalar` are elementwise in a scalar latent f and broadcast over any leading shape
``[...]``; those of :mod:`.multiclass` (robust-max, softmax) give a label from J latent values ``f [..., J]``
(:attr:`Likelihood.latent_dim` is J) and reduce the latent axis. A variational marginal
``q(f) = N(f | mean, var)`` is given by two arrays ``mean`` and ``var`` of broadcastable shapes.
Sparse variational GPs need three integrals (Matthews 2016, Sections 4.3 and 6.6.1):

* ``variational_expectation``  ``E_q[log p(y | f)]``   (the data term of the ELBO),
* ``log_predictive_density``   ``log E_q[p(y | f)]``   (the NLPD of a test point),
* ``predict_mean_and_var``     ``E_q[y], Var_q[y]``    (moments of the predictive ``q(y)``).

The base class :class:`Likelihood` computes all three by Gauss-Hermite quadrature from ``log_prob``
and the conditional moments; a subclass overrides them where a closed form exists (Gaussian, Poisson
with exp link, Bernoulli-probit predictive). With ``t_i, w_i`` the nodes and weights of
:func:`ppl_sparsegp.core.ops.gauss_hermite` (standard normal, ``sum_i w_i = 1``), ``f_i = mean +
sqrt(var) t_i``:

    E_q[g(f)]         ~= sum_i w_i g(f_i)
    log E_q[p(y | f)] ~= logsumexp_i (log w_i + log p(y | f_i))

The number of nodes is :attr:`Likelihood.quadrature_order` (default 20, as in GPflow; the single
place for this default). Quadrature is accurate when the integrand is smooth on the scale
``sqrt(var)``. A density ``p(y | f)`` much narrower than ``sqrt(var)`` in f (a Student-t whose
``scale`` is small next to ``sqrt(var)``, a Poisson with large counts and large ``var``) needs a
higher order, above all for ``log_predictive_density``.

Likelihood objects are frozen dataclasses holding their hyperparameters: Python floats, numpy arrays
or arrays of any backend (jax tracers included, when a NumPyro model rebuilds the likelihood from
sampled values with :meth:`Likelihood.with_parameters`). Construction checks positivity only for
concrete Python/numpy values, so it never forces a device sync. All arithmetic uses the array API
plus :mod:`ppl_sparsegp.core.ops`, so it runs on jax.numpy, torch and numpy. Inputs from several backends
are moved to the one that is not numpy (numpy data with jax latents computes in jax) and cast to the
floating dtype of the latent arrays (``f``, or ``mean`` and ``var``); integer labels and counts
are cast too. Nothing here draws random numbers (softmax's Monte Carlo draws are fixed by its ``seed``):
:func:`ppl_sparsegp.numpyro.distributions.observation_distribution`
gives the NumPyro distribution of y given f, for posterior predictive draws.

Modules: :mod:`.base` (the base class and the coercion), :mod:`.scalar`, :mod:`.multiclass` and :mod:`.by_name`.
"""

from ppl_sparsegp.core.likelihoods.base import Likelihood
from ppl_sparsegp.core.likelihoods.by_name import MULTICLASS, likelihood_from_name, likelihood_with_noise
from ppl_sparsegp.core.likelihoods.multiclass import MultiClass, RobustMax, Softmax
from ppl_sparsegp.core.likelihoods.scalar import Bernoulli, Beta, Exponential, Gamma, Gaussian, Poisson, StudentT

__all__ = [
    "MULTICLASS",
    "Bernoulli",
    "Beta",
    "Exponential",
    "Gamma",
    "Gaussian",
    "Likelihood",
    "MultiClass",
    "Poisson",
    "RobustMax",
    "Softmax",
    "StudentT",
    "likelihood_from_name",
    "likelihood_with_noise",
]
