"""The IDSGP network's outputs: their count, their reading as Z, m and L, and the constant network."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_sparsegp.numpyro import nn


@pytest.mark.parametrize("M, D, expected", [(50, 8, 1725), (15, 8, 255), (2, 1, 7)])
def test_output_size_is_md_plus_m_plus_the_lower_triangle(M, D, expected):
    assert nn.inducing_output_size(M, D) == expected


def test_outputs_split_into_z_m_and_a_lower_triangular_factor_with_positive_diagonal():
    M, D = 4, 3
    net = nn.inducing_network(D, M, (7, 7), "tanh", jax.random.PRNGKey(0), jnp.float64)
    out = 30.0 * jax.vmap(net)(jax.random.normal(jax.random.PRNGKey(1), (5, D)))  # large outputs, either sign
    Z, m, L = nn.split_inducing_outputs(out, M, D)
    assert Z.shape == (5, M, D) and m.shape == (5, M) and L.shape == (5, M, M)
    np.testing.assert_array_equal(Z, out[:, : M * D].reshape(5, M, D))
    np.testing.assert_array_equal(np.triu(L, 1), 0.0)
    assert np.all(np.diagonal(L, axis1=1, axis2=2) > 0)


def test_constants_are_read_back_as_the_given_z_m_and_l():
    rng = np.random.default_rng(0)
    M, D = 3, 2
    Z, m = rng.normal(size=(M, D)), rng.normal(size=M)
    L = np.tril(rng.normal(size=(M, M)), -1) + np.diag(rng.uniform(0.1, 2.0, M))
    back = nn.split_inducing_outputs(nn.inducing_network_constants(Z, m, L), M, D)
    for got, want in zip(back, (Z, m, L), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)


def test_ragged_hidden_widths_are_refused_by_name():
    with pytest.raises(ValueError, match="hidden"):
        nn.inducing_network(2, 3, (10, 20), "sigmoid", jax.random.PRNGKey(0), jnp.float64)


def test_a_very_negative_diagonal_output_gives_its_exponential_not_rounding_error():
    """exp(r) for r = -40 is 4.2e-18; adding exp(r) - r to r would leave rounding error of r's size (7e-15)."""
    M, D = 2, 1
    out = jnp.array([0.0, 0.0, 0.0, 0.0, -40.0, 0.5, -700.0])
    _, _, L = nn.split_inducing_outputs(out, M, D)
    np.testing.assert_allclose(np.diagonal(L), np.exp([-40.0, -700.0]), rtol=1e-14)
    assert L[1, 0] == 0.5 and L[0, 1] == 0.0
