"""A variational autoencoder (Kingma & Welling 2014) as a Pyro program, the twin of :mod:`models.numpyro.vae` (its
docstring states the model and the guide): SAS-GP's amortised encoder (:class:`ppl_sparsegp.pyro.nn.GaussianEncoder`)
and a network decoder of the mirrored widths.

Site names: as the NumPyro twin's, ``"likelihood.variance"`` (σ²); plate ``"data"``; latent ``"X"`` [B, Q];
observed ``"y"`` [B, D]; except the networks' weights, one param per tensor ``"encoder.<parameter>"`` (guide) and
``"decoder.<parameter>"`` (model) (:func:`ppl_sparsegp.pyro.nn.module`), where NumPyro has ``"encoder$params"`` and
``"decoder$params"``::

    x_n ~ N(0, I_Q),   y_n | x_n ~ N(g(x_n), σ² I_D)           g: the decoder, σ² learned
    q(x_n | y_n) = N(μ(y_n), diag s²(y_n))                    the encoder
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from ppl_sparsegp import validation
from ppl_sparsegp.pyro import nn, sites
from ppl_sparsegp.pyro.dtype import as_tensor, float_dtype

Array = Any

ENCODER, DECODER, NOISE = "encoder", "decoder", "likelihood.variance"


@dataclass(eq=False)
class VAE:
    """A VAE over Y [N, D] with Q latent dimensions; the fields of :class:`models.numpyro.vae.VAE`.

    Args:
        data_dim: D; latent_dim: Q; hidden: the encoder's hidden widths (the decoder's are reversed);
        activation: a name in :data:`ppl_sparsegp.pyro.nn.ACTIVATIONS`; batch_size: B rows per step (None: all);
        noise_variance: σ²'s initial value; seed: the networks' initial weights (encoder, then decoder, from one
        generator); num_data: N of ``model(Y=None)``.
    """

    data_dim: int
    latent_dim: int = 2
    hidden: Sequence[int] = (512, 256)
    activation: str = "relu"
    batch_size: int | None = 1024
    noise_variance: float = 0.5
    seed: int = 0
    num_data: int | None = None

    def __post_init__(self) -> None:
        for name, least in (("data_dim", 1), ("latent_dim", 1), ("seed", 0)):
            validation.check_count(name, getattr(self, name), least)
        validation.check_count("batch_size", self.batch_size, 1, optional=True)
        validation.check_choice("activation", self.activation, sorted(nn.ACTIVATIONS))
        self.noise_variance = validation.check_positive_float("noise_variance", self.noise_variance)
        self.hidden = tuple(validation.check_count("hidden", width, 1) for width in self.hidden)
        generator = torch.Generator().manual_seed(self.seed)
        self.encoder = nn.gaussian_encoder(self.data_dim, self.latent_dim, self.hidden, self.activation, generator)
        self.decoder = nn.encoder_network(self.latent_dim, self.data_dim, self.hidden[::-1], self.activation, generator)

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the networks' parameters and ``"likelihood.variance"``."""
        return set(nn.param_values(ENCODER, self.encoder)) | set(nn.param_values(DECODER, self.decoder)) | {NOISE}

    def check_data(self, Y: Array, *, init_params: Mapping[str, Array] | None = None) -> None:
        """Eager checks of Y [N, D] (finite) and of the names in ``init_params``."""
        validation.check_inputs(Y, x_name="Y")
        if Y.ndim != 2 or Y.shape[1] != self.data_dim:
            raise ValueError(f"Y: expected [N, {self.data_dim}], got {tuple(Y.shape)}")
        validation.check_keys("init_params", init_params or {}, self.parameter_names())

    def model(self, Y: Array | None = None) -> None:
        """x_n ~ N(0, I) and y_n ~ N(g(x_n), σ² I) for the batch's rows (``Y=None``: ``num_data`` prior draws)."""
        decoder = nn.module(DECODER, self.decoder)
        noise = pyro.param(
            NOISE, torch.tensor(self.noise_variance, dtype=float_dtype()), constraint=constraints.positive
        )
        if Y is None and self.num_data is None:
            raise ValueError("num_data: model(Y=None) draws num_data rows; set num_data=N")
        Y = as_tensor(Y)
        N = self.num_data if Y is None else Y.shape[0]
        with sites.data_plate(N, None if Y is None else self.batch_size) as idx:
            rows = N if idx is None else idx.shape[0]
            X = pyro.sample("X", dist.Normal(torch.zeros((rows, self.latent_dim), dtype=noise.dtype), 1.0).to_event(1))
            observed = None if Y is None else (Y if idx is None else Y[idx])
            pyro.sample("y", dist.Normal(decoder(X), torch.sqrt(noise)).to_event(1), obs=observed)

    def guide(self, Y: Array | None = None) -> None:
        """x_n ~ q(x | y_n) for the batch's rows (nothing with ``Y=None``: the latents then come from the prior)."""
        if Y is None:
            return
        Y = as_tensor(Y)
        encoder = nn.module(ENCODER, self.encoder)
        with sites.data_plate(Y.shape[0], self.batch_size) as idx:
            mean, var = encoder(Y if idx is None else Y[idx])
            pyro.sample("X", dist.Normal(mean, torch.sqrt(var)).to_event(1))

    def encode(self, params: Mapping[str, Array], Y: Array) -> Array:
        """The encoder's means μ(y) [S, Q] of the rows of Y [S, D]."""
        with torch.no_grad():
            return nn.fitted(self.encoder, params, ENCODER)(as_tensor(Y))[0]

    def reconstruct(self, params: Mapping[str, Array], Y_new: Array, Y: Array | None = None) -> tuple[Array, Array]:
        """Predictive mean g(μ(y)) [S, D] and variance σ² [S, D] of the rows of Y_new; ``Y`` (a GP decoder's
        conditioning rows) is not used: the decoder is a network."""
        with torch.no_grad():
            mean = nn.fitted(self.decoder, params, DECODER)(self.encode(params, Y_new))
            noise = as_tensor(params.get(NOISE, self.noise_variance)).to(mean.dtype)
            return mean, torch.broadcast_to(noise, mean.shape)
