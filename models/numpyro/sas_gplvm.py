"""SAS-GP: a GP-LVM decoder trained with stochastic active sets (Moreno-Muñoz, Feldager & Hauberg 2022; spec 004).

Notation: the library's GP-LVM names, observations Y [N, D] and latents X [N, Q] (the paper's x and z).

Site names: hyperparameter sites of :mod:`models.numpyro._base` (``"kernel.*"`` over the Q latent dimensions,
``"likelihood.variance"``, σ²); param ``"encoder$params"`` (the encoder's weights); plate ``"data"``; the factor
``"sas"``; with ``bayesian=True`` the latent ``"X"`` [B, Q] inside the plate. ``model(Y=None)`` (NumPyro's
``Predictive``, ``num_data`` rows) draws ``"X"`` [N, Q] from its prior, ``"f"`` [D, N] and ``"y"`` [N, D].

Generative model (paper §2, eq 2): D outputs sharing one kernel and one Gaussian noise, zero mean::

    x_n ~ N(0, I_Q)  (Bayesian SAS; deterministic SAS: x_n = g(y_n), the encoder, no prior term)
    Y[:, d] | X ~ N(0, K_XX + σ² I),  d = 1..D

Each step draws B distinct rows (``sites.data_plate(..., replace=False)``), splits them uniformly into A active and
B − A held-out rows (:func:`ppl_sparsegp.inducing.active_sets.split_active`) and scores (paper eqs 6 and 8)::

    log p(Y_A | X_A) + w Σ_{n held out} log p(y_n | Y_A, X)         the factor "sas", outside the plate
    − (N/B) Σ_{n in batch} KL[q(x_n | y_n) ‖ N(0, I)]                 Bayesian: "X" in the plate (scale N/B)

with w = (N − A)/(B − A) (``weight="unbiased"``, :func:`ppl_sparsegp.core.active_sets.conditional_weight`), which
makes the step's expectation the full-data SAS objective. Bayesian SAS evaluates the factor at one reparameterised
draw X ~ q(X | Y) = N(μ(y_n), diag σ²(y_n)) (:class:`ppl_sparsegp.numpyro.nn.GaussianEncoder`); with
``TraceMeanField_ELBO`` the KL is closed form. The released code's bugs are not carried over: the active-set term
has the multiplier D (not Q), the held-out residual is (y − m)², and exp(log σ²) is σ² everywhere.

Prediction (:meth:`reconstruct`): encode (Bayesian: the mean μ), then the exact GP predictive given the encoded
training rows, all of them or a random subset of them (spec 004 §1.10).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.module import eqx_module

from ppl_sparsegp import validation
from ppl_sparsegp.core import active_sets, bounds, ops
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.inducing.active_sets import split_active
from ppl_sparsegp.numpyro import nn, sites
from ppl_sparsegp.numpyro.dtype import as_float

from ._base import GPModel, _is_concrete

Array = Any

ENCODER = "encoder"
ENCODER_PARAMS = f"{ENCODER}$params"
LATENT = "X"


@dataclass(eq=False)
class SASGPLVM(GPModel):
    """A GP-LVM decoder over Y [N, D] with an amortised encoder, trained with stochastic active sets.

    Args (beyond :class:`GPModel`'s kernel over Q latent dimensions and Gaussian likelihood):
        data_dim: D, the observations' columns.
        latent_dim: Q.
        num_active: A, the active set's size per step.
        batch_size: B > A rows per step (None or >= N: all rows, split into A and N − A).
        bayesian: Bayesian SAS (q(x | y) and the latent prior) rather than deterministic SAS (x = g(y)).
        weight: the held-out sum's weight, one of :data:`ppl_sparsegp.core.active_sets.WEIGHTS`.
        hidden, activation: the encoder's hidden widths and activation (:func:`ppl_sparsegp.numpyro.nn.
            encoder_network`; the paper's 512-256 ReLU); ``seed`` its initial weights; ``encoder`` a network of
            one's own (an equinox module y [D] -> x [Q], or a :class:`~ppl_sparsegp.numpyro.nn.GaussianEncoder`).
        num_data: N of ``model(Y=None)``'s prior draws.
    """

    data_dim: int = 1
    latent_dim: int = 2
    num_active: int = 100
    batch_size: int | None = 1024
    bayesian: bool = False
    weight: str = "unbiased"
    hidden: Sequence[int] = (512, 256)
    activation: str = "relu"
    seed: int = 0
    encoder: Any = None
    num_data: int | None = None
    predicts_from_data = True

    def __post_init__(self) -> None:
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError(f"likelihood: SAS-GP needs the Gaussian likelihood, got {type(self.likelihood).__name__}")
        for name, least in (("data_dim", 1), ("latent_dim", 1), ("num_active", 1), ("seed", 0)):
            validation.check_count(name, getattr(self, name), least)
        validation.check_count("batch_size", self.batch_size, self.num_active + 1, optional=True)
        validation.check_count("num_data", self.num_data, 1, optional=True)
        validation.check_choice("weight", self.weight, active_sets.WEIGHTS)
        validation.check_choice("activation", self.activation, sorted(nn.ACTIVATIONS))
        self.hidden = tuple(validation.check_count("hidden", width, 1) for width in self.hidden)
        if self.encoder is None:
            build = nn.gaussian_encoder if self.bayesian else nn.encoder_network
            key, dtype = jax.random.PRNGKey(self.seed), as_float(np.zeros(())).dtype
            self.encoder = build(self.data_dim, self.latent_dim, self.hidden, self.activation, key, dtype)
        elif self.bayesian != isinstance(self.encoder, nn.GaussianEncoder):
            raise ValueError("encoder: Bayesian SAS takes a GaussianEncoder, deterministic SAS a network y -> x")
        super().__post_init__()

    def parameter_names(self) -> set[str]:
        """The hyperparameter sites' names and the encoder's ``"encoder$params"``."""
        return super().parameter_names() | {ENCODER_PARAMS}

    def check_data(self, Y: Array, *, init_params: Mapping[str, Array] | None = None) -> None:
        """Eager checks of Y [N, D] (finite unless traced; N > A) and of initial hyperparameter values."""
        if _is_concrete(Y):
            validation.check_inputs(Y, x_name="Y")
        if jnp.ndim(Y) != 2 or jnp.shape(Y)[1] != self.data_dim or jnp.shape(Y)[0] <= self.num_active:
            raise ValueError(f"Y: expected [N, {self.data_dim}] with N > num_active = {self.num_active}, got "
                             f"{jnp.shape(Y)}")  # fmt: skip
        super().check_data(jnp.zeros((1, self.latent_dim)), init_params=init_params)

    def _batch(self, N: int) -> int:
        return N if self.batch_size is None else min(self.batch_size, N)

    def model(self, Y: Array | None = None) -> None:
        """The SAS estimate of a batch as the factor ``"sas"`` (module docstring); ``Y=None``: prior draws."""
        kernel, likelihood = self.hyperparameters()
        if Y is None:
            return self._prior_draws(kernel, likelihood)
        Y = jnp.asarray(Y)
        self.check_data(Y)
        N, B, A = Y.shape[0], self._batch(Y.shape[0]), self.num_active
        encoder = None if self.bayesian else eqx_module(ENCODER, self.encoder)
        with sites.data_plate(N, B, replace=False) as idx:
            Yb = Y if idx is None else Y[idx]
            if self.bayesian:
                X = numpyro.sample(LATENT, dist.Normal(jnp.zeros((B, self.latent_dim), Y.dtype), 1.0).to_event(1))
        if not self.bayesian:
            X = jax.vmap(encoder)(Yb)
        weight = active_sets.conditional_weight(self.weight, N, B, A)
        numpyro.factor("sas", self._estimate(kernel, likelihood, X, Yb, numpyro.prng_key(), weight))

    def guide(self, Y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors; Bayesian SAS: x_n ~ q(x | y_n) for the batch's rows."""
        self.hyperparameter_guide()
        if not self.bayesian or Y is None:
            return
        Y = jnp.asarray(Y)
        encoder = eqx_module(ENCODER, self.encoder)
        N = Y.shape[0]
        with sites.data_plate(N, self._batch(N), replace=False) as idx:
            mean, var = jax.vmap(encoder)(Y if idx is None else Y[idx])
            numpyro.sample(LATENT, dist.Normal(mean, jnp.sqrt(var)).to_event(1))

    def _prior_draws(self, kernel: Any, likelihood: Any) -> None:
        if self.num_data is None:
            raise ValueError("num_data: model(Y=None) draws num_data rows; set num_data=N")
        N, dtype = self.num_data, as_float(np.zeros(())).dtype
        with sites.data_plate(N):
            X = numpyro.sample(LATENT, dist.Normal(jnp.zeros((N, self.latent_dim), dtype), 1.0).to_event(1))
        prior = dist.MultivariateNormal(jnp.zeros(N, dtype), scale_tril=ops.cholesky(kernel(X)))
        f = numpyro.sample("f", prior.expand([self.data_dim]).to_event(1))
        sites.observations(likelihood, f.T)

    def fitted_encoder(self, params: Mapping[str, Array]) -> Any:
        """The encoder with the fitted weights ``params["encoder$params"]`` (the initial ones if absent)."""
        return nn.fitted(self.encoder, params, ENCODER_PARAMS)

    def encode(self, params: Mapping[str, Array], Y: Array) -> Array:
        """The latents of the rows of Y [S, D]: x = g(y), or the mean μ(y) of q(x | y) (Bayesian): [S, Q]."""
        out = jax.vmap(self.fitted_encoder(params))(jnp.asarray(Y))
        return out[0] if self.bayesian else out

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """The exact GP posterior of f at latents X_new [S, Q] given latents X [N, Q] with observations y [N, D]:
        mean [S, D] and variance [S, D] (one variance per point, the same for every output) or covariance."""
        kernel, likelihood = self.fitted(params)
        X, y = jnp.asarray(X), jnp.asarray(y)
        Kss = kernel(X_new) if full_cov else kernel.diag(X_new)
        mean, var = bounds.gaussian_posterior(
            kernel(X), kernel(X_new, X), Kss, y, likelihood.variance, full_cov=full_cov
        )
        return mean.T, var if full_cov else jnp.broadcast_to(var[:, None], (X_new.shape[0], y.shape[1]))

    def reconstruct(
        self, params: Mapping[str, Array], Y_new: Array, Y: Array, num_conditioning: int | None = None, key: Any = 0
    ) -> tuple[Array, Array]:
        """Predictive mean and variance [S, D] of Y_new [S, D] through the encoder and the decoder conditioned on the
        encoded rows of Y [N, D]: all of them, or ``num_conditioning`` rows drawn without replacement (``key``)."""
        Y = jnp.asarray(Y)
        if num_conditioning is not None and num_conditioning < Y.shape[0]:
            Y = Y[jax.random.permutation(jax.random.PRNGKey(key) if isinstance(key, int) else key, Y.shape[0])
                  [:num_conditioning]]  # fmt: skip
        return self.predict_y(params, self.encode(params, Y_new), X=self.encode(params, Y), y=Y)

    def exact_log_marginal(self, params: Mapping[str, Array], Y: Array) -> Array:
        """log p(Y | X) = Σ_d log N(Y[:, d] | 0, K_XX + σ² I) at the encoded latents (paper eq 2; O(N³)): scalar."""
        kernel, likelihood = self.fitted(params)
        return bounds.gaussian_log_marginal(kernel(self.encode(params, Y)), jnp.asarray(Y), likelihood.variance)

    def sas_estimate(self, params: Mapping[str, Array], Y: Array, key: Array) -> Array:
        """One full-data SAS estimate at the encoded latents: A random active rows of Y [N, D], the other N − A held
        out, weight 1 (the estimate of log p(Y | X) that training averages over): scalar."""
        kernel, likelihood = self.fitted(params)
        return self._estimate(kernel, likelihood, self.encode(params, Y), jnp.asarray(Y), key, 1.0)

    def _estimate(self, kernel: Any, likelihood: Any, X: Array, Y: Array, key: Array, weight: float) -> Array:
        """L̂ of the rows X [B, Q], Y [B, D] split at random (``key``) into A active and B − A held out (paper eq 6)."""
        active, held = split_active(key, Y.shape[0], self.num_active)
        Xa, Xr = X[active], X[held]
        return active_sets.sas_objective(
            kernel(Xa), kernel(Xa, Xr), kernel.diag(Xr), Y[active], Y[held], likelihood.variance, weight
        )
