"""VGP: the non-sparse variational GP with the Opper-Archambeau q(f) (thesis §2.2.3 eq 2.14; digest §3.9).

Site names: hyperparameter sites of :mod:`models.numpyro._base`; latent ``"v"`` [P, N] (whitened latent values at
the training inputs, f = L v, K(X, X) = L Lᵀ); plate ``"data"``; factor ``"y"`` [N]; guide params ``"q_alpha"``
and ``"q_lambda"`` [P, N] (λ positive).

Generative model (the one GPMC samples)::

    v ~ N(0, I) [P, N],  f = L v        (f ~ N(0, K))
    y_n | f ~ p(y_n | f_n)              (any likelihood in ppl_sparsegp.core.likelihoods, multi-class included)

Guide: q(f_p) = N(K α_p, (K⁻¹ + diag λ_p²)⁻¹), 2N parameters per latent function, which is q(v_p) = N(Lᵀ α_p,
C_p⁻¹) with C_p = I + Lᵀ diag(λ_p²) L (:mod:`ppl_sparsegp.core.opper_archambeau`). The guide depends on the
hyperparameters through K.

ELBO (eq 2.14) = Σ_n E_{q(f_n)}[log p(y_n | f_n)] - KL[q(v) || N(0, I)]. As SVGP's ``data_term="analytic"``, the
model scores the data under the marginals q(f_n) of the guide's parameters, and ``TraceMeanField_ELBO`` takes the
KL in closed form, so the ELBO is exact. Cost O(N³) per step. It is the non-sparse comparator of SVGP: SVGP with
Z = X and a free Cholesky q(u) reaches the same optimum, with N(N+1)/2 rather than 2N parameters per function.

The 2N parameters are poorly conditioned when the kernel variance is large, so optimisers need many steps. Measured
on 120 probit-labelled points, kernel learned jointly: L-BFGS stayed near a loss of 31.2 for hundreds of steps and
reached the optimum of 26.86 after 5000, which SVGP with Z = X (``learn_Z=False``) reached in under 1000. Where N
allows the N² parameters, that SVGP is the quicker way to the same fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpyro
from numpyro.distributions import constraints

from ppl_sparsegp import validation
from ppl_sparsegp.core import conditionals, kl, ops
from ppl_sparsegp.core.opper_archambeau import marginals, whitened_q
from ppl_sparsegp.numpyro import sites

from .._shared import as_output_columns, check_output_columns
from ._base import GPModel, q_parameter

Array = Any


@dataclass(eq=False)
class VGP(GPModel):
    """Non-sparse variational GP over the N training inputs; predicts from them (``X=``, ``y=`` to predict_f).

    Args (beyond :class:`GPModel`'s kernel, likelihood, priors, fixed):
        num_latent: P, latent functions sharing the kernel (one per output column of y; J for J classes).
    """

    num_latent: int = 1
    predicts_from_data: ClassVar[bool] = True
    multiclass: ClassVar[bool] = True

    def __post_init__(self) -> None:
        validation.check_count("num_latent", self.num_latent, minimum=1)
        super().__post_init__()

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameters', ``"v"`` and q's ``"q_alpha"``, ``"q_lambda"``."""
        return super().parameter_names() | {"v", "q_alpha", "q_lambda"}

    def model(self, X: Array, y: Array | None = None) -> None:
        """v ~ N(0, I) and the data term under q(f_n) as the factor ``"y"``; with ``y=None`` (NumPyro's
        ``Predictive``), f = L v and y at the training inputs as the sites ``"f"`` and ``"y"``."""
        self.check_data(X, y)
        check_output_columns(y, self.num_latent, self.likelihood)
        kernel, likelihood = self.hyperparameters()
        X = jnp.asarray(X)
        L = ops.cholesky(kernel(X))
        v = sites.inducing_outputs(self.num_latent, X.shape[0], None, X.dtype, name="v")
        if y is None:
            sites.predictive_at_values(likelihood, v @ L.T)
            return
        q_mu, q_sqrt = whitened_q(L, *self._q_parameters(X.shape[0], X.dtype))
        with sites.data_plate(X.shape[0]):
            mean, var = marginals(L, q_mu, q_sqrt)
            numpyro.factor("y", jnp.sum(likelihood.expectation_by_output(sites.batch(None, y, None)[1], mean, var), 0))

    def guide(self, X: Array, y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors and v ~ q(v), which depends on them through K."""
        kernel, _ = sites.guide_hyperparameters(self.kernel, self.likelihood, self.priors, self.fixed)
        X = jnp.asarray(X)
        L = ops.cholesky(kernel(X))
        sites.inducing_posterior(*whitened_q(L, *self._q_parameters(X.shape[0], X.dtype)), name="v")

    def _q_parameters(self, N: int, dtype: Any) -> tuple[Array, Array]:
        """The params α (zeros) and λ (ones, positive), [P, N] each."""
        shape = (self.num_latent, N)
        alpha = numpyro.param("q_alpha", jnp.zeros(shape, dtype))
        return alpha, numpyro.param("q_lambda", jnp.ones(shape, dtype), constraint=constraints.positive)

    def _q(self, params: Mapping[str, Array], L: Array) -> tuple[Array, Array | None]:
        """q(v) from fitted parameters, or a point mass at a draw ``params["v"]`` [P, N]."""
        shape = (self.num_latent, L.shape[0])
        if "v" in params:
            return q_parameter(params, "v", shape), None
        return whitened_q(L, q_parameter(params, "q_alpha", shape), q_parameter(params, "q_lambda", shape))

    def elbo(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """The ELBO (eq 2.14) at given parameters: Σ_n E_q[log p(y_n | f_n)] - KL[q(v) || N(0, I)] (scalar)."""
        kernel, _ = self.fitted(params)
        q_mu, q_sqrt = self._q(params, ops.cholesky(kernel(jnp.asarray(X))))
        return jnp.sum(self.pointwise_log_likelihood(params, X, y)) - kl.kl_qu_pu(q_mu, q_sqrt)

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """E_{q(f_n)}[log p(y_n | f_n)] per data point (with a draw ``params["v"]``: log p(y_n | f_n), f = L v):
        [N] (or [N, P])."""
        kernel, likelihood = self.fitted(params)
        L = ops.cholesky(kernel(jnp.asarray(X)))
        mean, var = marginals(L, *self._q(params, L))
        per_point = likelihood.expectation_by_output(sites.batch(None, jnp.asarray(y), None)[1], mean, var)
        return per_point[0] if per_point.shape[0] == 1 else per_point.T

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f(X_new)) = ∫ p(f(X_new) | v) q(v) dv, or p(f(X_new) | v) of a draw ``params["v"]``."""
        kernel, _ = self.fitted(params)
        X = jnp.asarray(X)
        q_mu, q_sqrt = self._q(params, ops.cholesky(kernel(X)))
        mean, var = conditionals.inducing_conditional(kernel, X, X_new, q_mu, q_sqrt, full_cov=full_cov)
        return as_output_columns(mean, var, self.num_latent == 1)
