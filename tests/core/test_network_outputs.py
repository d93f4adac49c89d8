"""The amortising networks' output heads (ppl_sparsegp.core.network_outputs) against entry-by-entry oracles, on
numpy and on torch."""

import math

import numpy as np
import pytest
import torch

from ppl_sparsegp.core import network_outputs


@pytest.mark.parametrize("backend", [np.asarray, torch.as_tensor])
def test_split_inducing_outputs_fills_z_m_and_a_lower_triangle_row_by_row(backend):
    M, D = 3, 2
    out = np.random.default_rng(0).standard_normal((2, network_outputs.inducing_output_size(M, D)))
    assert out.shape[1] == M * D + M + 6
    Z, m, L = (np.asarray(a) for a in network_outputs.split_inducing_outputs(backend(out), M, D))
    for b in range(2):
        np.testing.assert_array_equal(Z[b], out[b, : M * D].reshape(M, D))
        np.testing.assert_array_equal(m[b], out[b, M * D : M * D + M])
        k = M * D + M
        for i in range(M):
            for j in range(M):
                if j > i:
                    assert L[b, i, j] == 0.0
                else:
                    expected = math.exp(out[b, k]) if i == j else out[b, k]
                    np.testing.assert_allclose(L[b, i, j], expected, rtol=1e-15)
                    k += 1


@pytest.mark.parametrize("backend", [np.asarray, torch.as_tensor])
def test_positive_variance_is_a_floored_softplus(backend):
    raw = np.array([-800.0, -3.0, 0.0, 2.5, 40.0])
    got = np.asarray(network_outputs.positive_variance(backend(raw), 1e-6))
    expected = np.array([0.0, math.log1p(math.exp(-3.0)), math.log(2.0), math.log1p(math.exp(2.5)), 40.0]) + 1e-6
    np.testing.assert_allclose(got, expected, rtol=1e-14)
    assert (got > 0).all()
