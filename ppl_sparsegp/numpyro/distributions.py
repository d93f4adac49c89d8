"""NumPyro distributions over inducing outputs u [P, M] (KL registered for NumPyro's ELBOs), and of y given f.

``InducingPrior`` is p(u) = Π_p N(u_p | 0, Kmm) (or, whitened, p(v) = N(0, I)); ``InducingPosterior`` is the
variational q(u) = Π_p N(u_p | m_p, R_p R_p^T) with a full lower-triangular or diagonal R_p (their densities and
draws: :mod:`ppl_sparsegp.core.inducing_gaussians`, shared with the Pyro twin). With both registered,
``TraceMeanField_ELBO`` computes KL[q(u) || p(u)] in closed form (thesis eq 4.26) through
:func:`ppl_sparsegp.core.kl.kl_qu_pu`, which for the whitened prior needs no O(M³) solve.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.kl import kl_divergence
from numpyro.distributions.transforms import LowerCholeskyTransform, biject_to

from ppl_sparsegp.core import inducing_gaussians, kl
from ppl_sparsegp.core.likelihoods import (
    Bernoulli,
    Beta,
    Gamma,
    Gaussian,
    Likelihood,
    MultiClass,
    Poisson,
    StudentT,
)

Array = Any


class InducingPrior(dist.Distribution):
    """p(u) over inducing outputs, event shape [P, M].

    Args:
        num_latent: P, the number of latent functions (they share Z and the kernel).
        num_inducing: M.
        Lmm: lower Cholesky factor of Kmm [M, M] for the unwhitened prior N(0, Kmm); None for the whitened
            prior N(0, I) over v = Lmm^{-1} u.
        dtype: dtype of the whitened prior's samples (ignored when ``Lmm`` is given).
    """

    support = constraints.independent(constraints.real, 2)
    reparametrized_params = ["Lmm"]

    def __init__(self, num_latent: int, num_inducing: int, Lmm=None, dtype=None):
        self.Lmm = Lmm
        self.dtype = Lmm.dtype if Lmm is not None else (dtype or jnp.result_type(float))
        super().__init__(batch_shape=(), event_shape=(num_latent, num_inducing))

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, sample_shape + self.event_shape, dtype=self.dtype)
        return inducing_gaussians.prior_draw(eps, self.Lmm)

    def log_prob(self, value):
        return inducing_gaussians.prior_log_prob(value, self.Lmm)


class InducingPosterior(dist.Distribution):
    """q(u) = Π_p N(u_p | loc_p, R_p R_p^T), event shape [P, M].

    Args:
        loc: [P, M].
        scale: lower-triangular R [P, M, M], or its diagonal [P, M] (mean-field q).
    """

    support = constraints.independent(constraints.real, 2)
    reparametrized_params = ["loc", "scale"]

    def __init__(self, loc, scale):
        self.loc, self.scale = loc, scale
        super().__init__(batch_shape=(), event_shape=loc.shape[-2:])

    @property
    def is_diagonal(self) -> bool:
        return self.scale.ndim == self.loc.ndim

    def sample(self, key, sample_shape=()):
        eps = jax.random.normal(key, sample_shape + self.event_shape, dtype=self.loc.dtype)
        return inducing_gaussians.posterior_draw(eps, self.loc, self.scale)

    def log_prob(self, value):
        return inducing_gaussians.posterior_log_prob(value, self.loc, self.scale)


@kl_divergence.register(InducingPosterior, InducingPrior)
def _kl_inducing(q: InducingPosterior, p: InducingPrior):
    return kl.kl_qu_pu(q.loc, q.scale, p.Lmm)


def observation_distribution(likelihood: Likelihood, f: Array) -> dist.Distribution:
    """p(y | f) as a NumPyro distribution with batch shape ``f.shape`` (a multi-class likelihood: ``f.shape[:-1]``,
    f [..., J]), for posterior predictive draws of y.

    Gaussian: Normal(f, σ); Bernoulli: Bernoulli(link(f)); Poisson: Poisson(binsize · exp f); Student-t:
    StudentT(df, f, scale); Gamma and Exponential: Gamma(k, rate exp(-f)); Beta: Beta(s Φ(f), s (1 - Φ(f)));
    robust-max and softmax: Categorical(p(y = k | f)). Each matches
    :meth:`~ppl_sparsegp.core.likelihoods.Likelihood.log_prob`.

    Raises:
        TypeError: a likelihood class without a NumPyro counterpart here.
    """
    if isinstance(likelihood, Gaussian):
        return dist.Normal(f, jnp.sqrt(jnp.asarray(likelihood.variance, dtype=f.dtype)))
    if isinstance(likelihood, Bernoulli):
        return dist.Bernoulli(probs=likelihood.conditional_mean(f))
    if isinstance(likelihood, Poisson):
        return dist.Poisson(likelihood.conditional_mean(f))
    if isinstance(likelihood, StudentT):
        return dist.StudentT(likelihood.df, f, jnp.asarray(likelihood.scale, dtype=f.dtype))
    if isinstance(likelihood, Gamma):
        return dist.Gamma(jnp.asarray(likelihood.shape, dtype=f.dtype), jnp.exp(-f))
    if isinstance(likelihood, Beta):
        m, s = likelihood.conditional_mean(f), jnp.asarray(likelihood.scale, dtype=f.dtype)
        return dist.Beta(s * m, s * (1.0 - m))
    if isinstance(likelihood, MultiClass):
        return dist.Categorical(probs=likelihood.conditional_mean(f))
    raise TypeError(f"likelihood: no NumPyro distribution of y given f for {type(likelihood).__name__}")


# q(u)'s lower-triangular square root as a NumPyro constraint whose bijection indexes with constants.
#
# NumPyro's ``biject_to(constraints.lower_cholesky)`` (``LowerCholeskyTransform``) maps an unconstrained vector
# [..., n(n+1)/2] to L [..., n, n]: the first n(n-1)/2 entries fill the strict lower triangle row by row, the last n
# are the log-diagonal. It finds the positions with ``jnp.tril_indices(n)``, which jax computes *inside the compiled
# program* (a ``nonzero`` over an n x n mask: a cumulative sum over n² integers and a scatter), on every step, in the
# forward pass and again for the gradient. At n = M = 1024 that index arithmetic took 36-43 ms of operation time per
# SVGP step in a profile here, and taking it out made the step 1.09x faster in float32 and 1.05x in float64, with 0.7 s
# less to compile (benchmarks/README.md, "Blocked Cholesky, and the M = 1024 step").
#
# ``lower_cholesky`` is the same constraint (same check, same unconstrained layout, so the same parameters, optimiser
# states and checkpoints) whose registered bijection, :class:`ConstantIndexLowerCholeskyTransform`, uses the positions
# from ``numpy.tril_indices`` at trace time: constants in the program. Its values are NumPyro's exactly (the entries
# are copied, the diagonal is ``exp``); only the index arithmetic leaves the step.


class _LowerCholesky(constraints._LowerCholesky):
    """``constraints.lower_cholesky`` with its own bijection (:class:`ConstantIndexLowerCholeskyTransform`)."""


lower_cholesky = _LowerCholesky()
"""Lower-triangular matrices with a positive diagonal [..., n, n] (NumPyro's ``constraints.lower_cholesky``)."""


@lru_cache(maxsize=32)
def _strict_lower_positions(n: int) -> np.ndarray:
    """Flat positions ``i * n + j`` [n(n-1)/2] of the strict lower triangle of an n x n matrix, row by row (the
    order of ``jnp.tril_indices(n, -1)``, which NumPyro's transform uses)."""
    i, j = np.tril_indices(n, -1)
    return (i * n + j).astype(np.int32)


def _order(size: int) -> int:
    """n for an unconstrained vector of n(n+1)/2 entries."""
    return round((math.sqrt(1 + 8 * size) - 1) / 2)


class ConstantIndexLowerCholeskyTransform(LowerCholeskyTransform):
    """NumPyro's ``LowerCholeskyTransform`` with the strict-lower positions as program constants.

    Forward: x [..., n(n+1)/2] -> L [..., n, n], ``L[strict lower] = x[:-n]`` (row by row), ``diag L = exp(x[-n:])``.
    Inverse: L -> ``concat(L[strict lower], log diag L)``. ``log_abs_det_jacobian`` is NumPyro's (``sum x[-n:]``).
    """

    codomain = lower_cholesky

    def __call__(self, x: Array) -> Array:
        n = _order(x.shape[-1])
        positions = _strict_lower_positions(n)
        flat = jnp.zeros((*x.shape[:-1], n * n), dtype=x.dtype)
        flat = flat.at[..., positions].set(x[..., :-n], indices_are_sorted=True, unique_indices=True)
        flat = flat.at[..., :: n + 1].set(jnp.exp(x[..., -n:]), indices_are_sorted=True, unique_indices=True)
        return flat.reshape((*x.shape[:-1], n, n))

    def _inverse(self, y: Array) -> Array:
        n = y.shape[-1]
        flat = y.reshape((*y.shape[:-2], n * n))
        return jnp.concatenate([flat[..., _strict_lower_positions(n)], jnp.log(flat[..., :: n + 1])], axis=-1)


@biject_to.register(_LowerCholesky)
def _transform_to_lower_cholesky(constraint: _LowerCholesky) -> ConstantIndexLowerCholeskyTransform:
    return ConstantIndexLowerCholeskyTransform()
