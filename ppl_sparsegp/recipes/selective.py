"""Probabilistic selection of inducing points (Uhrenholt et al. 2021; spec 000 §3.2, §4.1, §5.3), in one call each.

* :func:`fit_selective` (App. C.2): the three phases of :func:`.phases.run_phases` for a sparse GP: pre-train an
  ordinary sparse GP on all K candidates (SGPR for ``bound="collapsed"``, an unwhitened SVGP for
  ``"uncollapsed"``), learn the inclusion probabilities λ of the selective model (:mod:`models.numpyro.selective`) by
  the score-function estimator (``selection="frozen"`` keeps every GP parameter fixed, as the released code does;
  ``"joint"`` trains them too), sample one subset, prune and post-train the pruned model, an ordinary
  :class:`SGPR` / :class:`SVGP` usable by every predict, ArviZ and CLI path. Defaults follow the paper (App. C.1,
  C.3.2): Adam 0.01 for the GP, 0.2 for λ, S = 4 draws, λ₀ = 0.5, the UCI schedule 2500 / 1500 / 1000 steps.
* :func:`fit_selective_deep` (§5.2): the same phases for a deep GP, one candidate set and λ per layer, one joint
  subset of every layer; its pre-training is joint, or layer-wise then joint (:func:`fit_layerwise`, App. C.4).
* :func:`fit_selective_gplvm` (§5.3): the GP-LVM with its inducing inputs selected from a fixed latent grid,
  trained **jointly, without phases** (λ by the score-function estimator, the rest pathwise), recording λ along
  the way; with ``pre_steps`` it first fits the GP-LVM on every grid point, as the released demo does. Its phases
  (:func:`sequence_gplvm`), grid and model (:func:`grid_model`) and trace (:class:`LatentTrace`) are shared with its
  Pyro twin (:func:`ppl_sparsegp.recipes.selective_pyro.fit_selective_gplvm`).

Each keeps its settings in a frozen config (:class:`SelectiveConfig`, :class:`SelectiveDeepConfig`,
:class:`SelectiveGPLVMConfig`), checked when built. With ``checkpoint_dir`` each phase checkpoints
(:mod:`.phases`); the same call resumes a stopped fit and equals an uninterrupted one. Each checkpoint records a
fingerprint of every other setting: a call that differs is refused, naming what differs.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro import handlers

from ppl_sparsegp import validation
from ppl_sparsegp.core import deep, ops
from ppl_sparsegp.core.kernels import RBF, Kernel
from ppl_sparsegp.core.likelihoods import Gaussian, Likelihood
from ppl_sparsegp.inducing.initialise import kmeans, random_subset
from ppl_sparsegp.infer.checkpoint import key_data, tree_sha256
from ppl_sparsegp.infer.score_function import ScoreFunctionELBO
from ppl_sparsegp.infer.svi import SVIResult, fit_svi
from ppl_sparsegp.models.numpyro._base import part_fingerprint
from ppl_sparsegp.models.numpyro.deep_svgp import DeepSVGP, deep_svgp
from ppl_sparsegp.models.numpyro.gplvm import BayesianGPLVM, CollapsedGPLVM, pca_latents
from ppl_sparsegp.models.numpyro.selective import (
    INCLUSION_PARAM,
    SelectiveSGPR,
    SelectiveSVGP,
    check_alpha,
    check_initial_inclusion,
)
from ppl_sparsegp.models.numpyro.selective_deep import SelectiveDeepSVGP
from ppl_sparsegp.models.numpyro.selective_gplvm import SelectiveCollapsedGPLVM, SelectiveGPLVM
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.results import write_npz
from ppl_sparsegp.validation import check_count, check_positive_float

from .phases import (
    PHASES,
    InclusionCounts,
    PhaseCheckpoints,
    Phases,
    check_choice,
    configure,
    phase_checkpoint,
    run_phases,
    sample_joint_subset,
    sample_subset,
    selection_optimizer,
)

Array = Any

BOUNDS = ("collapsed", "uncollapsed")
SELECTION_MODES = ("frozen", "joint")
PRETRAINING = ("joint", "layerwise")
INITIALISATIONS = ("random", "kmeans")
ADDED_LAYER_VARIANCE = 0.1
"""Kernel variance of a layer added in layer-wise pre-training (the released code's outputscale 0.1)."""
ADDED_LAYER_SCALE = 1e-3
"""q(u)'s square root of an added layer as a multiple of chol K(Z, Z) (the released code's Cholesky × 1e-3)."""
LENGTHSCALE_STARTS = ("given", "spacing")
"""The lengthscale starts of the pre-training of :func:`fit_selective` (:attr:`SelectiveConfig.lengthscale_starts`)."""
GRID_MARGIN = 0.1
"""Default padding of the GP-LVM's grid beyond the latents' range, as a fraction of that range per dimension."""
TRACE_FILE = "selective_gplvm_trace.npz"
"""The λ / latent-mean trace of :func:`fit_selective_gplvm` in its ``checkpoint_dir``."""


@dataclass(frozen=True, kw_only=True)
class SelectionConfig:
    """The settings of learning λ that every selective recipe shares (keyword only), checked when built.

    initial_inclusion: λ₀ of every candidate, in (0, 1); num_particles: S draws of the subset per step of the
    score-function estimator; learning_rate: Adam's for the GP; selection_learning_rate: Adam's for λ (paper:
    0.01 and 0.2, S = 4).
    """

    initial_inclusion: float = 0.5
    num_particles: int = 4
    learning_rate: float = 0.01
    selection_learning_rate: float = 0.2

    def __post_init__(self) -> None:
        check_initial_inclusion(self.initial_inclusion)
        check_count("num_particles", self.num_particles, 1)
        check_positive_float("learning_rate", self.learning_rate)
        check_positive_float("selection_learning_rate", self.selection_learning_rate)


def _check_schedule(config: Any) -> None:
    """The settings the phased recipes share beyond :class:`SelectionConfig`'s: choices and step counts."""
    check_choice("selection", config.selection, SELECTION_MODES)
    check_choice("init", config.init, INITIALISATIONS)
    check_count("pre_steps", config.pre_steps, 0)
    check_count("selection_steps", config.selection_steps, 1)
    check_count("post_steps", config.post_steps, 0)
    check_count("checkpoint_every", config.checkpoint_every, 1)
    check_count("batch_size", config.batch_size, 1, optional=True)


@dataclass(frozen=True)
class SelectiveConfig(SelectionConfig):
    """The settings of :func:`fit_selective`, each default written here or in :class:`SelectionConfig` only.

    candidates: K, drawn from X by ``init`` (``"random"``: a random subset, the paper's choice; ``"kmeans"``), or
    the candidate inputs themselves [K, D]. alpha: prior strength α >= 0 (paper Table 1: concrete 0.01, energy
    0.05, kin8nm 0.1, protein 0.2). bound: ``"collapsed"`` (Titsias; Gaussian likelihood only) or
    ``"uncollapsed"`` (unwhitened SVGP, any likelihood, minibatches of ``batch_size``; None: full batch).
    learn_candidates: let Adam move the candidates in the pre-training (and joint) phases, or keep them where
    given. selection: ``"frozen"`` (only λ learns) or ``"joint"``. pre_steps, selection_steps, post_steps: Adam
    steps of the phases (pre and post may be 0). noise_variance: of the default Gaussian likelihood.
    checkpoint_every: steps between checkpoint writes within a phase. initial_inclusion, num_particles,
    learning_rate, selection_learning_rate: as :class:`SelectionConfig`.

    lengthscale_starts: where the pre-training starts the kernel's lengthscales, one or more of
    :data:`LENGTHSCALE_STARTS`: ``"given"``, the kernel's own (default RBF: 1, the paper's App. C.1 start);
    ``"spacing"``, every lengthscale at the candidates' spacing (:func:`candidate_spacing`), the shortest scale
    the candidates can resolve. With several, each is pre-trained for ``pre_steps`` and the one with the highest
    final bound (:func:`.phases.final_loss`) goes on, at the cost of that many pre-trainings. Default
    ``("given",)``, the paper's. From a long lengthscale the pre-training can end in the optimum that explains
    the data as noise (noise variance ≈ var(y), a flat function), from which no gradient leads out; use
    ``("given", "spacing")`` when the data may vary on a scale far below the inputs' range (spec 000 §5.3, B2).
    """

    candidates: int | Array = 100
    alpha: float = 0.1
    bound: str = "collapsed"
    init: str = "random"
    learn_candidates: bool = True
    selection: str = "frozen"
    pre_steps: int = 2500
    selection_steps: int = 1500
    post_steps: int = 1000
    batch_size: int | None = None
    noise_variance: float = 1.0
    lengthscale_starts: tuple[str, ...] = ("given",)
    checkpoint_every: int = 500

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("bound", self.bound, BOUNDS)
        _check_schedule(self)
        starts = self.lengthscale_starts
        if isinstance(starts, str) or not isinstance(starts, Sequence) or not starts:
            raise ValueError(
                f"lengthscale_starts: expected a non-empty sequence of {LENGTHSCALE_STARTS}, got {starts!r}"
            )
        for start in starts:
            check_choice("lengthscale_starts", start, LENGTHSCALE_STARTS)
        if len(set(starts)) < len(starts):
            raise ValueError(f"lengthscale_starts: each start at most once, got {starts!r}")
        if len(starts) > 1 and self.pre_steps == 0:
            raise ValueError(f"lengthscale_starts: choosing among {starts!r} needs pre_steps > 0, got 0")
        object.__setattr__(self, "lengthscale_starts", tuple(starts))
        check_alpha(self.alpha)
        validation.check_positive("noise_variance", self.noise_variance)
        if not isinstance(self.learn_candidates, bool | np.bool_):
            raise ValueError(f"learn_candidates: expected True or False, got {self.learn_candidates!r}")
        if self.bound == "collapsed" and self.batch_size is not None:
            raise ValueError("batch_size: the collapsed bound needs the full batch; use bound='uncollapsed'")


@dataclass
class SelectiveFit(InclusionCounts):
    """What :func:`fit_selective` returns.

    Attributes:
        model, params: the pruned, post-trained SGPR / SVGP and its fitted parameters.
        selective, selective_params: the selective model over all K candidates and its values after selection.
        mask: the drawn subset [K] (0/1) that was kept.
        losses: phase ("pre", "selection", "post") -> loss trace (negative bound) of that phase.
        seconds: phase -> wall-clock seconds (compilation included).
        pre_start: the lengthscale start (``config.lengthscale_starts``) whose pre-training went on.
        pre_start_losses: each start -> its pre-training's loss trace [pre_steps] (empty without pre-training).
    """

    model: SGPR | SVGP
    params: dict[str, Array]
    selective: SelectiveSGPR | SelectiveSVGP
    selective_params: dict[str, Array]
    mask: np.ndarray
    losses: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    pre_start: str = "given"
    pre_start_losses: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def inclusion_probs(self) -> np.ndarray:
        """λ [K] after the selection phase."""
        return np.asarray(self.selective_params[INCLUSION_PARAM])

    @property
    def selected_count(self) -> int:
        """|S| of the kept subset (the pruned model's number of inducing points)."""
        return int(np.sum(self.mask))


def candidate_inputs(X: Array, candidates: int | Array, init: str, seed: int) -> np.ndarray:
    """The candidate set Z* [K, D]: given, or K rows of X (``"random"``, as the paper) or k-means centres."""
    check_choice("init", init, INITIALISATIONS)
    if isinstance(candidates, int | np.integer) and not isinstance(candidates, bool):
        chooser = random_subset if init == "random" else kmeans
        return chooser(np.asarray(X), int(candidates), seed=seed)
    Z = np.asarray(candidates)
    validation.check_inputs(Z, x_name="candidates")
    validation.check_same_dim(Z, X, z_name="candidates")
    return Z


def candidate_spacing(Z: Array) -> float:
    """The median over candidates Z [K, D] (K >= 2) of the Euclidean distance to the nearest other candidate."""
    Z = np.asarray(Z, dtype=float)
    d2 = np.sum((Z[:, None, :] - Z[None, :, :]) ** 2, axis=-1)
    np.fill_diagonal(d2, np.inf)
    return float(np.median(np.sqrt(np.min(d2, axis=1))))


def lengthscale_starts(config: SelectiveConfig, base: SGPR | SVGP) -> list[dict[str, np.ndarray]]:
    """The initial values of each of ``config.lengthscale_starts`` for the pre-training of ``base`` (the model on
    all K candidates): ``"given"`` none (the kernel's own), ``"spacing"`` ``kernel.lengthscale`` at
    :func:`candidate_spacing` of ``base.Z``, of the kernel's lengthscale's shape. Raises ValueError, naming
    ``lengthscale_starts``, for ``"spacing"`` with a kernel without a lengthscale, fewer than 2 candidates or
    candidates that coincide."""
    starts = []
    for start in config.lengthscale_starts:
        if start == "given":
            starts.append({})
            continue
        if "lengthscale" not in getattr(base.kernel, "param_names", ()):
            raise ValueError(f"lengthscale_starts: 'spacing' needs a kernel with a lengthscale, got {base.kernel!r}")
        Z = np.asarray(base.Z)
        spacing = candidate_spacing(Z) if len(Z) >= 2 else 0.0
        if not spacing > 0:
            raise ValueError(f"lengthscale_starts: 'spacing' needs at least 2 distinct candidates, got {len(Z)}")
        shape = np.shape(base.kernel.lengthscale)
        starts.append({"kernel.lengthscale": np.full(shape, spacing, dtype=Z.dtype)})
    return starts


def _as_key(key: int | Array) -> Array:
    return jax.random.PRNGKey(key) if isinstance(key, int | np.integer) else key


def selective_settings(
    config: SelectiveConfig,
    likelihood: Likelihood | None,
    kernel: Kernel | None,
    key: int | Array,
    fingerprint: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What every phase's checkpoint of :func:`fit_selective` (and of its Pyro twin) records: each setting but the
    three step counts, which a resumed call may raise, the likelihood, kernel and key (or seed), and the caller's
    ``fingerprint``."""
    c = config
    return {
        "selective.candidates": tree_sha256(c.candidates),
        "selective.alpha": c.alpha,
        "selective.bound": c.bound,
        "selective.likelihood": None if likelihood is None else part_fingerprint(likelihood),
        "selective.kernel": None if kernel is None else part_fingerprint(kernel),
        "selective.init": c.init,
        "selective.learn_candidates": bool(c.learn_candidates),
        "selective.initial_inclusion": c.initial_inclusion,
        "selective.num_particles": c.num_particles,
        "selective.selection": c.selection,
        "selective.learning_rate": c.learning_rate,
        "selective.selection_learning_rate": c.selection_learning_rate,
        "selective.batch_size": c.batch_size,
        "selective.key": key_data(key),
        # recorded when not the default, so that checkpoints written before the option existed still resume
        **({} if c.lengthscale_starts == ("given",) else {"selective.lengthscale_starts": list(c.lengthscale_starts)}),
        **dict(fingerprint or {}),
    }


def build_selective(
    X: np.ndarray,
    y: np.ndarray,
    config: SelectiveConfig,
    *,
    likelihood: Likelihood | None,
    kernel: Kernel | None,
    key: int | Array,
) -> tuple[list[Array], SelectiveSGPR | SelectiveSVGP]:
    """The phases' four keys (pre-training, selection, subset, post-training) and the selective model of
    :func:`fit_selective` over the candidates [K, D] drawn from X [N, D] (:func:`candidate_inputs`, seeded from
    ``key``), checked against X and y [N] or [N, P]: SGPR for the collapsed bound, unwhitened SVGP otherwise, with
    the defaults of :func:`fit_selective` for a kernel or likelihood of None."""
    c = config
    *keys, init_key = jax.random.split(_as_key(key), 5)
    Z = candidate_inputs(X, c.candidates, c.init, seed=int(jax.random.randint(init_key, (), 0, 2**31 - 1)))
    kernel = kernel or RBF(variance=1.0, lengthscale=np.ones(X.shape[1], dtype=X.dtype))
    likelihood = likelihood or Gaussian(variance=c.noise_variance)
    common = {"kernel": kernel, "likelihood": likelihood, "Z": Z, "learn_Z": bool(c.learn_candidates)}
    if c.bound == "collapsed":
        base, selective_class = SGPR(**common), SelectiveSGPR
    else:
        svgp = {"num_latent": 1 if y.ndim == 1 else y.shape[1], "whiten": False, "batch_size": c.batch_size}
        base, selective_class = SVGP(**common, **svgp), SelectiveSVGP
    base.check_data(X, y)
    return keys, selective_class(base, alpha=c.alpha, initial_inclusion=c.initial_inclusion)


def fit_selective(
    X: Array,
    y: Array,
    config: SelectiveConfig | None = None,
    *,
    likelihood: Likelihood | None = None,
    kernel: Kernel | None = None,
    key: int | Array = 0,
    progress: bool | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> SelectiveFit:
    """Pre-train on K candidates, learn which to keep, sample a subset, prune and post-train.

    Args:
        X: inputs [N, D]; y: targets [N] (or [N, P] for several outputs sharing Z and the kernel).
        config: the settings (:class:`SelectiveConfig`); ``overrides``: fields of it, e.g. ``alpha=0.5``.
        likelihood: default Gaussian with variance ``config.noise_variance``; kernel: default RBF-ARD with unit
            variance and lengthscales (the paper's initial values).
        key: integer seed or JAX key. progress: show progress bars (None: in a terminal or notebook).
        checkpoint_dir: a folder for the phases' checkpoints (created; see :mod:`.phases`), or None.
        fingerprint: the caller's settings, recorded in every phase's checkpoint beside this function's own
            (all but the three step counts, which a resumed call may raise).

    Returns:
        A :class:`SelectiveFit`.
    """
    config = configure(SelectiveConfig, config, overrides)
    X, y = validation.as_array(X), validation.as_array(y)
    validation.check_inputs(X, y)
    c = config
    settings = None if checkpoint_dir is None else selective_settings(c, likelihood, kernel, key, fingerprint)
    checkpoints = PhaseCheckpoints(checkpoint_dir, c.checkpoint_every, settings)
    X, y = np.asarray(X), np.asarray(y)
    keys, selective = build_selective(X, y, c, likelihood=likelihood, kernel=kernel, key=key)
    base = selective.ordinary
    starts = lengthscale_starts(c, base)
    checkpoints.create()

    def prune(params: dict[str, Array], k: Array) -> tuple[np.ndarray, Any, dict[str, Array]]:
        mask = sample_subset(params[INCLUSION_PARAM], k)
        return (mask, *selective.prune(params, mask))

    done = run_phases(
        base, selective, X, y, key=keys, pre_steps=c.pre_steps, selection_steps=c.selection_steps,
        post_steps=c.post_steps, learning_rate=c.learning_rate, selection_learning_rate=c.selection_learning_rate,
        joint=c.selection == "joint", loss=ScoreFunctionELBO(c.num_particles, pathwise=c.selection == "joint"),
        prune=prune, checkpoints=checkpoints, starts=starts, progress=progress,
    )  # fmt: skip
    return selective_fit(c, selective, done)


def selective_fit(config: SelectiveConfig, selective: Any, done: Phases) -> SelectiveFit:
    """The :class:`SelectiveFit` of :func:`fit_selective` (or its Pyro twin) from the phases' results."""
    names = config.lengthscale_starts
    return SelectiveFit(
        done.model, done.params, selective, done.selective_params, done.masks, done.losses, done.seconds,
        names[done.start], dict(zip(names, done.start_losses, strict=False)),
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# Deep GPs


@dataclass(frozen=True)
class SelectiveDeepConfig(SelectionConfig):
    """The settings of :func:`fit_selective_deep`, each default written here or in :class:`SelectionConfig` only.

    candidates: K per layer (random rows of X, as the paper, or k-means centres with ``init="kmeans"``) or a list
    of L arrays [K_ℓ, D] in the space of X. num_layers: L; alpha: α (one, or one per layer); alpha_per_output:
    α_ℓ × D_{ℓ+1}. add_input, inner_mean: the architecture (:func:`models.numpyro.deep_svgp.deep_svgp`; the paper's
    kin8nm model is ``add_input=True, inner_mean="zero"``). noise_variance: of the default Gaussian likelihood (paper
    App. C.1). num_samples: propagated samples of the data term per evaluation. batch_size: minibatch of the pre-
    and post-training bound; selection_batch_size: of the selection bound (None: full batch). pretraining:
    ``"joint"`` (``pre_steps`` Adam steps on every layer at once) or ``"layerwise"`` (the paper's App. C.4 and the
    released code's ``fit_layerwise``: the layers are added one at a time and layer ℓ alone is trained for
    ``layerwise_steps`` steps, :func:`fit_layerwise`, then ``pre_steps`` joint steps; needs ``inner_mean="zero"``
    and one output column). layerwise_steps: Adam steps per layer of that phase (default 200: the paper's 200 epochs
    per layer on kin8nm, spec 000 §5.5b; the released code runs 300-500). The rest as :class:`SelectiveConfig` and
    :class:`SelectionConfig`. jitter: the deep GP's relative Cholesky jitter (None: the library's default; the
    released code's GPyTorch adds 1e-3 to K(Z, Z), which keeps many close inducing inputs trainable, e.g. the
    propagated means that start a layer in layer-wise pre-training).
    """

    candidates: int | Sequence[Array] = 150
    num_layers: int = 2
    alpha: float | Sequence[float] = 0.05
    alpha_per_output: bool = False
    add_input: bool = False
    inner_mean: str = "linear"
    noise_variance: float = 1.0
    init: str = "random"
    num_samples: int = 1
    selection: str = "frozen"
    pre_steps: int = 1000
    selection_steps: int = 500
    post_steps: int = 1500
    batch_size: int | None = 1000
    selection_batch_size: int | None = None
    pretraining: str = "joint"
    layerwise_steps: int = 200
    jitter: float | None = None
    checkpoint_every: int = 500

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_schedule(self)
        check_count("num_layers", self.num_layers, 1)
        check_count("selection_batch_size", self.selection_batch_size, 1, optional=True)
        check_choice("pretraining", self.pretraining, PRETRAINING)
        check_count("layerwise_steps", self.layerwise_steps, 1)
        if self.jitter is not None:
            ops.check_jitter(self.jitter)
        if self.pretraining == "layerwise" and self.inner_mean != "zero":
            raise ValueError(
                "pretraining: 'layerwise' trains each inner layer as the top of a partial stack, which has no mean "
                f"function; it needs inner_mean='zero', got inner_mean={self.inner_mean!r}"
            )


@dataclass
class SelectiveDeepFit:
    """What :func:`fit_selective_deep` returns.

    Attributes:
        model, params: the pruned, post-trained :class:`DeepSVGP` and its fitted parameters.
        selective, selective_params: the model over all candidates and its values after the selection phase.
        pretrained_params: the values after pre-training (pass as ``init_params`` with ``pre_steps=0`` to select
            again from them, e.g. with another α).
        masks: the drawn subset of every layer, [K_ℓ] 0/1 each.
        losses: phase ("pre", "selection", "post"; with layer-wise pre-training also "layer0", "layer1", ...) ->
            loss trace; seconds: phase (and "layerwise") -> wall-clock seconds.
        layerwise_params: with ``pretraining="layerwise"``, the values after each layer's phase (entry ℓ holds
            layers 0..ℓ and the likelihood); empty otherwise.
    """

    model: DeepSVGP
    params: dict[str, Array]
    selective: SelectiveDeepSVGP
    selective_params: dict[str, Array]
    pretrained_params: dict[str, Array]
    masks: list[np.ndarray]
    losses: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    layerwise_params: list[dict[str, Array]] = field(default_factory=list)

    @property
    def inclusion_probs(self) -> list[np.ndarray]:
        """λ^ℓ [K_ℓ] of every layer after selection."""
        return self.selective.inclusion_probabilities(self.selective_params)

    @property
    def selected_counts(self) -> list[int]:
        """|S^ℓ| of the kept subset of every layer."""
        return [int(np.sum(m)) for m in self.masks]

    @property
    def expected_counts(self) -> list[float]:
        """E_q|S^ℓ| = Σ_k λ^ℓ_k of every layer."""
        return [float(np.sum(p)) for p in self.inclusion_probs]


def _layer_candidates(X: np.ndarray, candidates: Any, num_layers: int, init: str, key: Array) -> list[np.ndarray]:
    """Per-layer candidates in the space of X: K random rows (or k-means centres) per layer, or the given arrays."""
    seeds = [int(s) for s in jax.random.randint(key, (num_layers,), 0, 2**31 - 1)]
    if isinstance(candidates, int | np.integer) and not isinstance(candidates, bool):
        if not 1 <= candidates <= X.shape[0]:
            raise ValueError(f"candidates: expected an integer in [1, N = {X.shape[0]}], got {candidates!r}")
        return [candidate_inputs(X, int(candidates), init, seed=s) for s in seeds]
    if isinstance(candidates, np.ndarray | jax.Array) or not isinstance(candidates, Sequence):
        raise ValueError(f"candidates: expected an integer K or a list of {num_layers} arrays [K_ℓ, D]")
    if len(candidates) != num_layers:
        raise ValueError(f"candidates: expected {num_layers} arrays (one per layer), got {len(candidates)}")
    return [candidate_inputs(X, np.asarray(c), init, seed=s) for c, s in zip(candidates, seeds, strict=True)]


def partial_stack(model: DeepSVGP, layer: int) -> DeepSVGP:
    """Layers 0..``layer`` of ``model`` as a deep GP of their own, the likelihood seeing the sum of layer ``layer``'s
    outputs (``sum_outputs``; the released code's ``DeepGPModel.forward`` on a partial stack); ``model`` itself for
    its last layer."""
    if layer == model.num_layers - 1:
        return model
    return dataclasses.replace(
        model, Z=model.Z[: layer + 1], widths=model.widths[: layer + 1], kernels=model.kernels[: layer + 1],
        mean_weights=model.mean_weights[:layer], sum_outputs=True,
    )  # fmt: skip


def added_layer_start(
    model: DeepSVGP, params: Mapping[str, Array], layer: int, X: np.ndarray, key: Array
) -> dict[str, Array]:
    """The start of layer ``layer`` >= 1 when it is added on top of the trained layers 0..layer-1 in ``params``
    (the released code's ``fit_layerwise``): its M inducing inputs are the mean path F^ℓ [M, D_ℓ] of M random rows
    of X [N, D] through the layers below (plus those rows with ``add_input``), its kernel variance 0.1 and q(u)'s
    square root 1e-3 × chol K(Z, Z); q(u)'s mean is F^ℓ for a layer of the same width (the identity at Z) and Σ_d
    F^ℓ_d for the last layer of one output (so the stack starts out predicting what the partial stack below did),
    zero otherwise. Returns the params ``"layer<ℓ>.*"``."""
    M, width = model.num_inducing[layer], model.widths[layer]
    rows = np.asarray(X)[np.asarray(jax.random.choice(key, X.shape[0], (M,), replace=False))]
    below = partial_stack(model, layer - 1).layers(params)
    mean, _ = deep.propagate(
        below, jnp.asarray(rows), lambda i, shape, dtype: jnp.zeros(shape, dtype), 1, whiten=model.whiten,
        mean_weights=model.mean_weights[: layer - 1], add_input=model.add_input,
    )  # fmt: skip
    F = mean[0].T  # [M, D_ℓ]
    Z = F + rows if model.add_input else F
    kernel = model.kernels[layer]
    values = {
        **kernel.parameters(),
        **({"variance": ADDED_LAYER_VARIANCE} if "variance" in kernel.parameters() else {}),
    }
    root = ADDED_LAYER_SCALE * ops.cholesky(kernel.with_parameters(values)(Z))
    if width == F.shape[1]:
        loc = F.T
    elif layer == model.num_layers - 1 and width == 1:
        loc = jnp.sum(F, axis=1)[None]
    else:
        loc = jnp.zeros((width, M), F.dtype)
    start = {f"layer{layer}.kernel.{name}": jnp.asarray(v, F.dtype) for name, v in values.items()}
    return start | {
        f"layer{layer}.Z": Z, f"layer{layer}.u_loc": loc,
        f"layer{layer}.u_scale_tril": jnp.broadcast_to(root, (width, M, M)),
    }  # fmt: skip


LayerFit = Callable[[int, dict[str, Array], dict[str, Array], Any], SVIResult]
"""``fit(layer, frozen, free, key)``: one layer's fit of the partial stack 0..``layer`` (:func:`partial_stack`) in
which the params ``frozen`` (those of the layers below) are constants and ``free`` (None where empty: the model's own
start) are trained, checkpointed as phase ``"layer<layer>"``; :func:`fit_layerwise` builds NumPyro's,
:func:`ppl_sparsegp.recipes.selective_pyro.fit_selective_deep` Pyro's."""


def sequence_layerwise(
    fit: LayerFit,
    added_start: Callable[[dict[str, Array], int, Any], dict[str, Array]],
    keys: Sequence[tuple[Any, Any]],
    checkpoints: PhaseCheckpoints,
) -> tuple[dict[str, Array], list[dict[str, Array]], dict[str, np.ndarray]]:
    """The layer-wise pre-training's loop, whatever engine ``fit`` runs (:data:`LayerFit`): for ℓ = 0..L-1 (L =
    ``len(keys)``, ``keys[ℓ]`` = (start key, fit key or seed)), add layer ℓ >= 1 at ``added_start(params, ℓ, start
    key)`` (:func:`added_layer_start`) and fit it with the layers below frozen. Only the free params' fitted values are
    kept, so the lower layers stay bitwise as they were. A layer's fit that ran any step deletes the later layers' and
    the three phases' checkpoints. Returns what :func:`fit_layerwise` returns."""
    params: dict[str, Array] = {}
    stages, losses = [], {}
    num_layers = len(keys)
    for layer, (start_key, fit_key) in enumerate(keys):
        if layer:
            params = params | added_start(params, layer, start_key)
        below = tuple(f"layer{i}." for i in range(layer))
        frozen = {name: v for name, v in params.items() if name.startswith(below)}
        free = {name: v for name, v in params.items() if name not in frozen}
        result = fit(layer, frozen, free, fit_key)
        params = params | {name: v for name, v in result.params.items() if name not in frozen}
        stages.append(dict(params))
        losses[f"layer{layer}"] = result.losses
        if checkpoints.folder is not None and result.steps_run:
            for later in [*(f"layer{j}" for j in range(layer + 1, num_layers)), *PHASES]:
                phase_checkpoint(checkpoints.folder, later).unlink(missing_ok=True)
    return params, stages, losses


def layerwise_keys(init_key: Array, num_layers: int) -> list[tuple[Array, Array]]:
    """The (start key, fit key) of every layer of the layer-wise pre-training, from the recipe's ``init_key``."""
    return [tuple(jax.random.split(k)) for k in jax.random.split(jax.random.fold_in(init_key, 1), num_layers)]


def fit_layerwise(
    model: DeepSVGP,
    X: np.ndarray,
    y: np.ndarray,
    *,
    steps: int,
    learning_rate: float,
    keys: Sequence[tuple[Array, Array]],
    checkpoints: PhaseCheckpoints,
    progress: bool | None = None,
) -> tuple[dict[str, Array], list[dict[str, Array]], dict[str, np.ndarray]]:
    """Layer-wise pre-training (Uhrenholt et al. 2021 App. C.4; the released code's ``fit_layerwise``): for ℓ = 0..L-1,
    add layer ℓ on top of the trained layers 0..ℓ-1 (:func:`added_layer_start` for ℓ >= 1; layer 0 at the model's
    own start) and fit the partial stack 0..ℓ (:func:`partial_stack`) on X [N, D], y [N] by ``steps`` Adam steps at
    ``learning_rate`` in which only layer ℓ's params and the likelihood's learn: the layers below are constants of
    that fit (substituted and hidden from SVI, so they stay bitwise unchanged). The released code trains every layer
    present after each addition; here each layer is fitted alone, and the joint pre-training that follows
    (``pre_steps`` of :func:`fit_selective_deep`) trains them together. ``keys``: :func:`layerwise_keys`.

    Each layer's fit checkpoints as phase ``"layer<ℓ>"`` in ``checkpoints``' folder; one that ran any step deletes
    the later layers' and the three phases' checkpoints (:func:`sequence_layerwise`).

    Returns:
        The params of every layer and the likelihood after the last layer's fit; the params after each layer's
        fit (entry ℓ: layers 0..ℓ and the likelihood); layer name ``"layer<ℓ>"`` -> its loss trace [steps].
    """

    def fit(layer: int, frozen: dict[str, Array], free: dict[str, Array], key: Array) -> SVIResult:
        part = partial_stack(model, layer)

        def constant(program: Callable) -> Callable:
            return handlers.block(handlers.substitute(program, data=frozen), hide=list(frozen))

        return fit_svi(
            constant(part.model), constant(part.guide), X, y, optimizer=optax.adam(learning_rate), num_steps=steps,
            key=key, init_params=free or None, progress=progress,
            label=f"layer-wise {layer + 1}/{model.num_layers}", validate=part.check_data,
            **checkpoints.options(f"layer{layer}"),
        )  # fmt: skip

    def added_start(params: dict[str, Array], layer: int, key: Array) -> dict[str, Array]:
        return added_layer_start(model, params, layer, X, key)

    return sequence_layerwise(fit, added_start, keys, checkpoints)


@dataclass
class SelectiveDeepBuild:
    """What :func:`build_selective_deep` returns: the phases' four keys (pre-training, selection, subset,
    post-training), the key the candidates and the layer-wise pre-training are drawn from, the deep GP on every
    candidate (minibatches of ``batch_size``) and the selective model (of ``selection_batch_size``)."""

    keys: list[Array]
    init_key: Array
    base: DeepSVGP
    selective: SelectiveDeepSVGP


def build_selective_deep(
    X: np.ndarray,
    y: np.ndarray,
    config: SelectiveDeepConfig,
    *,
    likelihood: Likelihood | None,
    key: int | Array,
    init_params: Mapping[str, Array] | None = None,
) -> SelectiveDeepBuild:
    """The models and keys of :func:`fit_selective_deep` (and of its Pyro twin, which takes their twins) on X [N, D],
    y [N] or [N, P]: per-layer candidates drawn from ``key`` (:func:`_layer_candidates`), the deep GP of the config's
    architecture (:func:`models.numpyro.deep_svgp.deep_svgp`), checked against the data; ``init_params`` is only
    checked (none with layer-wise pre-training).

    Raises:
        ValueError: a likelihood that is not one, ``init_params`` with layer-wise pre-training, layer-wise
            pre-training of several output columns, bad candidates or data.
    """
    c = config
    if c.pretraining == "layerwise" and init_params is not None:
        raise ValueError("init_params: layer-wise pre-training starts every layer itself; use pretraining='joint'")
    if likelihood is not None and not isinstance(likelihood, Likelihood):
        raise ValueError(f"likelihood: expected a ppl_sparsegp.core.likelihoods.Likelihood, got {likelihood!r}")
    outputs = 1 if y.ndim == 1 else y.shape[1]
    if c.pretraining == "layerwise" and outputs != 1:
        raise ValueError(
            f"y: layer-wise pre-training sums a partial stack's outputs into one column (as the released code); "
            f"y has {outputs} columns"
        )
    *keys, init_key = jax.random.split(_as_key(key), 5)
    Z = _layer_candidates(X, c.candidates, c.num_layers, c.init, init_key)
    architecture = {"num_layers": c.num_layers, "add_input": c.add_input, "inner_mean": c.inner_mean}
    base = deep_svgp(
        X, outputs, likelihood or Gaussian(c.noise_variance), Z=Z, **architecture, num_samples=c.num_samples,
        batch_size=c.batch_size, jitter=c.jitter,
    )  # fmt: skip
    selective = SelectiveDeepSVGP(
        dataclasses.replace(base, batch_size=c.selection_batch_size),
        alpha=c.alpha,
        alpha_per_output=c.alpha_per_output,
        initial_inclusion=c.initial_inclusion,
    )
    base.check_data(X, y)
    return SelectiveDeepBuild(keys, init_key, base, selective)


def fit_selective_deep(
    X: Array,
    y: Array,
    config: SelectiveDeepConfig | None = None,
    *,
    likelihood: Likelihood | None = None,
    init_params: Mapping[str, Array] | None = None,
    key: int | Array = 0,
    progress: bool | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    **overrides: Any,
) -> SelectiveDeepFit:
    """Pre-train a deep GP on K candidates per layer, learn which to keep, sample one joint subset, prune, post-train.

    Args:
        X: inputs [N, D]; y: targets [N] or [N, P].
        config: the settings (:class:`SelectiveDeepConfig`); ``overrides``: fields of it.
        likelihood: default ``Gaussian(config.noise_variance)``.
        init_params: starting values of the GP (e.g. an earlier fit's ``pretrained_params``); not with
            ``pretraining="layerwise"``, which starts every layer itself.
        key: integer seed or JAX key; progress: show progress bars (None: in a terminal or notebook).
        checkpoint_dir: a folder for the phases' checkpoints, or None (as :func:`fit_selective`; the layer-wise
            phases as ``selective_layer<ℓ>.npz``).

    Returns:
        A :class:`SelectiveDeepFit`.
    """
    c = configure(SelectiveDeepConfig, config, overrides)
    X, y = validation.as_array(X), validation.as_array(y)
    validation.check_inputs(X, y)
    checkpoints = PhaseCheckpoints(checkpoint_dir, c.checkpoint_every)
    X, y = np.asarray(X), np.asarray(y)
    built = build_selective_deep(X, y, c, likelihood=likelihood, key=key, init_params=init_params)
    base, selective = built.base, built.selective
    checkpoints.create()

    def prune(params: dict[str, Array], k: Array) -> tuple[list[np.ndarray], DeepSVGP, dict[str, Array]]:
        masks = sample_joint_subset(selective.inclusion_probabilities(params), k)
        pruned, pruned_params = selective.prune(params, masks)
        return masks, dataclasses.replace(pruned, batch_size=c.batch_size), pruned_params

    layerwise = None
    if c.pretraining == "layerwise":
        t0 = time.perf_counter()
        layerwise = fit_layerwise(
            base, X, y, steps=c.layerwise_steps, learning_rate=c.learning_rate,
            keys=layerwise_keys(built.init_key, c.num_layers), checkpoints=checkpoints, progress=progress,
        )  # fmt: skip
        layerwise = (*layerwise, time.perf_counter() - t0)
        init_params = layerwise[0]
    done = run_phases(
        base, selective, X, y, key=built.keys, pre_steps=c.pre_steps, selection_steps=c.selection_steps,
        post_steps=c.post_steps, learning_rate=c.learning_rate, selection_learning_rate=c.selection_learning_rate,
        joint=c.selection == "joint", loss=ScoreFunctionELBO(c.num_particles, pathwise=c.selection == "joint"),
        prune=prune, checkpoints=checkpoints, init_params=init_params, progress=progress,
    )  # fmt: skip
    return selective_deep_fit(selective, done, layerwise)


def selective_deep_fit(
    selective: Any,
    done: Phases,
    layerwise: tuple[dict[str, Array], list[dict[str, Array]], dict[str, np.ndarray], float] | None,
) -> SelectiveDeepFit:
    """The :class:`SelectiveDeepFit` of :func:`fit_selective_deep` (or its Pyro twin) from the phases' results and,
    with layer-wise pre-training, that phase's (params, params after each layer, losses per layer, seconds)."""
    stages, losses, seconds = ([], {}, {}) if layerwise is None else (*layerwise[1:3], {"layerwise": layerwise[3]})
    return SelectiveDeepFit(
        done.model, done.params, selective, done.selective_params, done.pretrained_params, done.masks,
        losses | done.losses, seconds | done.seconds, stages,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# The GP-LVM


@dataclass(frozen=True)
class SelectiveGPLVMConfig(SelectionConfig):
    """The settings of :func:`fit_selective_gplvm`, each default written here or in :class:`SelectionConfig` only.

    latent_dim: Q; grid_size: candidates per latent dimension (K = grid_size^Q); extent: the grid's [Q, 2] bounds
    (None: the PCA latents' range, padded 10 %). alpha: prior strength α (paper: 3); initial_inclusion: λ₀.
    noise_variance: fixed Gaussian noise variance (released code: 0.01 on standardised Y); None learns it.
    latent_scale: initial standard deviation of q(x_n). steps: Adam steps of the joint phase (full batch: one per
    epoch; the paper runs 300); pre_steps: Adam steps of the GP-LVM on all K grid points before those (0, the
    paper: none; the released demo pre-fits). num_particles: S draws of the subset (and of the latents) per step;
    baseline_decay: β of the score-function baseline (0.95 as the released code). learning_rate: Adam for latents,
    kernel, likelihood and q(u); selection_learning_rate: Adam for λ. batch_size: rows per step (None: all N; the
    collapsed bound needs None). bound: ``"uncollapsed"`` (the paper's) or ``"collapsed"``. record_every: steps
    between records of λ and the latent means. prune: draw one subset from the final q_λ and return the ordinary
    GP-LVM on it. checkpoint_every: steps between checkpoint writes (rounded up to whole records).
    """

    latent_dim: int = 2
    grid_size: int = 15
    extent: Array | None = None
    alpha: float = 3.0
    noise_variance: float | None = 0.01
    latent_scale: float = 0.1
    steps: int = 300
    pre_steps: int = 0
    baseline_decay: float = 0.95
    batch_size: int | None = None
    bound: str = "uncollapsed"
    record_every: int = 10
    prune: bool = False
    checkpoint_every: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, least in (("latent_dim", 1), ("grid_size", 2), ("steps", 1), ("pre_steps", 0), ("record_every", 1)):
            check_count(name, getattr(self, name), least)
        check_choice("bound", self.bound, BOUNDS)
        validation.check_open_unit_interval("baseline_decay", self.baseline_decay)
        validation.check_bool("prune", self.prune)


def latent_grid(
    size: int = SelectiveGPLVMConfig.grid_size,
    *,
    extent: Array | None = None,
    latents: Array | None = None,
    margin: float = GRID_MARGIN,
) -> np.ndarray:
    """A regular grid of ``size`` points per latent dimension -> candidates [size^Q, Q].

    Args:
        size: points per dimension (>= 2); the paper's GP-LVM uses 15 (225 candidates for Q = 2).
        extent: [Q, 2], the (lower, upper) bounds of each latent dimension.
        latents: [N, Q] latent means (e.g. the PCA initialisation) whose range, padded by ``margin`` × range on
            each side, is the extent when ``extent`` is None.
        margin: padding fraction (>= 0) used with ``latents``.

    Returns:
        The grid points [size^Q, Q], the last dimension varying fastest.
    """
    check_count("size", size, 2)
    size = int(size)
    if extent is None:
        if latents is None:
            raise ValueError("extent: give the grid's extent [Q, 2] or the latents [N, Q] whose range it covers")
        latents = np.asarray(latents)
        validation.check_inputs(latents, x_name="latents")
        if isinstance(margin, bool) or not isinstance(margin, int | float) or not (0 <= margin < np.inf):
            raise ValueError(f"margin: expected a finite number >= 0, got {margin!r}")
        low, high = latents.min(axis=0), latents.max(axis=0)
        pad = margin * (high - low)
        bounds = np.stack([low - pad, high + pad], axis=1)
    else:
        bounds = np.atleast_2d(np.asarray(extent, dtype=float))
        if bounds.ndim != 2 or bounds.shape[1] != 2 or not np.all(np.isfinite(bounds)):
            raise ValueError(f"extent: expected finite (lower, upper) pairs of shape [Q, 2], got {extent!r}")
        if not np.all(bounds[:, 1] > bounds[:, 0]):
            raise ValueError(f"extent: every upper bound must exceed its lower bound, got {bounds.tolist()}")
    axes = [np.linspace(lo, hi, size) for lo, hi in bounds]
    return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(axes))


@dataclass
class SelectiveGPLVMFit(InclusionCounts):
    """What :func:`fit_selective_gplvm` returns.

    Attributes:
        model, params: the selective GP-LVM over the grid and its fitted parameters.
        grid: the candidates [K, Q].
        trace_steps: steps of the joint phase at which λ was recorded [T] (0 = its start, after any pre-training).
        inclusion_trace: λ at those steps [T, K]; latent_trace: the latent means there [T, N, Q].
        losses: negative ELBO estimate per joint step [steps]; seconds: wall-clock time of both phases
            (compilation included); pre_losses: negative bound per pre-training step [pre_steps].
        mask, pruned, pruned_params: with ``prune=True``, one subset [K] drawn from q_λ and the ordinary
            GP-LVM on it with its parameters (otherwise None).
    """

    model: SelectiveGPLVM | SelectiveCollapsedGPLVM
    params: dict[str, Array]
    grid: np.ndarray
    trace_steps: np.ndarray
    inclusion_trace: np.ndarray
    latent_trace: np.ndarray
    losses: np.ndarray
    seconds: float
    pre_losses: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mask: np.ndarray | None = None
    pruned: BayesianGPLVM | CollapsedGPLVM | None = None
    pruned_params: dict[str, Array] | None = None

    @property
    def inclusion_probs(self) -> np.ndarray:
        """λ [K] at the end of training."""
        return np.asarray(self.params[INCLUSION_PARAM])


def gplvm_on_grid(
    Y: Array,
    grid: Array,
    *,
    latent_dim: int = SelectiveGPLVMConfig.latent_dim,
    noise_variance: float | None = SelectiveGPLVMConfig.noise_variance,
    latent_scale: float = SelectiveGPLVMConfig.latent_scale,
    batch_size: int | None = SelectiveGPLVMConfig.batch_size,
    bound: Literal["collapsed", "uncollapsed"] = SelectiveGPLVMConfig.bound,
    **selection: Any,
) -> BayesianGPLVM | CollapsedGPLVM:
    """The GP-LVM that :func:`fit_selective_gplvm` trains, with the grid's points as fixed inducing inputs.

    RBF-ARD kernel with unit variance and lengthscales (the paper's initial values), Gaussian likelihood with
    variance ``noise_variance`` held fixed (None: 1, learned), latent means from :func:`pca_latents` with
    standard deviations ``latent_scale``. ``bound="uncollapsed"`` gives a :class:`BayesianGPLVM` (train it from
    ``model.prior_initialisation()``, q(u) = p(u)); ``"collapsed"`` a :class:`CollapsedGPLVM` (full batch only).
    With ``selection`` (``alpha``, ``initial_inclusion``) it returns the selective model over the grid
    (:class:`SelectiveGPLVM` or :class:`SelectiveCollapsedGPLVM`); without, the GP-LVM using every grid point.
    """
    check_choice("bound", bound, BOUNDS)
    if bound == "collapsed" and batch_size is not None:
        raise ValueError(f"batch_size: the collapsed bound is full-batch; expected None, got {batch_size!r}")
    Y = np.asarray(Y)
    X_init = pca_latents(Y, latent_dim)
    fixed = () if noise_variance is None else ("likelihood.variance",)
    if noise_variance is not None:
        validation.check_positive("noise_variance", noise_variance)
    validation.check_positive("latent_scale", latent_scale)
    common = {
        "kernel": RBF(variance=1.0, lengthscale=np.ones(latent_dim, dtype=Y.dtype)),
        "likelihood": Gaussian(1.0 if noise_variance is None else noise_variance),
        "fixed": fixed,
        "Z": np.asarray(grid, dtype=Y.dtype),
        "learn_Z": False,
        "X_init": X_init,
        "X_scale_init": latent_scale,
    }
    if bound == "collapsed":
        model, selective_class = CollapsedGPLVM(**common), SelectiveCollapsedGPLVM
    else:
        model = BayesianGPLVM(**common, num_latent=Y.shape[1], batch_size=batch_size)
        selective_class = SelectiveGPLVM
    return selective_class(model, **selection) if selection else model


def grid_model(
    Y: np.ndarray, config: SelectiveGPLVMConfig
) -> tuple[np.ndarray, SelectiveGPLVM | SelectiveCollapsedGPLVM]:
    """The latent grid [K, Q] of :func:`fit_selective_gplvm` (``config.extent``, or the range of the PCA latents of
    Y [N, D] padded by :data:`GRID_MARGIN`) and the NumPyro selective GP-LVM over it (:func:`gplvm_on_grid`), which
    the Pyro twin builds its own from. Raises ValueError, naming ``extent``, for an extent of another dimension."""
    c = config
    grid = latent_grid(c.grid_size, extent=c.extent, latents=pca_latents(Y, c.latent_dim))
    if grid.shape[1] != c.latent_dim:
        raise ValueError(
            f"extent: expected {c.latent_dim} (lower, upper) rows, one per latent dimension, got {c.extent!r}"
        )
    on_grid = {
        name: getattr(c, name) for name in ("latent_dim", "noise_variance", "latent_scale", "batch_size", "bound")
    }
    return grid, gplvm_on_grid(Y, grid, **on_grid, alpha=c.alpha, initial_inclusion=c.initial_inclusion)


class LatentTrace:
    """λ [K] and the latent means [N, Q] at the recorded steps of the joint phase of :func:`fit_selective_gplvm` (or
    its Pyro twin), kept as :data:`TRACE_FILE` in ``checkpoint_dir`` (None: not kept) beside the phase's checkpoint.

    It resumes from that file when the joint phase's checkpoint exists, else starts at step 0 with ``inclusion``
    [K] and ``latents`` [N, Q]. :meth:`record` is the fit's callback after each chunk of steps: records past
    ``step`` (which a resumed run replays) are replaced, and the file is written once ``every`` steps have run
    since it was last written and at step ``steps``, so that it is written with each of the fit's checkpoints.
    """

    def __init__(
        self,
        checkpoint_dir: str | os.PathLike | None,
        every: int,
        steps: int,
        means: Callable[[Mapping[str, Array]], np.ndarray],
        inclusion: np.ndarray,
        latents: np.ndarray,
    ) -> None:
        self.path = None if checkpoint_dir is None else Path(checkpoint_dir) / TRACE_FILE
        self.every, self.steps, self.means, self.unwritten = every, steps, means, 0
        if self.path is not None and self.path.exists() and phase_checkpoint(checkpoint_dir, "selection").exists():
            with np.load(self.path, allow_pickle=False) as stored:
                self.trace = tuple(list(stored[name]) for name in ("steps", "inclusion", "latents"))
        else:
            self.trace = ([0], [np.asarray(inclusion)], [np.asarray(latents)])

    def record(self, step: int, chunk_losses: np.ndarray, params: Mapping[str, Array]) -> None:
        """Record λ and the latent means of ``params`` at ``step``, after the ``chunk_losses`` steps since the last
        record (or the resumed start)."""
        now = (step, np.asarray(params[INCLUSION_PARAM]), np.asarray(self.means(params)))
        while self.trace[0][-1] >= step:  # a resumed run replays the steps after its checkpoint: drop their records
            for values in self.trace:
                values.pop()
        for values, value in zip(self.trace, now, strict=True):
            values.append(value)
        self.unwritten += len(chunk_losses)
        if self.unwritten >= self.every or step >= self.steps:  # the fit's checkpoint follows at this step
            self.write()
            self.unwritten = 0

    def write(self) -> None:
        """Write the trace (atomically) when it is kept."""
        if self.path is not None:
            write_npz(self.path, dict(zip(("steps", "inclusion", "latents"), self.arrays(), strict=True)))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The recorded steps [T], λ [T, K] and latent means [T, N, Q]."""
        steps, inclusion, latents = self.trace
        return np.asarray(steps), np.stack(inclusion), np.stack(latents)


GPLVMPhaseFit = Callable[[str, Any, dict[str, Array], Callable | None], SVIResult]
"""One engine's fit of a phase of :func:`sequence_gplvm`: ``fit(phase, model, init_params, callback)``."""


def sequence_gplvm(
    config: SelectiveGPLVMConfig,
    model: Any,
    grid: np.ndarray,
    fit: GPLVMPhaseFit,
    sample: Callable[[Array], np.ndarray],
    checkpoints: PhaseCheckpoints,
) -> SelectiveGPLVMFit:
    """The phases of :func:`fit_selective_gplvm` on either engine, for the selective GP-LVM ``model`` over ``grid``.

    With ``config.pre_steps``, ``fit("pre", gp, init_params, None)`` trains ``gp = model.ordinary``, the GP-LVM
    on every grid point, from its initial params (q(u) = p(u)); then ``fit("selection", model, init_params,
    record)`` trains everything jointly from there (λ at λ₀), ``record`` the :class:`LatentTrace`'s callback, to be
    called every ``config.record_every`` steps (the trace is written on Ctrl-C too). With ``config.prune``,
    ``sample(λ)`` draws the kept subset [K] and ``model.prune`` gives the ordinary GP-LVM on it.
    """
    c = config
    everything = model.ordinary  # the GP-LVM on every grid point
    init_params = everything.initial_params()
    checkpoints.create()
    pre_losses = np.zeros(0)
    t0 = time.perf_counter()
    if c.pre_steps:
        pre = fit("pre", everything, everything.initial_params(), None)
        checkpoints.finished("pre", pre)
        init_params.update(pre.params)
        pre_losses = pre.losses
    start = everything.latents.means(init_params) if c.pre_steps else everything.X_init
    trace = LatentTrace(
        checkpoints.folder, checkpoints.every, c.steps, everything.latents.means, model.inclusion_probabilities({}),
        start,
    )  # fmt: skip
    try:
        result = fit("selection", model, init_params, trace.record)
    except KeyboardInterrupt:  # the fit then writes a checkpoint between scheduled ones: keep the trace with it
        trace.write()
        raise
    seconds = time.perf_counter() - t0
    done = SelectiveGPLVMFit(model, result.params, grid, *trace.arrays(), result.losses, seconds, pre_losses)
    if c.prune:
        done.mask = sample(done.inclusion_probs)
        done.pruned, done.pruned_params = model.prune(result.params, done.mask)
    return done


def fit_selective_gplvm(
    Y: Array,
    config: SelectiveGPLVMConfig | None = None,
    *,
    key: int | Array = 0,
    progress: bool | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    **overrides: Any,
) -> SelectiveGPLVMFit:
    """Fit a GP-LVM whose inducing inputs are selected from a latent grid, everything jointly (paper §5.3).

    Args:
        Y: observations [N, D] (standardise them first, as the paper does).
        config: the settings (:class:`SelectiveGPLVMConfig`); ``overrides``: fields of it.
        key: integer seed or JAX key. progress: show a progress bar (None: in a terminal or notebook).
        checkpoint_dir: a folder for checkpoints (created), or None. The pre-training and the joint phase keep
            their SVI states there as ``selective_pre.npz`` and ``selective_selection.npz`` (as
            :func:`fit_selective`; written atomically every ``checkpoint_every`` steps, at the end and on Ctrl-C),
            and the λ / latent trace as ``selective_gplvm_trace.npz`` with each of them. Calling again with the
            same arguments resumes and ends where an uninterrupted fit ends (the trace included; ``seconds`` then
            counts only the resumed call). Delete the folder to start afresh after changing a setting.

    Returns:
        A :class:`SelectiveGPLVMFit`.
    """
    c = configure(SelectiveGPLVMConfig, config, overrides)
    Y = np.asarray(Y)
    Y = validation.as_array(Y)
    validation.check_inputs(Y, x_name="Y")
    if not isinstance(key, int | np.integer | jax.Array) or isinstance(key, bool):
        raise ValueError(f"key: expected an integer seed or a JAX PRNG key, got {key!r}")
    checkpoints = PhaseCheckpoints(checkpoint_dir, c.checkpoint_every)
    loss = ScoreFunctionELBO(c.num_particles, baseline_decay=c.baseline_decay, pathwise=True)
    grid, model = grid_model(Y, c)
    key = jax.random.PRNGKey(key) if isinstance(key, int | np.integer) else key
    fit_key, prune_key = jax.random.split(key)

    def fit(phase: str, gp: Any, init_params: dict[str, Array], callback: Callable | None) -> SVIResult:
        if phase == "pre":
            return fit_svi(
                gp.model, gp.guide, Y, optimizer=optax.adam(c.learning_rate), num_steps=c.pre_steps,
                key=jax.random.fold_in(key, 1), init_params=init_params, progress=progress, label="pre-train",
                validate=gp.check_data, **checkpoints.options("pre"),
            )  # fmt: skip
        optimizer = selection_optimizer(optax.adam(c.learning_rate), c.selection_learning_rate)
        return fit_svi(
            gp.model, gp.guide, Y, optimizer=optimizer, num_steps=c.steps, key=fit_key, loss=loss,
            init_params=init_params, steps_per_dispatch=c.record_every,
            callback=callback, progress=progress, label="joint selection", **checkpoints.options("selection"),
            validate=gp.check_data,
        )  # fmt: skip

    return sequence_gplvm(c, model, grid, fit, lambda probs: sample_subset(probs, prune_key), checkpoints)
