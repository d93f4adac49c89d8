"""Probabilistic selection of inducing points for the Bayesian GP-LVM (Uhrenholt et al. 2021, §5.3, App. C.5).

Sites: those of the GP-LVM (:mod:`models.gplvm`: latent ``"X"`` [B, Q] in the plate ``"data"``, guide params
``"X_loc"``, ``"X_scale"`` [N, Q], hyperparameters, ``"Z"`` [K, Q]; :class:`SelectiveGPLVM` also ``"u"`` [D, K],
factor ``"y"``, ``"u_loc"`` [D, K], ``"u_scale_tril"`` [D, K, K]; :class:`SelectiveCollapsedGPLVM` the factor
``"collapsed_bound"``) and of the selection (:mod:`models.selective`: latent ``"inclusion"`` [K], guide param
``"inclusion_probs"`` [K], the guide's mutable ``"score_function_baseline"``).

The inducing inputs of a :class:`BayesianGPLVM` are a random subset S of a **fixed** grid Z* [K, Q] of candidates
in latent space (:func:`latent_grid`; the paper: 15 × 15 = 225 points, α = 3), with the point-process prior and
guide of :mod:`models.selective` (spec §2, paper Eq. 2)::

    s ~ p_α(s) ∝ exp(−α |s|²),   q_λ(s) = Π_k Bernoulli(s_k | λ_k)
    ELBO = E_{q_λ(s)}[L(s)] − KL[q_λ ‖ p_α],

where L(s) is a GP-LVM bound of :mod:`models.gplvm` with the candidates in s, at reparameterised latent draws:

* :class:`SelectiveGPLVM` (the paper's): the uncollapsed bound (closed-form KLs of q(u) and q(X)), evaluated by
  :func:`~ppl_sparsegp.core.masking.masked_conditional` on one unwhitened q(u) over all K candidates;
  :meth:`~SelectiveGPLVM.prune` yields an ordinary BayesianGPLVM with the kept grid points.
* :class:`SelectiveCollapsedGPLVM`: Titsias' collapsed bound of the selected candidates (q(u) optimal for each
  subset and latent draw; :func:`~ppl_sparsegp.core.masking.masked_sgpr_elbo`); it prunes to a CollapsedGPLVM and
  converges in far fewer steps.

Each writes its ``model`` and ``guide`` in full with the site helpers and holds the ordinary GP-LVM over all K
candidates (``ordinary``: its checks, its :class:`~models.gplvm.LatentInputs`, its start values) and a
:class:`~models.selective.SubsetSelection` (λ, the selection's KL, pruning).

:func:`fit_selective_gplvm` trains everything **jointly, without phases** (paper §5.3): λ by the score-function
estimator (Adam 0.2), the latents, kernel, q(u) (and the noise, unless fixed) by their pathwise gradient (Adam
0.01), recording λ along the way so one can watch grid points switch on as the latents move. With ``pre_steps``
it first fits the GP-LVM on all K grid points and starts the joint phase from there, as the released demo does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import optax

from ppl_sparsegp import validation
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.core.masking import masked_cholesky, masked_conditional, masked_q, masked_sgpr_elbo
from ppl_sparsegp.infer.score_function import ScoreFunctionELBO
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.numpyro import sites
from ppl_sparsegp.results import write_npz

from ._base import GPModel, base_fields
from .gplvm import BayesianGPLVM, CollapsedGPLVM, LatentInputs, pca_latents
from .selective import INCLUSION_PARAM, SubsetSelection, gp_parameters
from .selective_fit import (
    BOUNDS,
    InclusionCounts,
    PhaseCheckpoints,
    _check_choice,
    _check_rate,
    _check_steps,
    phase_checkpoint,
    sample_subset,
    selection_optimizer,
)

Array = Any

GRID_MARGIN = 0.1
"""Default padding of the grid beyond the latents' range, as a fraction of that range per dimension."""

TRACE_FILE = "selective_gplvm_trace.npz"
"""The λ / latent-mean trace of :func:`fit_selective_gplvm` in its ``checkpoint_dir``."""


def latent_grid(
    size: int = 15, *, extent: Array | None = None, latents: Array | None = None, margin: float = GRID_MARGIN
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
    size = _check_steps("size", size, 2)
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


def _selection_elbo(model: Any, params: Mapping[str, Array], Y: Array, key: Array, num_samples: int) -> Array:
    """E_{q_λ}[L(s)] − KL[q_λ ‖ p_α] of a full-batch selective GP-LVM from ``num_samples`` joint draws of (s, X)."""
    loss = ScoreFunctionELBO(num_samples)
    estimate = jax.jit(lambda k, p, Y: -loss.loss(k, p, model.model, model.guide, Y))
    return estimate(key, dict(params), jnp.asarray(Y))


@dataclass(eq=False)
class SelectiveGPLVM(GPModel):
    """Bayesian GP-LVM over a random subset of the K candidate inducing inputs ``Z`` [K, Q] (q(u) unwhitened).

    Args (beyond :class:`GPModel`'s): those of :class:`BayesianGPLVM`; keyword-only ``alpha`` and
    ``initial_inclusion`` as :class:`models.selective.SubsetSelection`.
    """

    Z: Array = None
    num_latent: int = 1
    whiten: bool = False
    q_diag: bool = False
    batch_size: int | None = None
    num_data: int | None = None
    learn_Z: bool = True
    data_term: Literal["analytic", "sampled"] = "analytic"
    X_init: Array = field(default=None, kw_only=True)
    X_scale_init: float = field(default=0.1, kw_only=True)
    alpha: float = field(default=0.1, kw_only=True)
    initial_inclusion: float = field(default=0.5, kw_only=True)
    ordinary: BayesianGPLVM = field(init=False, repr=False)
    selection: SubsetSelection = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.ordinary = BayesianGPLVM(**base_fields(self, BayesianGPLVM))  # the GP-LVM on every candidate
        self.selection = SubsetSelection(self.num_candidates, self.alpha, self.initial_inclusion)
        super().__post_init__()

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: those of the GP-LVM over all candidates and of the selection."""
        return self.ordinary.parameter_names() | self.selection.parameter_names()

    @property
    def num_candidates(self) -> int:
        return int(np.shape(self.Z)[0])

    @property
    def latents(self) -> LatentInputs:
        return self.ordinary.latents

    def check_data(self, Y: Array, *, init_params: Mapping | None = None) -> None:
        """The checks of :meth:`BayesianGPLVM.check_data`."""
        self.ordinary.check_data(Y, init_params=init_params)

    def model(self, Y: Array) -> None:
        """s ~ p_α(s), u_d | s ~ N(0, K̂mm); for the rows of the batch, x_n ~ N(0, I) and the data term of the
        GP-LVM on Z*_s as the factor ``"y"``."""
        Y = jnp.asarray(Y)
        self.check_data(Y)
        D, K, N, dtype = self.num_latent, self.num_candidates, self.latents.num_points, jnp.asarray(self.Z).dtype
        s = sites.inclusion(K, self.alpha, dtype)
        kernel, likelihood = self.hyperparameters()
        Z = sites.inducing_inputs(self.Z, self.learn_Z)
        Lmm = masked_cholesky(kernel(Z), s)
        u = sites.inducing_outputs(D, K, Lmm, Z.dtype)
        if self.data_term == "analytic":  # q(u_s) = N(m_s, S_ss), the marginal of the guide's q(u) over all K
            q_mu, q_sqrt = masked_q(*sites.inducing_posterior_parameters(D, K, Z.dtype, self.q_diag), s)
        else:
            q_mu, q_sqrt = u, None
        with sites.data_plate(N, self.batch_size) as idx:
            X = sites.latent_inputs(N if idx is None else idx.shape[0], self.latents.latent_dim, self.latents.dtype)
            _, Yb = sites.batch(None, Y, idx)
            mean, var = masked_conditional(kernel(Z, X), Lmm, kernel.diag(X), s, q_mu, q_sqrt)
            numpyro.factor("y", jnp.sum(likelihood.variational_expectation(Yb, mean, var), axis=0))

    def guide(self, Y: Array) -> None:
        """s ~ q_λ(s), point masses of the hyperparameters with priors, u ~ q(u_s) (the marginal of q(u)), and
        x_n ~ q(x_n) for the rows of the batch."""
        D, K, dtype = self.num_latent, self.num_candidates, jnp.asarray(self.Z).dtype
        s = sites.inclusion_posterior(K, self.initial_inclusion, dtype)
        self.hyperparameter_guide()
        sites.inducing_posterior(*masked_q(*sites.inducing_posterior_parameters(D, K, dtype, self.q_diag), s))
        loc, scale = sites.latent_posterior_parameters(self.X_init, self.X_scale_init)
        with sites.data_plate(self.latents.num_points, self.batch_size) as idx:
            sites.latent_posterior(loc, scale, idx)

    def elbo(self, params: Mapping[str, Array], Y: Array, key: Array, num_samples: int = 1) -> Array:
        """Full-batch estimate of E_{q_λ}[L(s)] − KL[q_λ ‖ p_α] from ``num_samples`` joint draws of (s, X)."""
        full_batch = self if self.batch_size is None else replace(self, batch_size=None)
        return _selection_elbo(full_batch, params, Y, key, num_samples)

    def subset_bound(
        self, params: Mapping[str, Array], Y: Array, mask: Array, key: Array, num_samples: int = 1
    ) -> Array:
        """L(s): the pruned GP-LVM's bound with the candidates in ``mask`` [K] (``num_samples`` draws of X)."""
        model, sparse = self.prune(params, mask)
        return model.elbo(sparse, Y, key, num_samples)

    def prune(self, params: Mapping[str, Array], mask: Array) -> tuple[BayesianGPLVM, dict[str, Array]]:
        """An ordinary :class:`BayesianGPLVM` on the candidates in ``mask`` [K], with q(u_s) = N(m_s, S_ss)."""
        q_scale = "u_scale" if self.q_diag else "u_scale_tril"
        sparse = {**gp_parameters(params), **self.selection.restrict(params, mask, self.Z, q_scale)}
        return BayesianGPLVM(**{**base_fields(self, BayesianGPLVM), "Z": np.asarray(sparse["Z"])}), sparse

    def initial_params(self) -> dict[str, Array]:
        """q(u) = p(u) over all K candidates at the initial kernel (:meth:`BayesianGPLVM.prior_initialisation`)."""
        return self.ordinary.initial_params()

    def inclusion_probabilities(self, params: Mapping[str, Array]) -> np.ndarray:
        """Fitted λ [K] (the initial value when ``params`` has none)."""
        return self.selection.probabilities(params)

    def kl_selection(self, params: Mapping[str, Array]) -> Array:
        """KL[q_λ ‖ p_α] at fitted λ (scalar, including −log C)."""
        return self.selection.kl(params)

    def latent_means(self, params: Mapping[str, Array]) -> np.ndarray:
        """μ [N, Q], the fitted latent means."""
        return self.latents.means(params)

    def kl_latent(self, params: Mapping[str, Array]) -> Array:
        """Σ_n KL[q(x_n) ‖ N(0, I)], closed form (scalar)."""
        return self.latents.kl(params)


@dataclass(eq=False)
class SelectiveCollapsedGPLVM(GPModel):
    """Collapsed GP-LVM over a random subset of the K candidate inducing inputs ``Z`` [K, Q]: L(s) is Titsias'
    bound with the selected candidates at the latent draw.

    Args (beyond :class:`GPModel`'s): those of :class:`CollapsedGPLVM`; keyword-only ``alpha`` and
    ``initial_inclusion`` as :class:`models.selective.SubsetSelection`.
    """

    Z: Array = None
    learn_Z: bool = True
    X_init: Array = field(default=None, kw_only=True)
    X_scale_init: float = field(default=0.1, kw_only=True)
    alpha: float = field(default=0.1, kw_only=True)
    initial_inclusion: float = field(default=0.5, kw_only=True)
    ordinary: CollapsedGPLVM = field(init=False, repr=False)
    selection: SubsetSelection = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.ordinary = CollapsedGPLVM(**base_fields(self, CollapsedGPLVM))  # the GP-LVM on every candidate
        self.selection = SubsetSelection(self.num_candidates, self.alpha, self.initial_inclusion)
        super().__post_init__()

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: those of the GP-LVM over all candidates and of the selection."""
        return self.ordinary.parameter_names() | self.selection.parameter_names()

    @property
    def num_candidates(self) -> int:
        return int(np.shape(self.Z)[0])

    @property
    def latents(self) -> LatentInputs:
        return self.ordinary.latents

    def check_data(self, Y: Array, *, init_params: Mapping | None = None) -> None:
        """The checks of :meth:`CollapsedGPLVM.check_data`."""
        self.ordinary.check_data(Y, init_params=init_params)

    def model(self, Y: Array) -> None:
        """x_n ~ N(0, I) for every row, s ~ p_α(s), and Titsias' bound of the candidates in s at X as the factor
        ``"collapsed_bound"`` (sites in the guide's order)."""
        Y = jnp.asarray(Y)
        self.check_data(Y)
        kernel, likelihood = self.hyperparameters()
        Z = sites.inducing_inputs(self.Z, self.learn_Z)
        N = self.latents.num_points
        with sites.data_plate(N):
            X = sites.latent_inputs(N, self.latents.latent_dim, self.latents.dtype)
        s = sites.inclusion(self.num_candidates, self.alpha, Z.dtype)
        bound = masked_sgpr_elbo(kernel(Z, X), kernel(Z), kernel.diag(X), Y, likelihood.variance, s)
        numpyro.factor("collapsed_bound", bound)

    def guide(self, Y: Array) -> None:
        """Point masses of the hyperparameters with priors, x_n ~ q(x_n), and s ~ q_λ(s); no q(u) (collapsed)."""
        self.hyperparameter_guide()
        loc, scale = sites.latent_posterior_parameters(self.X_init, self.X_scale_init)
        with sites.data_plate(self.latents.num_points) as idx:
            sites.latent_posterior(loc, scale, idx)
        sites.inclusion_posterior(self.num_candidates, self.initial_inclusion, jnp.asarray(self.Z).dtype)

    def elbo(self, params: Mapping[str, Array], Y: Array, key: Array, num_samples: int = 1) -> Array:
        """Estimate of E_{q_λ}[L(s)] − KL[q_λ ‖ p_α] from ``num_samples`` joint draws of (s, X)."""
        return _selection_elbo(self, params, Y, key, num_samples)

    def subset_bound(
        self, params: Mapping[str, Array], Y: Array, mask: Array, key: Array, num_samples: int = 1
    ) -> Array:
        """L(s): the pruned GP-LVM's bound with the candidates in ``mask`` [K] (``num_samples`` draws of X)."""
        model, sparse = self.prune(params, mask)
        return model.elbo(sparse, Y, key, num_samples)

    def prune(self, params: Mapping[str, Array], mask: Array) -> tuple[CollapsedGPLVM, dict[str, Array]]:
        """An ordinary :class:`CollapsedGPLVM` on the candidates in ``mask`` [K] (q(X), hyperparameters kept)."""
        sparse = {**gp_parameters(params), **self.selection.restrict(params, mask, self.Z)}
        return CollapsedGPLVM(**{**base_fields(self, CollapsedGPLVM), "Z": np.asarray(sparse["Z"])}), sparse

    def initial_params(self) -> dict[str, Array]:
        """None beyond the defaults (a collapsed q(u) has no parameters)."""
        return {}

    def inclusion_probabilities(self, params: Mapping[str, Array]) -> np.ndarray:
        """Fitted λ [K] (the initial value when ``params`` has none)."""
        return self.selection.probabilities(params)

    def kl_selection(self, params: Mapping[str, Array]) -> Array:
        """KL[q_λ ‖ p_α] at fitted λ (scalar, including −log C)."""
        return self.selection.kl(params)

    def latent_means(self, params: Mapping[str, Array]) -> np.ndarray:
        """μ [N, Q], the fitted latent means."""
        return self.latents.means(params)

    def kl_latent(self, params: Mapping[str, Array]) -> Array:
        """Σ_n KL[q(x_n) ‖ N(0, I)], closed form (scalar)."""
        return self.latents.kl(params)


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
    latent_dim: int = 2,
    noise_variance: float | None = 0.01,
    latent_scale: float = 0.1,
    batch_size: int | None = None,
    bound: Literal["collapsed", "uncollapsed"] = "uncollapsed",
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
    _check_choice("bound", bound, BOUNDS)
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
        return SelectiveCollapsedGPLVM(**common, **selection) if selection else CollapsedGPLVM(**common)
    common.update(num_latent=Y.shape[1], batch_size=batch_size)
    return SelectiveGPLVM(**common, **selection) if selection else BayesianGPLVM(**common)


def fit_selective_gplvm(
    Y: Array,
    *,
    latent_dim: int = 2,
    grid_size: int = 15,
    extent: Array | None = None,
    alpha: float = 3.0,
    initial_inclusion: float = 0.5,
    noise_variance: float | None = 0.01,
    latent_scale: float = 0.1,
    steps: int = 300,
    pre_steps: int = 0,
    num_particles: int = 4,
    baseline_decay: float = 0.95,
    learning_rate: float = 0.01,
    selection_learning_rate: float = 0.2,
    batch_size: int | None = None,
    bound: Literal["collapsed", "uncollapsed"] = "uncollapsed",
    key: int | Array = 0,
    record_every: int = 10,
    prune: bool = False,
    progress: bool = False,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: int = 100,
) -> SelectiveGPLVMFit:
    """Fit a GP-LVM whose inducing inputs are selected from a latent grid, everything jointly (paper §5.3).

    Args:
        Y: observations [N, D] (standardise them first, as the paper does).
        latent_dim: Q; grid_size: candidates per latent dimension (K = grid_size^Q); extent: the grid's [Q, 2]
            bounds (None: the PCA latents' range, padded 10 %).
        alpha: prior strength α (paper: 3); initial_inclusion: λ₀ of every candidate.
        noise_variance: fixed Gaussian noise variance (released code: 0.01 on standardised Y); None learns it.
        latent_scale: initial standard deviation of q(x_n).
        steps: Adam steps (full batch: one per epoch; the paper runs 300 epochs); pre_steps: Adam steps of the
            GP-LVM on all K grid points (no selection) before those, from which the joint phase starts (0, the
            paper: none; the released demo pre-fits); num_particles: S draws of the subset (and of the latents) per
            step; baseline_decay: β of the score-function baseline (0.95 as the
            released code; a small β follows a bound that improves quickly under joint training more closely).
        learning_rate: Adam for latents, kernel, likelihood and q(u); selection_learning_rate: Adam for λ.
        batch_size: rows per step (None: all N; the collapsed bound needs None).
        bound: ``"uncollapsed"`` (the paper's: q(u) over all K candidates learned by Adam, started at the prior)
            or ``"collapsed"`` (q(u) optimal for each subset and latent draw; :class:`SelectiveCollapsedGPLVM`).
        key: integer seed or JAX key.
        record_every: steps between records of λ and the latent means.
        prune: draw one subset from the final q_λ and return the ordinary GP-LVM (of the same bound) on it.
        progress: show a progress bar.
        checkpoint_dir: a folder for checkpoints (created), or None. The pre-training and the joint phase keep
            their SVI states there as ``selective_pre.npz`` and ``selective_selection.npz`` (as
            :func:`fit_selective`; written atomically every ``checkpoint_every`` steps, at the end and on Ctrl-C),
            and the λ / latent trace as ``selective_gplvm_trace.npz`` with each of them. Calling again with the
            same arguments resumes and ends where an uninterrupted fit ends (the trace included; ``seconds`` then
            counts only the resumed call). Delete the folder to start afresh after changing a setting.
        checkpoint_every: steps between checkpoint writes within a phase (rounded up to whole records).

    Returns:
        A :class:`SelectiveGPLVMFit`.
    """
    Y = np.asarray(Y)
    validation.check_inputs(Y, x_name="Y")
    latent_dim = _check_steps("latent_dim", latent_dim, 1)
    grid_size = _check_steps("grid_size", grid_size, 2)
    steps = _check_steps("steps", steps, 1)
    pre_steps = _check_steps("pre_steps", pre_steps, 0)
    record_every = _check_steps("record_every", record_every, 1)
    learning_rate = _check_rate("learning_rate", learning_rate)
    selection_learning_rate = _check_rate("selection_learning_rate", selection_learning_rate)
    if not isinstance(key, int | np.integer | jax.Array) or isinstance(key, bool):
        raise ValueError(f"key: expected an integer seed or a JAX PRNG key, got {key!r}")
    if not isinstance(prune, bool):
        raise ValueError(f"prune: expected True or False, got {prune!r}")
    _check_choice("bound", bound, BOUNDS)
    checkpoints = PhaseCheckpoints(checkpoint_dir, checkpoint_every)
    loss = ScoreFunctionELBO(num_particles, baseline_decay=baseline_decay, pathwise=True)
    X_init = pca_latents(Y, latent_dim)
    grid = latent_grid(grid_size, extent=extent, latents=X_init)
    if grid.shape[1] != latent_dim:
        raise ValueError(f"extent: expected {latent_dim} (lower, upper) rows, one per latent dimension, got {extent!r}")
    model = gplvm_on_grid(
        Y,
        grid,
        latent_dim=latent_dim,
        noise_variance=noise_variance,
        latent_scale=latent_scale,
        batch_size=batch_size,
        bound=bound,
        alpha=alpha,
        initial_inclusion=initial_inclusion,
    )
    key = jax.random.PRNGKey(key) if isinstance(key, int | np.integer) else key
    fit_key, prune_key = jax.random.split(key)

    init_params = model.initial_params()
    checkpoints.create()
    pre_losses = np.zeros(0)
    t0 = time.perf_counter()
    if pre_steps:
        everything = gplvm_on_grid(
            Y, grid, latent_dim=latent_dim, noise_variance=noise_variance, latent_scale=latent_scale,
            batch_size=batch_size, bound=bound,
        )  # fmt: skip
        pre = fit_svi(
            everything.model, everything.guide, Y, optimizer=optax.adam(learning_rate), num_steps=pre_steps,
            key=jax.random.fold_in(key, 1), init_params=everything.initial_params(), progress=progress,
            validate=everything.check_data, **checkpoints.options("pre"),
        )  # fmt: skip
        checkpoints.finished("pre", pre)
        init_params.update(pre.params)
        pre_losses = pre.losses
    trace_path = None if checkpoint_dir is None else Path(checkpoint_dir) / TRACE_FILE
    if trace_path is not None and trace_path.exists() and phase_checkpoint(checkpoint_dir, "selection").exists():
        with np.load(trace_path, allow_pickle=False) as stored:
            trace_steps, inclusion, latents = (list(stored[name]) for name in ("steps", "inclusion", "latents"))
    else:
        start = model.latent_means(init_params) if pre_steps else X_init
        trace_steps, inclusion, latents = [0], [model.inclusion_probabilities({})], [start]

    def write_trace() -> None:
        if trace_path is not None:
            write_npz(
                trace_path, {"steps": trace_steps, "inclusion": np.stack(inclusion), "latents": np.stack(latents)}
            )

    unwritten = [0]  # steps recorded since the trace was last written

    def record(step: int, chunk_losses: np.ndarray, params: dict[str, Array]) -> None:
        now = (step, np.asarray(params[INCLUSION_PARAM]), model.latent_means(params))
        while trace_steps[-1] >= step:  # a resumed run replays the steps after its checkpoint: drop their records
            for trace in (trace_steps, inclusion, latents):
                trace.pop()
        for trace, value in zip((trace_steps, inclusion, latents), now, strict=True):
            trace.append(value)
        unwritten[0] += len(chunk_losses)
        if unwritten[0] >= checkpoints.every or step >= steps:  # fit_svi's checkpoint follows at this step
            write_trace()
            unwritten[0] = 0

    optimizer = selection_optimizer(optax.adam(learning_rate), selection_learning_rate)
    try:
        result = fit_svi(
            model.model,
            model.guide,
            Y,
            optimizer=optimizer,
            num_steps=steps,
            key=fit_key,
            loss=loss,
            init_params=init_params,
            steps_per_dispatch=record_every,
            callback=record,
            progress=progress,
            **checkpoints.options("selection"),
            validate=model.check_data,
        )
    except KeyboardInterrupt:  # fit_svi then writes a checkpoint between scheduled ones: keep the trace with it
        write_trace()
        raise
    seconds = time.perf_counter() - t0
    fit = SelectiveGPLVMFit(
        model,
        result.params,
        grid,
        np.asarray(trace_steps),
        np.stack(inclusion),
        np.stack(latents),
        result.losses,
        seconds,
        pre_losses,
    )
    if prune:
        fit.mask = sample_subset(fit.inclusion_probs, prune_key)
        fit.pruned, fit.pruned_params = model.prune(result.params, fit.mask)
    return fit
