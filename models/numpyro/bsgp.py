"""BSGP: Bayesian sparse GPs with the inducing inputs sampled too (Rossi et al., BSGP paper Eq. 5; spec 001 §1).

Generative model (whitened, as the released code; spec §1.6)::

    log λ_d ~ N(0, 1),  log σ_k² ~ N(log 0.05, 1)       kernel θ (RBF-ARD, k = σ_k² exp(-½ Σ_d (x_d-x'_d)²/λ_d²))
    Z ~ p_ξ(Z)  [M, D]                                   Normal, DPP, Strauss or uniform (numpyro/z_priors.py)
    v ~ N(0, I)  [P, M],  u = L_zz(Z, θ) v               inducing outputs, one column per output, shared Z and θ
    y_n | v, Z, θ:  exp ℓ_n                              the data term below

MCMC samples (v, Z, θ) from the free-form optimum log q̂ = Σ_n ℓ_n + log p(v) + log p(Z) + log p(θ) (Eq. 6),
with f_n | v, Z, θ ~ N(m_n, s_n), m_n = a_nᵀ v, s_n = k_nn − a_nᵀ a_n, a_n = L_zz⁻¹ k_zn. The data term is

The choice between them is the model's ``likelihood_term`` (``data_term`` on the command line):

* ``"log_expected"`` (default): ℓ_n = log E_{N(f_n; m_n, s_n)} p(y_n | f_n), e.g. log N(y_n; m_n, s_n + σ²).
  This is what the released code uses and what produced the paper's Table 6 (spec §1.3);
* ``"expected_log"``: ℓ_n = E_{N(f_n; m_n, s_n)} log p(y_n | f_n), the paper's Eq. 6.

The Gaussian noise σ² (site ``"likelihood.variance"``) is a ``param`` by default: the SG-MCMC kernel optimises
it alongside the chain (:class:`ppl_sparsegp.infer.sghmc.PointEstimates`, Adam 0.01 on window states, spec
§2.3). Naming it in ``priors`` samples it instead (e.g. with :func:`noise_prior`), which NUTS needs.
Minibatches: ``batch_size`` points (default 1000, min(1000, N) as the paper) per evaluation through the
``"data"`` plate, scaled by N/B.

Point estimates in place of sampling (the SGHMC-DGP baseline of Havasi et al. 2018, spec §2.6;
:mod:`ppl_sparsegp.recipes.sghmc_dgp`): naming ``"Z"`` and kernel hyperparameter sites in ``optimised`` makes them
``param`` sites with no prior term (Z's prior ``z_prior`` and their hyperpriors drop out of the log joint), which
:meth:`BSGP.point_estimate_sites` lists beside the noise for the SG-MCMC kernel to optimise; only v is then sampled.

Site names: ``"kernel.lengthscale"`` [D], ``"kernel.variance"``, ``"likelihood.variance"``, ``"Z"`` [M, D],
``"u"`` [P, M] (holding v), plate ``"data"``, factor ``"y"``. Predictions mix the Gaussian predictives of the
draws (:mod:`ppl_sparsegp.posterior.predict`), recomputing K_zz for every draw of Z and θ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from ppl_sparsegp.core import conditionals
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.numpyro import sites
from ppl_sparsegp.numpyro.z_priors import Z_PRIORS, z_prior

from .._shared import (  # noqa: F401 (re-exported: the CLI, recipes, runs use them)
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


def bsgp_priors(kernel: Kernel) -> dict[str, dist.Distribution]:
    """The paper's hyperpriors for an RBF kernel: lengthscales LogNormal(0, 1), variance LogNormal(log 0.05, 1).

    On the log scale these are log λ_d ~ N(0, 1) and log σ_k² ~ N(log 0.05, 1) (spec §1.5); NumPyro's exp
    transform adds the Jacobian, so sampling the unconstrained coordinates targets exactly that.
    """
    params = kernel.parameters()
    if set(params) != {"variance", "lengthscale"}:
        raise ValueError(f"kernel: the BSGP hyperpriors are for an RBF-like kernel, got parameters {sorted(params)}")
    shape = np.shape(params["lengthscale"])
    return {
        "kernel.lengthscale": dist.LogNormal(0.0, 1.0).expand(shape).to_event(len(shape)),
        "kernel.variance": dist.LogNormal(math.log(0.05), 1.0),
    }


def noise_prior() -> dist.Distribution:
    """A prior for sampling the Gaussian noise variance of standardised targets: LogNormal(0, 1).

    The paper gives none (it optimises σ²); this one is centred on the initial value var(y) = 1 and is weak
    next to the likelihood of a few hundred points.
    """
    return dist.LogNormal(0.0, 1.0)


def build_z_prior(
    prior: str | dist.Distribution, options: Mapping[str, Any], num_inducing: int, input_dim: int, kernel: Kernel
) -> dist.Distribution:
    """The prior over Z [M, D]: a given distribution, or one of :data:`Z_PRIORS` by name (the DPP uses ``kernel``)."""
    if isinstance(prior, dist.Distribution):
        return prior
    return z_prior(prior, num_inducing, input_dim, kernel=kernel, **options)


def check_z_prior(prior: str | dist.Distribution, num_inducing: int, input_dim: int) -> None:
    if isinstance(prior, dist.Distribution):
        if tuple(prior.event_shape) != (num_inducing, input_dim):
            raise ValueError(f"z_prior: expected event shape {(num_inducing, input_dim)}, got {prior.event_shape}")
    elif prior not in Z_PRIORS:
        raise ValueError(f"z_prior: expected one of {Z_PRIORS} or a distribution over [M, D], got {prior!r}")


@dataclass(eq=False)
class BSGP(GPModel):
    """Shallow BSGP: v, Z and θ sampled; see the module docstring for the model and its sites.

    Args (beyond :class:`models.numpyro._base.GPModel`'s kernel, likelihood, priors, fixed):
        Z: the initial inducing inputs [M, D] (k-means on X in the paper); their prior is ``z_prior``.
        num_latent: P, outputs sharing Z and θ (one column of y each).
        batch_size: points per evaluation through the ``"data"`` plate (default 1000; None: all).
        z_prior: ``"normal"`` (default), ``"dpp"``, ``"strauss"``, ``"uniform"``, or a distribution over [M, D].
        z_prior_options: keyword arguments of :func:`ppl_sparsegp.numpyro.z_priors.z_prior` (e.g. Strauss'
            ``gamma``, ``radius``, ``smoothness``).
        likelihood_term: ``"log_expected"`` (default, Table 6) or ``"expected_log"`` (Eq. 6); see
            :func:`data_log_likelihood`.
        priors: default :func:`bsgp_priors` for the kernel (less the ``optimised`` sites); every kernel
            hyperparameter must be sampled, fixed or optimised.
        optimised: ``"Z"`` and kernel hyperparameter sites that are ``param`` sites (point estimates, no prior)
            instead of sampled (default none: BSGP); all of them gives SGHMC-DGP's model (module docstring).
    """

    Z: Array = None
    num_latent: int = 1
    batch_size: int | None = 1000
    z_prior: str | dist.Distribution = "normal"
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
        return int(np.shape(self.Z)[0])

    @property
    def input_dim(self) -> int:
        return int(np.shape(self.Z)[1])

    def model(self, X: Array, y: Array | None = None) -> None:
        """θ ~ p(θ), Z ~ p_ξ(Z | θ), v ~ N(0, I), then exp ℓ_n per point of a minibatch (scaled by N/B); with
        ``y=None`` (NumPyro's ``Predictive``), f and y at every row of X given Z, v and θ as ``"f"`` and ``"y"``."""
        self.check_data(X, y)
        check_output_columns(y, self.num_latent)
        kernel, likelihood = self.hyperparameters()
        if "Z" in self.optimised:
            Z = numpyro.param("Z", jnp.asarray(self.Z))
        else:
            Z = numpyro.sample("Z", build_z_prior(self.z_prior, self.z_prior_options, *np.shape(self.Z), kernel))
        ell = partial(data_log_likelihood, likelihood, self.likelihood_term)
        sites.whitened_inducing_data(kernel, likelihood, Z, self.num_latent, X, y, self.batch_size, ell)

    def guide(self, X: Array, y: Array | None = None) -> None:
        raise NotImplementedError("BSGP has no variational guide: sample it with SGHMC or NUTS (see fit_bsgp)")

    def point_estimate_sites(self) -> tuple[str, ...]:
        """The ``param`` sites an SG-MCMC kernel should optimise: the ``optimised`` ones and the likelihood's that
        are neither sampled nor fixed (e.g. the Gaussian noise)."""
        held = {*self.priors, *self.fixed}
        noise = (s for s in self.hyperparameter_sites() if s.startswith("likelihood.") and s not in held)
        return (*self.optimised, *noise)

    def initial_values(self) -> dict[str, Array]:
        """The released code's starting point (spec §2.4) of the sampled sites: Z as given, v = 0, θ at the
        kernel's values (the ``optimised`` sites start there too, as params)."""
        initial = self.hyperparameter_sites()
        values = {s: jnp.asarray(initial[s]) for s in self.priors}
        if "Z" not in self.optimised:
            values["Z"] = jnp.asarray(self.Z)
        values["u"] = jnp.zeros((self.num_latent, self.num_inducing), jnp.asarray(self.Z).dtype)
        return values

    def _draw(self, params: Mapping[str, Array]) -> tuple[Kernel, Likelihood, Array, Array]:
        """Kernel, likelihood, Z [M, D] and v [P, M] of one posterior draw."""
        kernel, likelihood = self.fitted(params)
        return kernel, likelihood, jnp.asarray(params.get("Z", self.Z)), jnp.asarray(params["u"])

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """ℓ_n of one draw per data point: [N] (or [N, P])."""
        kernel, likelihood, Z, v = self._draw(params)
        mean, var = conditionals.inducing_conditional(kernel, Z, jnp.asarray(X), v)
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
