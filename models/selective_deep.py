"""Probabilistic selection of inducing points in a deep GP (Uhrenholt et al. 2021 §5.2, App. A; spec 000 §4.1).

Sites: those of :class:`models.deep_svgp.DeepSVGP` (``"layer<ℓ>.kernel.<name>"``, ``"likelihood.<name>"``,
``"layer<ℓ>.Z"`` [K_ℓ, D_ℓ], ``"layer<ℓ>.u"`` [D_{ℓ+1}, K_ℓ], ``"layer<ℓ>.u_loc"``, ``"layer<ℓ>.u_scale_tril"``,
plate ``"data"``, factor ``"y"``), the latent ``"layer<ℓ>.inclusion"`` [K_ℓ], the guide param
``"layer<ℓ>.inclusion_probs"`` [K_ℓ] (λ^ℓ in (0, 1)) and the guide's mutable ``"score_function_baseline"``.

Every layer ℓ of a :class:`models.deep_svgp.DeepSVGP` gets its own candidate set Z*^ℓ [K_ℓ, D_ℓ], an inclusion
mask s^ℓ ∈ {0,1}^{K_ℓ} under its own prior and its own guide::

    s^ℓ ~ p_{α_ℓ}(s^ℓ) ∝ exp(−α_ℓ |s^ℓ|²)            SubsetPointProcess(K_ℓ, α_ℓ), one per layer
    q(s^1..s^L) = Π_ℓ Π_k Bernoulli(s^ℓ_k | λ^ℓ_k)     IndependentInclusion(λ^ℓ), one per layer
    ELBO = E_q[L(s^1..s^L)] − Σ_ℓ KL[q_{λ^ℓ} ‖ p_{α_ℓ}]

L(s) is the deep GP bound (paper Eq. 6) with q(u^{ℓ,d} | s^ℓ) the sub-vector and sub-block of one unwhitened
N(m^{ℓ,d}, S^{ℓ,d}) over all K_ℓ candidates, evaluated at fixed shapes by masking. One joint sample of all layers'
masks per particle, Σ_ℓ log q_{λ^ℓ}(s^ℓ) as its score, one shared baseline: all λ^ℓ learn jointly by
:class:`ppl_sparsegp.infer.score_function.ScoreFunctionELBO` (the per-layer allocation becomes inference).
``alpha_per_output=True`` uses α_ℓ = α × D_{ℓ+1} (the released code's choice, which the paper does not state:
each selected point costs D_{ℓ+1} KL terms).

:func:`fit_selective_deep` runs the paper's procedure: pre-train the deep GP on all candidates, select (GP frozen
by default, as the released code), sample one joint subset, prune, post-train; with ``checkpoint_dir`` each phase
checkpoints and a stopped fit resumes, as :func:`models.selective_fit.fit_selective` (same files and rules).

:class:`SelectiveDeepSVGP` writes its ``model`` and ``guide`` in full with the site helpers (``inclusion`` /
``inclusion_posterior`` per layer) and holds, by composition, the ordinary :class:`DeepSVGP` over all candidates
(``ordinary``: its checks, per-layer q(u) parameters and propagation) and one
:class:`~models.selective.SubsetSelection` per layer (λ^ℓ, the KLs, pruning).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import optax

from ppl_sparsegp import validation
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Gaussian, Likelihood
from ppl_sparsegp.core.masking import masked_q
from ppl_sparsegp.infer.score_function import ScoreFunctionELBO
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.numpyro import sites
from ppl_sparsegp.numpyro.subset_prior import IndependentInclusion, SubsetPointProcess

from ._base import base_fields, scoped_methods
from .deep_svgp import DeepSVGP, Layer, deep_svgp
from .selective import INCLUSION_PARAM, INCLUSION_SITE, SubsetSelection, check_alpha, gp_parameters
from .selective_fit import (
    INITIALISATIONS,
    MAX_EMPTY_REDRAWS,
    SELECTION_MODES,
    PhaseCheckpoints,
    _check_choice,
    _check_rate,
    _check_steps,
    candidate_inputs,
    post_train,
)

Array = Any


def inclusion_site(layer: int) -> str:
    return f"layer{layer}.{INCLUSION_SITE}"


def inclusion_param(layer: int) -> str:
    return f"layer{layer}.{INCLUSION_PARAM}"


@scoped_methods
@dataclass(eq=False)
class SelectiveDeepSVGP:
    """A :class:`DeepSVGP` whose layer ℓ uses a random subset of its K_ℓ candidates ``Z[ℓ]`` (unwhitened q).

    Args: those of :class:`DeepSVGP` (``whiten`` must stay False), and keyword-only
        alpha: prior strength α >= 0, one for every layer or a sequence of L.
        alpha_per_output: multiply layer ℓ's α by its output width D_{ℓ+1} (the released code).
        initial_inclusion: λ₀ of every candidate, in (0, 1).
    """

    Z: Sequence[Array]
    widths: Sequence[int]
    likelihood: Likelihood
    kernels: Sequence[Kernel] | None = None
    mean_weights: Sequence[Array | None] = ()
    add_input: bool = False
    whiten: bool = False
    num_samples: int = 1
    batch_size: int | None = None
    num_data: int | None = None
    inner_scale: float = 1e-3
    alpha: float | Sequence[float] = field(default=0.05, kw_only=True)
    alpha_per_output: bool = field(default=False, kw_only=True)
    initial_inclusion: float = field(default=0.5, kw_only=True)
    jitter: float | None = field(default=None, kw_only=True)
    ordinary: DeepSVGP = field(init=False, repr=False)
    selections: list[SubsetSelection] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.whiten:
            raise ValueError("whiten: SelectiveDeepSVGP needs whiten=False (a subset of whitened v is no marginal)")
        self.ordinary = DeepSVGP(**base_fields(self, DeepSVGP))  # the deep GP on every candidate: checks, algebra
        for name in ("Z", "widths", "kernels", "mean_weights", "jitter"):  # as the deep GP normalised them
            setattr(self, name, getattr(self.ordinary, name))
        L = self.num_layers
        given = list(self.alpha) if isinstance(self.alpha, Sequence | np.ndarray) else [self.alpha] * L
        if len(given) != L:
            raise ValueError(f"alpha: expected one number or {L} (one per layer), got {self.alpha!r}")
        self.alpha = [check_alpha(a) for a in given]
        if not isinstance(self.alpha_per_output, bool):
            raise ValueError(f"alpha_per_output: expected True or False, got {self.alpha_per_output!r}")
        self.selections = [
            SubsetSelection(K, a, self.initial_inclusion, prefix=f"layer{i}.")
            for i, (K, a) in enumerate(zip(self.num_inducing, self.alphas, strict=True))
        ]

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: those of the deep GP over all candidates and of each layer's
        selection."""
        return self.ordinary.parameter_names().union(*(s.parameter_names() for s in self.selections))

    @property
    def num_layers(self) -> int:
        return self.ordinary.num_layers

    @property
    def num_inducing(self) -> list[int]:
        """K_ℓ of every layer."""
        return self.ordinary.num_inducing

    @property
    def alphas(self) -> list[float]:
        """α_ℓ of every layer's prior (× D_{ℓ+1} with ``alpha_per_output``)."""
        return [a * (w if self.alpha_per_output else 1) for a, w in zip(self.alpha, self.widths, strict=True)]

    def check_data(self, X: Array, y: Array | None = None, *, init_params: Mapping[str, Array] | None = None) -> None:
        """The checks of :meth:`DeepSVGP.check_data`."""
        self.ordinary.check_data(X, y, init_params=init_params)

    def model(self, X: Array, y: Array) -> None:
        """s^ℓ ~ p_{α_ℓ}(s^ℓ) and u^ℓ | s^ℓ ~ N(0, K̂_ℓ) per layer; the data term of the deep GP on the selected
        inducing inputs, from S propagated samples of the batch, as the factor ``"y"``."""
        deep = self.ordinary
        masks = [
            sites.inclusion(sel.num_candidates, sel.alpha, jnp.asarray(Z).dtype, sel.prefix)
            for sel, Z in zip(self.selections, self.Z, strict=True)
        ]
        self.check_data(X, y)
        kernels, likelihood = deep.hyperparameters()
        layers = []
        for i, (kernel, mask) in enumerate(zip(kernels, masks, strict=True)):
            Z = sites.inducing_inputs(self.Z[i], name=f"layer{i}.Z")
            layer = Layer.at(kernel, Z, deep.variational_parameters(i), mask)
            sites.inducing_outputs(self.widths[i], Z.shape[0], layer.Lmm, Z.dtype, name=f"layer{i}.u")
            layers.append(layer)
        key = numpyro.prng_key()
        if key is None:
            raise ValueError("SelectiveDeepSVGP.model needs a PRNG key (run it under SVI or numpyro.handlers.seed)")
        with sites.data_plate(X.shape[0], self.batch_size, self.num_data) as idx:
            Xb, yb = (X, y) if idx is None else (X[idx], y[idx])
            numpyro.factor("y", deep.expected_log_likelihood(layers, likelihood, Xb, yb, key, self.num_samples))

    def guide(self, X: Array, y: Array) -> None:
        """s^ℓ ~ q_{λ^ℓ}(s^ℓ) of every layer (one baseline), then q(u^ℓ_s), the marginal of q(u^ℓ) over all K_ℓ."""
        masks = [
            sites.inclusion_posterior(
                sel.num_candidates, self.initial_inclusion, jnp.asarray(Z).dtype, sel.prefix, baseline=i == 0
            )
            for i, (sel, Z) in enumerate(zip(self.selections, self.Z, strict=True))
        ]
        for i, mask in enumerate(masks):
            q = masked_q(*self.ordinary.variational_parameters(i), mask)
            sites.inducing_posterior(*q, name=f"layer{i}.u")

    def fitted(self, params: Mapping[str, Array]) -> tuple[list[Kernel], Likelihood]:
        """Kernels and likelihood at fitted values (:meth:`DeepSVGP.fitted`)."""
        return self.ordinary.fitted(params)

    def elbo(
        self,
        params: Mapping[str, Array],
        X: Array,
        y: Array,
        key: Array,
        *,
        masks: Sequence[Array] | None = None,
        num_samples: int | None = None,
    ) -> Array:
        """The deep GP's bound L(s) at ``params`` with every layer restricted to ``masks`` (None: all candidates),
        :meth:`DeepSVGP.elbo` (scalar)."""
        return self.ordinary.elbo(params, X, y, key, masks=masks, num_samples=num_samples)

    def inclusion_priors(self) -> list[SubsetPointProcess]:
        """p_{α_ℓ} of every layer."""
        return [sel.prior() for sel in self.selections]

    def inclusion_probabilities(self, params: Mapping[str, Array]) -> list[np.ndarray]:
        """Fitted λ^ℓ [K_ℓ] of every layer (the initial value where ``params`` has none)."""
        return [sel.probabilities(params) for sel in self.selections]

    def kl_selection(self, params: Mapping[str, Array]) -> list[float]:
        """KL[q_{λ^ℓ} ‖ p_{α_ℓ}] of every layer at fitted λ."""
        return [float(sel.kl(params)) for sel in self.selections]

    def prune(self, params: Mapping[str, Array], masks: Sequence[Array]) -> tuple[DeepSVGP, dict[str, Array]]:
        """An ordinary :class:`DeepSVGP` on the selected candidates and its parameters: Z^ℓ restricted to the
        kept rows, q(u^ℓ_I) = N(m_I, S_II) (Gaussian marginal), every other fitted value carried over."""
        if len(masks) != self.num_layers:
            raise ValueError(f"masks: expected {self.num_layers} masks (one per layer), got {len(masks)}")
        pruned = gp_parameters(params)
        for i, (sel, mask, Z) in enumerate(zip(self.selections, masks, self.Z, strict=True)):
            pruned.update(sel.restrict(params, mask, Z, "u_scale_tril", name=f"masks[{i}]"))
        Zs = [np.asarray(pruned[f"layer{i}.Z"]) for i in range(self.num_layers)]
        return DeepSVGP(**{**base_fields(self, DeepSVGP), "Z": Zs}), pruned


def sample_joint_subset(probs: Sequence[Array], key: Array) -> list[np.ndarray]:
    """One joint draw of every layer's mask [K_ℓ] from q, redrawn (up to 20 times) while any layer is empty."""
    qs = [IndependentInclusion(np.asarray(p)) for p in probs]
    for k in jax.random.split(key, MAX_EMPTY_REDRAWS):
        masks = [np.asarray(q.sample(sub)) for q, sub in zip(qs, jax.random.split(k, len(qs)), strict=True)]
        if all(m.any() for m in masks):
            return masks
    expected = ", ".join(f"{float(np.sum(p)):.3g}" for p in probs)
    raise ValueError(
        f"every one of {MAX_EMPTY_REDRAWS} joint subsets drawn from q left some layer empty (E|S| per layer: "
        f"{expected}); lower alpha or give the model more signal"
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
        losses: phase ("pre", "selection", "post") -> loss trace; seconds: phase -> wall-clock seconds.
    """

    model: DeepSVGP
    params: dict[str, Array]
    selective: SelectiveDeepSVGP
    selective_params: dict[str, Array]
    pretrained_params: dict[str, Array]
    masks: list[np.ndarray]
    losses: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

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


def _check_batch(name: str, value: Any) -> int | None:
    return None if value is None else _check_steps(name, value, 1)


def _candidates(X: np.ndarray, candidates: Any, num_layers: int, init: str, key: Array) -> list[np.ndarray]:
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


def fit_selective_deep(
    X: Array,
    y: Array,
    *,
    candidates: int | Sequence[Array] = 150,
    num_layers: int = 2,
    alpha: float | Sequence[float] = 0.05,
    alpha_per_output: bool = False,
    add_input: bool = False,
    inner_mean: Literal["linear", "zero"] = "linear",
    likelihood: Likelihood | None = None,
    init: Literal["random", "kmeans"] = "random",
    initial_inclusion: float = 0.5,
    num_particles: int = 4,
    num_samples: int = 1,
    selection: Literal["frozen", "joint"] = "frozen",
    pre_steps: int = 1000,
    selection_steps: int = 500,
    post_steps: int = 1500,
    learning_rate: float = 0.01,
    selection_learning_rate: float = 0.2,
    batch_size: int | None = 1000,
    selection_batch_size: int | None = None,
    init_params: Mapping[str, Array] | None = None,
    key: int | Array = 0,
    progress: bool = False,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 500,
) -> SelectiveDeepFit:
    """Pre-train a deep GP on K candidates per layer, learn which to keep, sample one joint subset, prune, post-train.

    Args:
        X: inputs [N, D]; y: targets [N] or [N, P].
        candidates: K per layer (random rows of X, as the paper, or k-means centres with ``init="kmeans"``) or a
            list of L arrays [K_ℓ, D] in the space of X (mapped along the initial mean path, see
            :func:`models.deep_svgp.deep_svgp`).
        num_layers: L; alpha: α (one, or one per layer); alpha_per_output: α_ℓ × D_{ℓ+1}.
        add_input, inner_mean: the architecture (:func:`models.deep_svgp.deep_svgp`); the paper's kin8nm model is
            ``add_input=True, inner_mean="zero"``.
        likelihood: default ``Gaussian(1.0)`` (paper App. C.1).
        initial_inclusion: λ₀; num_particles: S joint mask draws per selection step (paper: 4).
        num_samples: propagated samples of the deep GP's data term per evaluation.
        selection: ``"frozen"`` (GP fixed while selecting, the released code) or ``"joint"`` (pathwise too).
        pre_steps, selection_steps, post_steps: Adam steps of the three phases (pre and post may be 0).
        learning_rate: Adam step for the GP; selection_learning_rate: for λ (paper: 0.01 and 0.2).
        batch_size: minibatch of the pre- and post-training bound; selection_batch_size: of the selection bound
            (None: full batch, the least noisy learning signal).
        init_params: starting values of the GP (e.g. an earlier fit's ``pretrained_params``).
        key: integer seed or JAX key; progress: show progress bars.
        checkpoint_dir: a folder for the phases' checkpoints, or None; checkpoint_every: steps between writes.
            As :func:`models.selective_fit.fit_selective`: the same call resumes a stopped fit and equals an
            uninterrupted one.

    Returns:
        A :class:`SelectiveDeepFit`.
    """
    validation.check_inputs(X, y)
    num_layers = _check_steps("num_layers", num_layers, 1)
    _check_choice("selection", selection, SELECTION_MODES)
    _check_choice("init", init, INITIALISATIONS)
    pre_steps = _check_steps("pre_steps", pre_steps, 0)
    selection_steps = _check_steps("selection_steps", selection_steps, 1)
    post_steps = _check_steps("post_steps", post_steps, 0)
    learning_rate = _check_rate("learning_rate", learning_rate)
    selection_learning_rate = _check_rate("selection_learning_rate", selection_learning_rate)
    batch_size = _check_batch("batch_size", batch_size)
    selection_batch_size = _check_batch("selection_batch_size", selection_batch_size)
    checkpoints = PhaseCheckpoints(checkpoint_dir, checkpoint_every)
    if likelihood is not None and not isinstance(likelihood, Likelihood):
        raise ValueError(f"likelihood: expected a ppl_sparsegp.core.likelihoods.Likelihood, got {likelihood!r}")
    X, y = np.asarray(X), np.asarray(y)
    key = jax.random.PRNGKey(key) if isinstance(key, int | np.integer) else key
    pre_key, selection_key, prune_key, post_key, init_key = jax.random.split(key, 5)
    Z = _candidates(X, candidates, num_layers, init, init_key)
    outputs = 1 if y.ndim == 1 else y.shape[1]
    architecture = {"num_layers": num_layers, "add_input": add_input, "inner_mean": inner_mean}
    base = deep_svgp(
        X, outputs, likelihood or Gaussian(1.0), Z=Z, **architecture, num_samples=num_samples, batch_size=batch_size
    )
    fields = base_fields(base, DeepSVGP)
    selective = SelectiveDeepSVGP(
        **{**fields, "batch_size": selection_batch_size},
        alpha=alpha,
        alpha_per_output=alpha_per_output,
        initial_inclusion=initial_inclusion,
    )
    loss = ScoreFunctionELBO(num_particles, pathwise=selection == "joint")
    base.check_data(X, y)
    checkpoints.create()

    def fit(model, steps, k, optimizer, params, **options):
        return fit_svi(
            model.model,
            model.guide,
            X,
            y,
            optimizer=optimizer,
            num_steps=steps,
            key=k,
            init_params=params,
            progress=progress,
            **options,
            validate=model.check_data,
        )

    losses, seconds = {}, {}
    params = dict(init_params or {})
    t0 = time.perf_counter()
    if pre_steps:
        pre = fit(base, pre_steps, pre_key, optax.adam(learning_rate), params or None, **checkpoints.options("pre"))
        params, losses["pre"] = pre.params, pre.losses
        checkpoints.finished("pre", pre)
    seconds["pre"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    gp_update = optax.adam(learning_rate) if selection == "joint" else optax.set_to_zero()
    optimizer = optax.multi_transform(
        {"inclusion": optax.adam(selection_learning_rate), "gp": gp_update},
        lambda tree: {name: "inclusion" if name.endswith(".inclusion_probs") else "gp" for name in tree},
    )
    chosen = fit(
        selective, selection_steps, selection_key, optimizer, params or None, loss=loss,
        **checkpoints.options("selection"),
    )  # fmt: skip
    losses["selection"] = chosen.losses
    checkpoints.finished("selection", chosen)
    seconds["selection"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    masks = sample_joint_subset(selective.inclusion_probabilities(chosen.params), prune_key)
    pruned, pruned_params = selective.prune(chosen.params, masks)
    pruned = dataclasses.replace(pruned, batch_size=batch_size)
    fitted, losses["post"] = post_train(
        pruned, pruned_params, X, y, steps=post_steps, key=post_key, learning_rate=learning_rate, progress=progress,
        **checkpoints.options("post"),
    )  # fmt: skip
    seconds["post"] = time.perf_counter() - t0
    return SelectiveDeepFit(pruned, fitted, selective, chosen.params, params, masks, losses, seconds)
