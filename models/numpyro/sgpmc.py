"""SGPMC: MCMC for variationally sparse GPs (Hensman et al. 2015; thesis ch. 5, §3.7 of the digest).

Target (thesis eq 5.26), sampled jointly over the whitened inducing outputs v and the hyperparameters θ::

    θ ~ p(θ)                       (a prior per sampled hyperparameter: Gamma or LogNormal, see default_priors)
    v ~ N(0, I) [P, M],  u = Lmm(θ) v
    H(v, θ) = log p(θ) + log N(v | 0, I) + Σ_n E_{p(f_n | u, θ)}[log p(y_n | f_n)]

The data term is the variational potential: the expectation of the log-likelihood under the *prior conditional*
p(f_n | u, θ) = N(a_n^T v, k_nn - a_n^T a_n), closed form or Gauss-Hermite per likelihood. Samples of this
density are draws of the KL-optimal free-form q*(u, θ); predictions mix p(f_* | u_s, θ_s) over draws s
(:mod:`ppl_sparsegp.posterior.predict`). Z is fixed (from a Gaussian fit, §5.5).

Its density equals that of :class:`models.numpyro.svgp.SVGP` with ``data_term="sampled"``, ``whiten=True`` and
``learn_Z=False``, with the same site names (the sampled ``"u"`` holds v), so an SVGP fit initialises it. Every
hyperparameter is either sampled (named in ``priors``) or held fixed (named in ``fixed``): an MCMC engine would
otherwise keep a ``param`` at its initial value silently.

:func:`ppl_sparsegp.recipes.sgpmc.fit_sgpmc` is the thesis recipe in one call: fit SVGP (MAP for θ, Z from k-means,
Z held fixed for the first steps), fix Z, start θ at its point estimate and v at a draw of q(v), run NUTS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.numpyro import sites

from .._shared import check_every_hyperparameter_sampled, check_output_columns, check_sparse_settings
from ._base import GPModel, base_fields
from .svgp import SVGP

Array = Any


@dataclass(eq=False)
class SGPMC(GPModel):
    """The SGPMC target as a NumPyro model; Z [M, D] fixed, v sampled at site ``"u"`` [P, M].

    Args (beyond :class:`models.numpyro._base.GPModel`'s kernel, likelihood, priors, fixed; ``priors`` and ``fixed``
    together must cover every hyperparameter site):
        Z: the fixed inducing inputs [M, D].
        num_latent: P, latent functions sharing Z and the kernel (one per output column of y).
        batch_size: subsample B points per evaluation through the ``"data"`` plate (SG-MCMC engines only).
    """

    Z: Array = None
    num_latent: int = 1
    batch_size: int | None = None
    multiclass: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_sparse_settings(self.Z, num_latent=self.num_latent, batch_size=self.batch_size)
        super().__post_init__()
        check_every_hyperparameter_sampled(self)

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameters', ``"Z"`` and ``"u"``."""
        return super().parameter_names() | {"Z", "u"}

    @property
    def num_inducing(self) -> int:
        return int(np.shape(self.Z)[0])

    def model(self, X: Array, y: Array | None = None) -> None:
        """θ ~ p(θ), v ~ N(0, I), and the variational potential Σ_n E_{p(f_n | v, θ)}[log p(y_n | f_n)]
        (thesis eq 5.26), on a minibatch when ``batch_size`` is set; with ``y=None`` (NumPyro's ``Predictive``), f
        and y at every row of X given v and θ as the sites ``"f"`` and ``"y"``."""
        self.check_data(X, y)
        check_output_columns(y, self.num_latent, self.likelihood)
        kernel, likelihood = self.hyperparameters()
        Z = jnp.asarray(self.Z)
        ell = likelihood.expectation_by_output
        sites.whitened_inducing_data(kernel, likelihood, Z, self.num_latent, X, y, self.batch_size, ell)

    def guide(self, X: Array, y: Array | None = None) -> None:
        raise NotImplementedError("SGPMC is sampled by MCMC (see fit_sgpmc); its variational twin is SVGP")

    def variational_twin(self) -> SVGP:
        """The whitened SVGP with the same kernel, likelihood, priors, jitter and fixed Z: its data term with
        ``data_term="sampled"`` is this model's, and it predicts from a draw ``{"u": v, ...}`` the same way."""
        shared = base_fields(self, GPModel)  # kernel, likelihood, priors, fixed, jitter
        return SVGP(**shared, Z=self.Z, num_latent=self.num_latent, learn_Z=False, data_term="sampled")

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """log φ(y_n | v, θ) of one draw per data point (the per-point factor of eq 5.26): [N] (or [N, P])."""
        return self.variational_twin().pointwise_log_likelihood(params, X, y)

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """p(f(X_new) | v, θ) of one draw (its variational twin's)."""
        return self.variational_twin().predict_f(params, X_new, full_cov=full_cov)


def default_priors(
    kernel: Kernel, likelihood: Likelihood, family: Literal["gamma", "lognormal"] = "gamma"
) -> dict[str, dist.Distribution]:
    """A prior for every kernel and likelihood hyperparameter, shaped like its value.

    ``"gamma"``: Gamma(1.1, 1) (shape, rate), the thesis code's prior on lengthscales and variances (ch. 5,
    Image); ``"lognormal"``: LogNormal(0, 1).
    """
    if family not in ("gamma", "lognormal"):
        raise ValueError(f"family: expected 'gamma' or 'lognormal', got {family!r}")
    base = dist.Gamma(1.1, 1.0) if family == "gamma" else dist.LogNormal(0.0, 1.0)
    sites = {f"kernel.{k}": v for k, v in kernel.parameters().items()}
    sites.update({f"likelihood.{k}": v for k, v in likelihood.parameters().items()})
    return {site: base.expand(np.shape(v)).to_event(np.ndim(v)) for site, v in sites.items()}
