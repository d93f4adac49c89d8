"""q(u)'s lower-Cholesky constraint: NumPyro's values and layout exactly, with no index arithmetic in the program."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.distributions import constraints
from numpyro.distributions.transforms import biject_to

from ppl_sparsegp.numpyro import distributions as transforms
from ppl_sparsegp.numpyro import sites


@pytest.mark.parametrize("n", [1, 2, 7, 64])
@pytest.mark.slow
def test_the_bijection_is_numpyros_bit_for_bit(rng, n):
    x = jnp.asarray(rng.standard_normal((3, n * (n + 1) // 2)))
    ours, numpyro_s = biject_to(transforms.lower_cholesky), biject_to(constraints.lower_cholesky)
    assert isinstance(ours, transforms.ConstantIndexLowerCholeskyTransform)
    L = ours(x)
    assert np.array_equal(L, numpyro_s(x))
    assert np.array_equal(ours.inv(L), numpyro_s.inv(L))
    assert np.array_equal(ours.log_abs_det_jacobian(x, L), numpyro_s.log_abs_det_jacobian(x, L))
    weights = jnp.arange(n * n, dtype=x.dtype).reshape(n, n)

    def gradient(t):
        return jax.grad(lambda x: jnp.sum(jnp.sin(t(x)) * weights))(x)

    assert np.array_equal(gradient(ours), gradient(numpyro_s))
    assert bool(jnp.all(transforms.lower_cholesky(L)))


def test_the_program_has_no_index_arithmetic():
    n = 256
    x = jnp.zeros(n * (n + 1) // 2)

    def integer_ops(t):
        text = jax.jit(jax.grad(lambda x: jnp.sum(t(x) ** 2))).lower(x).compile().as_text()
        # integer arrays of n² / 16 elements or more computed at run time (constants and their uses as fusion
        # parameters are not)
        kinds = re.findall(r"= s32\[\d{4,}[\d,]*\]\S* ([\w-]+)\(", text)
        return sum(kind not in ("constant", "parameter") for kind in kinds)

    assert integer_ops(biject_to(constraints.lower_cholesky)) > 0  # NumPyro's: tril_indices inside the program
    assert integer_ops(biject_to(transforms.lower_cholesky)) == 0


def test_the_guide_uses_it():
    assert sites.lower_cholesky is transforms.lower_cholesky
