"""Probabilistic selection of inducing points (Uhrenholt et al. 2021, App. C.2) on the Pyro twins and engine, the
twin of :func:`ppl_sparsegp.recipes.selective.fit_selective` with the same settings
(:class:`~ppl_sparsegp.recipes.selective.SelectiveConfig`), phases
(:func:`~ppl_sparsegp.recipes.phases.sequence_phases`) and checkpoints (``<checkpoint_dir>/selective_<phase>.npz``,
the same fingerprint settings):

* pre-train the Pyro SGPR (``bound="collapsed"``) or unwhitened SVGP (``"uncollapsed"``) on all K candidates by Adam
  (:func:`ppl_sparsegp.pyro.svi.fit_svi`), from each of ``lengthscale_starts`` (the NumPyro recipe's starts,
  :func:`~ppl_sparsegp.recipes.selective.lengthscale_starts`), the one of highest final bound going on;
* learn λ of the Pyro selective model (:mod:`models.pyro.selective`) by
  :class:`ppl_sparsegp.pyro.score_function.ScoreFunctionELBO` with S = ``num_particles`` draws per step, the NumPyro
  recipe's estimator and settings: the score-function gradient of λ against the normalised decaying-average baseline
  (β = 0.95, the default of both engines; one baseline for the whole bound, the running sums
  :data:`~ppl_sparsegp.pyro.score_function.BASELINE_TOTAL` and ``BASELINE_WEIGHT`` kept with the params), KL[q_λ ‖ p_α]
  and the KL of q(u) in closed form, ``pathwise`` only with ``selection="joint"``. Adam at
  ``selection_learning_rate`` moves λ; with ``selection="frozen"`` no other param moves (the bound's gradient is
  stopped and they are not given to the optimiser: the twin of ``optax.set_to_zero``), with ``"joint"`` Adam at
  ``learning_rate`` moves them too;
* draw one subset from q_λ (redrawn while empty, as the NumPyro recipe), prune, post-train the pruned SGPR / SVGP.

The selective model is the twin (:func:`ppl_sparsegp.models.pyro._base.twin_of`) of the NumPyro recipe's
(:func:`~ppl_sparsegp.recipes.selective.build_selective`), so that a fit from ``seed`` starts on the candidates a
NumPyro fit from ``key=seed`` draws; the deterministic pre-training then takes the NumPyro recipe's steps. Randomness
is torch's: phase i (pre-training, selection, subset, post-training) is seeded by ``seed + i``. Tensors are of
torch's default dtype (:func:`ppl_sparsegp.pyro.dtype.default_dtype`).

:func:`fit_selective_deep` is the twin of :func:`ppl_sparsegp.recipes.selective.fit_selective_deep` for the deep GP
(:mod:`models.pyro.selective_deep`), with its config
(:class:`~ppl_sparsegp.recipes.selective.SelectiveDeepConfig`), result
(:class:`~ppl_sparsegp.recipes.selective.SelectiveDeepFit`) and checkpoints (``selective_layer<ℓ>.npz`` and
``selective_<phase>.npz``): the same phases, one joint subset of every layer drawn by torch's generator, and the
layer-wise pre-training's loop (:func:`~ppl_sparsegp.recipes.selective.sequence_layerwise`), in which layer ℓ's fit
gives the optimiser only the params that are not the lower layers' (these keep their values bit for bit). Its selection
phase learns every layer's λ^ℓ by the same ``ScoreFunctionELBO``: one joint draw of all layers' masks per particle,
their summed score and one baseline, as the NumPyro recipe. Its
candidates and the inputs that start each added layer (:func:`~ppl_sparsegp.recipes.selective.added_layer_start`,
evaluated on the NumPyro twin at the Pyro fit's values) are the NumPyro recipe's for ``key=seed``; phase i is seeded
by seed + i as above, layer ℓ's layer-wise fit by seed + 4 + ℓ.

:func:`fit_selective_gplvm` is the twin of :func:`ppl_sparsegp.recipes.selective.fit_selective_gplvm` for the
GP-LVM (:mod:`models.pyro.selective_gplvm`), with its config
(:class:`~ppl_sparsegp.recipes.selective.SelectiveGPLVMConfig`), result
(:class:`~ppl_sparsegp.recipes.selective.SelectiveGPLVMFit`), checkpoints (``selective_pre.npz``,
``selective_selection.npz`` and the λ / latent trace ``selective_gplvm_trace.npz``) and phases
(:func:`~ppl_sparsegp.recipes.selective.sequence_gplvm`): the same latent grid and model (the twin of the NumPyro
recipe's, :func:`~ppl_sparsegp.recipes.selective.grid_model`), the optional pre-training of the GP-LVM on every grid
point by Adam, then everything jointly by :class:`ppl_sparsegp.pyro.score_function.ScoreFunctionELBO` with S =
``num_particles`` draws, the NumPyro recipe's estimator (λ by the score function against the normalised
decaying-average baseline at β = ``baseline_decay``, Adam at ``selection_learning_rate``; the rest pathwise, Adam at
``learning_rate``; the KLs of q(u), q(X) and q_λ in closed form where ``TraceGraph_ELBO`` would estimate them from the
draws, with gradients of 2 to 11 times the standard deviation on oil flow), λ and the latent means recorded every
``record_every`` steps, and with ``prune`` one subset drawn from q_λ. The pre-training is seeded by seed, the joint
phase by seed + 1, the subset by seed + 2.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyro
import torch

from ppl_sparsegp import validation
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.infer.svi import SVIResult
from ppl_sparsegp.models.pyro._base import twin_of
from ppl_sparsegp.models.pyro.deep_svgp import DeepSVGP
from ppl_sparsegp.models.pyro.gplvm import BayesianGPLVM, CollapsedGPLVM
from ppl_sparsegp.models.pyro.selective import INCLUSION_PARAM
from ppl_sparsegp.models.pyro.selective_gplvm import SelectiveCollapsedGPLVM, SelectiveGPLVM
from ppl_sparsegp.pyro.score_function import ScoreFunctionELBO
from ppl_sparsegp.pyro.subset_prior import IndependentInclusion
from ppl_sparsegp.pyro.svi import OptimizerFactory, fit_svi

from . import selective as numpyro_recipes
from .phases import (
    INCLUSION_SUFFIX,
    LABELS,
    MAX_EMPTY_REDRAWS,
    PHASES,
    PhaseCheckpoints,
    PhaseFit,
    configure,
    empty_joint_subsets,
    empty_subsets,
    sequence_phases,
)
from .selective import (
    SelectiveConfig,
    SelectiveDeepConfig,
    SelectiveDeepFit,
    SelectiveFit,
    SelectiveGPLVMConfig,
    SelectiveGPLVMFit,
    added_layer_start,
    build_selective,
    build_selective_deep,
    grid_model,
    layerwise_keys,
    lengthscale_starts,
    partial_stack,
    selective_deep_fit,
    selective_fit,
    selective_settings,
    sequence_gplvm,
    sequence_layerwise,
)

Array = Any


def sample_subset(probs: Array, seed: int) -> np.ndarray:
    """One mask [K] from q_λ = Π_k Bernoulli(λ_k) (λ: ``probs`` [K]) by torch's generator seeded with ``seed`` (the
    global generator is left as it was), redrawn while it is empty (up to :data:`.phases.MAX_EMPTY_REDRAWS` times);
    the twin of :func:`ppl_sparsegp.recipes.phases.sample_subset`."""
    masks = _draw_nonempty([probs], seed)
    if masks is None:
        raise empty_subsets(probs)
    return masks[0]


def sample_joint_subset(probs: Sequence[Array], seed: int) -> list[np.ndarray]:
    """One joint draw of every layer's mask [K_ℓ] from q = Π_ℓ Π_k Bernoulli(λ^ℓ_k) (``probs``: λ^ℓ [K_ℓ] each) by
    torch's generator seeded with ``seed``, redrawn while any layer is empty (up to
    :data:`.phases.MAX_EMPTY_REDRAWS` times); the twin of :func:`ppl_sparsegp.recipes.phases.sample_joint_subset`."""
    masks = _draw_nonempty(probs, seed)
    if masks is None:
        raise empty_joint_subsets(probs)
    return masks


def _draw_nonempty(probs: Sequence[Array], seed: int) -> list[np.ndarray] | None:
    """Masks drawn from each Π_k Bernoulli(``probs[j]``) in turn, from torch's generator seeded with ``seed`` (the
    global generator is left as it was), until none is empty; None when every one of the redraws left one empty."""
    qs = [IndependentInclusion(torch.as_tensor(p)) for p in probs]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for _ in range(MAX_EMPTY_REDRAWS):
            masks = [q.sample().numpy() for q in qs]
            if all(mask.any() for mask in masks):
                return masks
    return None


def check_seed(seed: Any) -> int:
    """``seed`` as an int; ValueError naming ``seed`` for anything but an integer (a bool included)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"seed: expected an integer, got {seed!r}")
    return int(seed)


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


def phase_fit(
    config: SelectiveConfig | SelectiveDeepConfig,
    X: np.ndarray,
    y: np.ndarray,
    steps: Mapping[str, int],
    checkpoints: PhaseCheckpoints,
    progress: bool | None,
) -> PhaseFit:
    """The Pyro engine's fit of one phase of :func:`~.phases.sequence_phases` on X [N, D], y [N] or [N, P] for both
    recipes here: Adam at ``config.learning_rate`` (pre- and post-training), :func:`selection_optimizer` and
    :class:`~ppl_sparsegp.pyro.score_function.ScoreFunctionELBO` with ``config.num_particles`` draws, pathwise only
    for ``selection="joint"`` (selection; the NumPyro recipes' loss), ``steps[phase]`` steps, checkpointed in
    ``checkpoints``. A pruned model that holds its kept candidates as constants (``learn_Z=False``) gets no ``Z``."""
    c = config

    def fit(phase: str, model: Any, params: dict[str, Array] | None, phase_seed: int, checkpoint: str) -> SVIResult:
        optimizer, loss = partial(torch.optim.Adam, lr=c.learning_rate), None
        if phase == "selection":
            optimizer = selection_optimizer(c.learning_rate, c.selection_learning_rate, c.selection == "joint")
            loss = ScoreFunctionELBO(c.num_particles, pathwise=c.selection == "joint")
        if phase == "post" and not getattr(model, "learn_Z", True):
            params = {name: value for name, value in params.items() if name != "Z"}
        return fit_svi(
            model.model, model.guide, X, y, optimizer=optimizer, num_steps=steps[phase], seed=phase_seed, loss=loss,
            init_params=params, progress=progress, label=f"{LABELS[phase]} (Pyro)", validate=model.check_data,
            **checkpoints.options(checkpoint),
        )  # fmt: skip

    return fit


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
        selection's include the baseline's running sums :data:`ppl_sparsegp.pyro.score_function.BASELINE_TOTAL` and
        ``BASELINE_WEIGHT``).

    Raises:
        ValueError: a bad setting, seed or data, before anything runs or is written.
        ppl_sparsegp.infer.checkpoint.CheckpointError: a phase's checkpoint is another run's.
    """
    c = configure(SelectiveConfig, config, overrides)
    seed = check_seed(seed)
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

    fit = phase_fit(c, X, y, steps, checkpoints, progress)

    def prune(params: dict[str, Array], phase_seed: int) -> tuple[np.ndarray, Any, dict[str, Array]]:
        mask = sample_subset(params[INCLUSION_PARAM], phase_seed)
        return (mask, *selective.prune(params, mask))

    done = sequence_phases(
        fit, selective.ordinary, selective, steps, key=[seed + i for i in range(4)], prune=prune,
        checkpoints=checkpoints, starts=starts,
    )  # fmt: skip
    return selective_fit(c, selective, done)


def _adam_except(learning_rate: float, frozen: Sequence[str]) -> OptimizerFactory:
    """Adam at ``learning_rate`` over every param but those named in ``frozen``, which stay where they are."""

    def build(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        names = {id(p): name for name, p in pyro.get_param_store().named_parameters()}
        return torch.optim.Adam([p for p in params if names[id(p)] not in frozen], lr=learning_rate)

    return build


def fit_selective_deep(
    X: Array,
    y: Array,
    config: SelectiveDeepConfig | None = None,
    *,
    likelihood: Likelihood | None = None,
    init_params: Mapping[str, Array] | None = None,
    seed: int = 0,
    progress: bool | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    **overrides: Any,
) -> SelectiveDeepFit:
    """Pre-train a deep GP on K candidates per layer (jointly, or layer-wise then jointly), learn which to keep,
    sample one joint subset, prune and post-train, on the Pyro side (module docstring); arguments as
    :func:`ppl_sparsegp.recipes.selective.fit_selective_deep`'s, with ``seed`` in place of a JAX key.

    Args:
        X: inputs [N, D]; y: targets [N] or [N, P].
        config: the settings (:class:`~ppl_sparsegp.recipes.selective.SelectiveDeepConfig`); ``overrides``: fields
            of it.
        likelihood: default ``Gaussian(config.noise_variance)``.
        init_params: starting values of the GP (e.g. an earlier fit's ``pretrained_params``); not with
            ``pretraining="layerwise"``.
        seed: an integer; the candidates (and the layer-wise starts' inputs) are the NumPyro recipe's for
            ``key=seed``, phase i is seeded by seed + i, layer ℓ's layer-wise fit by seed + 4 + ℓ.
        progress: show progress bars (None: in a terminal or notebook).
        checkpoint_dir: a folder for the phases' checkpoints (created), or None; the same call resumes.

    Returns:
        A :class:`~ppl_sparsegp.recipes.selective.SelectiveDeepFit` of the Pyro models: ``model`` the pruned Pyro
        :class:`~ppl_sparsegp.models.pyro.deep_svgp.DeepSVGP`, ``selective`` the Pyro selective deep GP over every
        candidate, their params detached tensors (the selection's include the baseline's running sums
        :data:`ppl_sparsegp.pyro.score_function.BASELINE_TOTAL` and ``BASELINE_WEIGHT``, one for all layers).

    Raises:
        ValueError: a bad setting, seed or data, before anything runs or is written.
        ppl_sparsegp.infer.checkpoint.CheckpointError: a phase's checkpoint is another run's.
    """
    c = configure(SelectiveDeepConfig, config, overrides)
    seed = check_seed(seed)
    X, y = validation.as_array(X), validation.as_array(y)
    validation.check_inputs(X, y)
    checkpoints = PhaseCheckpoints(checkpoint_dir, c.checkpoint_every)
    X, y = np.asarray(X), np.asarray(y)
    built = build_selective_deep(X, y, c, likelihood=likelihood, key=seed, init_params=init_params)
    base, selective = twin_of(built.base), twin_of(built.selective)
    checkpoints.create()
    steps = dict(zip(PHASES, (c.pre_steps, c.selection_steps, c.post_steps), strict=True))

    fit = phase_fit(c, X, y, steps, checkpoints, progress)

    def prune(params: dict[str, Array], phase_seed: int) -> tuple[list[np.ndarray], DeepSVGP, dict[str, Array]]:
        masks = sample_joint_subset(selective.inclusion_probabilities(params), phase_seed)
        pruned, pruned_params = selective.prune(params, masks)
        return masks, dataclasses.replace(pruned, batch_size=c.batch_size), pruned_params

    layerwise = None
    if c.pretraining == "layerwise":
        t0 = time.perf_counter()
        starts = [start_key for start_key, _ in layerwise_keys(built.init_key, c.num_layers)]
        keys = [(start_key, seed + 4 + layer) for layer, start_key in enumerate(starts)]
        layerwise = fit_layerwise(
            base, X, y, steps=c.layerwise_steps, learning_rate=c.learning_rate, keys=keys, checkpoints=checkpoints,
            numpyro_model=built.base, progress=progress,
        )  # fmt: skip
        layerwise = (*layerwise, time.perf_counter() - t0)
        init_params = layerwise[0]
    done = sequence_phases(
        fit, base, selective, steps, key=[seed + i for i in range(4)], prune=prune, checkpoints=checkpoints,
        init_params=init_params,
    )  # fmt: skip
    return selective_deep_fit(selective, done, layerwise)


def fit_layerwise(
    model: DeepSVGP,
    X: np.ndarray,
    y: np.ndarray,
    *,
    steps: int,
    learning_rate: float,
    keys: Sequence[tuple[Array, int]],
    checkpoints: PhaseCheckpoints,
    numpyro_model: Any,
    progress: bool | None = None,
) -> tuple[dict[str, Array], list[dict[str, Array]], dict[str, np.ndarray]]:
    """The layer-wise pre-training of the Pyro deep GP ``model`` on X [N, D], y [N], the twin of
    :func:`ppl_sparsegp.recipes.selective.fit_layerwise` (same loop, :func:`~.selective.sequence_layerwise`):
    layer ℓ's fit of the partial stack 0..ℓ takes ``steps`` Adam steps at ``learning_rate`` on every param but the
    lower layers', which it holds where they are. An added layer starts at
    :func:`~.selective.added_layer_start` of ``numpyro_model`` (``model``'s NumPyro twin) at the fit's values.
    ``keys``: (JAX start key, integer seed of the fit) of every layer. Returns what that function returns."""

    def fit(layer: int, frozen: dict[str, Array], free: dict[str, Array], layer_seed: int) -> SVIResult:
        part = partial_stack(model, layer)
        return fit_svi(
            part.model, part.guide, X, y, optimizer=_adam_except(learning_rate, list(frozen)), num_steps=steps,
            seed=layer_seed, init_params={**frozen, **free} or None, progress=progress,
            label=f"layer-wise {layer + 1}/{model.num_layers} (Pyro)", validate=part.check_data,
            **checkpoints.options(f"layer{layer}"),
        )  # fmt: skip

    def added_start(params: dict[str, Array], layer: int, key: Array) -> dict[str, Array]:
        values = {name: np.asarray(torch.as_tensor(v).detach().cpu()) for name, v in params.items()}
        start = added_layer_start(numpyro_model, values, layer, X, key)
        return {name: torch.as_tensor(np.array(v)) for name, v in start.items()}

    return sequence_layerwise(fit, added_start, keys, checkpoints)


def gplvm_on_grid(
    Y: Array, grid: Array, **settings: Any
) -> BayesianGPLVM | CollapsedGPLVM | SelectiveGPLVM | SelectiveCollapsedGPLVM:
    """The Pyro twin of :func:`ppl_sparsegp.recipes.selective.gplvm_on_grid` (same arguments: Y [N, D], the grid
    [K, Q] as fixed inducing inputs, ``latent_dim``, ``noise_variance``, ``latent_scale``, ``batch_size``, ``bound``
    and, for the selective model, ``alpha`` and ``initial_inclusion``): the twin
    (:func:`ppl_sparsegp.models.pyro._base.twin_of`) of the NumPyro model it builds, so the same kernel, likelihood,
    grid and PCA-started latents, e.g. the all-grid baseline of a :func:`fit_selective_gplvm` fit (train a
    :class:`~ppl_sparsegp.models.pyro.gplvm.BayesianGPLVM` from its ``initial_params()``, q(u) = p(u)).

    Raises:
        ValueError: a bad setting, as the NumPyro function, before anything is built.
    """
    return twin_of(numpyro_recipes.gplvm_on_grid(Y, grid, **settings))


def fit_selective_gplvm(
    Y: Array,
    config: SelectiveGPLVMConfig | None = None,
    *,
    seed: int = 0,
    progress: bool | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    **overrides: Any,
) -> SelectiveGPLVMFit:
    """Fit a GP-LVM whose inducing inputs are selected from a latent grid, everything jointly, on the Pyro side
    (module docstring); arguments as :func:`ppl_sparsegp.recipes.selective.fit_selective_gplvm`'s, with ``seed`` in
    place of a JAX key.

    Args:
        Y: observations [N, D] (standardise them first, as the paper does).
        config: the settings (:class:`~ppl_sparsegp.recipes.selective.SelectiveGPLVMConfig`); ``overrides``: fields
            of it.
        seed: an integer; the pre-training is seeded by seed, the joint phase by seed + 1, the subset by seed + 2.
        progress: show progress bars (None: in a terminal or notebook).
        checkpoint_dir: a folder for the checkpoints and the trace (created), or None; the same call resumes and ends
            where an uninterrupted fit ends, the trace included.

    Returns:
        A :class:`~ppl_sparsegp.recipes.selective.SelectiveGPLVMFit` of the Pyro models: ``model`` the Pyro selective
        GP-LVM over the grid, ``params`` detached tensors (with the baseline's running sums
        :data:`ppl_sparsegp.pyro.score_function.BASELINE_TOTAL` and ``BASELINE_WEIGHT``), ``pruned`` the ordinary Pyro
        GP-LVM with ``prune``.

    Raises:
        ValueError: a bad setting, seed or data, before anything runs or is written.
        ppl_sparsegp.infer.checkpoint.CheckpointError: a checkpoint is another run's.
    """
    c = configure(SelectiveGPLVMConfig, config, overrides)
    seed = check_seed(seed)
    Y = validation.as_array(Y)
    validation.check_inputs(Y, x_name="Y")
    checkpoints = PhaseCheckpoints(checkpoint_dir, c.checkpoint_every)
    Y = np.asarray(Y)
    grid, numpyro_model = grid_model(Y, c)
    model = twin_of(numpyro_model)
    loss = ScoreFunctionELBO(c.num_particles, baseline_decay=c.baseline_decay)

    def fit(phase: str, gp: Any, init_params: dict[str, Array], callback: Any) -> SVIResult:
        if phase == "pre":
            return fit_svi(
                gp.model, gp.guide, Y, optimizer=partial(torch.optim.Adam, lr=c.learning_rate), num_steps=c.pre_steps,
                seed=seed, init_params=init_params, progress=progress, label="pre-train (Pyro)",
                validate=gp.check_data, **checkpoints.options("pre"),
            )  # fmt: skip
        optimizer = selection_optimizer(c.learning_rate, c.selection_learning_rate, joint=True)
        return fit_svi(
            gp.model, gp.guide, Y, optimizer=optimizer, num_steps=c.steps, seed=seed + 1, loss=loss,
            init_params=init_params, callback=callback, callback_every=c.record_every, progress=progress,
            label="joint selection (Pyro)", validate=gp.check_data, **checkpoints.options("selection"),
        )  # fmt: skip

    return sequence_gplvm(c, model, grid, fit, lambda probs: sample_subset(probs, seed + 2), checkpoints)
