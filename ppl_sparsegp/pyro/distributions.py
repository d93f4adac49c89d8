"""Pyro distributions over inducing outputs u [P, M] (KL registered for Pyro's ELBOs), and of y given f: the twins
of :mod:`ppl_sparsegp.numpyro.distributions`.

``InducingPrior`` is p(u) = Π_p N(u_p | 0, Kmm) (or, whitened, p(v) = N(0, I)); ``InducingPosterior`` is the
variational q(u) = Π_p N(u_p | m_p, R_p R_pᵀ) with a full lower-triangular or diagonal R_p. Their densities and
draws are :mod:`ppl_sparsegp.core.inducing_gaussians`, the functions the NumPyro twins call too; with both
registered, ``TraceMeanField_ELBO`` computes KL[q(u) || p(u)] in closed form (thesis eq 4.26) through
:func:`ppl_sparsegp.core.kl.kl_qu_pu`.
"""

from __future__ import annotations

from typing import Any

import pyro.distributions as dist
import torch
from torch.distributions import constraints
from torch.distributions.kl import register_kl

from ppl_sparsegp.core import inducing_gaussians, kl
from ppl_sparsegp.core.likelihoods import Bernoulli, Beta, Gamma, Gaussian, Likelihood, MultiClass, Poisson, StudentT

Array = Any


class InducingPrior(dist.TorchDistribution):
    """p(u) over inducing outputs, event shape [P, M].

    Args:
        num_latent: P, the number of latent functions (they share Z and the kernel).
        num_inducing: M.
        Lmm: lower Cholesky factor of Kmm [M, M] for the unwhitened prior N(0, Kmm); None for the whitened
            prior N(0, I) over v = Lmm⁻¹ u.
        dtype: dtype of the whitened prior's samples (ignored when ``Lmm`` is given; None: torch's default).
    """

    support = constraints.independent(constraints.real, 2)
    arg_constraints: dict = {}
    has_rsample = True

    def __init__(self, num_latent: int, num_inducing: int, Lmm: Array | None = None, dtype: Any = None) -> None:
        self.Lmm = Lmm
        self.dtype = Lmm.dtype if Lmm is not None else (dtype or torch.get_default_dtype())
        super().__init__(batch_shape=torch.Size(), event_shape=torch.Size((num_latent, num_inducing)))

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> Array:
        eps = torch.randn(torch.Size(sample_shape) + self.event_shape, dtype=self.dtype)
        return inducing_gaussians.prior_draw(eps, self.Lmm)

    def log_prob(self, value: Array) -> Array:
        return inducing_gaussians.prior_log_prob(value, self.Lmm)


class InducingPosterior(dist.TorchDistribution):
    """q(u) = Π_p N(u_p | loc_p, R_p R_pᵀ), event shape [P, M].

    Args:
        loc: [P, M].
        scale: lower-triangular R [P, M, M], or its diagonal [P, M] (mean-field q).
    """

    support = constraints.independent(constraints.real, 2)
    arg_constraints: dict = {}
    has_rsample = True

    def __init__(self, loc: Array, scale: Array) -> None:
        self.loc, self.scale = loc, scale
        super().__init__(batch_shape=torch.Size(), event_shape=loc.shape[-2:])

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> Array:
        eps = torch.randn(torch.Size(sample_shape) + self.event_shape, dtype=self.loc.dtype)
        return inducing_gaussians.posterior_draw(eps, self.loc, self.scale)

    def log_prob(self, value: Array) -> Array:
        return inducing_gaussians.posterior_log_prob(value, self.loc, self.scale)


@register_kl(InducingPosterior, InducingPrior)
def _kl_inducing(q: InducingPosterior, p: InducingPrior) -> Array:
    return kl.kl_qu_pu(q.loc, q.scale, p.Lmm)


def observation_distribution(likelihood: Likelihood, f: Array) -> dist.TorchDistribution:
    """p(y | f) as a Pyro distribution with batch shape ``f.shape`` (a multi-class likelihood: ``f.shape[:-1]``,
    f [..., J]), for posterior predictive draws of y; the same families and parameters as
    :func:`ppl_sparsegp.numpyro.distributions.observation_distribution`, each matching
    :meth:`~ppl_sparsegp.core.likelihoods.Likelihood.log_prob`.

    Raises:
        TypeError: a likelihood class without a Pyro counterpart here.
    """

    def scalar(value: Any) -> Array:
        return torch.as_tensor(value, dtype=f.dtype)

    if isinstance(likelihood, Gaussian):
        return dist.Normal(f, torch.sqrt(scalar(likelihood.variance)))
    if isinstance(likelihood, Bernoulli):
        return dist.Bernoulli(probs=likelihood.conditional_mean(f))
    if isinstance(likelihood, Poisson):
        return dist.Poisson(likelihood.conditional_mean(f))
    if isinstance(likelihood, StudentT):
        return dist.StudentT(scalar(likelihood.df), f, scalar(likelihood.scale))
    if isinstance(likelihood, Gamma):
        return dist.Gamma(scalar(likelihood.shape), torch.exp(-f))
    if isinstance(likelihood, Beta):
        m, s = likelihood.conditional_mean(f), scalar(likelihood.scale)
        return dist.Beta(s * m, s * (1.0 - m))
    if isinstance(likelihood, MultiClass):
        return dist.Categorical(probs=likelihood.conditional_mean(f))
    raise TypeError(f"likelihood: no Pyro distribution of y given f for {type(likelihood).__name__}")
