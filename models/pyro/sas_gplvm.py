"""SAS-GP: a GP-LVM decoder trained with stochastic active sets (Moreno-Muñoz, Feldager & Hauberg 2022; spec 004) as
a Pyro program, the twin of :mod:`models.numpyro.sas_gplvm` (its docstring states the model, the estimate, paper
eqs 2, 6 and 8, and the prediction). Observations Y [N, D], latents X [N, Q].

Site names: as the NumPyro twin's, hyperparameter sites (``"kernel.*"`` over the Q latent dimensions,
``"likelihood.variance"``); plate ``"data"`` (its sample site holds the batch's B distinct row indices); factor
``"sas"``; with ``bayesian=True`` the latent ``"X"`` [B, Q] inside the plate; ``model(Y=None)`` draws ``"X"``
[N, Q], ``"f"`` [D, N] and ``"y"`` [N, D]. The encoder's weights are one param per tensor, ``"encoder.<parameter>"``
(:func:`ppl_sparsegp.pyro.nn.module`), where NumPyro has ``"encoder$params"``.

Randomness is torch's generator (``pyro.set_rng_seed``): the batch (:func:`ppl_sparsegp.pyro.sites.data_plate`
with ``replace=False``), its split into A active and B − A held-out rows (:func:`split_active`), Bayesian SAS's
reparameterised draw of X, and :meth:`SASGPLVM.reconstruct`'s conditioning rows. The estimate itself is
:func:`ppl_sparsegp.core.active_sets.sas_objective`, as on the NumPyro side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyro
import pyro.distributions as dist
import torch

from ppl_sparsegp import validation
from ppl_sparsegp.core import active_sets, bounds, ops
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.pyro import nn, sites
from ppl_sparsegp.pyro.dtype import as_tensor, float_dtype

from ._base import GPModel

Array = Any

ENCODER = "encoder"
LATENT = "X"


def split_active(batch_size: int, num_active: int) -> tuple[Array, Array]:
    """A uniformly random split of the positions 0..B−1 of a batch (torch's generator): active [A] and held-out
    [B − A] (disjoint, together every position once); the twin of
    :func:`ppl_sparsegp.inducing.active_sets.split_active`."""
    order = torch.randperm(int(batch_size))
    return order[: int(num_active)], order[int(num_active) :]


@dataclass(eq=False)
class SASGPLVM(GPModel):
    """A GP-LVM decoder over Y [N, D] with an amortised encoder, trained with stochastic active sets; the fields of
    :class:`models.numpyro.sas_gplvm.SASGPLVM` (``encoder``: a ``torch.nn`` module y [B, D] -> x [B, Q], or a
    :class:`~ppl_sparsegp.pyro.nn.GaussianEncoder` for Bayesian SAS; or the NumPyro twin's equinox encoder (or its
    weights), whose weights the encoder built from ``hidden``, ``activation`` and ``seed`` takes).
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
        if not isinstance(self.encoder, torch.nn.Module):
            weights = self.encoder
            build = nn.gaussian_encoder if self.bayesian else nn.encoder_network
            self.encoder = build(self.data_dim, self.latent_dim, self.hidden, self.activation, self.seed)
            if weights is not None:
                nn.load_numpyro_weights(self.encoder, weights)
        elif self.bayesian != isinstance(self.encoder, nn.GaussianEncoder):
            raise ValueError("encoder: Bayesian SAS takes a GaussianEncoder, deterministic SAS a network y -> x")
        super().__post_init__()

    def parameter_names(self) -> set[str]:
        """The hyperparameter sites' names and the encoder's ``"encoder.<parameter>"``."""
        return super().parameter_names() | set(nn.param_values(ENCODER, self.encoder))

    def check_data(self, Y: Array) -> None:
        """Eager checks of Y [N, D] (finite; N > A)."""
        validation.check_inputs(Y, x_name="Y")
        if Y.ndim != 2 or Y.shape[1] != self.data_dim or Y.shape[0] <= self.num_active:
            raise ValueError(
                f"Y: expected [N, {self.data_dim}] with N > num_active = {self.num_active}, got {tuple(Y.shape)}"
            )
        super().check_data(torch.zeros((1, self.latent_dim)))

    def _batch(self, N: int) -> int:
        return N if self.batch_size is None else min(self.batch_size, N)

    def model(self, Y: Array | None = None) -> None:
        """The SAS estimate of a batch as the factor ``"sas"`` (module docstring); ``Y=None``: prior draws."""
        kernel, likelihood = self.hyperparameters()
        if Y is None:
            return self._prior_draws(kernel, likelihood)
        Y = as_tensor(Y)
        self.check_data(Y)
        N, B, A = Y.shape[0], self._batch(Y.shape[0]), self.num_active
        encoder = None if self.bayesian else nn.module(ENCODER, self.encoder)
        with sites.data_plate(N, B, replace=False) as idx:
            Yb = Y if idx is None else Y[idx]
            if self.bayesian:
                prior = dist.Normal(torch.zeros((B, self.latent_dim), dtype=Y.dtype), 1.0).to_event(1)
                X = pyro.sample(LATENT, prior)
        if not self.bayesian:
            X = encoder(Yb)
        weight = active_sets.conditional_weight(self.weight, N, B, A)
        pyro.factor("sas", self._estimate(kernel, likelihood, X, Yb, weight))

    def guide(self, Y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors; Bayesian SAS: x_n ~ q(x | y_n) for the batch's rows."""
        self.hyperparameter_guide()
        if not self.bayesian or Y is None:
            return
        Y = as_tensor(Y)
        encoder = nn.module(ENCODER, self.encoder)
        N = Y.shape[0]
        with sites.data_plate(N, self._batch(N), replace=False) as idx:
            mean, var = encoder(Y if idx is None else Y[idx])
            pyro.sample(LATENT, dist.Normal(mean, torch.sqrt(var)).to_event(1))

    def _prior_draws(self, kernel: Any, likelihood: Any) -> None:
        if self.num_data is None:
            raise ValueError("num_data: model(Y=None) draws num_data rows; set num_data=N")
        N, dtype = self.num_data, float_dtype()
        with sites.data_plate(N):
            X = pyro.sample(LATENT, dist.Normal(torch.zeros((N, self.latent_dim), dtype=dtype), 1.0).to_event(1))
        prior = dist.MultivariateNormal(torch.zeros(N, dtype=dtype), scale_tril=ops.cholesky(kernel(X)))
        f = pyro.sample("f", prior.expand([self.data_dim]).to_event(1))
        sites.observations(likelihood, f.T)

    def fitted_encoder(self, params: Mapping[str, Array]) -> Callable[[Array], Any]:
        """The encoder with the fitted weights ``params["encoder.<parameter>"]`` (the initial ones if absent)."""
        return nn.fitted(self.encoder, params, ENCODER)

    def encode(self, params: Mapping[str, Array], Y: Array) -> Array:
        """The latents of the rows of Y [S, D]: x = g(y), or the mean μ(y) of q(x | y) (Bayesian): [S, Q]."""
        with torch.no_grad():
            out = self.fitted_encoder(params)(as_tensor(Y))
        return out[0] if self.bayesian else out

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """The exact GP posterior of f at latents X_new [S, Q] given latents X [N, Q] with observations y [N, D]:
        mean [S, D] and variance [S, D] (one variance per point, the same for every output) or covariance."""
        kernel, likelihood = self.fitted(params)
        Kss = kernel(X_new) if full_cov else kernel.diag(X_new)
        mean, var = bounds.gaussian_posterior(
            kernel(X), kernel(X_new, X), Kss, y, likelihood.variance, full_cov=full_cov
        )
        return mean.T, var if full_cov else torch.broadcast_to(var[:, None], (X_new.shape[0], y.shape[1]))

    def reconstruct(
        self, params: Mapping[str, Array], Y_new: Array, Y: Array, num_conditioning: int | None = None
    ) -> tuple[Array, Array]:
        """Predictive mean and variance [S, D] of Y_new [S, D] through the encoder and the decoder conditioned on the
        encoded rows of Y [N, D]: all of them, or ``num_conditioning`` rows drawn without replacement (torch's
        generator)."""
        Y = as_tensor(Y)
        if num_conditioning is not None and num_conditioning < Y.shape[0]:
            Y = Y[torch.randperm(Y.shape[0])[:num_conditioning]]
        return self.predict_y(params, self.encode(params, Y_new), X=self.encode(params, Y), y=Y)

    def exact_log_marginal(self, params: Mapping[str, Array], Y: Array) -> Array:
        """log p(Y | X) = Σ_d log N(Y[:, d] | 0, K_XX + σ² I) at the encoded latents (paper eq 2; O(N³)): scalar."""
        kernel, likelihood = self.fitted(params)
        Y = as_tensor(Y)
        with torch.no_grad():
            return bounds.gaussian_log_marginal(kernel(self.encode(params, Y)), Y, likelihood.variance)

    def sas_estimate(self, params: Mapping[str, Array], Y: Array) -> Array:
        """One full-data SAS estimate at the encoded latents: A random active rows of Y [N, D] (torch's generator),
        the other N − A held out, weight 1 (the estimate of log p(Y | X) that training averages over): scalar."""
        kernel, likelihood = self.fitted(params)
        Y = as_tensor(Y)
        with torch.no_grad():
            return self._estimate(kernel, likelihood, self.encode(params, Y), Y, 1.0)

    def _estimate(self, kernel: Any, likelihood: Any, X: Array, Y: Array, weight: float) -> Array:
        """L̂ of the rows X [B, Q], Y [B, D] split at random into A active and B − A held out (paper eq 6)."""
        active, held = split_active(Y.shape[0], self.num_active)
        Xa, Xr = X[active], X[held]
        return active_sets.sas_objective(
            kernel(Xa), kernel(Xa, Xr), kernel.diag(Xr), Y[active], Y[held], likelihood.variance, weight
        )
