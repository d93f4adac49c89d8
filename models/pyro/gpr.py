"""Exact GP regression (thesis eqs 1.24, 6.1-6.8) as a Pyro program, the twin of :mod:`models.numpyro.gpr`.

Generative model::

    f ~ GP(0, k_θ),   y_n | f ~ N(f(x_n), σ²)      =>   y ~ N(0, K_XX + σ² I)

Site names (as the NumPyro twin's): the hyperparameter sites ``kernel.*``, ``likelihood.variance`` and the observed
site ``"y"`` (one event over the P output columns). The guide holds only MAP point masses for hyperparameters with
priors. Cost O(N³).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyro
import pyro.distributions as dist
import torch

from ppl_sparsegp.core import bounds, ops
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import POSTERIOR_FACTOR, as_output_columns
from ._base import GPModel
from .sgpr import SGPR
from .svgp import SVGP

Array = Any


@dataclass(eq=False)
class GPR(GPModel):
    """Exact GP regression with a Gaussian likelihood; y [N] or [N, P] (independent columns, shared θ)."""

    predicts_from_data = True

    def __post_init__(self) -> None:
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError(f"likelihood: GPR needs likelihoods.Gaussian, got {type(self.likelihood).__name__}")
        super().__post_init__()

    def model(self, X: Array, y: Array | None = None) -> None:
        """y ~ N(0, K_XX + σ² I), each output column; with ``y=None`` the prior f and y at X as the sites ``"f"``
        and ``"y"`` (:func:`ppl_sparsegp.pyro.sites.prior_predictive`)."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        kernel, likelihood = self.hyperparameters()
        if y is None:
            sites.prior_predictive(kernel, likelihood, X)
            return
        N = X.shape[0]
        L = ops.cholesky(kernel(X) + likelihood.variance * torch.eye(N, dtype=X.dtype))
        Y = y[:, None] if y.ndim == 1 else y
        marginal = dist.MultivariateNormal(torch.zeros(N, dtype=X.dtype), scale_tril=L)
        pyro.sample("y", marginal.expand([Y.shape[1]]).to_event(1), obs=Y.T)

    def guide(self, X: Array, y: Array | None = None) -> None:
        self.hyperparameter_guide()

    def log_marginal_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """log p(y | θ) at fitted hyperparameters (scalar, summed over output columns)."""
        kernel, likelihood = self.fitted(params)
        X = as_tensor(X)
        return bounds.gaussian_log_marginal(kernel(X), as_tensor(y), likelihood.variance)

    def as_svgp(self, params: Mapping[str, Array], X: Array, y: Array) -> tuple[SVGP, dict[str, Array]]:
        """This fit as an SVGP with u = f(X) (Z = X) and q(u) = p(f(X) | y), the exact posterior (:meth:`SGPR.as_svgp`
        with every training input inducing, where the collapsed bound is the marginal likelihood)."""
        sgpr = SGPR(self.kernel, self.likelihood, self.priors, self.fixed, jitter=self.jitter, Z=X, learn_Z=False)
        return sgpr.as_svgp(params, X, y)

    def parameter_names(self) -> set[str]:
        """The hyperparameter sites' names and the keys of a cached factor (:data:`POSTERIOR_FACTOR`)."""
        return super().parameter_names() | set(POSTERIOR_FACTOR)

    def with_posterior_factor(self, params: Mapping[str, Array], X: Array, y: Array) -> dict[str, Array]:
        """``params`` and, under :data:`POSTERIOR_FACTOR`, the Cholesky factor of K + σ²I and L⁻¹ y of the training
        data X [N, D], y [N] or [N, P] (:func:`ppl_sparsegp.core.bounds.gaussian_posterior_factor`): prediction with
        these params (and the same X, y) skips the O(N³) factorisation."""
        kernel, likelihood = self.fitted(params)
        with torch.no_grad():
            factor = bounds.gaussian_posterior_factor(kernel(as_tensor(X)), as_tensor(y), likelihood.variance)
        return {**params, **dict(zip(POSTERIOR_FACTOR, factor, strict=True))}

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """Posterior of f at X_new [S, D] given training data X [N, D], y [N] or [N, P] (and their factor, where
        ``params`` holds it: :meth:`with_posterior_factor`)."""
        kernel, likelihood = self.fitted(params)
        Kss = kernel(X_new) if full_cov else kernel.diag(X_new)
        factor = tuple(as_tensor(params[k]) for k in POSTERIOR_FACTOR) if POSTERIOR_FACTOR[0] in params else None
        K = None if factor is not None else kernel(X)
        mean, var = bounds.gaussian_posterior(
            K, kernel(X_new, X), Kss, y, likelihood.variance, full_cov=full_cov, factor=factor
        )
        var = var.expand(mean.shape[0], *var.shape)
        return as_output_columns(mean, var, y.ndim == 1)
