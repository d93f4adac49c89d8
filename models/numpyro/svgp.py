"""SVGP: the uncollapsed sparse variational GP for any likelihood (thesis §3.3, Ch 4 eqs 4.22-4.26).

Site names: hyperparameter sites of :mod:`models.numpyro._base`; param ``"Z"`` [M, D]; latent ``"u"`` [P, M];
plate ``"data"``; factor ``"y"`` [B]; guide params ``"u_loc"`` [P, M] and ``"u_scale_tril"`` [P, M, M]
(or ``"u_scale"`` [P, M] when ``q_diag``).

Generative model (whitened by default, thesis eq 5.25)::

    v ~ N(0, I) [P, M],  u = Lmm v    (unwhitened: u ~ N(0, Kmm))
    f(x_n) | u ~ p(f(x_n) | u)        (the GP prior conditional)
    y_n | f ~ p(y_n | f(x_n))         (any likelihood in ppl_sparsegp.core.likelihoods)

Guide: q(u) = Π_p N(m_p, R_p R_p^T), R_p lower triangular (``q_diag=True``: diagonal).

ELBO (eq 4.22) = Σ_n E_{q(f_n)}[log p(y_n | f_n)] - KL[q(u) || p(u)]. With ``TraceMeanField_ELBO`` the KL is
closed form (registered in :mod:`ppl_sparsegp.numpyro.distributions`). The data term depends on how it is scored:

* ``data_term="analytic"`` (default): as Pyro's ``VariationalSparseGP`` does, the model scores the data under
  the marginal q(f_n) implied by the guide's q(u) parameters (eq 4.24), with the 1-D expectation in closed form
  or by Gauss-Hermite. The ELBO is then exact, not a Monte Carlo estimate over u.
* ``data_term="sampled"``: the data term is the variational potential of the sampled u,
  E_{p(f_n|u)}[log p(y_n|f_n)] (eq 5.26) -- an unbiased estimate of the same ELBO, and the density that
  SGPMC samples with HMC.

Minibatches: ``batch_size=B`` subsamples the data plate (B indices drawn uniformly with replacement), which
scales the data term by N/B; the KL is outside the plate and counted once. Alternatively pass minibatches
yourself and set ``num_data`` to the full N.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import jax.numpy as jnp
import numpyro

from ppl_sparsegp.core import conditionals, kl, ops
from ppl_sparsegp.numpyro import sites

from .._shared import as_output_columns, check_output_columns, check_sparse_settings
from ._base import GPModel, q_parameter

Array = Any


@dataclass(eq=False)
class SVGP(GPModel):
    """Sparse variational GP with inducing inputs ``Z`` [M, D].

    Args (beyond :class:`GPModel`'s kernel, likelihood, priors, fixed):
        Z: initial inducing inputs [M, D].
        num_latent: P, independent latent functions sharing Z and the kernel (one per output column of y).
        whiten: parameterise q over v = Lmm^{-1} u (default) or over u.
        q_diag: mean-field (diagonal) q(u) instead of a full lower-triangular square root.
        batch_size: subsample B data points per step through the ``"data"`` plate (None: all N).
        num_data: the full N when the caller passes minibatches itself (scales the data term by N/B).
        learn_Z: optimise Z (a variational parameter) or keep it fixed.
        data_term: ``"analytic"`` or ``"sampled"`` (see the module docstring).
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
        return int(jnp.shape(self.Z)[0])

    def model(self, X: Array, y: Array | None = None) -> None:
        """u ~ p(u) and the data term of the batch as the factor ``"y"`` (see the module docstring); with ``y=None``
        (NumPyro's ``Predictive``), f and y at every row of X given u as the sites ``"f"`` and ``"y"``."""
        self.check_data(X, y)
        check_output_columns(y, self.num_latent, self.likelihood)
        kernel, likelihood = self.hyperparameters()
        Z = sites.inducing_inputs(self.Z, self.learn_Z)
        Kmm = kernel(Z)
        Lmm = None if self.whiten else ops.cholesky(Kmm)  # whitened, the fused projection below forms it
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
            A = ops.cholesky_project(Kmm, Kmn) if self.whiten else None  # Lmm⁻¹ Kmn with the cheaper gradient
            mean, var = conditionals.conditional(
                Kmn, Lmm, kernel.diag(Xb), q_mu, q_sqrt, whiten=self.whiten, projection=A
            )
            numpyro.factor("y", jnp.sum(likelihood.expectation_by_output(Yb, mean, var), axis=0))

    def guide(self, X: Array, y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors and u ~ q(u)."""
        self.hyperparameter_guide()
        dtype = jnp.asarray(self.Z).dtype
        sites.inducing_posterior(
            *sites.inducing_posterior_parameters(self.num_latent, self.num_inducing, dtype, self.q_diag)
        )

    def elbo(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """The full-batch ELBO (eq 4.22) at given parameters: Σ_n E_q[log p(y_n|f_n)] - KL (scalar)."""
        data = jnp.sum(self.pointwise_log_likelihood(params, X, y))
        q_mu, q_sqrt = self._q(params)
        if self.whiten:
            return data - kl.kl_qu_pu(q_mu, q_sqrt, None)
        kernel, _ = self.fitted(params)
        Lmm = ops.cholesky(kernel(jnp.asarray(params.get("Z", self.Z))))
        return data - kl.kl_qu_pu(q_mu, q_sqrt, Lmm)

    def _q(self, params: Mapping[str, Array]) -> tuple[Array, Array | None]:
        """q(u) from fitted guide parameters, or a point mass at a posterior draw ``params["u"]`` [P, M]: their
        shapes as :func:`models.numpyro._base.q_parameter` reads them (single output: [M], [M, M] accepted)."""
        P, M = self.num_latent, self.num_inducing
        if "u" in params:
            return q_parameter(params, "u", (P, M)), None
        if self.q_diag:
            return q_parameter(params, "u_loc", (P, M)), q_parameter(params, "u_scale", (P, M))
        return q_parameter(params, "u_loc", (P, M)), q_parameter(params, "u_scale_tril", (P, M, M))

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """E_{q(f_n)}[log p(y_n | f_n)] per data point: [N] (or [N, P]).

        With a posterior draw ``params["u"]`` this is the variational potential log φ(y_n | u, θ) (thesis
        eq 5.26), the per-point factor of the density that SGPMC samples; with guide parameters it is the
        per-point term of the ELBO (eq 4.22).
        """
        kernel, likelihood = self.fitted(params)
        Z = jnp.asarray(params.get("Z", self.Z))
        q_mu, q_sqrt = self._q(params)
        mean, var = conditionals.inducing_conditional(kernel, Z, X, q_mu, q_sqrt, whiten=self.whiten)
        Y = y[None, :] if y.ndim == 1 else y.T
        terms = likelihood.expectation_by_output(Y, mean, var)
        return terms[0] if y.ndim == 1 else terms.T

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f) at X_new (thesis eq 4.24, or eq 5.26's conditional at a draw ``params["u"]``)."""
        kernel, _ = self.fitted(params)
        Z = jnp.asarray(params.get("Z", self.Z))
        q_mu, q_sqrt = self._q(params)
        mean, var = conditionals.inducing_conditional(
            kernel, Z, X_new, q_mu, q_sqrt, whiten=self.whiten, full_cov=full_cov
        )
        return as_output_columns(mean, var, self.num_latent == 1)
