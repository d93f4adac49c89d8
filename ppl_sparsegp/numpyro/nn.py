"""Networks for amortised guides: equinox MLPs registered through ``numpyro.contrib.module.eqx_module``.

Why equinox (not flax): an equinox module is a pytree of its arrays, so ``eqx_module`` registers one ``param`` site
whose value optax, NumPyro's SVI state, our npz checkpoints and ``jax.vmap`` all handle as they handle any pytree;
it needs no separate state or RNG plumbing for a plain MLP, and it installs in seconds (flax pulls orbax and
tensorstore).

:func:`inducing_network` builds the IDSGP network (Jafrasteh et al. 2022, §3.2 and Fig 1): x [D] -> a vector of
:func:`inducing_output_size` numbers that :func:`split_inducing_outputs` reads as inducing inputs Z(x) [M, D], the
mean m(x) [M] and the lower-triangular L(x) [M, M] with a positive (exponentiated) diagonal, S(x) = L Lᵀ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Array = Any

ACTIVATIONS = {"sigmoid": jax.nn.sigmoid, "tanh": jnp.tanh, "relu": jax.nn.relu, "softplus": jax.nn.softplus}
"""Hidden-layer activations by name (the authors' code uses the sigmoid)."""


def inducing_output_size(num_inducing: int, input_dim: int) -> int:
    """O = M·D + M + M(M+1)/2: Z(x), m(x) and the lower triangle of L(x)."""
    M = int(num_inducing)
    return M * int(input_dim) + M + M * (M + 1) // 2


def inducing_network(input_dim: int, num_inducing: int, hidden: Sequence[int], activation: str, key: Array,
                     dtype: Any) -> Any:  # fmt: skip
    """An equinox MLP x [D] -> [O] (:func:`inducing_output_size`) with the hidden widths ``hidden`` (all equal, as
    ``eqx.nn.MLP`` builds them; empty: one linear layer), ``activation`` (a name in :data:`ACTIVATIONS`) between
    layers, a linear output whose bias starts at zero, and weights of ``dtype``."""
    import equinox as eqx

    widths = tuple(int(w) for w in hidden)
    if len(set(widths)) > 1:
        raise ValueError(f"hidden: equinox's MLP has one width for every hidden layer, got {widths}")
    net = eqx.nn.MLP(
        int(input_dim), inducing_output_size(num_inducing, input_dim), widths[0] if widths else 0, len(widths),
        activation=ACTIVATIONS[activation], dtype=dtype, key=key,
    )  # fmt: skip
    last = net.layers[-1]
    return eqx.tree_at(lambda n: n.layers[-1].bias, net, jnp.zeros_like(last.bias))


def split_inducing_outputs(out: Array, num_inducing: int, input_dim: int) -> tuple[Array, Array, Array]:
    """The network's outputs [..., O] as Z [..., M, D], m [..., M] and L [..., M, M]: the first M·D numbers are Z
    row by row, the next M are m, the rest fill L's lower triangle row by row, its diagonal through exp."""
    M, D = int(num_inducing), int(input_dim)
    Z = out[..., : M * D].reshape(out.shape[:-1] + (M, D))
    m = out[..., M * D : M * D + M]
    rows, cols = np.tril_indices(M)
    raw = jnp.zeros(out.shape[:-1] + (M, M), out.dtype).at[..., rows, cols].set(out[..., M * D + M :])
    # The diagonal is replaced, not corrected by adding exp(r) - r: for r far below 0 that sum cancels to rounding
    # error (or to 0, whose log in the KL is -inf), where exp(r) itself is still a tiny positive number.
    on_diagonal = jnp.eye(M, dtype=bool)
    return Z, m, jnp.where(on_diagonal, jnp.exp(raw), raw)


def inducing_network_constants(Z: Array, m: Array, L: Array) -> Array:
    """The output vector [O] for which :func:`split_inducing_outputs` returns Z [M, D], m [M] and L [M, M] (L's
    diagonal positive): the bias of a network whose weights are zero, i.e. one shared inducing set and q(u)."""
    M = Z.shape[0]
    rows, cols = np.tril_indices(M)
    raw = jnp.asarray(L).at[jnp.arange(M), jnp.arange(M)].set(jnp.log(jnp.diagonal(L)))
    return jnp.concatenate([jnp.ravel(Z), jnp.ravel(m), raw[rows, cols]])
