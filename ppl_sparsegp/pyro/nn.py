"""Networks for amortised guides as ``torch.nn`` modules registered with Pyro: the twin of
:mod:`ppl_sparsegp.numpyro.nn` (same function names, same architectures, same output heads).

* :func:`inducing_network` is the IDSGP network x [D] -> [O] (Jafrasteh et al. 2022, §3.2 and Fig 1), linear layers
  of one hidden width with an activation between them and a linear output whose bias starts at zero; its outputs are
  read by :func:`ppl_sparsegp.core.network_outputs.split_inducing_outputs` (re-exported here) as Z(x) [M, D], m(x)
  [M] and L(x) [M, M] with a positive diagonal, exactly as on the NumPyro side.
* :func:`encoder_network` is a GP-LVM encoder y [D] -> x [Q] (SAS-GP, Moreno-Muñoz et al. 2022 §3.2), and
  :class:`GaussianEncoder` the amortised q(x | y) = N(μ(y), diag σ²(y)), σ² = softplus + floor
  (:func:`ppl_sparsegp.core.network_outputs.positive_variance`).

The modules take batches (rows [..., D]) where the equinox ones take one row and are ``vmap``-ed; the outputs agree.
Weights start as equinox's do, uniform in ±1/sqrt(fan-in), drawn from a ``torch.Generator`` seeded by ``seed`` (or
from the generator passed as ``seed``); the draws differ from JAX's: :func:`load_numpyro_weights` copies a NumPyro
network's weights for parity, and :func:`numpyro_weights` hands a torch module's (a Pyro fit's) back to NumPyro.

:func:`encoder_twin` builds the torch twin of a NumPyro encoder (an :func:`encoder_network` or a
:class:`GaussianEncoder` of :mod:`ppl_sparsegp.numpyro.nn`) from the equinox module itself: its widths, activation
and variance floor, and its weights.

Registration (:func:`module`, the twin of ``numpyro.contrib.module.eqx_module``): every parameter of the module is a
``pyro.param`` named as a ``PyroModule`` of that name names it, ``"<name>.<parameter>"`` (e.g.
``"network.0.weight"``; Pyro cannot hold a whole module at NumPyro's single site ``"<name>$params"``), and the module
is evaluated with those values through ``torch.func.functional_call``, so that ``poutine.substitute``, the param
store and SVI all act on them while the module itself keeps its initial weights. (Not ``pyro.module``'s
``"<name>$$$<parameter>"``: ``poutine.substitute`` matches such names by ``<parameter>`` alone, which would confuse
two networks of one model, the VAE's encoder and decoder.) :func:`fitted` evaluates it at a ``params`` dict's
values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyro
import torch

from ppl_sparsegp.core import ops
from ppl_sparsegp.core.network_outputs import inducing_output_size, positive_variance, split_inducing_outputs

Array = Any

__all__ = [
    "ACTIVATIONS",
    "GaussianEncoder",
    "Softplus",
    "encoder_network",
    "encoder_twin",
    "fitted",
    "gaussian_encoder",
    "inducing_network",
    "inducing_output_size",
    "load_numpyro_weights",
    "module",
    "numpyro_weights",
    "param_name",
    "param_values",
    "split_inducing_outputs",
]


class Softplus(torch.nn.Module):
    """softplus(x) = log(1 + eˣ) as ``jax.nn.softplus`` computes it (``logaddexp(x, 0)``), without the linear cut-off
    above 20 of ``torch.nn.Softplus``, so that both sides agree there too."""

    def forward(self, x: Array) -> Array:
        return torch.logaddexp(x, torch.zeros_like(x))


ACTIVATIONS: dict[str, Callable[[], torch.nn.Module]] = {
    "sigmoid": torch.nn.Sigmoid,
    "tanh": torch.nn.Tanh,
    "relu": torch.nn.ReLU,
    "softplus": Softplus,
}
"""Hidden-layer activation modules by name, the names of :data:`ppl_sparsegp.numpyro.nn.ACTIVATIONS`."""


def _linear(fan_in: int, fan_out: int, generator: torch.Generator, dtype: Any) -> torch.nn.Linear:
    """A linear layer [fan_in] -> [fan_out] whose weight [fan_out, fan_in] and bias [fan_out] are uniform in
    ±1/sqrt(fan_in), as equinox initialises ``eqx.nn.Linear``."""
    layer = torch.nn.Linear(fan_in, fan_out, dtype=dtype)
    bound = 1.0 / math.sqrt(fan_in)
    with torch.no_grad():
        for value in (layer.weight, layer.bias):
            value.uniform_(-bound, bound, generator=generator)
    return layer


def _generator(seed: int | torch.Generator) -> torch.Generator:
    """``seed`` itself when it is a generator (networks built one after another draw from it in turn), else a new
    generator seeded with it."""
    return seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(int(seed))


def _stack(widths: Sequence[int], activation: str, seed: int | torch.Generator, dtype: Any) -> torch.nn.Sequential:
    """Linear layers through ``widths`` (input, hidden..., output) with ``activation`` after every hidden one."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}")
    generator = _generator(seed)
    dtype = dtype or torch.get_default_dtype()
    layers: list[torch.nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(_linear(fan_in, fan_out, generator, dtype))
        if i < len(widths) - 2:
            layers.append(ACTIVATIONS[activation]())
    return torch.nn.Sequential(*layers)


def inducing_network(
    input_dim: int,
    num_inducing: int,
    hidden: Sequence[int],
    activation: str,
    seed: int | torch.Generator = 0,
    dtype: Any = None,
) -> torch.nn.Sequential:
    """The IDSGP network x [..., D] -> [..., O] (:func:`inducing_output_size`): hidden layers of the widths
    ``hidden`` (all equal, as equinox's MLP on the NumPyro side; empty: one linear layer), ``activation`` (a name in
    :data:`ACTIVATIONS`) between layers, a linear output whose bias starts at zero; weights of ``dtype`` (None:
    torch's default) drawn with ``seed``."""
    widths = tuple(int(w) for w in hidden)
    if len(set(widths)) > 1:
        raise ValueError(f"hidden: equinox's MLP has one width for every hidden layer, got {widths}")
    net = _stack((int(input_dim), *widths, inducing_output_size(num_inducing, input_dim)), activation, seed, dtype)
    with torch.no_grad():
        net[-1].bias.zero_()
    return net


def encoder_network(
    input_dim: int,
    output_dim: int,
    hidden: Sequence[int],
    activation: str,
    seed: int | torch.Generator = 0,
    dtype: Any = None,
) -> torch.nn.Sequential:
    """A network y [..., input_dim] -> [..., output_dim]: linear layers of the widths ``hidden`` (each its own;
    empty: one linear layer) with ``activation`` (a name in :data:`ACTIVATIONS`) after every hidden layer."""
    return _stack((int(input_dim), *(int(w) for w in hidden), int(output_dim)), activation, seed, dtype)


class GaussianEncoder(torch.nn.Module):
    """q(x | y) = N(μ(y), diag σ²(y)) over x [Q], by two networks (:func:`encoder_network`): ``mean`` gives μ and
    ``variance`` gives σ² through a softplus, floored at ``min_variance``."""

    def __init__(self, mean: torch.nn.Module, variance: torch.nn.Module, min_variance: float = 1e-6) -> None:
        super().__init__()
        self.mean, self.variance, self.min_variance = mean, variance, float(min_variance)

    def forward(self, y: Array) -> tuple[Array, Array]:
        """μ [..., Q] and σ² [..., Q] at observations y [..., D]."""
        return self.mean(y), positive_variance(self.variance(y), self.min_variance)


def gaussian_encoder(
    input_dim: int,
    latent_dim: int,
    hidden: Sequence[int],
    activation: str,
    seed: int | torch.Generator = 0,
    dtype: Any = None,
) -> GaussianEncoder:
    """A :class:`GaussianEncoder` y [..., input_dim] -> (μ, σ²) [..., latent_dim] whose two networks have the widths
    ``hidden`` and ``activation`` of :func:`encoder_network` (their weights drawn in turn from ``seed``'s
    generator)."""
    generator = _generator(seed)
    return GaussianEncoder(
        encoder_network(input_dim, latent_dim, hidden, activation, generator, dtype),
        encoder_network(input_dim, latent_dim, hidden, activation, generator, dtype),
    )


def _call(network: torch.nn.Module, weights: Mapping[str, Array]) -> Callable[..., Any]:
    def call(*args: Array) -> Any:
        return torch.func.functional_call(network, dict(weights), args)

    return call


def param_name(name: str, parameter: str) -> str:
    """The Pyro param of the parameter ``parameter`` of a network registered as ``name``: ``"<name>.<parameter>"``."""
    return f"{name}.{parameter}"


def module(name: str, network: torch.nn.Module) -> Callable[..., Any]:
    """Register every parameter of ``network`` as the ``pyro.param`` ``"<name>.<parameter>"`` (initialised at a
    copy of the module's value) and return the network evaluated at those params' values (module docstring)."""
    weights = {
        key: pyro.param(param_name(name, key), lambda value=value: value.detach().clone())
        for key, value in network.named_parameters()
    }
    return _call(network, weights)


def param_values(name: str, network: torch.nn.Module) -> dict[str, Array]:
    """The ``params`` entries of ``network`` registered under ``name``: ``"<name>.<parameter>"`` -> a detached
    copy of the module's current value."""
    return {param_name(name, key): value.detach().clone() for key, value in network.named_parameters()}


def fitted(network: torch.nn.Module, params: Mapping[str, Array], name: str) -> Callable[..., Any]:
    """``network`` evaluated with the weights ``params["<name>.<parameter>"]`` (each its initial value where
    ``params`` has none), as tensors of the module's dtype, without gradients flowing into the module."""
    weights = {
        key: torch.as_tensor(params.get(param_name(name, key), value.detach()), dtype=value.dtype)
        for key, value in network.named_parameters()
    }
    return _call(network, weights)


def load_numpyro_weights(network: torch.nn.Module, weights: Any) -> torch.nn.Module:
    """Copy a NumPyro network's weights into ``network`` (in place; returned): ``weights`` is the equinox module built
    by :mod:`ppl_sparsegp.numpyro.nn` or its weights as NumPyro stores them at ``params["<name>$params"]`` (the
    module with its arrays only). Its floating arrays, in pytree order (layer by layer, weight [out, in] before bias
    [out]; a GaussianEncoder's ``mean`` before its ``variance``), are the torch module's parameters in registration
    order, converted to their dtype.

    Raises:
        ValueError: the two networks' parameters differ in number or in shape (another architecture).
    """
    import jax  # the NumPyro side's pytree; imported only when its weights are handed over

    arrays = [
        np.asarray(leaf)
        for leaf in jax.tree_util.tree_leaves(weights)
        if ops.is_array(leaf) and np.issubdtype(np.asarray(leaf).dtype, np.inexact)
    ]
    targets = list(network.parameters())
    shapes = [tuple(a.shape) for a in arrays], [tuple(t.shape) for t in targets]
    if shapes[0] != shapes[1]:
        raise ValueError(
            f"weights: the NumPyro network's arrays {shapes[0]} do not match the torch module's {shapes[1]}"
        )
    with torch.no_grad():
        for target, array in zip(targets, arrays, strict=True):
            target.copy_(torch.tensor(array, dtype=target.dtype))
    return network


def numpyro_weights(network: torch.nn.Module, template: Any, params: Mapping[str, Array] | None = None,
                    name: str = "") -> Any:  # fmt: skip
    """The reverse of :func:`load_numpyro_weights`: ``network``'s weights as a NumPyro network's, for the NumPyro twin
    to evaluate a Pyro fit. ``template`` is the equinox module of :mod:`ppl_sparsegp.numpyro.nn` or its weights as
    NumPyro stores them at ``params["<name>$params"]``; the result is ``template`` with its floating arrays, in
    pytree order, replaced by the torch module's parameters in registration order (the order
    :func:`load_numpyro_weights` pairs them in), each as a JAX array of the template array's dtype. A parameter's
    value is ``params["<name>.<parameter>"]`` (a Pyro fit's, :func:`param_name`) where ``params`` has it, else the
    module's own.

    Raises:
        ValueError: the two networks' parameters differ in number or in shape (another architecture).
    """
    import jax  # the NumPyro side's pytree; imported only when weights are handed over
    import jax.numpy as jnp

    params = params or {}
    values = [params.get(param_name(name, key), value) for key, value in network.named_parameters()]
    leaves, treedef = jax.tree_util.tree_flatten(template)
    slots = [i for i, leaf in enumerate(leaves) if ops.is_array(leaf) and np.issubdtype(leaf.dtype, np.inexact)]
    shapes = [tuple(np.shape(leaves[i])) for i in slots], [tuple(v.shape) for v in values]
    if shapes[0] != shapes[1]:
        raise ValueError(
            f"template: the NumPyro network's arrays {shapes[0]} do not match the torch module's {shapes[1]}"
        )
    for i, value in zip(slots, values, strict=True):
        leaves[i] = jnp.asarray(torch.as_tensor(value).detach().cpu().numpy(), dtype=leaves[i].dtype)
    return jax.tree_util.tree_unflatten(treedef, leaves)


def encoder_twin(network: Any) -> torch.nn.Module:
    """The torch twin of an equinox encoder of :mod:`ppl_sparsegp.numpyro.nn`: an :func:`encoder_network` (an
    ``eqx.nn.Sequential`` of ``eqx.nn.Linear`` layers with ``eqx.nn.Lambda`` activations between them) becomes the
    :func:`encoder_network` of the same widths and activation, a NumPyro ``GaussianEncoder`` the
    :class:`GaussianEncoder` of the twins of its ``mean`` and ``variance`` networks and its ``min_variance``; the
    weights (and their dtype) are the equinox module's (:func:`load_numpyro_weights`).

    Raises:
        ValueError: ``network`` is not such a module, or is its weights only (``eqx.partition``'s arrays, whose
            activations are gone): pass the module, e.g. :func:`ppl_sparsegp.numpyro.nn.fitted`'s.
    """
    import equinox as eqx  # the NumPyro side's modules; imported only when one is handed over

    from ppl_sparsegp.numpyro import nn as numpyro_nn

    if isinstance(network, numpyro_nn.GaussianEncoder):
        mean, variance = encoder_twin(network.mean), encoder_twin(network.variance)
        return GaussianEncoder(mean, variance, network.min_variance)
    layers = network.layers if isinstance(network, eqx.nn.Sequential) else ()
    linear = [layer for layer in layers if isinstance(layer, eqx.nn.Linear)]
    steps = [layer.fn for layer in layers if isinstance(layer, eqx.nn.Lambda)]
    names = {fn: name for name, fn in numpyro_nn.ACTIVATIONS.items()}
    if not linear or len(steps) != len(linear) - 1 or len(set(map(id, steps))) > 1:
        raise ValueError(f"network: expected an encoder of ppl_sparsegp.numpyro.nn, got {type(network).__name__}")
    if steps and steps[0] not in names:
        raise ValueError(
            "network: its activation is unknown (weights only, or not one of ACTIVATIONS); pass the equinox module"
        )
    dtype = torch.tensor(np.asarray(linear[0].bias)).dtype
    twin = encoder_network(
        linear[0].in_features, linear[-1].out_features, [layer.out_features for layer in linear[:-1]],
        names[steps[0]] if steps else next(iter(ACTIVATIONS)), dtype=dtype,
    )  # fmt: skip
    return load_numpyro_weights(twin, network)
