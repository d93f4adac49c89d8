"""The point-process densities of the core against enumeration and direct formulas, on numpy, jax and torch."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from ppl_sparsegp.core import kernels, point_processes

BACKENDS = [(np.asarray, np.asarray), (jnp.asarray, np.asarray), (torch.as_tensor, lambda t: t.numpy())]


def _all_masks(K):
    return np.array(list(itertools.product([0.0, 1.0], repeat=K)))


@pytest.mark.parametrize("conv, back", BACKENDS)
def test_subset_prior_is_normalised_and_kl_equals_enumeration(conv, back):
    K, alpha = 6, 0.2
    probs = np.array([0.05, 0.3, 0.5, 0.7, 0.95, 1.0])
    masks = _all_masks(K)
    log_sizes, log_c = point_processes.subset_size_log_probs(K, conv(np.asarray(alpha)))
    np.testing.assert_allclose(np.exp(back(log_sizes)).sum(), 1.0, rtol=1e-12)
    log_p = back(point_processes.subset_prior_log_prob(conv(masks), conv(np.asarray(alpha)), log_c))
    np.testing.assert_allclose(np.exp(log_p).sum(), 1.0, rtol=1e-12)
    log_q = back(point_processes.inclusion_log_prob(conv(probs), conv(masks)))
    q = np.exp(log_q)
    np.testing.assert_allclose(q.sum(), 1.0, rtol=1e-12)
    support = q > 0
    brute = np.sum(q[support] * (log_q[support] - log_p[support]))
    kl = point_processes.kl_inclusion_subset_prior(conv(probs), conv(np.asarray(alpha)), log_c)
    np.testing.assert_allclose(back(kl), brute, rtol=1e-10)
    entropy = -np.sum(q[support] * log_q[support])
    np.testing.assert_allclose(back(point_processes.inclusion_entropy(conv(probs))), entropy, rtol=1e-10)


def test_log_normaliser_matches_the_spec_table():
    """K = 80, α = 0.05 gives log C = −26.96 (spec 000 §2.2)."""
    _, log_c = point_processes.subset_size_log_probs(80, np.asarray(0.05))
    assert round(float(log_c), 2) == -26.96
    assert round(point_processes.no_signal_inclusion_probability(80, 0.05), 3) == 0.183


@pytest.mark.parametrize("conv, back", BACKENDS)
def test_strauss_and_dpp_against_direct_formulas(rng, conv, back):
    Z = rng.uniform(-1, 1, (6, 2))
    d = np.sqrt(((Z[:, None] - Z[None]) ** 2).sum(-1))
    iu = np.triu_indices(6, 1)
    hard = np.sum(d[iu] <= 0.6)
    smooth = np.sum(1 / (1 + np.exp(-(0.6 - d[iu]) / 0.1)))
    np.testing.assert_allclose(back(point_processes.strauss_pair_count(conv(Z), 0.6)), hard)
    np.testing.assert_allclose(back(point_processes.strauss_pair_count(conv(Z), 0.6, 0.1)), smooth, rtol=1e-12)
    expected = 6 * np.log(2.0) + hard * np.log(0.5)
    np.testing.assert_allclose(back(point_processes.strauss_log_density(conv(Z), 2.0, 0.5, 0.6)), expected)
    k = kernels.RBF(variance=1.0, lengthscale=0.5)
    np.testing.assert_allclose(back(point_processes.dpp_log_density(conv(k(Z)))), np.linalg.slogdet(k(Z))[1], rtol=1e-6)


def test_no_signal_probability_checks_its_arguments():
    with pytest.raises(ValueError, match="num_candidates"):
        point_processes.no_signal_inclusion_probability(0, 0.1)
    with pytest.raises(ValueError, match="alpha"):
        point_processes.no_signal_inclusion_probability(5, -1.0)
