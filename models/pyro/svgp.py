"""SVGP: the uncollapsed sparse variational GP for any likelihood (thesis §3.3, Ch 4 eqs 4.22-4.26) as a Pyro
program, the twin of :mod:`models.numpyro.svgp` (its docstring states the model, the guide and both data terms).

Site names (as the NumPyro twin's): hyperparameter sites; param ``"Z"`` [M, D]; latent ``"u"`` [P, M]; plate
``"data"``; factor ``"y"`` [B]; guide params ``"u_loc"`` [P, M] and ``"u_scale_tril"`` [P, M, M] (or
``"u_scale"`` [P, M] when ``q_diag``).

Whitened by default (v ~ N(0, I), u = Lmm v; eq 5.25), or u ~ N(0, Kmm). ``data_term="analytic"`` scores the data
under the marginal q(f_n) of the guide's q(u) parameters (eq 4.24), ``"sampled"`` under p(f_n | u) of the sampled u
(eq 5.26). With ``TraceMeanField_ELBO`` the KL[q(u) || p(u)] is closed form (eq 4.26). ``batch_size=B`` subsamples
the ``"data"`` plate (scale N/B); ``num_data`` scales minibatches the caller passes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pyro
import torch

from ppl_sparsegp.core import conditionals, kl, ops
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import as_output_columns, check_output_columns, check_sparse_settings
from ._base import GPModel, q_parameter

Array = Any


@dataclass(eq=False)
class SVGP(GPModel):
    """Sparse variational GP with inducing inputs ``Z`` [M, D]; the fields of :class:`models.numpyro.svgp.SVGP`.

    Args (beyond :class:`GPModel`'s kernel, likelihood, priors, fixed):
        Z: initial inducing inputs [M, D].
        num_latent: P, independent latent functions sharing Z and the kernel (one per output column of y).
        whiten: parameterise q over v = Lmm⁻¹ u (default) or over u.
        q_diag: mean-field (diagonal) q(u) instead of a full lower-triangular square root.
        batch_size: subsample B data points per step through the ``"data"`` plate (None: all N).
        num_data: the full N when the caller passes minibatches itself (scales the data term by N/B).
        learn_Z: optimise Z (a variational parameter) or keep it fixed.
        data_term: ``"analytic"`` or ``"sampled"`` (module docstring).
    """

    Z: Array = None
    num_latent: int = 1
    whiten: bool = True
    q_diag: bool = False
    batch_size: int | None = None
    num_data: int | None = None
    learn_Z: bool = True
    data_term: Literal["analytic", "sampled"] = "analytic"

    DATA_TERMS: ClassVar[tuple[str, ...]] = ("analytic", "sampled")
    multiclass: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_sparse_settings(self.Z, num_latent=self.num_latent, batch_size=self.batch_size, num_data=self.num_data)
        if self.data_term not in self.DATA_TERMS:
            raise ValueError(f"data_term: expected one of {self.DATA_TERMS}, got {self.data_term!r}")
        if self.batch_size is not None and self.num_data is not None:
            raise ValueError("batch_size and num_data: give one (plate subsampling or external minibatches)")
        super().__post_init__()

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameters', ``"Z"``, ``"u"`` and q(u)'s."""
        return super().parameter_names() | {"Z", "u", "u_loc", "u_scale" if self.q_diag else "u_scale_tril"}

    @property
    def num_inducing(self) -> int:
        return int(self.Z.shape[0])

    def model(self, X: Array, y: Array | None = None) -> None:
        """u ~ p(u) and the data term of the batch as the factor ``"y"``; with ``y=None`` (``Predictive``), f and y
        at every row of X given u as the sites ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        check_output_columns(y, self.num_latent, self.likelihood)
        kernel, likelihood = self.hyperparameters()
        Z = sites.inducing_inputs(self.Z, self.learn_Z)
        Kmm = kernel(Z)
        Lmm = None if self.whiten else ops.cholesky(Kmm)
        u = sites.inducing_outputs(self.num_latent, self.num_inducing, Lmm, Z.dtype)
        if y is None:
            sites.predictive(likelihood, *conditionals.inducing_conditional(kernel, Z, X, u, whiten=self.whiten))
            return
        if self.data_term == "analytic":
            q_mu, q_sqrt = sites.inducing_posterior_parameters(self.num_latent, self.num_inducing, Z.dtype, self.q_diag)
        else:
            q_mu, q_sqrt = u, None
        with sites.data_plate(y.shape[0], self.batch_size, self.num_data) as idx:
            Xb, Yb = sites.batch(X, y, idx)
            Kmn = kernel(Z, Xb)
            A = ops.cholesky_project(Kmm, Kmn) if self.whiten else None
            mean, var = conditionals.conditional(
                Kmn, Lmm, kernel.diag(Xb), q_mu, q_sqrt, whiten=self.whiten, projection=A
            )
            pyro.factor("y", torch.sum(likelihood.expectation_by_output(Yb, mean, var), dim=0))

    def guide(self, X: Array, y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors and u ~ q(u)."""
        self.hyperparameter_guide()
        sites.inducing_posterior(
            *sites.inducing_posterior_parameters(self.num_latent, self.num_inducing, self.Z.dtype, self.q_diag)
        )

    def elbo(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """The full-batch ELBO (eq 4.22) at given parameters: Σ_n E_q[log p(y_n|f_n)] - KL (scalar)."""
        data = torch.sum(self.pointwise_log_likelihood(params, X, y))
        q_mu, q_sqrt = self._q(params)
        Lmm = None if self.whiten else ops.cholesky(self.fitted(params)[0](self._Z(params)))
        return data - kl.kl_qu_pu(q_mu, q_sqrt, Lmm)

    def _Z(self, params: Mapping[str, Array]) -> Array:
        return as_tensor(params.get("Z", self.Z))

    def _q(self, params: Mapping[str, Array]) -> tuple[Array, Array | None]:
        """q(u) from fitted guide parameters, or a point mass at a posterior draw ``params["u"]`` [P, M]."""
        P, M = self.num_latent, self.num_inducing
        if "u" in params:
            return q_parameter(params, "u", (P, M)), None
        if self.q_diag:
            return q_parameter(params, "u_loc", (P, M)), q_parameter(params, "u_scale", (P, M))
        return q_parameter(params, "u_loc", (P, M)), q_parameter(params, "u_scale_tril", (P, M, M))

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """E_{q(f_n)}[log p(y_n | f_n)] per data point: [N] (or [N, P]); at a draw ``params["u"]`` the
        variational potential log φ(y_n | u, θ) (eq 5.26)."""
        kernel, likelihood = self.fitted(params)
        X, y = as_tensor(X), as_tensor(y)
        q_mu, q_sqrt = self._q(params)
        mean, var = conditionals.inducing_conditional(kernel, self._Z(params), X, q_mu, q_sqrt, whiten=self.whiten)
        Y = y[None, :] if y.ndim == 1 else y.T
        terms = likelihood.expectation_by_output(Y, mean, var)
        return terms[0] if y.ndim == 1 else terms.T

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f) at X_new (thesis eq 4.24, or eq 5.26's conditional at a draw ``params["u"]``)."""
        kernel, _ = self.fitted(params)
        q_mu, q_sqrt = self._q(params)
        mean, var = conditionals.inducing_conditional(
            kernel, self._Z(params), X_new, q_mu, q_sqrt, whiten=self.whiten, full_cov=full_cov
        )
        return as_output_columns(mean, var, self.num_latent == 1)
