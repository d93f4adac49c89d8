"""Bayesian GP-LVM: a sparse variational GP whose inputs are latent (Titsias & Lawrence 2010; spec 000 §4.2).

Sites: the latent ``"X"`` [B, Q] inside the plate ``"data"`` and the guide params ``"X_loc"`` [N, Q] and
``"X_scale"`` [N, Q] (positive), or, for a :class:`BayesianGPLVM` with an ``encoder``, the param
``"encoder$params"`` (q(x_n | y_n) amortised); the hyperparameter sites of :mod:`models.numpyro._base`; param
``"Z"`` [M, Q] (a constant when ``learn_Z=False``). :class:`BayesianGPLVM` adds the latent ``"u"`` [D, M], the
factor ``"y"`` [B] and the guide params ``"u_loc"`` [D, M] and ``"u_scale_tril"`` [D, M, M] (``"u_scale"`` [D, M]
when ``q_diag``); :class:`CollapsedGPLVM` the factor ``"collapsed_bound"``.

Generative model over observations Y [N, D] with latent inputs X [N, Q] (Uhrenholt et al. 2021, §5.3 and App. A,
the GP-LVM as a one-layer special case of the deep GP)::

    x_n ~ N(0, I_Q)                                      latent inputs
    u_d ~ N(0, Kmm),  d = 1..D                           unwhitened inducing outputs at Z [M, Q], one per output
    f_d(x_n) | u_d ~ p(f | u_d)                          D outputs sharing one (RBF-ARD) kernel over latent space
    y_nd | f_d(x_n) ~ N(f_d(x_n), σ²)                    (any likelihood of :mod:`ppl_sparsegp.core.likelihoods`)

Both models here have the guide q(x_n) = N(μ_n, diag s_n²) and differ in q(u):

* :class:`BayesianGPLVM` learns q(u_d) = N(m_d, S_d); its bound is the uncollapsed one (spec §4.2)::

      L = Σ_n E_{q(x_n)} E_{q(f(x_n))}[log p(y_n | f(x_n))] − Σ_d KL[q(u_d) ‖ p(u_d)] − Σ_n KL[q(x_n) ‖ p(x_n)],

  with the inner expectation over f in closed form (Gaussian likelihood) or by Gauss-Hermite, exactly as in
  :class:`SVGP`, and the outer one over x_n by one reparameterised draw per step. Both KLs are closed form
  (``TraceMeanField_ELBO`` through NumPyro's registered KLs). ``batch_size=B`` subsamples the plate ``"data"``,
  which scales the data term and the latent KL by N/B; the guide draws the latents of the same rows (the model
  replays the guide's plate indices).
* :class:`CollapsedGPLVM` (Gaussian likelihood, full batch) has no q(u) parameters: at each latent draw X it takes
  Titsias' collapsed bound, whose q(u) is the optimal one for that X (thesis eq 4.12; :class:`SGPR`)::

      L_c = E_{q(X)}[Σ_d log N(y_d | 0, σ² I + Q_XX) − D Tr(K_XX − Q_XX) / (2σ²)] − Σ_n KL[q(x_n) ‖ p(x_n)].

  The collapsed bound at X is at least the uncollapsed data term minus KL[q(u) ‖ p(u)] for every q(u) (it is
  their maximum over q(u)) and at most log p(Y | X), so L ≤ L_c ≤ log p(Y). It is also at least Titsias &
  Lawrence's Ψ-statistics bound, which shares one q(u) across q(X) (the expectation of a maximum is at least the
  maximum of the expectation). Without an M × M q(u) per output to learn, it converges in far fewer steps (the
  oil-flow GP-LVM section of benchmarks/README.md).

Composition, not inheritance: each model writes its ``model`` and ``guide`` with the site helpers
(``latent_inputs`` / ``latent_posterior`` for X), holds a :class:`LatentInputs` (checks of Y, q(X), its KL, Monte
Carlo bounds over q(X)) and the sparse GP it is at given inputs (``svgp`` / ``sgpr``: its checks, its bound at a
draw of X and its predictions).

Initialise μ by :func:`pca_latents` (PCA of Y rescaled to unit variance per latent dimension, as the released
code of Uhrenholt et al.); fix the noise with ``fixed=("likelihood.variance",)`` (their code fixes σ² = 0.01 on
standardised Y).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.module import eqx_module
from numpyro.distributions.kl import kl_divergence

from ppl_sparsegp import validation
from ppl_sparsegp.core import conditionals, ops
from ppl_sparsegp.numpyro import nn, sites

from .._shared import base_fields
from .._shared import pca_latents as pca_latents
from ._base import GPModel, _is_concrete
from .sgpr import SGPR
from .svgp import SVGP

Array = Any

LATENT_SITE = "X"
LATENT_LOC, LATENT_SCALE = "X_loc", "X_scale"
ENCODER_PARAMS = "encoder$params"
ENCODER = "encoder"


@dataclass(frozen=True, eq=False)
class LatentInputs:
    """The latent inputs of a GP-LVM, held by each GP-LVM model: p(x_n) = N(0, I_Q) and the guide
    q(x_n) = N(μ_n, diag s_n²) over the N rows of Y (their sites: :func:`ppl_sparsegp.numpyro.sites.latent_inputs`
    and :func:`~ppl_sparsegp.numpyro.sites.latent_posterior`), the checks of Y, q(X) at fitted values, its KL and
    Monte Carlo bounds over it.

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

    def parameter_names(self) -> set[str]:
        """q(X)'s sites: the latent ``"X"`` and the params ``"X_loc"``, ``"X_scale"``."""
        return {LATENT_SITE, LATENT_LOC, LATENT_SCALE}

    @property
    def num_points(self) -> int:
        return int(np.shape(self.X_init)[0])

    @property
    def latent_dim(self) -> int:
        return int(np.shape(self.X_init)[1])

    @property
    def dtype(self) -> Any:
        return jnp.asarray(self.X_init).dtype

    def check_observations(self, Y: Array, num_columns: int | None = None) -> None:
        """Checks of the observations Y [N, D]: N rows (those of ``X_init``) and, when given, ``num_columns``
        columns; finite entries unless Y is traced."""
        if _is_concrete(Y):
            validation.check_inputs(Y, x_name="Y")
        shape = jnp.shape(Y)
        if len(shape) != 2 or shape[0] != self.num_points or (num_columns is not None and shape[1] != num_columns):
            columns = "D" if num_columns is None else num_columns
            raise ValueError(f"Y: expected shape [N, D] = [{self.num_points}, {columns}] (rows of X_init), got {shape}")

    def q(self, params: Mapping[str, Array]) -> dist.Distribution:
        """q(X) at fitted values: N(X_loc, X_scale²), batch [N], event [Q]."""
        return dist.Normal(jnp.asarray(params["X_loc"]), jnp.asarray(params["X_scale"])).to_event(1)

    def means(self, params: Mapping[str, Array]) -> np.ndarray:
        """μ [N, Q], the fitted latent means (the embedding of Y)."""
        return np.asarray(params["X_loc"])

    def kl(self, params: Mapping[str, Array]) -> Array:
        """Σ_n KL[q(x_n) ‖ N(0, I)] = ½ Σ_nq (s² + μ² − 1 − log s²), closed form (scalar)."""
        q = self.q(params)
        return jnp.sum(kl_divergence(q, dist.Normal(jnp.zeros_like(q.mean), 1.0).to_event(1)))

    def expected_bound(
        self,
        bound: Callable[[Mapping[str, Array], Array, Array], Array],
        params: Mapping[str, Array],
        Y: Array,
        key: Array,
        num_samples: int = 1,
    ) -> Array:
        """E_{q(X)}[bound(params, X, Y)] − Σ_n KL[q(x_n) ‖ p(x_n)], the expectation from ``num_samples`` draws
        X⁽ˢ⁾ = μ + s ⊙ ε⁽ˢ⁾ and the KL exact: an unbiased estimate (scalar)."""

        @jax.jit
        def estimate(params: Mapping[str, Array], Y: Array, key: Array) -> Array:
            draws = self.q(params).sample(key, (num_samples,))
            values = jax.vmap(lambda X: bound(params, X, Y))(draws)
            return jnp.mean(values) - self.kl(params)

        return estimate(dict(params), jnp.asarray(Y), key)


@dataclass(eq=False)
class BayesianGPLVM(GPModel):
    """Bayesian GP-LVM over Y [N, D] with latent inputs [N, Q] and inducing inputs ``Z`` [M, Q]; q(u) learned.

    Args (beyond :class:`GPModel`'s): those of :class:`SVGP` (``num_latent`` must be D, ``whiten`` must stay False,
    no ``num_data``: minibatch through ``batch_size``); keyword-only ``X_init`` and ``X_scale_init`` as
    :class:`LatentInputs`; keyword-only ``encoder``, a :class:`ppl_sparsegp.numpyro.nn.GaussianEncoder` y [D] ->
    (μ, s²) [Q] that amortises q(x_n | y_n) (Bui & Turner 2015; SAS-GP's baseline), in place of the free
    ``"X_loc"``, ``"X_scale"`` (``X_init`` then only fixes N and Q).
    """

    Z: Array = None
    num_latent: int = 1
    whiten: bool = False
    q_diag: bool = False
    batch_size: int | None = None
    num_data: int | None = None
    learn_Z: bool = True
    data_term: Literal["analytic", "sampled"] = "analytic"
    X_init: Array = field(default=None, kw_only=True)
    X_scale_init: float = field(default=0.1, kw_only=True)
    encoder: Any = field(default=None, kw_only=True)
    latents: LatentInputs = field(init=False, repr=False)
    svgp: SVGP = field(init=False, repr=False)
    components = ("svgp", "latents")

    def __post_init__(self) -> None:
        if self.whiten:
            raise ValueError("whiten: BayesianGPLVM parameterises q(u) over u itself (unwhitened); pass whiten=False")
        if self.num_data is not None:
            raise ValueError("num_data: the latents are indexed by row, so minibatch through batch_size instead")
        self.X_init = validation.as_array(self.X_init)
        self.latents = LatentInputs(self.X_init, self.X_scale_init)
        self.svgp = SVGP(**base_fields(self, SVGP))  # the sparse GP at given inputs: its checks, bound, predictions
        validation.check_same_dim(self.Z, self.X_init, x_name="X_init")
        super().__post_init__()

    @property
    def num_inducing(self) -> int:
        return self.svgp.num_inducing

    def parameter_names(self) -> set[str]:
        """:meth:`GPModel.parameter_names`, and the encoder's ``"encoder$params"`` when it has one."""
        return super().parameter_names() | ({ENCODER_PARAMS} if self.encoder is not None else set())

    def check_data(self, Y: Array | None, *, init_params: Mapping | None = None) -> None:
        """Eager checks of the observations Y [N, D] (N = rows of ``X_init``, D = ``num_latent``; None: to be drawn)
        and of initial hyperparameters (traced values skipped)."""
        if Y is not None:
            self.latents.check_observations(Y, self.num_latent)
        super().check_data(jnp.asarray(self.X_init), init_params=init_params)

    def model(self, Y: Array | None = None) -> None:
        """u_d ~ N(0, Kmm); for the rows of the batch, x_n ~ N(0, I) and the data term as the factor ``"y"``. With
        ``Y=None`` (NumPyro's ``Predictive``): x_n for every row, then f and y there given u as the sites ``"f"``
        and ``"y"`` [N, D]."""
        Y = None if Y is None else jnp.asarray(Y)
        self.check_data(Y)
        kernel, likelihood = self.hyperparameters()
        Z = sites.inducing_inputs(self.Z, self.learn_Z)
        Lmm = ops.cholesky(kernel(Z))
        u = sites.inducing_outputs(self.num_latent, self.num_inducing, Lmm, Z.dtype)
        if Y is None:
            with sites.data_plate(self.latents.num_points):
                X = sites.latent_inputs(self.latents.num_points, self.latents.latent_dim, self.latents.dtype)
            sites.predictive(likelihood, *conditionals.conditional(kernel(Z, X), Lmm, kernel.diag(X), u, whiten=False))
            return
        if self.data_term == "analytic":
            q_mu, q_sqrt = sites.inducing_posterior_parameters(self.num_latent, self.num_inducing, Z.dtype, self.q_diag)
        else:
            q_mu, q_sqrt = u, None
        with sites.data_plate(self.latents.num_points, self.batch_size) as idx:
            X = sites.latent_inputs(
                self.latents.num_points if idx is None else idx.shape[0], self.latents.latent_dim, self.latents.dtype
            )
            _, Yb = sites.batch(None, Y, idx)
            mean, var = conditionals.conditional(kernel(Z, X), Lmm, kernel.diag(X), q_mu, q_sqrt, whiten=False)
            numpyro.factor("y", jnp.sum(likelihood.expectation_by_output(Yb, mean, var), axis=0))

    def guide(self, Y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors, u ~ q(u), and x_n ~ q(x_n) for the rows of the batch
        (every row when ``Y`` is None, as the model's ``Predictive`` branch has them)."""
        self.hyperparameter_guide()
        dtype = jnp.asarray(self.Z).dtype
        sites.inducing_posterior(
            *sites.inducing_posterior_parameters(self.num_latent, self.num_inducing, dtype, self.q_diag)
        )
        if self.encoder is not None:
            if Y is not None:  # amortised: q(x_n | y_n) for the batch's rows (Y=None: the model's prior draws)
                encoder = eqx_module(ENCODER, self.encoder)
                with sites.data_plate(self.latents.num_points, self.batch_size) as idx:
                    mean, var = jax.vmap(encoder)(jnp.asarray(Y) if idx is None else jnp.asarray(Y)[idx])
                    numpyro.sample(LATENT_SITE, dist.Normal(mean, jnp.sqrt(var)).to_event(1))
            return
        loc, scale = sites.latent_posterior_parameters(self.X_init, self.X_scale_init)
        with sites.data_plate(self.latents.num_points, None if Y is None else self.batch_size) as idx:
            sites.latent_posterior(loc, scale, idx)

    def elbo(self, params: Mapping[str, Array], Y: Array, key: Array, num_samples: int = 1) -> Array:
        """Full-batch Monte Carlo estimate of the bound (module docstring) with ``num_samples`` draws of X: the
        SVGP ELBO at each draw (:meth:`SVGP.elbo`), minus the exact latent KL; with an ``encoder``, q(x_n | y_n) at
        the encoder's outputs for the rows of Y. Unbiased; scalar."""
        return self.latents.expected_bound(
            self.svgp.elbo, {**params, **self.latent_posterior(params, Y)}, Y, key, num_samples
        )

    def latent_posterior(self, params: Mapping[str, Array], Y: Array) -> dict[str, Array]:
        """q(X)'s parameters for the rows of Y [N, D]: ``{"X_loc": μ, "X_scale": s}``, each [N, Q]; the encoder's
        μ(y_n), s(y_n) = √s²(y_n) (weights ``params["encoder$params"]``) when the model has one,
        else the free params."""
        if self.encoder is None:
            return {LATENT_LOC: params[LATENT_LOC], LATENT_SCALE: params[LATENT_SCALE]}
        mean, var = jax.vmap(nn.fitted(self.encoder, params, ENCODER_PARAMS))(jnp.asarray(Y))
        return {LATENT_LOC: mean, LATENT_SCALE: jnp.sqrt(var)}

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f) at latent inputs X_new [S, Q]: :meth:`SVGP.predict_f`."""
        return self.svgp.predict_f(params, X_new, full_cov=full_cov)

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

    def encode(self, params: Mapping[str, Array], Y: Array) -> Array:
        """The amortised latent means μ(y) [S, Q] of the rows of Y [S, D] (a model with an ``encoder``).

        Raises:
            ValueError: the model has free latents (read them as ``params["X_loc"]``).
        """
        if self.encoder is None:
            raise ValueError('encoder: this GP-LVM has free latent means; read them as params["X_loc"]')
        return jax.vmap(nn.fitted(self.encoder, params, ENCODER_PARAMS))(jnp.asarray(Y))[0]

    def reconstruct(self, params: Mapping[str, Array], Y: Array | None = None) -> tuple[Array, Array]:
        """Predictive mean and variance of Y at the latent means: ([N, D], [N, D]) (``predict_y`` at μ). q(u) is a
        fitted parameter, so a model with free latents needs no Y (it is accepted for the signature of
        :meth:`CollapsedGPLVM.reconstruct`); one with an ``encoder`` reconstructs the rows of Y [S, D] at their
        encoded means."""
        latents = self.encode(params, Y) if self.encoder is not None else jnp.asarray(params["X_loc"])
        return self.predict_y(params, latents)


@dataclass(eq=False)
class CollapsedGPLVM(GPModel):
    """Bayesian GP-LVM over Y [N, D] with latent inputs [N, Q] and inducing inputs ``Z`` [M, Q]; q(u) collapsed.

    Args (beyond :class:`GPModel`'s): ``Z`` and ``learn_Z`` as :class:`SGPR` (Gaussian likelihood; the D columns of
    Y share the kernel and the noise, so there is no ``num_latent``); keyword-only ``X_init`` and ``X_scale_init``
    as :class:`LatentInputs`. Full batch: the collapsed bound does not split over rows.
    """

    Z: Array = None
    learn_Z: bool = True
    X_init: Array = field(default=None, kw_only=True)
    X_scale_init: float = field(default=0.1, kw_only=True)
    latents: LatentInputs = field(init=False, repr=False)
    sgpr: SGPR = field(init=False, repr=False)
    components = ("sgpr", "latents")
    predicts_from_data = True

    def __post_init__(self) -> None:
        self.X_init = validation.as_array(self.X_init)
        self.latents = LatentInputs(self.X_init, self.X_scale_init)
        self.sgpr = SGPR(**base_fields(self, SGPR))  # Titsias' bound at given inputs: its checks, bound, predictions
        validation.check_same_dim(self.Z, self.X_init, x_name="X_init")
        super().__post_init__()

    def check_data(self, Y: Array | None, *, init_params: Mapping | None = None) -> None:
        """Eager checks of the observations Y [N, D] (None: to be drawn) and of initial hyperparameters (traced
        values skipped)."""
        if Y is not None:
            self.latents.check_observations(Y)
        super().check_data(jnp.asarray(self.X_init), init_params=init_params)

    def model(self, Y: Array | None = None) -> None:
        """x_n ~ N(0, I) for every row, and Titsias' bound at X as the factor ``"collapsed_bound"``; with ``Y=None``
        (NumPyro's ``Predictive``), the prior f and y of one output at X (:func:`sites.prior_predictive`)."""
        Y = None if Y is None else jnp.asarray(Y)
        self.check_data(Y)
        kernel, likelihood = self.hyperparameters()
        Z = sites.inducing_inputs(self.Z, self.learn_Z)
        with sites.data_plate(self.latents.num_points):
            X = sites.latent_inputs(self.latents.num_points, self.latents.latent_dim, self.latents.dtype)
        if Y is None:
            sites.prior_predictive(kernel, likelihood, X)
            return
        numpyro.factor("collapsed_bound", SGPR.collapsed_bound(kernel, likelihood, Z, X, Y))

    def guide(self, Y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors and x_n ~ q(x_n); no q(u) (it is collapsed)."""
        self.hyperparameter_guide()
        loc, scale = sites.latent_posterior_parameters(self.X_init, self.X_scale_init)
        with sites.data_plate(self.latents.num_points) as idx:
            sites.latent_posterior(loc, scale, idx)

    def elbo(self, params: Mapping[str, Array], Y: Array, key: Array, num_samples: int = 1) -> Array:
        """Monte Carlo estimate of L_c (module docstring) with ``num_samples`` draws of X: Titsias' bound at each
        draw (:meth:`SGPR.elbo`), minus the exact latent KL. Unbiased; scalar."""
        return self.latents.expected_bound(self.sgpr.elbo, params, Y, key, num_samples)

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f) at latent inputs X_new [S, Q] under the optimal q*(u) for y at inputs X (:meth:`SGPR.predict_f`)."""
        return self.sgpr.predict_f(params, X_new, full_cov=full_cov, X=X, y=y)

    def initial_params(self) -> dict[str, Array]:
        """Initial values for :func:`fit_svi`'s ``init_params`` beyond the defaults: none (a collapsed q(u) has no
        parameters)."""
        return {}

    def reconstruct(self, params: Mapping[str, Array], Y: Array) -> tuple[Array, Array]:
        """Predictive mean and variance of Y at the latent means: ([N, D], [N, D]), with the collapsed q(u) optimal
        for Y at X = μ (``predict_y`` with training inputs μ)."""
        mu = jnp.asarray(params["X_loc"])
        return self.predict_y(params, mu, X=mu, y=jnp.asarray(Y))
