"""numpyro_weights, the reverse of load_numpyro_weights: a torch network's weights (or a Pyro fit's params) handed
to the NumPyro twin's equinox network round-trip exactly both ways, keep the template's dtypes, take the params'
values over the module's own, and are refused for another architecture."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from ppl_sparsegp.numpyro import nn as np_nn
from ppl_sparsegp.pyro import nn as pyro_nn

NETWORKS = {
    "inducing": (np_nn.inducing_network, pyro_nn.inducing_network, (3, 4, (6,), "sigmoid")),
    "encoder": (np_nn.encoder_network, pyro_nn.encoder_network, (5, 2, (7, 4), "relu")),
    "gaussian-encoder": (np_nn.gaussian_encoder, pyro_nn.gaussian_encoder, (5, 2, (6, 3), "softplus")),
}


def _weights(network):
    return eqx.partition(network, eqx.is_inexact_array)[0]


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("name", NETWORKS)
def test_numpyro_weights_round_trip_both_ways(name):
    build_np, build_pyro, args = NETWORKS[name]
    net = build_np(*args, jax.random.PRNGKey(0), jnp.float64)
    rng = np.random.default_rng(0)
    moved = jax.tree_util.tree_map(lambda a: a + jnp.asarray(rng.standard_normal(a.shape)), _weights(net))

    # NumPyro -> torch -> NumPyro: the same arrays, bit for bit, in the template's structure
    module = pyro_nn.load_numpyro_weights(build_pyro(*args, seed=1), moved)
    back = pyro_nn.numpyro_weights(module, _weights(net))
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(moved)
    for got, want in zip(_leaves(back), _leaves(moved), strict=True):
        np.testing.assert_array_equal(got, want)

    # torch -> NumPyro -> torch: a module's own (torch-initialised) weights come back unchanged
    own = build_pyro(*args, seed=2)
    again = pyro_nn.load_numpyro_weights(build_pyro(*args, seed=3), pyro_nn.numpyro_weights(own, _weights(net)))
    for got, want in zip(again.parameters(), own.parameters(), strict=True):
        assert torch.equal(got, want)
    # and the equinox network at those weights computes what the torch module computes
    x = rng.standard_normal((4, args[0]))
    fitted = eqx.combine(pyro_nn.numpyro_weights(own, _weights(net)), eqx.partition(net, eqx.is_inexact_array)[1])
    expected = own(torch.as_tensor(x))
    got = jax.vmap(fitted)(jnp.asarray(x))
    for e, g in zip(*((expected, got) if isinstance(got, tuple) else ((expected,), (got,))), strict=True):
        np.testing.assert_allclose(np.asarray(g), e.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_a_pyro_fits_params_stand_in_for_the_modules_own_weights_and_dtypes_follow_the_template():
    net = np_nn.encoder_network(5, 2, (4,), "tanh", jax.random.PRNGKey(0), jnp.float32)
    module = pyro_nn.encoder_network(5, 2, (4,), "tanh", seed=0)
    fitted = {name: value + 1.0 for name, value in pyro_nn.param_values("encoder", module).items()}
    fitted.pop("encoder.2.bias")  # absent: the module's own value
    weights = pyro_nn.numpyro_weights(module, _weights(net), fitted, "encoder")
    first, last = weights.layers[0], weights.layers[2]
    assert first.weight.dtype == jnp.float32 and last.bias.dtype == jnp.float32
    np.testing.assert_allclose(first.weight, (module[0].weight + 1.0).detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(last.bias, module[2].bias.detach().numpy(), rtol=1e-6)


def test_another_architecture_is_refused():
    net = np_nn.encoder_network(5, 2, (7, 4), "relu", jax.random.PRNGKey(0), jnp.float64)
    with pytest.raises(ValueError, match="do not match the torch module"):
        pyro_nn.numpyro_weights(pyro_nn.encoder_network(5, 2, (7,), "relu"), _weights(net))
