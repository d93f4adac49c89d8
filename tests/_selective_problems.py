"""Problems and checks shared by the tests of the selective recipes and their Pyro twins
(tests/models/test_selective_gplvm.py, tests/pyro/test_pyro_selective_gplvm_recipe.py,
tests/pyro/test_pyro_selective_deep_recipe.py, tests/recipes/test_selective_pyro.py): the data, the spec's check B7
in small, a Ctrl-C at a chosen step and the trap that shows bad input was refused before any work."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest


def standardised(Y: np.ndarray) -> np.ndarray:
    """Every column of Y [N, D] to zero mean and unit standard deviation."""
    return (Y - Y.mean(axis=0)) / Y.std(axis=0)


def curve_in_3d(num_points: int = 30, latent_dim: int = 2) -> np.ndarray:
    """Y [N, 3], standardised: (sin 2t₁, cos t₂, t₁ t₂) of latents t ~ U(-2, 2)^Q plus N(0, 0.05²) noise (seed 2)."""
    rng = np.random.default_rng(2)
    t = rng.uniform(-2, 2, size=(num_points, latent_dim))
    Y = np.stack([np.sin(2 * t[:, 0]), np.cos(t[:, 1]), t[:, 0] * t[:, 1]], axis=1)
    return standardised(Y + 0.05 * rng.normal(size=(num_points, 3)))


def manifold_in_4d() -> np.ndarray:
    """Check B7's data in small: Y [80, 4], standardised, on a 2-D manifold (latents t ~ U(-2, 2)², seed 0) plus
    N(0, 0.05²) noise."""
    rng = np.random.default_rng(0)
    t = rng.uniform(-2, 2, size=(80, 2))
    features = (np.sin(2 * t[:, 0]), np.cos(t[:, 1]), t[:, 0] * t[:, 1], np.tanh(t[:, 0] - t[:, 1]))
    return standardised(np.stack(features, axis=1) + 0.05 * rng.normal(size=(80, 4)))


B7_SETTINGS = {"grid_size": 8, "steps": 300, "record_every": 100, "prune": True}
"""Check B7 in small: an 8 × 8 grid (α = 3, the default), 300 joint steps, recorded every 100, pruned."""


def assert_keeps_few_grid_points_near_the_latents(fit: Any) -> None:
    """Check B7 on a selective GP-LVM fit of :func:`manifold_in_4d` with :data:`B7_SETTINGS`: the expected subset
    shrinks from 32 of the 64 grid points at every record, and at least 5 points are kept, 80 % of them within a
    grid spacing of a latent mean."""
    counts = fit.inclusion_trace.sum(axis=1)
    assert counts[0] == 32 and fit.expected_count < 26 and np.all(np.diff(counts) < 0)
    assert 1 <= fit.mask.sum() < 32
    active = fit.inclusion_probs > 0.5
    latents = fit.model.ordinary.latents.means(fit.params)
    spacing = np.ptp(fit.grid[:, 0]) / 7
    nearest = np.sqrt(np.min(np.sum((fit.grid[active, None] - latents[None]) ** 2, axis=-1), axis=1))
    assert active.sum() >= 5 and np.mean(nearest <= spacing) >= 0.8


@contextlib.contextmanager
def ctrl_c_at_call(monkeypatch: pytest.MonkeyPatch, elbo: type, call: int) -> Iterator[None]:
    """Within: the ``call``-th ``elbo.loss_and_grads`` (a Pyro ELBO class) raises KeyboardInterrupt, which the block
    must raise; the ELBO is restored on leaving."""
    calls, step = [], elbo.loss_and_grads

    def killed(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return step(self, *args, **kwargs)

    monkeypatch.setattr(elbo, "loss_and_grads", killed)
    try:
        with pytest.raises(KeyboardInterrupt):
            yield
    finally:
        monkeypatch.setattr(elbo, "loss_and_grads", step)


def trap_phases(monkeypatch: pytest.MonkeyPatch, recipe: Any) -> None:
    """Make ``recipe.fit_svi``, with which every phase of a Pyro recipe trains, fail the test when it is called."""

    def trap(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a phase started before the bad input was refused")

    monkeypatch.setattr(recipe, "fit_svi", trap)
