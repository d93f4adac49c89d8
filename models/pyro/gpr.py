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

from .._shared import as_output_columns
from ._base import GPModel

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

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """Posterior of f at X_new [S, D] given training data X [N, D], y [N] or [N, P]."""
        kernel, likelihood = self.fitted(params)
        Kss = kernel(X_new) if full_cov else kernel.diag(X_new)
        mean, var = bounds.gaussian_posterior(
            kernel(X), kernel(X_new, X), Kss, y, likelihood.variance, full_cov=full_cov
        )
        var = var.expand(mean.shape[0], *var.shape)
        return as_output_columns(mean, var, y.ndim == 1)
