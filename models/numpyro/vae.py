"""A variational autoencoder (Kingma & Welling 2014), the neural baseline of SAS-GP's Table 2 (issue 22): the same
amortised encoder as Bayesian SAS (:class:`ppl_sparsegp.numpyro.nn.GaussianEncoder`) and a network decoder of the
mirrored widths in place of the GP.

Notation as :mod:`models.numpyro.sas_gplvm`: observations Y [N, D], latents X [N, Q].

Site names: params ``"encoder$params"`` (guide) and ``"decoder$params"`` (model), ``"likelihood.variance"`` (the
noise variance σ², one for every pixel, as the GP decoder's); plate ``"data"``; latent ``"X"`` [B, Q]; observed
``"y"`` [B, D]. ``model(Y=None)`` draws ``num_data`` rows from the prior and the decoder.

Generative model and guide, trained by ``TraceMeanField_ELBO`` (the latent KL in closed form), the data term and
the KL scaled N/B by the data plate::

    x_n ~ N(0, I_Q),   y_n | x_n ~ N(g(x_n), σ² I_D)           g: Q -> 256 -> 512 -> D (ReLU), σ² learned
    q(x_n | y_n) = N(μ(y_n), diag s²(y_n))                    the encoder: D -> 512 -> 256 -> Q, twice
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
from numpyro.distributions import constraints

from ppl_sparsegp import validation
from ppl_sparsegp.numpyro import nn, sites
from ppl_sparsegp.numpyro.dtype import as_float

from ._base import _is_concrete

Array = Any

ENCODER, DECODER, NOISE = "encoder", "decoder", "likelihood.variance"


@dataclass(eq=False)
class VAE:
    """A VAE over Y [N, D] with Q latent dimensions (module docstring).

    Args:
        data_dim: D; latent_dim: Q; hidden: the encoder's hidden widths (the decoder's are reversed);
        activation: a name in :data:`ppl_sparsegp.numpyro.nn.ACTIVATIONS`; batch_size: B rows per step (None: all);
        noise_variance: σ²'s initial value; seed: the networks' initial weights; num_data: N of ``model(Y=None)``.
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
        encoder_key, decoder_key = jax.random.split(jax.random.PRNGKey(self.seed))
        dtype = as_float(np.zeros(())).dtype
        self.encoder = nn.gaussian_encoder(self.data_dim, self.latent_dim, self.hidden, self.activation, encoder_key,
                                           dtype)  # fmt: skip
        self.decoder = nn.encoder_network(self.latent_dim, self.data_dim, self.hidden[::-1], self.activation,
                                          decoder_key, dtype)  # fmt: skip

    def parameter_names(self) -> set[str]:
        return {f"{ENCODER}$params", f"{DECODER}$params", NOISE}

    def check_data(self, Y: Array, *, init_params: Mapping[str, Array] | None = None) -> None:
        """Eager checks of Y [N, D] (finite unless traced) and of the names in ``init_params``."""
        if _is_concrete(Y):
            validation.check_inputs(Y, x_name="Y")
        if jnp.ndim(Y) != 2 or jnp.shape(Y)[1] != self.data_dim:
            raise ValueError(f"Y: expected [N, {self.data_dim}], got {jnp.shape(Y)}")
        validation.check_keys("init_params", init_params or {}, self.parameter_names())

    def model(self, Y: Array | None = None) -> None:
        """x_n ~ N(0, I) and y_n ~ N(g(x_n), σ² I) for the batch's rows (``Y=None``: ``num_data`` prior draws)."""
        decoder = eqx_module(DECODER, self.decoder)
        noise = numpyro.param(NOISE, jnp.asarray(self.noise_variance, as_float(np.zeros(())).dtype),
                              constraint=constraints.positive)  # fmt: skip
        if Y is None and self.num_data is None:
            raise ValueError("num_data: model(Y=None) draws num_data rows; set num_data=N")
        N = self.num_data if Y is None else Y.shape[0]
        with sites.data_plate(N, None if Y is None else self.batch_size) as idx:
            rows = N if idx is None else idx.shape[0]
            X = numpyro.sample("X", dist.Normal(jnp.zeros((rows, self.latent_dim), noise.dtype), 1.0).to_event(1))
            observed = None if Y is None else (jnp.asarray(Y) if idx is None else jnp.asarray(Y)[idx])
            numpyro.sample("y", dist.Normal(jax.vmap(decoder)(X), jnp.sqrt(noise)).to_event(1), obs=observed)

    def guide(self, Y: Array | None = None) -> None:
        """x_n ~ q(x | y_n) for the batch's rows (nothing with ``Y=None``: the latents then come from the prior)."""
        if Y is None:
            return
        encoder = eqx_module(ENCODER, self.encoder)
        with sites.data_plate(Y.shape[0], self.batch_size) as idx:
            mean, var = jax.vmap(encoder)(jnp.asarray(Y) if idx is None else jnp.asarray(Y)[idx])
            numpyro.sample("X", dist.Normal(mean, jnp.sqrt(var)).to_event(1))

    def encode(self, params: Mapping[str, Array], Y: Array) -> Array:
        """The encoder's means μ(y) [S, Q] of the rows of Y [S, D]."""
        return jax.vmap(nn.fitted(self.encoder, params, f"{ENCODER}$params"))(jnp.asarray(Y))[0]

    def reconstruct(self, params: Mapping[str, Array], Y_new: Array, Y: Array | None = None) -> tuple[Array, Array]:
        """Predictive mean g(μ(y)) [S, D] and variance σ² [S, D] of the rows of Y_new; ``Y`` (a GP decoder's
        conditioning rows) is not used: the decoder is a network."""
        mean = jax.vmap(nn.fitted(self.decoder, params, f"{DECODER}$params"))(self.encode(params, Y_new))
        return mean, jnp.broadcast_to(jnp.asarray(params.get(NOISE, self.noise_variance), mean.dtype), mean.shape)
