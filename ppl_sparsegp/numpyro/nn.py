"""Networks for amortised guides: equinox MLPs registered through ``numpyro.contrib.module.eqx_module``.

Why equinox (not flax): an equinox module is a pytree of its arrays, so ``eqx_module`` registers one ``param`` site
whose value optax, NumPyro's SVI state, our npz checkpoints and ``jax.vmap`` all handle as they handle any pytree;
it needs no separate state or RNG plumbing for a plain MLP, and it installs in seconds (flax pulls orbax and
tensorstore).

:func:`inducing_network` builds the IDSGP network (Jafrasteh et al. 2022, §3.2 and Fig 1): x [D] -> a vector of
:func:`inducing_output_size` numbers that :func:`split_inducing_outputs` reads as inducing inputs Z(x) [M, D], the
mean m(x) [M] and the lower-triangular L(x) [M, M] with a positive (exponentiated) diagonal, S(x) = L Lᵀ. The
reading of the outputs is :mod:`ppl_sparsegp.core.network_outputs`, shared with the Pyro twin
:mod:`ppl_sparsegp.pyro.nn` (torch modules of the same architecture).

:func:`encoder_network` builds a GP-LVM encoder y [D] -> x [Q] (SAS-GP's amortisation, Moreno-Muñoz et al. 2022
§3.2: linear layers of any widths with an activation between them, 784-512-256-2 with ReLU in the paper), and
:class:`GaussianEncoder` the amortised q(x | y) = N(μ(y), diag σ²(y)) of the Bayesian variant: two such networks,
the variance through a softplus.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ppl_sparsegp.core.network_outputs import inducing_output_size, positive_variance, split_inducing_outputs

Array = Any

__all__ = [
    "ACTIVATIONS",
    "GaussianEncoder",
    "encoder_network",
    "fitted",
    "gaussian_encoder",
    "inducing_network",
    "inducing_network_constants",
    "inducing_output_size",
    "split_inducing_outputs",
]

ACTIVATIONS = {"sigmoid": jax.nn.sigmoid, "tanh": jnp.tanh, "relu": jax.nn.relu, "softplus": jax.nn.softplus}
"""Hidden-layer activations by name (the authors' code uses the sigmoid)."""


def inducing_network(input_dim: int, num_inducing: int, hidden: Sequence[int], activation: str, key: Array,
                     dtype: Any) -> Any:  # fmt: skip
    """An equinox MLP x [D] -> [O] (:func:`inducing_output_size`) with the hidden widths ``hidden`` (all equal, as
    ``eqx.nn.MLP`` builds them; empty: one linear layer), ``activation`` (a name in :data:`ACTIVATIONS`) between
    layers, a linear output whose bias starts at zero, and weights of ``dtype``."""
    widths = tuple(int(w) for w in hidden)
    if len(set(widths)) > 1:
        raise ValueError(f"hidden: equinox's MLP has one width for every hidden layer, got {widths}")
    net = eqx.nn.MLP(
        int(input_dim), inducing_output_size(num_inducing, input_dim), widths[0] if widths else 0, len(widths),
        activation=ACTIVATIONS[activation], dtype=dtype, key=key,
    )  # fmt: skip
    last = net.layers[-1]
    return eqx.tree_at(lambda n: n.layers[-1].bias, net, jnp.zeros_like(last.bias))


def inducing_network_constants(Z: Array, m: Array, L: Array) -> Array:
    """The output vector [O] for which :func:`split_inducing_outputs` returns Z [M, D], m [M] and L [M, M] (L's
    diagonal positive): the bias of a network whose weights are zero, i.e. one shared inducing set and q(u)."""
    M = Z.shape[0]
    rows, cols = np.tril_indices(M)
    raw = jnp.asarray(L).at[jnp.arange(M), jnp.arange(M)].set(jnp.log(jnp.diagonal(L)))
    return jnp.concatenate([jnp.ravel(Z), jnp.ravel(m), raw[rows, cols]])


def fitted(module: Any, params: Mapping[str, Array], site: str) -> Any:
    """``module`` (an equinox module registered by ``eqx_module(name, module)``) with the weights of its param site
    ``site`` (``"<name>$params"``) in ``params``, or its own initial weights where ``params`` has none."""
    weights, static = eqx.partition(module, eqx.is_inexact_array)
    return eqx.combine(params.get(site, weights), static)


def encoder_network(input_dim: int, output_dim: int, hidden: Sequence[int], activation: str, key: Array,
                    dtype: Any) -> Any:  # fmt: skip
    """An equinox network y [input_dim] -> [output_dim]: linear layers of the widths ``hidden`` (each its own; empty:
    one linear layer) with ``activation`` (a name in :data:`ACTIVATIONS`) after every hidden layer, weights of
    ``dtype`` initialised as equinox does (uniform, scaled by 1/sqrt(fan-in))."""
    widths = (int(input_dim), *(int(w) for w in hidden), int(output_dim))
    keys = jax.random.split(key, len(widths) - 1)
    layers: list[Any] = []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(eqx.nn.Linear(fan_in, fan_out, key=keys[i], dtype=dtype))
        if i < len(widths) - 2:
            layers.append(eqx.nn.Lambda(ACTIVATIONS[activation]))
    return eqx.nn.Sequential(layers)


class GaussianEncoder(eqx.Module):
    """q(x | y) = N(μ(y), diag σ²(y)) over x [Q], by two networks (:func:`encoder_network`): ``mean`` gives μ and
    ``variance`` gives σ² through a softplus, floored at ``min_variance``."""

    mean: Any
    variance: Any
    min_variance: float = eqx.field(static=True, default=1e-6)

    def __call__(self, y: Array) -> tuple[Array, Array]:
        """μ [Q] and σ² [Q] at one observation y [D]."""
        return self.mean(y), positive_variance(self.variance(y), self.min_variance)


def gaussian_encoder(input_dim: int, latent_dim: int, hidden: Sequence[int], activation: str, key: Array,
                     dtype: Any) -> GaussianEncoder:  # fmt: skip
    """A :class:`GaussianEncoder` y [input_dim] -> (μ, σ²) [latent_dim] whose two networks have the widths
    ``hidden`` and ``activation`` of :func:`encoder_network`."""
    mean_key, variance_key = jax.random.split(key)
    return GaussianEncoder(
        encoder_network(input_dim, latent_dim, hidden, activation, mean_key, dtype),
        encoder_network(input_dim, latent_dim, hidden, activation, variance_key, dtype),
    )
