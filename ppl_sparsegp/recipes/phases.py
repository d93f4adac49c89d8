"""The phases that the selection recipes share, written once: pre-train, select, sample a subset, prune, post-train.

:func:`sequence_phases` is that sequence (Uhrenholt et al. 2021, App. C.2), whatever engine fits a phase: an
ordinary model on all candidates is pre-trained, the selective model learns the inclusion probabilities λ from there
by the score-function estimator (the GP frozen or trained jointly), one subset is drawn from q_λ, the selective model
prunes the unselected candidates and the pruned model is post-trained. :func:`run_phases` runs it by NumPyro's SVI;
``fit_selective`` and ``fit_selective_deep`` (:mod:`ppl_sparsegp.recipes.selective`) share it, the Pyro recipe
(:mod:`ppl_sparsegp.recipes.selective_pyro`) runs the sequence by Pyro's; the GP-LVM recipe, which trains jointly
without phases, uses its pieces.

Checkpoints: with a folder each phase keeps its SVI state in ``<folder>/selective_<phase>.npz``
(:func:`ppl_sparsegp.infer.svi.fit_svi` checkpoints). Calling again with the same arguments resumes: finished
phases are read back, not re-run, and the subset is drawn with the same key from the same λ. A phase that runs any
step deletes the later phases' checkpoints, which no longer follow from it.

Also what every recipe's config uses: :func:`configure` (a config with keyword overrides) and the checks
(:func:`check_choice` here; :func:`ppl_sparsegp.validation.check_count` and
:func:`~ppl_sparsegp.validation.check_positive_float`), which name the setting.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import jax
import numpy as np
import optax

from ppl_sparsegp.infer.svi import SVIResult, fit_svi
from ppl_sparsegp.numpyro.subset_prior import IndependentInclusion
from ppl_sparsegp.validation import check_count

Array = Any
Config = TypeVar("Config")

PHASES = ("pre", "selection", "post")
MAX_EMPTY_REDRAWS = 20
INCLUSION_SUFFIX = "inclusion_probs"
"""The name (or, per layer, the end of the name) of the guide parameter λ."""


def configure(config_type: type[Config], config: Config | None, overrides: Mapping[str, Any]) -> Config:
    """``config`` (default: ``config_type()``) with ``overrides`` of its fields; building it checks every field."""
    return dataclasses.replace(config_type() if config is None else config, **overrides)


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """``value`` must be one of ``choices``; the error names ``name``."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")


class InclusionCounts:
    """E|S| and Var|S| under q_λ for a fit result that has ``inclusion_probs`` λ [K]."""

    inclusion_probs: np.ndarray

    @property
    def expected_count(self) -> float:
        """E_q|S| = Σ_k λ_k."""
        return float(np.sum(self.inclusion_probs))

    @property
    def count_variance(self) -> float:
        """Var_q|S| = Σ_k λ_k (1 − λ_k)."""
        p = self.inclusion_probs
        return float(np.sum(p * (1 - p)))


def sample_subset(probs: Array, key: Array) -> np.ndarray:
    """One mask [K] from q_λ, redrawn (up to 20 times, as the released code) while it is empty."""
    q = IndependentInclusion(np.asarray(probs))
    for k in jax.random.split(key, MAX_EMPTY_REDRAWS):
        mask = np.asarray(q.sample(k))
        if mask.any():
            return mask
    raise empty_subsets(probs)


def empty_subsets(probs: Array) -> ValueError:
    """The error when each of :data:`MAX_EMPTY_REDRAWS` subsets drawn from q_λ (λ: ``probs`` [K]) was empty."""
    return ValueError(
        f"every one of {MAX_EMPTY_REDRAWS} subsets drawn from q selected no candidate (E|S| = "
        f"{float(np.sum(np.asarray(probs))):.3g}); lower alpha or give the model more signal"
    )


def sample_joint_subset(probs: Sequence[Array], key: Array) -> list[np.ndarray]:
    """One joint draw of every layer's mask [K_ℓ] from q, redrawn (up to 20 times) while any layer is empty."""
    qs = [IndependentInclusion(np.asarray(p)) for p in probs]
    for k in jax.random.split(key, MAX_EMPTY_REDRAWS):
        masks = [np.asarray(q.sample(sub)) for q, sub in zip(qs, jax.random.split(k, len(qs)), strict=True)]
        if all(m.any() for m in masks):
            return masks
    raise empty_joint_subsets(probs)


def empty_joint_subsets(probs: Sequence[Array]) -> ValueError:
    """The error when each of :data:`MAX_EMPTY_REDRAWS` joint subsets drawn from q (λ^ℓ: ``probs``, [K_ℓ] each)
    left some layer empty."""
    expected = ", ".join(f"{float(np.sum(np.asarray(p))):.3g}" for p in probs)
    return ValueError(
        f"every one of {MAX_EMPTY_REDRAWS} joint subsets drawn from q left some layer empty (E|S| per layer: "
        f"{expected}); lower alpha or give the model more signal"
    )


def selection_optimizer(
    gp_update: optax.GradientTransformation, selection_learning_rate: float
) -> optax.GradientTransformation:
    """Adam at ``selection_learning_rate`` for λ (every ``*inclusion_probs``), ``gp_update`` for the rest."""
    return optax.multi_transform(
        {"inclusion": optax.adam(selection_learning_rate), "gp": gp_update},
        lambda tree: {name: "inclusion" if name.endswith(INCLUSION_SUFFIX) else "gp" for name in tree},
    )


def phase_checkpoint(checkpoint_dir: str | os.PathLike | None, phase: str) -> Path | None:
    """The checkpoint file of one phase (``"pre"``, ``"selection"`` or ``"post"``) in ``checkpoint_dir``."""
    return None if checkpoint_dir is None else Path(checkpoint_dir) / f"selective_{phase}.npz"


class PhaseCheckpoints:
    """The checkpoints of the three phases in one folder (see the module docstring), or none for ``folder=None``.

    ``options(phase)`` gives the ``checkpoint`` / ``checkpoint_every`` / ``fingerprint`` arguments of that phase's
    :func:`ppl_sparsegp.infer.svi.fit_svi` (the fingerprint is ``fingerprint`` plus ``{"phase": phase}``);
    ``finished(phase, result)`` deletes the later phases' checkpoints when the phase ran any step, since they no
    longer follow from it.
    """

    def __init__(
        self, folder: str | os.PathLike | None, every: Any, fingerprint: Mapping[str, Any] | None = None
    ) -> None:
        check_count("checkpoint_every", every, 1)
        if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
            raise ValueError(f"checkpoint_dir: expected a folder, got the file {folder}")
        self.every = int(every)
        self.folder = folder
        self.fingerprint = dict(fingerprint or {})

    def create(self) -> None:
        """Create the folder (after the arguments are checked, so bad input leaves nothing behind)."""
        if self.folder is not None:
            Path(self.folder).mkdir(parents=True, exist_ok=True)

    def options(self, phase: str) -> dict[str, Any]:
        """``fit_svi``'s checkpointing arguments for ``phase``."""
        return {
            "checkpoint": phase_checkpoint(self.folder, phase),
            "checkpoint_every": self.every,
            "fingerprint": {**self.fingerprint, "phase": phase},
        }

    def finished(self, phase: str, result: SVIResult) -> None:
        """Delete the later phases' checkpoints if ``phase`` ran any step."""
        if self.folder is not None and result.steps_run:
            for later in PHASES[PHASES.index(phase) + 1 :]:
                phase_checkpoint(self.folder, later).unlink(missing_ok=True)


def fit_phase(model: Any, X: Array, y: Array, optimizer: Any, steps: int, key: Array, **options: Any) -> SVIResult:
    """``fit_svi`` of ``model``'s model and guide on (X [N, D], y [N] or [N, P]) for ``steps`` steps."""
    return fit_svi(
        model.model, model.guide, X, y, optimizer=optimizer, num_steps=steps, key=key, validate=model.check_data,
        **options,
    )  # fmt: skip


@dataclass
class Phases:
    """What :func:`run_phases` returns: each phase's values, losses and seconds (phase -> ...)."""

    pretrained_params: dict[str, Array]
    selective_params: dict[str, Array]
    masks: Any
    model: Any
    params: dict[str, Array]
    losses: dict[str, np.ndarray]
    seconds: dict[str, float]
    start: int = 0
    start_losses: list[np.ndarray] = dataclasses.field(default_factory=list)


PhaseFit = Callable[[str, Any, dict[str, Array] | None, Any, str], SVIResult]
"""``fit(phase, model, init_params, key, checkpoint)``: one phase's fit of ``model`` (its model and guide) from
``init_params`` (None: the model's own start) with ``key`` (a JAX key, or the Pyro engine's integer seed),
checkpointed as ``checkpoint`` (:meth:`PhaseCheckpoints.options`; the phase's name, or ``pre<i>`` for the i-th
pre-training start, i >= 1); :func:`run_phases` builds NumPyro's,
:func:`ppl_sparsegp.recipes.selective_pyro.fit_selective` Pyro's."""


def final_loss(losses: np.ndarray) -> float:
    """The mean of the last tenth (at least one) of a loss trace [steps]: how :func:`sequence_phases` ranks
    pre-training starts (the last value of a deterministic bound; a tenth of the steps of a stochastic one)."""
    losses = np.asarray(losses)
    return float(np.mean(losses[-max(1, len(losses) // 10) :]))


LABELS = {"pre": "pre-train", "selection": "selection", "post": "post-train"}
"""The progress bar's label of each phase."""


def run_phases(
    base: Any,
    selective: Any,
    X: Array,
    y: Array,
    *,
    key: Array,
    pre_steps: int,
    selection_steps: int,
    post_steps: int,
    learning_rate: float,
    selection_learning_rate: float,
    joint: bool,
    loss: Any,
    prune: Callable[[dict[str, Array], Array], tuple[Any, Any, dict[str, Array]]],
    checkpoints: PhaseCheckpoints,
    init_params: Mapping[str, Array] | None = None,
    starts: Sequence[Mapping[str, Array]] = ({},),
    progress: bool | None = None,
) -> Phases:
    """Pre-train ``base``, select with ``selective`` (GP frozen unless ``joint``), prune and post-train by NumPyro's
    :func:`~ppl_sparsegp.infer.svi.fit_svi` on X [N, D], y [N] or [N, P] (:func:`sequence_phases`).

    ``key`` is split into the pre-training, selection, subset and post-training keys; ``prune(params, key)`` draws
    the subset from the selected ``params`` and returns (masks, pruned model, its parameters); ``loss`` is the
    selection phase's score-function ELBO; Adam at ``learning_rate`` for the GP, at ``selection_learning_rate`` for
    λ; ``starts``: the pre-training starts of :func:`sequence_phases`. The arguments are checked by the caller.
    """
    steps = dict(zip(PHASES, (pre_steps, selection_steps, post_steps), strict=True))

    def fit(phase: str, model: Any, params: dict[str, Array] | None, k: Array, checkpoint: str) -> SVIResult:
        optimizer, options = optax.adam(learning_rate), {}
        if phase == "selection":
            gp_update = optimizer if joint else optax.set_to_zero()
            optimizer, options = selection_optimizer(gp_update, selection_learning_rate), {"loss": loss}
        return fit_phase(
            model, X, y, optimizer, steps[phase], k, init_params=params, progress=progress, label=LABELS[phase],
            **options, **checkpoints.options(checkpoint),
        )  # fmt: skip

    return sequence_phases(fit, base, selective, steps, key=key, prune=prune, checkpoints=checkpoints,
                           init_params=init_params, starts=starts)  # fmt: skip


def sequence_phases(
    fit: PhaseFit,
    base: Any,
    selective: Any,
    steps: Mapping[str, int],
    *,
    key: Sequence[Any],
    prune: Callable[[dict[str, Array], Any], tuple[Any, Any, dict[str, Array]]],
    checkpoints: PhaseCheckpoints,
    init_params: Mapping[str, Array] | None = None,
    starts: Sequence[Mapping[str, Array]] = ({},),
) -> Phases:
    """The phases in order, whatever engine ``fit`` runs (:data:`PhaseFit`): pre-train ``base`` from
    ``init_params`` (skipped for ``steps["pre"] == 0``), select with ``selective`` from there, ``prune(params, key)``
    the selected params to (masks, pruned model, its params), post-train the pruned model (skipped for
    ``steps["post"] == 0``). ``key``: the pre-training, selection, subset and post-training keys (or seeds); a phase
    that ran any step deletes the later phases' checkpoints (:meth:`PhaseCheckpoints.finished`).

    ``starts``: restarts of the pre-training, each a dict of initial values laid over ``init_params`` (one empty
    dict: ``init_params`` alone). Each is pre-trained for ``steps["pre"]`` steps with the same key (checkpointed as
    ``pre``, ``pre1``, ...) and the one of lowest :func:`final_loss` (highest bound) goes on to the selection;
    ``Phases.start`` is its index, ``Phases.start_losses`` every start's loss trace. With no pre-training only the
    first start is used.
    """
    pre_key, selection_key, prune_key, post_key = key
    losses, seconds = {}, {}
    begins = [{**dict(init_params or {}), **dict(start)} for start in starts]
    params, best, start_losses = begins[0], 0, []
    t0 = time.perf_counter()
    if steps["pre"]:
        pres = []
        for i, begin in enumerate(begins):
            pres.append(fit("pre", base, begin or None, pre_key, "pre" if i == 0 else f"pre{i}"))
            checkpoints.finished("pre", pres[-1])
        start_losses = [np.asarray(pre.losses) for pre in pres]
        best = int(np.argmin([final_loss(trace) for trace in start_losses]))
        params, losses["pre"] = pres[best].params, pres[best].losses
    seconds["pre"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    chosen = fit("selection", selective, params or None, selection_key, "selection")
    losses["selection"] = chosen.losses
    checkpoints.finished("selection", chosen)
    seconds["selection"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    masks, pruned, pruned_params = prune(chosen.params, prune_key)
    fitted, losses["post"] = dict(pruned_params), np.zeros(0)
    if steps["post"]:
        post = fit("post", pruned, pruned_params, post_key, "post")
        fitted, losses["post"] = post.params, post.losses
    seconds["post"] = time.perf_counter() - t0
    return Phases(params, chosen.params, masks, pruned, fitted, losses, seconds, best, start_losses)
