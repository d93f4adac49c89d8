"""LGCP utilities: binning a point pattern (1-D and 2-D), bin sizes, grids of inducing inputs; and a GP with the
Poisson likelihood on binned counts recovering a known intensity from a simulated Cox process."""

import jax
import numpy as np
import optax
import pytest

from ppl_sparsegp import lgcp
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Poisson
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.svgp import SVGP

jax.config.update("jax_enable_x64", True)


def intensity(x):
    """The known intensity on [0, 10]: exp(1 + sin x), between 1 and 7.4 events per unit length."""
    return np.exp(1.0 + np.sin(x))


def simulated_events(seed: int) -> np.ndarray:
    """A Poisson process with :func:`intensity` on [0, 10] by thinning a homogeneous one of rate e^2."""
    rng = np.random.default_rng(seed)
    candidates = rng.uniform(0, 10, rng.poisson(np.exp(2.0) * 10))
    return np.sort(candidates[rng.uniform(0, np.exp(2.0), candidates.size) < intensity(candidates)])


def test_binning_counts_every_event_once_with_centres_and_bin_sizes():
    events = np.array([0.1, 0.2, 2.5, 9.99, 10.0, 0.0])
    binned = lgcp.bin_events(events, [(0, 10)], (4,))
    np.testing.assert_array_equal(binned.X[:, 0], [1.25, 3.75, 6.25, 8.75])
    np.testing.assert_array_equal(binned.y, [3, 1, 0, 2])
    assert binned.binsize == 2.5
    points = np.array([[0.5, 0.5], [1.5, 0.2], [1.9, 3.9], [0.1, 3.0]])
    binned = lgcp.bin_events(points, [(0, 2), (0, 4)], (2, 2))
    np.testing.assert_array_equal(binned.X, [[0.5, 1.0], [0.5, 3.0], [1.5, 1.0], [1.5, 3.0]])
    np.testing.assert_array_equal(binned.y, [1, 1, 1, 1])
    assert binned.binsize == 2.0
    np.testing.assert_array_equal(lgcp.grid([(0, 1), (0, 2)], (2, 3)).shape, (6, 2))


def test_bad_patterns_and_boxes_are_refused_by_name():
    with pytest.raises(ValueError, match=r"events: 1 of 2 lie outside bounds"):
        lgcp.bin_events(np.array([0.5, 11.0]), [(0, 10)], (5,))
    with pytest.raises(ValueError, match="bounds: expected"):
        lgcp.bin_events(np.array([0.5]), [(10, 0)], (5,))
    with pytest.raises(ValueError, match="shape: expected 2 bin counts"):
        lgcp.grid([(0, 1), (0, 1)], (5,))
    with pytest.raises(ValueError, match=r"events: expected \[n, 2\]"):
        lgcp.bin_events(np.zeros((3, 3)), [(0, 1), (0, 1)], (2, 2))


@pytest.mark.slow
def test_a_poisson_gp_on_binned_counts_recovers_the_known_intensity():
    events = np.concatenate([simulated_events(seed) for seed in range(20)])  # 20 realisations of about 40 events
    binned = lgcp.bin_events(events, [(0, 10)], (50,))
    binsize = binned.binsize * 20  # 20 realisations of the same window
    gp = SVGP(RBF(variance=1.0, lengthscale=2.0), Poisson(binsize=binsize), Z=lgcp.grid([(0, 10)], (15,)))
    fit = fit_svi(gp.model, gp.guide, binned.X, binned.y, optimizer=optax.adam(0.02), num_steps=2000, progress=False)
    mean, var = gp.predict_f(fit.params, binned.X)
    estimated = np.exp(np.asarray(mean) + np.asarray(var) / 2)  # E[exp f]: the posterior mean intensity
    truth = intensity(binned.X[:, 0])
    assert np.corrcoef(estimated, truth)[0, 1] > 0.9
    assert np.sum(estimated) == pytest.approx(np.sum(truth), rel=0.1)
    assert np.median(np.abs(estimated / truth - 1)) < 0.25
