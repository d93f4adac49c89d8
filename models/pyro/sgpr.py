"""SGPR: Titsias' collapsed variational bound (thesis §3.2; Ch 4 eq 4.12; Ch 5 eqs 5.10-5.15) as a Pyro program,
the twin of :mod:`models.numpyro.sgpr`.

The bound ``log N(y | 0, σ²I + Q_XX) - Tr(K_XX - Q_XX)/(2σ²)`` enters the model as a ``factor``; q(u) is
collapsed (optimal) and recovered for prediction.

Site names (as the NumPyro twin's): the hyperparameter sites, the param ``"Z"`` [M, D] (a constant when
``learn_Z=False``), and the factor ``"collapsed_bound"``. Cost O(N M² + M³) per evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyro
import torch

from ppl_sparsegp.core import bounds, conditionals
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import as_output_columns, check_sparse_settings
from ._base import GPModel
from .svgp import SVGP

Array = Any


@dataclass(eq=False)
class SGPR(GPModel):
    """Sparse GP regression with inducing inputs ``Z`` [M, D] and a Gaussian likelihood."""

    predicts_from_data = True

    Z: Array = None
    learn_Z: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError(f"likelihood: SGPR needs likelihoods.Gaussian, got {type(self.likelihood).__name__}")
        check_sparse_settings(self.Z)
        super().__post_init__()

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameters' and ``"Z"``."""
        return super().parameter_names() | {"Z"}

    def inducing_inputs(self) -> Array:
        """Model side: Z [M, D], the param ``"Z"`` or, with ``learn_Z=False``, the constant
        (:func:`~ppl_sparsegp.pyro.sites.inducing_inputs`)."""
        return sites.inducing_inputs(self.Z, self.learn_Z)

    def model(self, X: Array, y: Array | None = None) -> None:
        """Titsias' collapsed bound as the factor ``"collapsed_bound"``; with ``y=None`` the prior f and y at X as
        the sites ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        kernel, likelihood = self.hyperparameters()
        Z = self.inducing_inputs()
        if y is None:
            sites.prior_predictive(kernel, likelihood, X)
            return
        pyro.factor("collapsed_bound", self.collapsed_bound(kernel, likelihood, Z, X, y))

    def guide(self, X: Array, y: Array | None = None) -> None:
        self.hyperparameter_guide()

    def elbo(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """The collapsed bound at fitted values (scalar)."""
        kernel, likelihood = self.fitted(params)
        return self.collapsed_bound(kernel, likelihood, self._Z(params), as_tensor(X), as_tensor(y))

    @staticmethod
    def collapsed_bound(kernel: Kernel, likelihood: Gaussian, Z: Array, X: Array, y: Array) -> Array:
        """Titsias' bound (thesis eq 4.12) at inputs X [N, D] with inducing inputs Z [M, D] and targets y [N] or
        [N, P]: Σ_p log N(y_p | 0, σ²I + Q_XX) − P Tr(K_XX − Q_XX)/(2σ²) (scalar)."""
        return bounds.sgpr_elbo(kernel(Z, X), kernel(Z), kernel.diag(X), y, likelihood.variance)

    def optimal_qu(
        self, params: Mapping[str, Array], X: Array, y: Array, *, whiten: bool = True
    ) -> tuple[Array, Array]:
        """q*(u) at fitted values: (q_mu [P, M], q_sqrt [P, M, M]), whitened or not."""
        kernel, likelihood = self.fitted(params)
        Z, X, y = self._Z(params), as_tensor(X), as_tensor(y)
        return bounds.sgpr_optimal_qu(kernel(Z, X), kernel(Z), y, likelihood.variance, whiten=whiten)

    def as_svgp(self, params: Mapping[str, Array], X: Array, y: Array) -> tuple[SVGP, dict[str, Array]]:
        """This fit as the whitened SVGP on the same Z whose q(u) is the optimal q*(u), and its parameters: the same
        predictions, and an ELBO equal to the collapsed bound (thesis §4.3), with a q(u) to draw u from. X [N, D],
        y [N] or [N, P]: the training data."""
        with torch.no_grad():
            q_mu, q_sqrt = self.optimal_qu(params, X, y, whiten=True)
        Z = self._Z(params)
        svgp = SVGP(self.kernel, self.likelihood, self.priors, self.fixed, jitter=self.jitter, Z=Z,
                    num_latent=int(q_mu.shape[0]))  # fmt: skip
        names = self.hyperparameter_sites()
        return svgp, {**{k: v for k, v in params.items() if k in names}, "Z": Z, "u_loc": q_mu, "u_scale_tril": q_sqrt}

    def _Z(self, params: Mapping[str, Array]) -> Array:
        return as_tensor(params.get("Z", self.Z))

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f) at X_new [S, D] under the optimal q*(u) (the DTC predictive equations)."""
        kernel, _ = self.fitted(params)
        q_mu, q_sqrt = self.optimal_qu(params, X, y, whiten=True)
        mean, var = conditionals.inducing_conditional(
            kernel, self._Z(params), X_new, q_mu, q_sqrt, whiten=True, full_cov=full_cov
        )
        return as_output_columns(mean, var, y.ndim == 1)
