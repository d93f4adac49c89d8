"""Probabilistic selection of inducing points (Uhrenholt et al. 2021, App. C.2) on the Pyro twins and engine, the
twin of :func:`ppl_sparsegp.recipes.selective.fit_selective` with the same settings
(:class:`~ppl_sparsegp.recipes.selective.SelectiveConfig`), phases
(:func:`~ppl_sparsegp.recipes.phases.sequence_phases`) and checkpoints (``<checkpoint_dir>/selective_<phase>.npz``,
the same fingerprint settings):

* pre-train the Pyro SGPR (``bound="collapsed"``) or unwhitened SVGP (``"uncollapsed"``) on all K candidates by Adam
  (:func:`ppl_sparsegp.pyro.svi.fit_svi`), from each of ``lengthscale_starts`` (the NumPyro recipe's starts,
  :func:`~ppl_sparsegp.recipes.selective.lengthscale_starts`), the one of highest final bound going on;
* learn λ of the Pyro selective model (:mod:`models.pyro.selective`) by ``pyro.infer.TraceGraph_ELBO`` with S =
  ``num_particles`` draws per step: the score-function gradient of λ against the guide site's decaying-average
  baseline (:func:`ppl_sparsegp.pyro.sites.score_function_baseline`), KL[q_λ ‖ p_α] estimated by the draws where the
  NumPyro recipe takes it in closed form (same expectation). Adam at ``selection_learning_rate`` moves λ; with
  ``selection="frozen"`` no other param moves (they are not given to the optimiser, which leaves them without a
  gradient: the twin of ``optax.set_to_zero``),
  with ``"joint"`` Adam at ``learning_rate`` moves them too;
* draw one subset from q_λ (redrawn while empty, as the NumPyro recipe), prune, post-train the pruned SGPR / SVGP.

The selective model is the twin (:func:`ppl_sparsegp.models.pyro._base.twin_of`) of the NumPyro recipe's
(:func:`~ppl_sparsegp.recipes.selective.build_selective`), so that a fit from ``seed`` starts on the candidates a
NumPyro fit from ``key=seed`` draws; the deterministic pre-training then takes the NumPyro recipe's steps. Randomness
is torch's: phase i (pre-training, selection, subset, post-training) is seeded by ``seed + i``. Tensors are of
torch's default dtype (:func:`ppl_sparsegp.pyro.dtype.default_dtype`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import TraceGraph_ELBO

from ppl_sparsegp import validation
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.infer.svi import SVIResult
from ppl_sparsegp.models.pyro._base import twin_of
from ppl_sparsegp.models.pyro.selective import INCLUSION_PARAM
from ppl_sparsegp.pyro.subset_prior import IndependentInclusion
from ppl_sparsegp.pyro.svi import OptimizerFactory, fit_svi

from .phases import (
    INCLUSION_SUFFIX,
    LABELS,
    MAX_EMPTY_REDRAWS,
    PHASES,
    PhaseCheckpoints,
    configure,
    empty_subsets,
    sequence_phases,
)
from .selective import (
    SelectiveConfig,
    SelectiveFit,
    build_selective,
    lengthscale_starts,
    selective_fit,
    selective_settings,
)

Array = Any


def sample_subset(probs: Array, seed: int) -> np.ndarray:
    """One mask [K] from q_λ = Π_k Bernoulli(λ_k) (λ: ``probs`` [K]) by torch's generator seeded with ``seed`` (the
    global generator is left as it was), redrawn while it is empty (up to :data:`.phases.MAX_EMPTY_REDRAWS` times);
    the twin of :func:`ppl_sparsegp.recipes.phases.sample_subset`."""
    q = IndependentInclusion(torch.as_tensor(probs))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(MAX_EMPTY_REDRAWS):
            mask = q.sample().numpy()
            if mask.any():
                return mask
    raise empty_subsets(probs)


def selection_optimizer(learning_rate: float, selection_learning_rate: float, joint: bool) -> OptimizerFactory:
    """The selection phase's optimiser for :func:`ppl_sparsegp.pyro.svi.fit_svi`: Adam at ``selection_learning_rate``
    for λ (every param named ``*inclusion_probs``) and, when ``joint``, Adam at ``learning_rate`` for the others,
    which otherwise stay where they are; the twin of :func:`ppl_sparsegp.recipes.phases.selection_optimizer`."""

    def build(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        names = {id(p): name for name, p in pyro.get_param_store().named_parameters()}
        is_inclusion = [names[id(p)].endswith(INCLUSION_SUFFIX) for p in params]
        groups = [{"params": [p for p, chosen in zip(params, is_inclusion, strict=True) if chosen],
                   "lr": selection_learning_rate}]  # fmt: skip
        if joint:
            gp = [p for p, chosen in zip(params, is_inclusion, strict=True) if not chosen]
            groups.append({"params": gp, "lr": learning_rate})
        return torch.optim.Adam(groups)

    return build


def fit_selective(
    X: Array,
    y: Array,
    config: SelectiveConfig | None = None,
    *,
    likelihood: Likelihood | None = None,
    kernel: Kernel | None = None,
    seed: int = 0,
    progress: bool | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> SelectiveFit:
    """Pre-train on K candidates, learn which to keep, sample a subset, prune and post-train, on the Pyro side
    (module docstring); arguments as :func:`ppl_sparsegp.recipes.selective.fit_selective`'s, with ``seed`` in
    place of a JAX key.

    Args:
        X: inputs [N, D]; y: targets [N] (or [N, P]).
        config: the settings (:class:`~ppl_sparsegp.recipes.selective.SelectiveConfig`); ``overrides``: fields of it.
        likelihood, kernel: the initial ones (None: the NumPyro recipe's defaults).
        seed: an integer; the candidates are the NumPyro recipe's for ``key=seed``, phase i is seeded by seed + i.
        progress: show progress bars (None: in a terminal or notebook).
        checkpoint_dir: a folder for the phases' checkpoints (created), or None; the same call resumes.
        fingerprint: the caller's settings, recorded in every phase's checkpoint beside this function's own.

    Returns:
        A :class:`~ppl_sparsegp.recipes.selective.SelectiveFit` of the Pyro models: ``model`` the pruned Pyro SGPR /
        SVGP, ``selective`` the Pyro selective model over all K candidates, their params detached tensors (the
        selection's include the baseline's running average ``"__baseline_avg_downstream_cost_inclusion"``).

    Raises:
        ValueError: a bad setting, seed or data, before anything runs or is written.
        ppl_sparsegp.infer.checkpoint.CheckpointError: a phase's checkpoint is another run's.
    """
    c = configure(SelectiveConfig, config, overrides)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"seed: expected an integer, got {seed!r}")
    seed = int(seed)
    X, y = validation.as_array(X), validation.as_array(y)
    validation.check_inputs(X, y)
    settings = None if checkpoint_dir is None else selective_settings(c, likelihood, kernel, seed, fingerprint)
    checkpoints = PhaseCheckpoints(checkpoint_dir, c.checkpoint_every, settings)
    X, y = np.asarray(X), np.asarray(y)
    _, numpyro_selective = build_selective(X, y, c, likelihood=likelihood, kernel=kernel, key=seed)
    selective = twin_of(numpyro_selective)
    starts = lengthscale_starts(c, numpyro_selective.ordinary)
    checkpoints.create()
    steps = dict(zip(PHASES, (c.pre_steps, c.selection_steps, c.post_steps), strict=True))

    def fit(phase: str, model: Any, params: dict[str, Array] | None, phase_seed: int, checkpoint: str) -> SVIResult:
        optimizer, loss = partial(torch.optim.Adam, lr=c.learning_rate), None
        if phase == "selection":
            optimizer = selection_optimizer(c.learning_rate, c.selection_learning_rate, c.selection == "joint")
            loss = TraceGraph_ELBO(num_particles=c.num_particles)
        if phase == "post" and not model.learn_Z:  # the pruned model holds the kept candidates as constants
            params = {name: value for name, value in params.items() if name != "Z"}
        return fit_svi(
            model.model, model.guide, X, y, optimizer=optimizer, num_steps=steps[phase], seed=phase_seed, loss=loss,
            init_params=params, progress=progress, label=f"{LABELS[phase]} (Pyro)", validate=model.check_data,
            **checkpoints.options(checkpoint),
        )  # fmt: skip

    def prune(params: dict[str, Array], phase_seed: int) -> tuple[np.ndarray, Any, dict[str, Array]]:
        mask = sample_subset(params[INCLUSION_PARAM], phase_seed)
        return (mask, *selective.prune(params, mask))

    done = sequence_phases(
        fit, selective.ordinary, selective, steps, key=[seed + i for i in range(4)], prune=prune,
        checkpoints=checkpoints, starts=starts,
    )  # fmt: skip
    return selective_fit(c, selective, done)
