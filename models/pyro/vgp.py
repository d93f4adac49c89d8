"""VGP: the non-sparse variational GP with the Opper-Archambeau q(f) (thesis §2.2.3 eq 2.14) as a Pyro program, the
twin of :mod:`models.numpyro.vgp` (its docstring states the model, the guide and the ELBO).

Site names (as the NumPyro twin's): hyperparameter sites; latent ``"v"`` [P, N] (whitened latent values at the
training inputs, f = L v, K(X, X) = L Lᵀ); plate ``"data"``; factor ``"y"`` [N]; guide params ``"q_alpha"`` and
``"q_lambda"`` [P, N] (λ positive).

The guide's q(v_p) = N(Lᵀ α_p, C_p⁻¹), C_p = I + Lᵀ diag(λ_p²) L (:mod:`ppl_sparsegp.core.opper_archambeau`),
depends on the hyperparameters through K. The model scores the data under the marginals q(f_n) of the guide's
parameters, and ``TraceMeanField_ELBO`` takes KL[q(v) || N(0, I)] in closed form, so its loss is the exact
negative ELBO.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import pyro
import torch
from torch.distributions import constraints

from ppl_sparsegp import validation
from ppl_sparsegp.core import conditionals, kl, ops
from ppl_sparsegp.core.opper_archambeau import marginals, whitened_q
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import as_output_columns, check_output_columns
from ._base import GPModel, q_parameter

Array = Any


@dataclass(eq=False)
class VGP(GPModel):
    """Non-sparse variational GP over the N training inputs; the fields of :class:`models.numpyro.vgp.VGP`.
    Predicts from the training inputs (``X=``, ``y=`` to predict_f).

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
        """v ~ N(0, I) and the data term under q(f_n) as the factor ``"y"``; with ``y=None``
        (``pyro.infer.Predictive``), f = L v and y at the training inputs as the sites ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        check_output_columns(y, self.num_latent, self.likelihood)
        kernel, likelihood = self.hyperparameters()
        L = ops.cholesky(kernel(X))
        v = sites.inducing_outputs(self.num_latent, X.shape[0], None, X.dtype, name="v")
        if y is None:
            sites.predictive_at_values(likelihood, v @ L.T)
            return
        q_mu, q_sqrt = whitened_q(L, *self._q_parameters(X.shape[0], X.dtype))
        with sites.data_plate(X.shape[0]):
            mean, var = marginals(L, q_mu, q_sqrt)
            pyro.factor("y", torch.sum(likelihood.expectation_by_output(sites.batch(None, y, None)[1], mean, var), 0))

    def guide(self, X: Array, y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors and v ~ q(v), which depends on them through K."""
        kernel, _ = sites.guide_hyperparameters(self.kernel, self.likelihood, self.priors, self.fixed)
        X = as_tensor(X)
        L = ops.cholesky(kernel(X))
        sites.inducing_posterior(*whitened_q(L, *self._q_parameters(X.shape[0], X.dtype)), name="v")

    def _q_parameters(self, N: int, dtype: Any) -> tuple[Array, Array]:
        """The params α (zeros) and λ (ones, positive), [P, N] each."""
        shape = (self.num_latent, N)
        alpha = pyro.param("q_alpha", torch.zeros(shape, dtype=dtype))
        return alpha, pyro.param("q_lambda", torch.ones(shape, dtype=dtype), constraint=constraints.positive)

    def _q(self, params: Mapping[str, Array], L: Array) -> tuple[Array, Array | None]:
        """q(v) from fitted parameters, or a point mass at a draw ``params["v"]`` [P, N]."""
        shape = (self.num_latent, L.shape[0])
        if "v" in params:
            return q_parameter(params, "v", shape), None
        return whitened_q(L, q_parameter(params, "q_alpha", shape), q_parameter(params, "q_lambda", shape))

    def elbo(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """The ELBO (eq 2.14) at given parameters: Σ_n E_q[log p(y_n | f_n)] - KL[q(v) || N(0, I)] (scalar)."""
        kernel, _ = self.fitted(params)
        q_mu, q_sqrt = self._q(params, ops.cholesky(kernel(as_tensor(X))))
        return torch.sum(self.pointwise_log_likelihood(params, X, y)) - kl.kl_qu_pu(q_mu, q_sqrt)

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """E_{q(f_n)}[log p(y_n | f_n)] per data point (with a draw ``params["v"]``: log p(y_n | f_n), f = L v):
        [N] (or [N, P])."""
        kernel, likelihood = self.fitted(params)
        L = ops.cholesky(kernel(as_tensor(X)))
        mean, var = marginals(L, *self._q(params, L))
        per_point = likelihood.expectation_by_output(sites.batch(None, as_tensor(y), None)[1], mean, var)
        return per_point[0] if per_point.shape[0] == 1 else per_point.T

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f(X_new)) = ∫ p(f(X_new) | v) q(v) dv, or p(f(X_new) | v) of a draw ``params["v"]``."""
        kernel, _ = self.fitted(params)
        q_mu, q_sqrt = self._q(params, ops.cholesky(kernel(X)))
        mean, var = conditionals.inducing_conditional(kernel, X, X_new, q_mu, q_sqrt, full_cov=full_cov)
        return as_output_columns(mean, var, self.num_latent == 1)
