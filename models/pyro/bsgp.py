"""BSGP: Bayesian sparse GPs with the inducing inputs sampled too (Rossi et al., BSGP paper Eq. 5) as a Pyro
program, the twin of :mod:`models.numpyro.bsgp` (its docstring states the model and the two data terms)::

    log λ_d ~ N(0, 1),  log σ_k² ~ N(log 0.05, 1),  Z ~ p_ξ(Z) [M, D],  v ~ N(0, I) [P, M],  y_n: exp ℓ_n

with ℓ_n = log E_{N(f_n; m_n, s_n)} p(y_n | f_n) (``"log_expected"``, default) or E[log p(y_n | f_n)]
(``"expected_log"``), f_n | v, Z, θ the whitened conditional
(:func:`ppl_sparsegp.core.conditionals.inducing_conditional`).

Site names (as the NumPyro twin's): ``"kernel.lengthscale"`` [D], ``"kernel.variance"``, ``"likelihood.variance"``
(a param, optimised by :class:`ppl_sparsegp.pyro.sgmcmc.PointEstimates` unless given a prior), ``"Z"`` [M, D],
``"u"`` [P, M] (holding v), plate ``"data"`` (``batch_size`` points per evaluation, scaled by N/B), factor ``"y"``.
Sites named in ``optimised`` (``"Z"``, kernel hyperparameters) are ``pyro.param`` sites with no prior term, as in
the NumPyro twin (SGHMC-DGP's model, :mod:`ppl_sparsegp.recipes.sghmc_dgp_pyro`).
Sample it with ``pyro.infer.MCMC`` and :class:`ppl_sparsegp.pyro.sgmcmc.AdaptiveSGHMC` over ``model.model``, with
``point_estimates=PointEstimates(model.point_estimate_sites())`` and
``init_strategy=init_to_value(values=model.initial_values())``; a draw predicts through :meth:`BSGP.predict_f`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import pyro
import pyro.distributions as dist
import torch

from ppl_sparsegp.core import conditionals
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor
from ppl_sparsegp.pyro.z_priors import Z_PRIORS, z_prior

from .._shared import (  # noqa: F401 (LIKELIHOOD_TERMS, bsgp_kernel: the NumPyro twin's public names)
    LIKELIHOOD_TERMS,
    as_output_columns,
    bsgp_kernel,
    check_likelihood_term,
    check_output_columns,
    check_sparse_settings,
    checked_optimised,
    data_log_likelihood,
)
from ._base import GPModel

Array = Any


def bsgp_priors(kernel: Kernel) -> dict[str, dist.TorchDistribution]:
    """The paper's hyperpriors for an RBF kernel: lengthscales LogNormal(0, 1), variance LogNormal(log 0.05, 1)
    (log λ_d ~ N(0, 1), log σ_k² ~ N(log 0.05, 1); spec §1.5), as Pyro distributions."""
    params = kernel.parameters()
    if set(params) != {"variance", "lengthscale"}:
        raise ValueError(f"kernel: the BSGP hyperpriors are for an RBF-like kernel, got parameters {sorted(params)}")
    shape = tuple(as_tensor(params["lengthscale"]).shape)
    one = as_tensor(1.0)
    return {
        "kernel.lengthscale": dist.LogNormal(0.0 * one, one).expand(shape).to_event(len(shape)),
        "kernel.variance": dist.LogNormal(math.log(0.05) * one, one),
    }


def noise_prior() -> dist.TorchDistribution:
    """LogNormal(0, 1) for sampling the Gaussian noise variance of standardised targets (the NumPyro twin's)."""
    one = as_tensor(1.0)
    return dist.LogNormal(0.0 * one, one)


def build_z_prior(
    prior: str | dist.TorchDistribution, options: Mapping[str, Any], num_inducing: int, input_dim: int, kernel: Kernel
) -> dist.TorchDistribution:
    """The prior over Z [M, D]: a given distribution, or one of :data:`Z_PRIORS` by name (the DPP uses ``kernel``)."""
    if isinstance(prior, torch.distributions.Distribution):
        return prior
    return z_prior(prior, num_inducing, input_dim, kernel=kernel, **options)


def check_z_prior(prior: str | dist.TorchDistribution, num_inducing: int, input_dim: int) -> None:
    if isinstance(prior, torch.distributions.Distribution):
        if tuple(prior.event_shape) != (num_inducing, input_dim):
            raise ValueError(f"z_prior: expected event shape {(num_inducing, input_dim)}, got {prior.event_shape}")
    elif prior not in Z_PRIORS:
        raise ValueError(f"z_prior: expected one of {Z_PRIORS} or a distribution over [M, D], got {prior!r}")


@dataclass(eq=False)
class BSGP(GPModel):
    """Shallow BSGP: v, Z and θ sampled; the fields are the NumPyro twin's (``z_prior`` a name or a Pyro
    distribution over [M, D]; ``priors`` default :func:`bsgp_priors` less the ``optimised`` sites, every kernel
    hyperparameter sampled, fixed or optimised)."""

    Z: Array = None
    num_latent: int = 1
    batch_size: int | None = 1000
    z_prior: str | dist.TorchDistribution = "normal"
    z_prior_options: Mapping[str, Any] = field(default_factory=dict)
    likelihood_term: Literal["log_expected", "expected_log"] = "log_expected"
    optimised: Sequence[str] = ()

    def __post_init__(self) -> None:
        check_sparse_settings(self.Z, num_latent=self.num_latent, batch_size=self.batch_size)
        check_likelihood_term(self.likelihood_term)
        kernel_sites = {s for s in self.hyperparameter_sites() if s.startswith("kernel.")}
        if not self.priors:
            self.priors = {k: v for k, v in bsgp_priors(self.kernel).items() if k not in self.optimised}
        self.optimised = checked_optimised(self.optimised, kernel_sites, self.priors, self.fixed)
        super().__post_init__()
        check_z_prior(self.z_prior, self.num_inducing, self.input_dim)
        unsampled = kernel_sites - set(self.priors) - set(self.fixed) - set(self.optimised)
        if unsampled:
            raise ValueError(
                f"priors: BSGP samples the kernel hyperparameters; give a prior (or name in `fixed` or `optimised`) "
                f"for {sorted(unsampled)}"
            )

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameters', ``"Z"`` and ``"u"``."""
        return super().parameter_names() | {"Z", "u"}

    @property
    def num_inducing(self) -> int:
        return int(self.Z.shape[0])

    @property
    def input_dim(self) -> int:
        return int(self.Z.shape[1])

    def model(self, X: Array, y: Array | None = None) -> None:
        """θ ~ p(θ), Z ~ p_ξ(Z | θ), v ~ N(0, I), then exp ℓ_n per point of a minibatch (scaled by N/B); with
        ``y=None`` (``pyro.infer.Predictive``), f and y at every row of X as ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        check_output_columns(y, self.num_latent)
        kernel, likelihood = self.hyperparameters()
        if "Z" in self.optimised:
            Z = pyro.param("Z", self.Z.clone())
        else:
            Z = pyro.sample("Z", build_z_prior(self.z_prior, self.z_prior_options, *self.Z.shape, kernel))
        ell = partial(data_log_likelihood, likelihood, self.likelihood_term)
        sites.whitened_inducing_data(kernel, likelihood, Z, self.num_latent, X, y, self.batch_size, ell)

    def guide(self, X: Array, y: Array | None = None) -> None:
        raise NotImplementedError("BSGP has no variational guide: sample it with SGHMC or NUTS")

    def point_estimate_sites(self) -> tuple[str, ...]:
        """The ``param`` sites an SG-MCMC kernel should optimise: the ``optimised`` ones and the likelihood's that
        are neither sampled nor fixed (e.g. the Gaussian noise)."""
        held = {*self.priors, *self.fixed}
        noise = (s for s in self.hyperparameter_sites() if s.startswith("likelihood.") and s not in held)
        return (*self.optimised, *noise)

    def initial_values(self) -> dict[str, Array]:
        """The released code's starting point (spec §2.4): Z as given, v = 0, θ at the kernel's values."""
        initial = self.hyperparameter_sites()
        values = {s: initial[s] for s in self.priors}
        if "Z" not in self.optimised:
            values["Z"] = self.Z.clone()
        values["u"] = torch.zeros((self.num_latent, self.num_inducing), dtype=self.Z.dtype)
        return values

    def _draw(self, params: Mapping[str, Array]) -> tuple[Kernel, Likelihood, Array, Array]:
        """Kernel, likelihood, Z [M, D] and v [P, M] of one posterior draw."""
        kernel, likelihood = self.fitted(params)
        return kernel, likelihood, as_tensor(params.get("Z", self.Z)), as_tensor(params["u"])

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """ℓ_n of one draw per data point: [N] (or [N, P])."""
        kernel, likelihood, Z, v = self._draw(params)
        X, y = as_tensor(X), as_tensor(y)
        with torch.no_grad():
            mean, var = conditionals.inducing_conditional(kernel, Z, X, v)
            Y = y[None, :] if y.ndim == 1 else y.T
            terms = data_log_likelihood(likelihood, self.likelihood_term, Y, mean, var)
        return terms[0] if y.ndim == 1 else terms.T

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """p(f(X_new) | v, Z, θ) of one draw."""
        kernel, _, Z, v = self._draw(params)
        mean, var = conditionals.inducing_conditional(kernel, Z, X_new, v, full_cov=full_cov)
        return as_output_columns(mean, var, self.num_latent == 1)
