"""GPMC: full (non-sparse) MCMC over whitened latent values and hyperparameters (thesis ch. 5-6) as a Pyro program,
the twin of :mod:`models.numpyro.gpmc` (its docstring states the target).

Target, sampled jointly over v [P, N] and the hyperparameters θ by Pyro's ``MCMC(NUTS(model))``::

    log p(θ) + log N(v | 0, I) + Σ_n log p(y_n | f_n),   f = L_θ v,  L_θ L_θᵀ = K_θ(X, X)

Site names (as the NumPyro twin's): the hyperparameter sites (each sampled under its prior, e.g.
:func:`models.pyro.sgpmc.default_priors`, or fixed); latent ``"v"`` [P, N]; plate ``"data"``; factor ``"y"`` [N].
A draw predicts through :meth:`GPMC.predict_f` with ``params`` that draw and the training data (``X=``, ``y=``).
Its variational counterpart, with the same model, is :class:`models.pyro.vgp.VGP`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pyro
import torch

from ppl_sparsegp import validation
from ppl_sparsegp.core import conditionals, ops
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import as_output_columns, check_every_hyperparameter_sampled, check_output_columns
from ._base import GPModel, q_parameter

Array = Any


@dataclass(eq=False)
class GPMC(GPModel):
    """The GPMC target as a Pyro model; the fields of :class:`models.numpyro.gpmc.GPMC`.

    Args (beyond :class:`GPModel`'s kernel, likelihood, priors, fixed; ``priors`` and ``fixed`` together must
    cover every hyperparameter site):
        num_latent: P, latent functions sharing the kernel (one per output column of y).
    """

    num_latent: int = 1
    predicts_from_data: ClassVar[bool] = True

    def __post_init__(self) -> None:
        validation.check_count("num_latent", self.num_latent, minimum=1)
        super().__post_init__()
        check_every_hyperparameter_sampled(self)

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameters' and ``"v"``."""
        return super().parameter_names() | {"v"}

    def model(self, X: Array, y: Array | None = None) -> None:
        """θ ~ p(θ), v ~ N(0, I), f = L_θ v and Σ_n log p(y_n | f_n) as the factor ``"y"``; with ``y=None``
        (``pyro.infer.Predictive``), f and y at the training inputs as the sites ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        check_output_columns(y, self.num_latent)
        kernel, likelihood = self.hyperparameters()
        v = sites.inducing_outputs(self.num_latent, X.shape[0], None, X.dtype, name="v")
        F = v @ ops.cholesky(kernel(X)).T
        if y is None:
            sites.predictive_at_values(likelihood, F)
            return
        with sites.data_plate(X.shape[0]):
            pyro.factor("y", torch.sum(likelihood.log_prob(sites.batch(None, y, None)[1], F), dim=0))

    def guide(self, X: Array, y: Array | None = None) -> None:
        raise NotImplementedError("GPMC is sampled by MCMC (MCMC(NUTS)); its variational counterpart is VGP")

    def _latent_values(self, params: Mapping[str, Array], X: Array) -> Array:
        """f = L_θ v of a draw ``params`` (θ and ``"v"``) at the training inputs X [N, D]: [P, N]."""
        kernel, _ = self.fitted(params)
        X = as_tensor(X)
        return q_parameter(params, "v", (self.num_latent, X.shape[0])) @ ops.cholesky(kernel(X)).T

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """log p(y_n | f_n) of one draw per data point: [N] (or [N, P])."""
        _, likelihood = self.fitted(params)
        per_point = likelihood.log_prob(sites.batch(None, as_tensor(y), None)[1], self._latent_values(params, X))
        return per_point[0] if per_point.shape[0] == 1 else per_point.T

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """p(f(X_new) | v, θ) of one draw: the whitened conditional with the training inputs as inducing inputs."""
        kernel, _ = self.fitted(params)
        v = q_parameter(params, "v", (self.num_latent, X.shape[0]))
        mean, var = conditionals.inducing_conditional(kernel, X, X_new, v, full_cov=full_cov)
        return as_output_columns(mean, var, self.num_latent == 1)
