"""Bayesian GP-LVM: a sparse variational GP whose inputs are latent (Titsias & Lawrence 2010; spec 000 §4.2).

Generative model over observations Y [N, D] with latent inputs X [N, Q] (Uhrenholt et al. 2021, §5.3 and App. A,
the GP-LVM as a one-layer special case of the deep GP)::

    x_n ~ N(0, I_Q)                                      latent inputs
    u_d ~ N(0, Kmm),  d = 1..D                           unwhitened inducing outputs at Z [M, Q], one per output
    f_d(x_n) | u_d ~ p(f | u_d)                          D outputs sharing one (RBF-ARD) kernel over latent space
    y_nd | f_d(x_n) ~ N(f_d(x_n), σ²)                    (any likelihood of :mod:`ppl_sparsegp.core.likelihoods`)

Both models here have the guide q(x_n) = N(μ_n, diag s_n²) (:class:`LatentInputs`) and differ in q(u):

* :class:`BayesianGPLVM` learns q(u_d) = N(m_d, S_d); its bound is the uncollapsed one (spec §4.2)::

      L = Σ_n E_{q(x_n)} E_{q(f(x_n))}[log p(y_n | f(x_n))] − Σ_d KL[q(u_d) ‖ p(u_d)] − Σ_n KL[q(x_n) ‖ p(x_n)],

  with the inner expectation over f in closed form (Gaussian likelihood) or by Gauss-Hermite, exactly as in
  :class:`SVGP`, and the outer one over x_n by one reparameterised draw per step. Both KLs are closed form
  (``TraceMeanField_ELBO`` through NumPyro's registered KLs). The model *is* the SVGP model with the inputs of each
  batch drawn from the latent prior instead of read from data (the hook ``_batch_inputs``), so minibatching, masks
  and the data term are SVGP's: ``batch_size=B`` subsamples the plate ``"data"``, which scales the data term and
  the latent KL by N/B; the guide draws the latents of the same rows (the model replays the guide's plate indices).
* :class:`CollapsedGPLVM` (Gaussian likelihood, full batch) has no q(u) parameters: at each latent draw X it takes
  Titsias' collapsed bound, whose q(u) is the optimal one for that X (thesis eq 4.12; :class:`SGPR`)::

      L_c = E_{q(X)}[Σ_d log N(y_d | 0, σ² I + Q_XX) − D Tr(K_XX − Q_XX) / (2σ²)] − Σ_n KL[q(x_n) ‖ p(x_n)].

  The collapsed bound at X is at least the uncollapsed data term minus KL[q(u) ‖ p(u)] for every q(u) (it is
  their maximum over q(u)) and at most log p(Y | X), so L ≤ L_c ≤ log p(Y). It is also at least Titsias &
  Lawrence's Ψ-statistics bound, which shares one q(u) across q(X) (the expectation of a maximum is at least the
  maximum of the expectation). Without an M × M q(u) per output to learn, it converges in far fewer steps (the
  oil-flow GP-LVM section of benchmarks/README.md).

Initialise μ by :func:`pca_latents` (PCA of Y rescaled to unit variance per latent dimension, as the released
code of Uhrenholt et al.); fix the noise with ``fixed=("likelihood.variance",)`` (their code fixes σ² = 0.01 on
standardised Y).

Sites: the latent ``"X"`` [B, Q] in the plate ``"data"`` and the guide params ``"X_loc"`` [N, Q] and ``"X_scale"``
[N, Q] (positive), plus those of :class:`SVGP` (``"u"`` [D, M], param ``"Z"`` [M, Q] unless ``learn_Z=False``,
factor ``"y"``) for :class:`BayesianGPLVM`, or those of :class:`SGPR` (factor ``"collapsed_bound"``) for
:class:`CollapsedGPLVM`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.distributions.kl import kl_divergence

from ppl_sparsegp import validation
from ppl_sparsegp.core import ops
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.numpyro.sites import data_plate

from ._base import _is_concrete
from .sgpr import SGPR
from .svgp import SVGP

Array = Any

LATENT_SITE = "X"
LATENT_LOC, LATENT_SCALE = "X_loc", "X_scale"


def pca_latents(Y: Array, latent_dim: int) -> np.ndarray:
    """PCA initialisation of the latent means: the top ``latent_dim`` principal scores of Y, unit variance each.

    Args:
        Y: observations [N, D]; latent_dim: Q with 1 <= Q <= min(N, D).

    Returns:
        [N, Q]: (Y − mean) V_Q / std, V_Q the leading right singular vectors, each column scaled to unit variance
        (the scale of the prior N(0, I)).
    """
    Y = np.asarray(Y)
    validation.check_inputs(Y, x_name="Y")
    if (
        isinstance(latent_dim, bool)
        or not isinstance(latent_dim, int | np.integer)
        or not (1 <= latent_dim <= min(Y.shape))
    ):
        raise ValueError(f"latent_dim: expected an integer in [1, min(N, D) = {min(Y.shape)}], got {latent_dim!r}")
    centred = Y - Y.mean(axis=0)
    _, _, Vt = np.linalg.svd(centred, full_matrices=False)
    scores = centred @ Vt[:latent_dim].T
    return scores / np.maximum(scores.std(axis=0), np.finfo(Y.dtype).tiny)


@dataclass(eq=False, kw_only=True)
class LatentInputs:
    """The latent inputs of a GP-LVM (a mixin before :class:`SVGP` or :class:`SGPR`): p(x_n) = N(0, I_Q) and the
    guide q(x_n) = N(μ_n, diag s_n²) over the N rows of Y.

    Args:
        X_init: initial latent means μ [N, Q] (e.g. :func:`pca_latents`); fixes N and Q.
        X_scale_init: initial latent standard deviation s (every n, q), > 0.
    """

    X_init: Array = None
    X_scale_init: float = 0.1

    def __post_init__(self) -> None:
        if self.X_init is None:
            raise ValueError("X_init: expected initial latent means of shape [N, Q] (see pca_latents), got None")
        validation.check_inputs(self.X_init, x_name="X_init")
        validation.check_positive("X_scale_init", self.X_scale_init)
        super().__post_init__()
        validation.check_same_dim(self.Z, self.X_init, x_name="X_init")

    def initial_params(self) -> dict[str, Array]:
        """Initial values for :func:`fit_svi`'s ``init_params`` beyond the defaults: none here (a collapsed q(u)
        has no parameters); :class:`BayesianGPLVM` starts its learned q(u) at the prior."""
        return {}

    @property
    def num_points(self) -> int:
        return int(np.shape(self.X_init)[0])

    @property
    def latent_dim(self) -> int:
        return int(np.shape(self.X_init)[1])

    def check_observations(self, Y: Array, num_columns: int | None = None) -> None:
        """Eager checks of the observations Y [N, D]: N rows (those of ``X_init``) and, when given, ``num_columns``
        columns. Traced values are skipped."""
        if _is_concrete(Y):
            validation.check_inputs(Y, x_name="Y")
            columns = "D" if num_columns is None else num_columns
            if Y.ndim != 2 or Y.shape[0] != self.num_points or (num_columns is not None and Y.shape[1] != num_columns):
                raise ValueError(
                    f"Y: expected shape [N, D] = [{self.num_points}, {columns}] (rows of X_init), got {Y.shape}"
                )

    def latent_prior(self, batch: int) -> Array:
        """The model's site ``"X"``: latent inputs of ``batch`` rows from N(0, I), inside the plate -> [B, Q]."""
        zeros = jnp.zeros((batch, self.latent_dim), dtype=jnp.asarray(self.X_init).dtype)
        return numpyro.sample(LATENT_SITE, dist.Normal(zeros, 1.0).to_event(1))

    def latent_guide(self) -> None:
        """The guide's site ``"X"`` under q(X), over the rows of the ``"data"`` plate (a minibatch or all N)."""
        loc, scale = self.latent_parameters()
        with data_plate(self.num_points, getattr(self, "batch_size", None)) as idx:
            batch = (loc, scale) if idx is None else (loc[idx], scale[idx])
            numpyro.sample(LATENT_SITE, dist.Normal(*batch).to_event(1))

    def latent_parameters(self) -> tuple[Array, Array]:
        """The guide's q(X) parameters as NumPyro params: (X_loc [N, Q], X_scale [N, Q] positive)."""
        init = jnp.asarray(self.X_init)
        loc = numpyro.param(LATENT_LOC, init)
        scale_init = jnp.full(init.shape, self.X_scale_init, dtype=init.dtype)
        return loc, numpyro.param(LATENT_SCALE, scale_init, constraint=constraints.positive)

    def _q_latent(self, params: Mapping[str, Array]) -> dist.Distribution:
        return dist.Normal(jnp.asarray(params[LATENT_LOC]), jnp.asarray(params[LATENT_SCALE])).to_event(1)

    def latent_means(self, params: Mapping[str, Array]) -> np.ndarray:
        """μ [N, Q], the fitted latent means (the embedding of Y)."""
        return np.asarray(params[LATENT_LOC])

    def kl_latent(self, params: Mapping[str, Array]) -> Array:
        """Σ_n KL[q(x_n) ‖ N(0, I)] = ½ Σ_nq (s² + μ² − 1 − log s²), closed form (scalar)."""
        q = self._q_latent(params)
        return jnp.sum(kl_divergence(q, dist.Normal(jnp.zeros_like(q.mean), 1.0).to_event(1)))

    def elbo(self, params: Mapping[str, Array], Y: Array, key: Array, num_samples: int = 1) -> Array:
        """Full-batch Monte Carlo estimate of the bound (module docstring) with ``num_samples`` draws of X.

        Each draw X⁽ˢ⁾ = μ + s ⊙ ε⁽ˢ⁾ enters the sparse GP's bound at those inputs (``elbo(params, X, Y)`` of the
        next class in the MRO: :meth:`SVGP.elbo` or :meth:`SGPR.elbo`); the latent KL is exact. Unbiased; scalar.
        """
        bound_at = super().elbo

        @jax.jit
        def estimate(params: Mapping[str, Array], Y: Array, key: Array) -> Array:
            draws = self._q_latent(params).sample(key, (num_samples,))
            bounds = jax.vmap(lambda X: bound_at(params, X, Y))(draws)
            return jnp.mean(bounds) - self.kl_latent(params)

        return estimate(dict(params), jnp.asarray(Y), key)


@dataclass(eq=False)
class BayesianGPLVM(LatentInputs, SVGP):
    """Bayesian GP-LVM over Y [N, D] with latent inputs [N, Q] and inducing inputs ``Z`` [M, Q]; q(u) learned.

    Args: those of :class:`LatentInputs` and :class:`SVGP` (``num_latent`` must be D, ``whiten`` must stay False).
    """

    whiten: bool = False

    def __post_init__(self) -> None:
        if self.whiten:
            raise ValueError("whiten: BayesianGPLVM parameterises q(u) over u itself (unwhitened); pass whiten=False")
        if self.num_data is not None:
            raise ValueError("num_data: the latents are indexed by row, so minibatch through batch_size instead")
        super().__post_init__()

    def check_data(self, Y: Array | None = None, y: Array | None = None, *, init_params: Mapping | None = None) -> None:
        """Eager checks of the observations Y [N, D] (N = rows of ``X_init``, D = ``num_latent``).

        Called as ``check_data(Y)`` by ``fit_svi`` and as ``check_data(None, Y)`` by the SVGP model body, whose
        inputs are latent here. Traced values are skipped.
        """
        self.check_observations(y if Y is None else Y, self.num_latent)
        super().check_data(jnp.asarray(self.X_init), init_params=init_params)

    def model(self, Y: Array) -> None:
        self._model(None, jnp.asarray(Y), None)

    def guide(self, Y: Array) -> None:
        self._guide(None)

    def _batch_inputs(self, Xb: None, idx: Array | None) -> Array:
        """The latent inputs of the batch rows, drawn from the prior N(0, I): [B, Q]."""
        return self.latent_prior(self.num_points if idx is None else idx.shape[0])

    def _guide(self, mask: Array | None) -> None:
        super()._guide(mask)
        self.latent_guide()

    def prior_initialisation(self) -> dict[str, Array]:
        """Initial q(u_d) covariances S_d = Kmm at the initial kernel (q(u) = p(u) when m = 0), for ``init_params``.

        The default S_d = I adds Kmnᵀ Kmm⁻¹ (I − Kmm) Kmm⁻¹ Kmn to every predictive variance of the unwhitened
        parameterisation, which explodes when Kmm is ill-conditioned, as on a dense grid of candidates.
        Returns ``{"u_scale_tril": [D, M, M]}`` (or ``{"u_scale": [D, M]}`` when ``q_diag``).
        """
        Kmm = self.kernel(jnp.asarray(self.Z))
        if self.q_diag:
            return {"u_scale": jnp.broadcast_to(jnp.sqrt(jnp.diag(Kmm)), (self.num_latent, self.num_inducing))}
        shape = (self.num_latent, self.num_inducing, self.num_inducing)
        return {"u_scale_tril": jnp.broadcast_to(ops.cholesky(Kmm), shape)}

    def initial_params(self) -> dict[str, Array]:
        """q(u) = p(u) at the initial kernel (:meth:`prior_initialisation`), for :func:`fit_svi`'s ``init_params``."""
        return dict(self.prior_initialisation())

    def reconstruct(self, params: Mapping[str, Array], Y: Array | None = None) -> tuple[Array, Array]:
        """Predictive mean and variance of Y at the latent means: ([N, D], [N, D]) (``predict_y`` at μ). q(u) is a
        fitted parameter here, so Y is not needed; it is accepted for the signature of
        :meth:`CollapsedGPLVM.reconstruct`."""
        return self.predict_y(params, jnp.asarray(params[LATENT_LOC]))


@dataclass(eq=False)
class CollapsedGPLVM(LatentInputs, SGPR):
    """Bayesian GP-LVM over Y [N, D] with latent inputs [N, Q] and inducing inputs ``Z`` [M, Q]; q(u) collapsed.

    Args: those of :class:`LatentInputs` and :class:`SGPR` (Gaussian likelihood; the D columns of Y share the kernel
    and the noise, so there is no ``num_latent``). Full batch: the collapsed bound does not split over rows.
    """

    def check_data(self, Y: Array, *, init_params: Mapping | None = None) -> None:
        """Eager checks of the observations Y [N, D] and of initial hyperparameters (traced values skipped)."""
        self.check_observations(Y)
        super().check_data(jnp.asarray(self.X_init), init_params=init_params)

    def model(self, Y: Array) -> None:
        Y = jnp.asarray(Y)
        self.check_data(Y)
        kernel, likelihood = self.hyperparameters()
        Z = self.inducing_inputs()
        with data_plate(self.num_points):
            X = self.latent_prior(self.num_points)
        numpyro.factor("collapsed_bound", self.bound_at(kernel, likelihood, Z, X, Y))

    def guide(self, Y: Array) -> None:
        self.hyperparameter_guide()
        self.latent_guide()

    def bound_at(self, kernel: Kernel, likelihood: Gaussian, Z: Array, X: Array, Y: Array) -> Array:
        """The data term at latent inputs X [N, Q]: Titsias' bound with every inducing input (a hook: the selective
        model draws its subset here). Scalar."""
        return self.collapsed_bound(kernel, likelihood, Z, X, Y)

    def reconstruct(self, params: Mapping[str, Array], Y: Array) -> tuple[Array, Array]:
        """Predictive mean and variance of Y at the latent means: ([N, D], [N, D]), with the collapsed q(u) optimal
        for Y at X = μ (``predict_y`` of :class:`SGPR` with training inputs μ)."""
        mu = jnp.asarray(params[LATENT_LOC])
        return self.predict_y(params, mu, X=mu, y=jnp.asarray(Y))
