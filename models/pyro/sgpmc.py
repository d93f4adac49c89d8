"""SGPMC: MCMC for variationally sparse GPs (Hensman et al. 2015; thesis ch. 5) as a Pyro program, the twin of
:mod:`models.numpyro.sgpmc` (its docstring states the target).

Target (thesis eq 5.26), over the whitened inducing outputs v and the hyperparameters θ::

    H(v, θ) = log p(θ) + log N(v | 0, I) + Σ_n E_{p(f_n | u, θ)}[log p(y_n | f_n)],   u = Lmm(θ) v

Site names (as the NumPyro twin's): the hyperparameter sites (each sampled under its prior or fixed), the latent
``"u"`` [P, M] holding v, the plate ``"data"`` and the factor ``"y"`` [B]. Z is fixed. Run it with Pyro's
``MCMC(NUTS(model))``; draws predict through :meth:`SGPMC.predict_f` with ``params`` one draw.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pyro.distributions as dist

from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import check_every_hyperparameter_sampled, check_output_columns, check_sparse_settings
from ._base import GPModel
from .svgp import SVGP

Array = Any


@dataclass(eq=False)
class SGPMC(GPModel):
    """The SGPMC target as a Pyro model; Z [M, D] fixed, v sampled at site ``"u"`` [P, M].

    Args (beyond :class:`GPModel`'s; ``priors`` and ``fixed`` together must cover every hyperparameter site):
        Z: the fixed inducing inputs [M, D].
        num_latent: P, latent functions sharing Z and the kernel (one per output column of y).
        batch_size: subsample B points per evaluation through the ``"data"`` plate.
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

    def model(self, X: Array, y: Array | None = None) -> None:
        """θ ~ p(θ), v ~ N(0, I), and the variational potential Σ_n E_{p(f_n | v, θ)}[log p(y_n | f_n)] (eq 5.26);
        with ``y=None``, f and y at every row of X given v and θ as the sites ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        check_output_columns(y, self.num_latent, self.likelihood)
        kernel, likelihood = self.hyperparameters()
        ell = likelihood.expectation_by_output
        sites.whitened_inducing_data(kernel, likelihood, self.Z, self.num_latent, X, y, self.batch_size, ell)

    def guide(self, X: Array, y: Array | None = None) -> None:
        raise NotImplementedError("SGPMC is sampled by MCMC; its variational twin is SVGP")

    def variational_twin(self) -> SVGP:
        """The whitened SVGP with the same kernel, likelihood, priors, jitter and fixed Z, whose data term with
        ``data_term="sampled"`` is this model's and which predicts from a draw ``{"u": v, ...}``."""
        return SVGP(self.kernel, self.likelihood, self.priors, self.fixed, jitter=self.jitter, Z=self.Z,
                    num_latent=self.num_latent, learn_Z=False, data_term="sampled")  # fmt: skip

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """log φ(y_n | v, θ) of one draw per data point (eq 5.26): [N] (or [N, P])."""
        return self.variational_twin().pointwise_log_likelihood(params, X, y)

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """p(f(X_new) | v, θ) of one draw (its variational twin's)."""
        return self.variational_twin().predict_f(params, X_new, full_cov=full_cov)


def default_priors(
    kernel: Kernel, likelihood: Likelihood, family: Literal["gamma", "lognormal"] = "gamma"
) -> dict[str, dist.TorchDistribution]:
    """A Pyro prior for every kernel and likelihood hyperparameter, shaped like its value: ``"gamma"``:
    Gamma(1.1, 1) (shape, rate), ``"lognormal"``: LogNormal(0, 1), as :func:`models.numpyro.sgpmc.default_priors`."""
    if family not in ("gamma", "lognormal"):
        raise ValueError(f"family: expected 'gamma' or 'lognormal', got {family!r}")
    priors = {}
    for site, value in sites.hyperparameter_values(kernel, likelihood).items():
        one = as_tensor(1.0)
        base = dist.Gamma(1.1 * one, one) if family == "gamma" else dist.LogNormal(0.0 * one, one)
        priors[site] = base.expand(value.shape).to_event(value.ndim)
    return priors
