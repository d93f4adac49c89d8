"""Probabilistic selection of inducing points in one call (Uhrenholt et al. 2021, App. C.2; spec 000 §3.2).

:func:`fit_selective` runs the paper's three phases:

1. **pre-train** an ordinary sparse GP on all K candidates (SGPR for ``bound="collapsed"``, an unwhitened SVGP
   for ``"uncollapsed"``), Adam at ``learning_rate``;
2. **select**: the selective model (:mod:`models.selective`) starts from the pre-trained values and learns the
   inclusion probabilities λ by the score-function estimator (``num_particles`` draws per step, decaying-average
   baseline, Adam at ``selection_learning_rate``). ``selection="frozen"`` keeps every GP parameter fixed, as the
   released code does; ``"joint"`` trains them too by their pathwise gradient, as the paper's GP-LVM does;
3. **sample one subset** from q_λ, **prune** the unselected candidates (q(u) restricted to the kept ones), and
   **post-train** the pruned model, which is an ordinary :class:`SGPR` / :class:`SVGP` usable by every predict,
   ArviZ and CLI path.

Defaults follow the paper (App. C.1, C.3.2): Adam 0.01 for the GP, 0.2 for λ, S = 4 draws, λ₀ = 0.5, and the UCI
schedule 2500 / 1500 / 1000 steps of full-batch training.

Checkpoints: with ``checkpoint_dir`` each phase keeps its SVI state in ``checkpoint_dir/selective_<phase>.npz``
(:func:`ppl_sparsegp.infer.svi.fit_svi` checkpoints, written atomically every ``checkpoint_every`` steps and on
Ctrl-C). Calling again with the same arguments resumes: finished phases are read back, not re-run, and the subset
is drawn with the same key from the same λ, so a resumed fit equals an uninterrupted one. A phase that runs any
step deletes the later phases' checkpoints, which no longer follow from it (e.g. after raising
``selection_steps``). Each checkpoint records a fingerprint of every other setting (the caller's ``fingerprint``,
this function's arguments, the phase, and ``fit_svi``'s data hash, key and initial values): a call that differs in
any of them is refused, naming what differs; delete the folder (or its files) to start afresh.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jax
import numpy as np
import optax

from ppl_sparsegp import validation
from ppl_sparsegp.core.kernels import RBF, Kernel
from ppl_sparsegp.core.likelihoods import Gaussian, Likelihood
from ppl_sparsegp.inducing.initialise import kmeans, random_subset
from ppl_sparsegp.infer.checkpoint import key_data, tree_sha256
from ppl_sparsegp.infer.score_function import ScoreFunctionELBO
from ppl_sparsegp.infer.svi import SVIResult, fit_svi
from ppl_sparsegp.numpyro.subset_prior import IndependentInclusion

from ._base import part_fingerprint
from .selective import INCLUSION_PARAM, SelectiveSGPR, SelectiveSVGP
from .sgpr import SGPR
from .svgp import SVGP

Array = Any

BOUNDS = ("collapsed", "uncollapsed")
SELECTION_MODES = ("frozen", "joint")
PHASES = ("pre", "selection", "post")
INITIALISATIONS = ("random", "kmeans")
MAX_EMPTY_REDRAWS = 20


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


@dataclass
class SelectiveFit(InclusionCounts):
    """What :func:`fit_selective` returns.

    Attributes:
        model, params: the pruned, post-trained SGPR / SVGP and its fitted parameters.
        selective, selective_params: the selective model over all K candidates and its values after selection.
        mask: the drawn subset [K] (0/1) that was kept.
        losses: phase ("pre", "selection", "post") -> loss trace (negative bound) of that phase.
        seconds: phase -> wall-clock seconds (compilation included).
    """

    model: SGPR | SVGP
    params: dict[str, Array]
    selective: SelectiveSGPR | SelectiveSVGP
    selective_params: dict[str, Array]
    mask: np.ndarray
    losses: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def inclusion_probs(self) -> np.ndarray:
        """λ [K] after the selection phase."""
        return np.asarray(self.selective_params[INCLUSION_PARAM])

    @property
    def selected_count(self) -> int:
        """|S| of the kept subset (the pruned model's number of inducing points)."""
        return int(np.sum(self.mask))


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")


def _check_steps(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _check_rate(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (0 < value < np.inf):
        raise ValueError(f"{name}: expected a positive learning rate, got {value!r}")
    return float(value)


def candidate_inputs(X: Array, candidates: int | Array, init: str, seed: int) -> np.ndarray:
    """The candidate set Z* [K, D]: given, or K rows of X (``"random"``, as the paper) or k-means centres."""
    _check_choice("init", init, INITIALISATIONS)
    if isinstance(candidates, int | np.integer) and not isinstance(candidates, bool):
        chooser = random_subset if init == "random" else kmeans
        return chooser(np.asarray(X), int(candidates), seed=seed)
    Z = np.asarray(candidates)
    validation.check_inputs(Z, x_name="candidates")
    validation.check_same_dim(Z, X, z_name="candidates")
    return Z


def sample_subset(probs: Array, key: Array) -> np.ndarray:
    """One mask [K] from q_λ, redrawn (up to 20 times, as the released code) while it is empty."""
    q = IndependentInclusion(np.asarray(probs))
    for k in jax.random.split(key, MAX_EMPTY_REDRAWS):
        mask = np.asarray(q.sample(k))
        if mask.any():
            return mask
    raise ValueError(
        f"every one of {MAX_EMPTY_REDRAWS} subsets drawn from q selected no candidate (E|S| = "
        f"{float(np.sum(probs)):.3g}); lower alpha or give the model more signal"
    )


def selection_optimizer(
    gp_update: optax.GradientTransformation, selection_learning_rate: float
) -> optax.GradientTransformation:
    """Adam at ``selection_learning_rate`` for λ (``"inclusion_probs"``), ``gp_update`` for every other parameter."""
    return optax.multi_transform(
        {"inclusion": optax.adam(selection_learning_rate), "gp": gp_update},
        lambda tree: {name: "inclusion" if name == INCLUSION_PARAM else "gp" for name in tree},
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
        self.every = _check_steps("checkpoint_every", every, 1)
        if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
            raise ValueError(f"checkpoint_dir: expected a folder, got the file {folder}")
        self.folder = folder
        self.fingerprint = dict(fingerprint or {})

    def create(self) -> None:
        """Create the folder (after the arguments are checked, so bad input leaves nothing behind)."""
        if self.folder is not None:
            Path(self.folder).mkdir(parents=True, exist_ok=True)

    def options(self, phase: str) -> dict[str, Any]:
        return {
            "checkpoint": phase_checkpoint(self.folder, phase),
            "checkpoint_every": self.every,
            "fingerprint": {**self.fingerprint, "phase": phase},
        }

    def finished(self, phase: str, result: SVIResult) -> None:
        if self.folder is not None and result.steps_run:
            for later in PHASES[PHASES.index(phase) + 1 :]:
                phase_checkpoint(self.folder, later).unlink(missing_ok=True)


def _fit(model, X, y, optimizer, steps, key, **options) -> SVIResult:
    return fit_svi(
        model.model,
        model.guide,
        X,
        y,
        optimizer=optimizer,
        num_steps=steps,
        key=key,
        validate=model.check_data,
        **options,
    )


def post_train(
    model: SGPR | SVGP,
    params: dict[str, Array],
    X: Array,
    y: Array,
    *,
    steps: int,
    key: Array,
    learning_rate: float = 0.01,
    progress: bool = False,
    **checkpointing: Any,
) -> tuple[dict[str, Array], np.ndarray]:
    """Train a pruned model from ``params`` for ``steps`` Adam steps -> (fitted params, loss trace).

    ``checkpointing``: ``checkpoint`` and ``checkpoint_every`` of :func:`ppl_sparsegp.infer.svi.fit_svi`.
    """
    if steps == 0:
        return dict(params), np.zeros(0)
    optimizer = optax.adam(learning_rate)
    result = _fit(model, X, y, optimizer, steps, key, init_params=params, progress=progress, **checkpointing)
    return result.params, result.losses


def fit_selective(
    X: Array,
    y: Array,
    *,
    candidates: int | Array = 100,
    alpha: float = 0.1,
    bound: Literal["collapsed", "uncollapsed"] = "collapsed",
    likelihood: Likelihood | None = None,
    kernel: Kernel | None = None,
    init: Literal["random", "kmeans"] = "random",
    learn_candidates: bool = True,
    initial_inclusion: float = 0.5,
    num_particles: int = 4,
    selection: Literal["frozen", "joint"] = "frozen",
    pre_steps: int = 2500,
    selection_steps: int = 1500,
    post_steps: int = 1000,
    learning_rate: float = 0.01,
    selection_learning_rate: float = 0.2,
    batch_size: int | None = None,
    key: int | Array = 0,
    progress: bool = False,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 500,
    fingerprint: Mapping[str, Any] | None = None,
) -> SelectiveFit:
    """Pre-train on K candidates, learn which to keep, sample a subset, prune and post-train.

    Args:
        X: inputs [N, D]; y: targets [N] (or [N, P] for several outputs sharing Z and the kernel).
        candidates: K, drawn from X by ``init`` (``"random"``: a random subset, the paper's choice; ``"kmeans"``),
            or the candidate inputs themselves [K, D].
        alpha: prior strength α >= 0 (paper Table 1: concrete 0.01, energy 0.05, kin8nm 0.1, protein 0.2).
        bound: ``"collapsed"`` (Titsias; Gaussian likelihood only) or ``"uncollapsed"`` (unwhitened SVGP, any
            likelihood, minibatches through ``batch_size``).
        likelihood: default Gaussian with variance 1; kernel: default RBF-ARD with unit variance and lengthscales
            (the paper's initial values).
        learn_candidates: let Adam move the candidate inputs in the pre-training (and joint) phases, as the paper
            does, or keep them exactly where given (``False``, e.g. for a fixed grid of candidates).
        initial_inclusion: λ₀ of every candidate; num_particles: S draws per selection step.
        selection: ``"frozen"`` (only λ learns) or ``"joint"`` (every parameter learns).
        pre_steps, selection_steps, post_steps: Adam steps of the three phases (pre and post may be 0).
        learning_rate: Adam step for the GP parameters; selection_learning_rate: for λ (as logits).
        batch_size: minibatch size of the uncollapsed bound (None: full batch).
        key: integer seed or JAX key.
        progress: show progress bars.
        checkpoint_dir: a folder for the phases' checkpoints (created; see the module docstring), or None.
        checkpoint_every: steps between checkpoint writes within a phase.
        fingerprint: the caller's settings, recorded in every phase's checkpoint beside this function's own
            arguments (all but the three step counts, which a resumed call may raise); see the module docstring.

    Returns:
        A :class:`SelectiveFit`.
    """
    validation.check_inputs(X, y)
    _check_choice("bound", bound, BOUNDS)
    _check_choice("selection", selection, SELECTION_MODES)
    if not isinstance(learn_candidates, bool | np.bool_):
        raise ValueError(f"learn_candidates: expected True or False, got {learn_candidates!r}")
    pre_steps = _check_steps("pre_steps", pre_steps, 0)
    selection_steps = _check_steps("selection_steps", selection_steps, 1)
    post_steps = _check_steps("post_steps", post_steps, 0)
    learning_rate = _check_rate("learning_rate", learning_rate)
    selection_learning_rate = _check_rate("selection_learning_rate", selection_learning_rate)
    settings = None
    if checkpoint_dir is not None:
        settings = {
            "selective.candidates": tree_sha256(candidates),
            "selective.alpha": alpha,
            "selective.bound": bound,
            "selective.likelihood": None if likelihood is None else part_fingerprint(likelihood),
            "selective.kernel": None if kernel is None else part_fingerprint(kernel),
            "selective.init": init,
            "selective.learn_candidates": bool(learn_candidates),
            "selective.initial_inclusion": initial_inclusion,
            "selective.num_particles": num_particles,
            "selective.selection": selection,
            "selective.learning_rate": learning_rate,
            "selective.selection_learning_rate": selection_learning_rate,
            "selective.batch_size": batch_size,
            "selective.key": key_data(key),
            **dict(fingerprint or {}),
        }
    checkpoints = PhaseCheckpoints(checkpoint_dir, checkpoint_every, settings)
    X, y = np.asarray(X), np.asarray(y)
    key = jax.random.PRNGKey(key) if isinstance(key, int | np.integer) else key
    pre_key, selection_key, prune_key, post_key, init_key = jax.random.split(key, 5)
    Z = candidate_inputs(X, candidates, init, seed=int(jax.random.randint(init_key, (), 0, 2**31 - 1)))
    D = X.shape[1]
    kernel = kernel or RBF(variance=1.0, lengthscale=np.ones(D, dtype=X.dtype))
    likelihood = likelihood or Gaussian(variance=1.0)
    common = {"kernel": kernel, "likelihood": likelihood, "Z": Z, "learn_Z": bool(learn_candidates)}
    if bound == "collapsed":
        if batch_size is not None:
            raise ValueError("batch_size: the collapsed bound needs the full batch; use bound='uncollapsed'")
        base, selective = SGPR(**common), SelectiveSGPR(**common, alpha=alpha, initial_inclusion=initial_inclusion)
    else:
        svgp = {"num_latent": 1 if y.ndim == 1 else y.shape[1], "whiten": False, "batch_size": batch_size}
        base = SVGP(**common, **svgp)
        selective = SelectiveSVGP(**common, **svgp, alpha=alpha, initial_inclusion=initial_inclusion)
    loss = ScoreFunctionELBO(num_particles, pathwise=selection == "joint")
    base.check_data(X, y)
    checkpoints.create()

    losses, seconds, params = {}, {}, {}
    t0 = time.perf_counter()
    if pre_steps:
        pre = _fit(
            base, X, y, optax.adam(learning_rate), pre_steps, pre_key, progress=progress, **checkpoints.options("pre")
        )
        params, losses["pre"] = pre.params, pre.losses
        checkpoints.finished("pre", pre)
    seconds["pre"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    gp_update = optax.adam(learning_rate) if selection == "joint" else optax.set_to_zero()
    optimizer = selection_optimizer(gp_update, selection_learning_rate)
    chosen = _fit(
        selective, X, y, optimizer, selection_steps, selection_key, loss=loss, init_params=params, progress=progress,
        **checkpoints.options("selection"),
    )  # fmt: skip
    losses["selection"] = chosen.losses
    checkpoints.finished("selection", chosen)
    seconds["selection"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    mask = sample_subset(chosen.params[INCLUSION_PARAM], prune_key)
    pruned, pruned_params = selective.prune(chosen.params, mask)
    fitted, losses["post"] = post_train(
        pruned, pruned_params, X, y, steps=post_steps, key=post_key, learning_rate=learning_rate, progress=progress,
        **checkpoints.options("post"),
    )  # fmt: skip
    seconds["post"] = time.perf_counter() - t0
    return SelectiveFit(pruned, fitted, selective, chosen.params, mask, losses, seconds)
