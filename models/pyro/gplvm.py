"""Bayesian GP-LVM: a sparse variational GP whose inputs are latent (Titsias & Lawrence 2010) as Pyro programs, the
twins of :mod:`models.numpyro.gplvm` (its docstring states the model, both guides and both bounds).

Sites (as the NumPyro twins'): the latent ``"X"`` [B, Q] inside the plate ``"data"`` and the guide params
``"X_loc"`` [N, Q] and ``"X_scale"`` [N, Q] (positive), or, for a :class:`BayesianGPLVM` with an ``encoder``
(q(x_n | y_n) amortised), the encoder's weights, one param per tensor ``"encoder.<parameter>"``
(:func:`ppl_sparsegp.pyro.nn.module`) where NumPyro has the one site ``"encoder$params"``; the hyperparameter
sites; param ``"Z"`` [M, Q] (a constant when ``learn_Z=False``). :class:`BayesianGPLVM` adds the latent ``"u"``
[D, M], the factor ``"y"`` [B] and the guide params ``"u_loc"`` [D, M] and ``"u_scale_tril"`` [D, M, M]
(``"u_scale"`` [D, M] when ``q_diag``); :class:`CollapsedGPLVM` the factor ``"collapsed_bound"``.

With ``batch_size=B`` the guide draws the plate's indices and the latents of those rows, and Pyro's ELBOs replay the
model with them (its data term and latent KL scaled by N/B).

The amortised ``encoder`` is a :class:`ppl_sparsegp.pyro.nn.GaussianEncoder` (a ``torch.nn`` module taking rows
[B, D]), or the NumPyro twin's equinox ``GaussianEncoder``, whose architecture, variance floor and weights the
torch twin takes (:func:`ppl_sparsegp.pyro.nn.encoder_twin`); so :func:`models.pyro._base.twin_of` carries the
encoder over, and ``twin_of(m, encoder=ppl_sparsegp.numpyro.nn.fitted(m.encoder, params, "encoder$params"))`` the
weights of a NumPyro fit. As on the NumPyro side, :meth:`BayesianGPLVM.elbo` and :class:`LatentInputs` read the free
latents ``"X_loc"``, ``"X_scale"``; an amortised model's bound is its ELBO loss (``TraceMeanField_ELBO``).

Randomness is torch's: :meth:`BayesianGPLVM.elbo` draws X from q(X) with torch's generator
(``pyro.set_rng_seed``) where the NumPyro twin takes a key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from torch.distributions import kl_divergence

from ppl_sparsegp import validation
from ppl_sparsegp.core import conditionals, ops
from ppl_sparsegp.pyro import nn, sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import base_fields
from .._shared import pca_latents as pca_latents
from ._base import GPModel
from .sgpr import SGPR
from .svgp import SVGP

Array = Any

ENCODER = "encoder"
"""The name under which :func:`ppl_sparsegp.pyro.nn.module` registers the encoder's parameters."""


@dataclass(frozen=True, eq=False)
class LatentInputs:
    """The latent inputs of a GP-LVM: p(x_n) = N(0, I_Q) and the guide q(x_n) = N(μ_n, diag s_n²) over the N rows
    of Y (their sites: :func:`ppl_sparsegp.pyro.sites.latent_inputs` and
    :func:`~ppl_sparsegp.pyro.sites.latent_posterior`), the checks of Y, q(X) at fitted values, its KL and Monte
    Carlo bounds over it; the twin of :class:`models.numpyro.gplvm.LatentInputs`.

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
        return {"X", "X_loc", "X_scale"}

    @property
    def num_points(self) -> int:
        return int(np.shape(self.X_init)[0])

    @property
    def latent_dim(self) -> int:
        return int(np.shape(self.X_init)[1])

    @property
    def dtype(self) -> torch.dtype:
        return as_tensor(self.X_init).dtype

    def check_observations(self, Y: Array, num_columns: int | None = None) -> None:
        """Checks of the observations Y [N, D]: finite, N rows (those of ``X_init``) and, when given,
        ``num_columns`` columns."""
        validation.check_inputs(Y, x_name="Y")
        shape = tuple(Y.shape)
        if len(shape) != 2 or shape[0] != self.num_points or (num_columns is not None and shape[1] != num_columns):
            columns = "D" if num_columns is None else num_columns
            raise ValueError(f"Y: expected shape [N, D] = [{self.num_points}, {columns}] (rows of X_init), got {shape}")

    def q(self, params: Mapping[str, Array]) -> dist.TorchDistribution:
        """q(X) at fitted values: N(X_loc, X_scale²), batch [N], event [Q]."""
        return dist.Normal(as_tensor(params["X_loc"]), as_tensor(params["X_scale"])).to_event(1)

    def means(self, params: Mapping[str, Array]) -> np.ndarray:
        """μ [N, Q], the fitted latent means (the embedding of Y)."""
        return np.asarray(as_tensor(params["X_loc"]).detach())

    def kl(self, params: Mapping[str, Array]) -> Array:
        """Σ_n KL[q(x_n) ‖ N(0, I)] = ½ Σ_nq (s² + μ² − 1 − log s²), closed form (scalar)."""
        q = self.q(params)
        return torch.sum(kl_divergence(q, dist.Normal(torch.zeros_like(q.mean), 1.0).to_event(1)))

    def expected_bound(
        self,
        bound: Callable[[Mapping[str, Array], Array, Array], Array],
        params: Mapping[str, Array],
        Y: Array,
        num_samples: int = 1,
    ) -> Array:
        """E_{q(X)}[bound(params, X, Y)] − Σ_n KL[q(x_n) ‖ p(x_n)], the expectation from ``num_samples`` draws
        X⁽ˢ⁾ = μ + s ⊙ ε⁽ˢ⁾ (ε from torch's generator) and the KL exact: an unbiased estimate (scalar)."""
        draws = self.q(params).rsample((num_samples,))
        Y = as_tensor(Y)
        return torch.mean(torch.stack([bound(params, X, Y) for X in draws])) - self.kl(params)


@dataclass(eq=False)
class BayesianGPLVM(GPModel):
    """Bayesian GP-LVM over Y [N, D] with latent inputs [N, Q] and inducing inputs ``Z`` [M, Q]; q(u) learned.

    Args (beyond :class:`GPModel`'s): those of :class:`SVGP` (``num_latent`` must be D, ``whiten`` must stay False,
    no ``num_data``: minibatch through ``batch_size``); keyword-only ``X_init`` and ``X_scale_init`` as
    :class:`LatentInputs`; keyword-only ``encoder``, a :class:`ppl_sparsegp.pyro.nn.GaussianEncoder` y [B, D] ->
    (μ, s²) [B, Q] that amortises q(x_n | y_n) (Bui & Turner 2015; SAS-GP's baseline) in place of the free
    ``"X_loc"``, ``"X_scale"`` (``X_init`` then only fixes N and Q), or the NumPyro twin's equinox
    ``GaussianEncoder``, whose torch twin (same architecture and weights) it becomes.
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
    encoder: Any = field(default=None, kw_only=True, repr=False)
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
        if self.encoder is not None and not isinstance(self.encoder, torch.nn.Module):
            self.encoder = nn.encoder_twin(self.encoder)
        if self.encoder is not None and not isinstance(self.encoder, nn.GaussianEncoder):
            raise ValueError(f"encoder: expected a GaussianEncoder y -> (μ, s²), got {type(self.encoder).__name__}")
        super().__post_init__()

    @property
    def num_inducing(self) -> int:
        return self.svgp.num_inducing

    def parameter_names(self) -> set[str]:
        """:meth:`GPModel.parameter_names`, and the encoder's ``"encoder.<parameter>"`` when it has one."""
        encoder = set() if self.encoder is None else set(nn.param_values(ENCODER, self.encoder))
        return super().parameter_names() | encoder

    def check_data(self, Y: Array | None) -> None:
        """Eager checks of the observations Y [N, D] (N = rows of ``X_init``, D = ``num_latent``; None: to be
        drawn)."""
        if Y is not None:
            self.latents.check_observations(Y, self.num_latent)
        super().check_data(as_tensor(self.X_init))

    def model(self, Y: Array | None = None) -> None:
        """u_d ~ N(0, Kmm); for the rows of the batch, x_n ~ N(0, I) and the data term as the factor ``"y"``. With
        ``Y=None`` (``pyro.infer.Predictive``): x_n for every row, then f and y there given u as the sites ``"f"``
        and ``"y"`` [N, D]."""
        Y = as_tensor(Y)
        self.check_data(Y)
        kernel, likelihood = self.hyperparameters()
        Z = sites.inducing_inputs(self.Z, self.learn_Z)
        Lmm = ops.cholesky(kernel(Z))
        u = sites.inducing_outputs(self.num_latent, self.num_inducing, Lmm, Z.dtype)
        N, Q = self.latents.num_points, self.latents.latent_dim
        if Y is None:
            with sites.data_plate(N):
                X = sites.latent_inputs(N, Q, self.latents.dtype)
            sites.predictive(likelihood, *conditionals.conditional(kernel(Z, X), Lmm, kernel.diag(X), u, whiten=False))
            return
        if self.data_term == "analytic":
            q_mu, q_sqrt = sites.inducing_posterior_parameters(self.num_latent, self.num_inducing, Z.dtype, self.q_diag)
        else:
            q_mu, q_sqrt = u, None
        with sites.data_plate(N, self.batch_size) as idx:
            X = sites.latent_inputs(N if idx is None else idx.shape[0], Q, self.latents.dtype)
            _, Yb = sites.batch(None, Y, idx)
            mean, var = conditionals.conditional(kernel(Z, X), Lmm, kernel.diag(X), q_mu, q_sqrt, whiten=False)
            pyro.factor("y", torch.sum(likelihood.expectation_by_output(Yb, mean, var), dim=0))

    def guide(self, Y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors, u ~ q(u), and x_n ~ q(x_n) for the rows of the batch
        (every row when ``Y`` is None, as the model's ``Predictive`` branch has them); with an ``encoder``,
        x_n ~ N(μ(y_n), diag s²(y_n)) for the batch's rows (none when ``Y`` is None: the model's prior draws)."""
        self.hyperparameter_guide()
        sites.inducing_posterior(
            *sites.inducing_posterior_parameters(self.num_latent, self.num_inducing, self.Z.dtype, self.q_diag)
        )
        if self.encoder is not None:
            if Y is not None:
                Y = as_tensor(Y)
                encoder = nn.module(ENCODER, self.encoder)
                with sites.data_plate(self.latents.num_points, self.batch_size) as idx:
                    mean, var = encoder(Y if idx is None else Y[idx])
                    pyro.sample("X", dist.Normal(mean, torch.sqrt(var)).to_event(1))
            return
        loc, scale = sites.latent_posterior_parameters(self.X_init, self.X_scale_init)
        with sites.data_plate(self.latents.num_points, None if Y is None else self.batch_size) as idx:
            sites.latent_posterior(loc, scale, idx)

    def elbo(self, params: Mapping[str, Array], Y: Array, num_samples: int = 1) -> Array:
        """Full-batch Monte Carlo estimate of the bound with ``num_samples`` draws of X (torch's generator): the
        SVGP ELBO at each draw (:meth:`SVGP.elbo`), minus the exact latent KL; with an ``encoder``, q(x_n | y_n) at
        the encoder's outputs for the rows of Y. Unbiased; scalar."""
        return self.latents.expected_bound(
            self.svgp.elbo, {**params, **self.latent_posterior(params, Y)}, Y, num_samples
        )

    def latent_posterior(self, params: Mapping[str, Array], Y: Array) -> dict[str, Array]:
        """q(X)'s parameters for the rows of Y [N, D]: ``{"X_loc": μ, "X_scale": s}``, each [N, Q]; the encoder's
        μ(y_n), s(y_n) = √s²(y_n) (weights ``params["encoder.<parameter>"]``) when the model has one,
        else the free params."""
        if self.encoder is None:
            return {"X_loc": params["X_loc"], "X_scale": params["X_scale"]}
        mean, var = nn.fitted(self.encoder, params, ENCODER)(as_tensor(Y))
        return {"X_loc": mean, "X_scale": torch.sqrt(var)}

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f) at latent inputs X_new [S, Q]: :meth:`SVGP.predict_f`."""
        return self.svgp.predict_f(params, X_new, full_cov=full_cov)

    def prior_initialisation(self) -> dict[str, Array]:
        """Initial q(u_d) covariances S_d = Kmm at the initial kernel (q(u) = p(u) when m = 0), as
        :meth:`models.numpyro.gplvm.BayesianGPLVM.prior_initialisation`: ``{"u_scale_tril": [D, M, M]}`` (or
        ``{"u_scale": [D, M]}`` when ``q_diag``)."""
        Kmm = self.kernel(self.Z)
        if self.q_diag:
            return {"u_scale": torch.sqrt(torch.diagonal(Kmm)).expand(self.num_latent, self.num_inducing).clone()}
        shape = (self.num_latent, self.num_inducing, self.num_inducing)
        return {"u_scale_tril": ops.cholesky(Kmm).expand(shape).clone()}

    def initial_params(self) -> dict[str, Array]:
        """q(u) = p(u) at the initial kernel (:meth:`prior_initialisation`), e.g. for ``pyro.param`` before SVI."""
        return dict(self.prior_initialisation())

    def encode(self, params: Mapping[str, Array], Y: Array) -> Array:
        """The amortised latent means μ(y) [S, Q] of the rows of Y [S, D] (a model with an ``encoder``), from the
        weights ``params["encoder.<parameter>"]`` (the encoder's own where absent).

        Raises:
            ValueError: the model has free latents (read them as ``params["X_loc"]``).
        """
        if self.encoder is None:
            raise ValueError('encoder: this GP-LVM has free latent means; read them as params["X_loc"]')
        with torch.no_grad():
            return nn.fitted(self.encoder, params, ENCODER)(as_tensor(Y))[0]

    def reconstruct(self, params: Mapping[str, Array], Y: Array | None = None) -> tuple[Array, Array]:
        """Predictive mean and variance of Y at the latent means: ([N, D], [N, D]) (``predict_y`` at μ). q(u) is a
        fitted parameter, so a model with free latents needs no Y (it is accepted for the signature of
        :meth:`CollapsedGPLVM.reconstruct`); one with an ``encoder`` reconstructs the rows of Y [S, D] at their
        encoded means."""
        latents = self.encode(params, Y) if self.encoder is not None else as_tensor(params["X_loc"])
        return self.predict_y(params, latents)


@dataclass(eq=False)
class CollapsedGPLVM(GPModel):
    """Bayesian GP-LVM over Y [N, D] with latent inputs [N, Q] and inducing inputs ``Z`` [M, Q]; q(u) collapsed.

    Args (beyond :class:`GPModel`'s): ``Z`` and ``learn_Z`` as :class:`SGPR` (Gaussian likelihood; the D columns of
    Y share the kernel and the noise); keyword-only ``X_init`` and ``X_scale_init`` as :class:`LatentInputs`. Full
    batch: the collapsed bound does not split over rows.
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

    def check_data(self, Y: Array | None) -> None:
        """Eager checks of the observations Y [N, D] (None: to be drawn)."""
        if Y is not None:
            self.latents.check_observations(Y)
        super().check_data(as_tensor(self.X_init))

    def model(self, Y: Array | None = None) -> None:
        """x_n ~ N(0, I) for every row, and Titsias' bound at X as the factor ``"collapsed_bound"``; with ``Y=None``
        (``pyro.infer.Predictive``), the prior f and y of one output at X (:func:`sites.prior_predictive`)."""
        Y = as_tensor(Y)
        self.check_data(Y)
        kernel, likelihood = self.hyperparameters()
        Z = sites.inducing_inputs(self.Z, self.learn_Z)
        with sites.data_plate(self.latents.num_points):
            X = sites.latent_inputs(self.latents.num_points, self.latents.latent_dim, self.latents.dtype)
        if Y is None:
            sites.prior_predictive(kernel, likelihood, X)
            return
        pyro.factor("collapsed_bound", SGPR.collapsed_bound(kernel, likelihood, Z, X, Y))

    def guide(self, Y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors and x_n ~ q(x_n); no q(u) (it is collapsed)."""
        self.hyperparameter_guide()
        loc, scale = sites.latent_posterior_parameters(self.X_init, self.X_scale_init)
        with sites.data_plate(self.latents.num_points) as idx:
            sites.latent_posterior(loc, scale, idx)

    def elbo(self, params: Mapping[str, Array], Y: Array, num_samples: int = 1) -> Array:
        """Monte Carlo estimate of L_c with ``num_samples`` draws of X (torch's generator): Titsias' bound at each
        draw (:meth:`SGPR.elbo`), minus the exact latent KL. Unbiased; scalar."""
        return self.latents.expected_bound(self.sgpr.elbo, params, Y, num_samples)

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f) at latent inputs X_new [S, Q] under the optimal q*(u) for y at inputs X (:meth:`SGPR.predict_f`)."""
        return self.sgpr.predict_f(params, X_new, full_cov=full_cov, X=X, y=y)

    def initial_params(self) -> dict[str, Array]:
        """Initial values beyond the defaults: none (a collapsed q(u) has no parameters)."""
        return {}

    def reconstruct(self, params: Mapping[str, Array], Y: Array) -> tuple[Array, Array]:
        """Predictive mean and variance of Y at the latent means: ([N, D], [N, D]), with the collapsed q(u) optimal
        for Y at X = μ (``predict_y`` with training inputs μ)."""
        mu = as_tensor(params["X_loc"])
        return self.predict_y(params, mu, X=mu, y=as_tensor(Y))
