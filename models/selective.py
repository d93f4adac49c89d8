"""Probabilistic selection of inducing points (Uhrenholt, Charvet & Jensen, UAI 2021; spec 000).

The inducing set is a random subset S of K candidate inputs Z* [K, D], written as an inclusion mask
s ∈ {0,1}^K. Generative model and guide (paper Eq. 2)::

    s ~ p_α(s) ∝ exp(−α |s|²)                      prior over subsets (SubsetPointProcess)
    u | s, f, y as in SGPR / SVGP on Z*_s          the sparse GP with the selected inducing inputs
    q(s) = Π_k Bernoulli(s_k | λ_k)                guide over subsets (IndependentInclusion)

    ELBO = E_{q_λ(s)}[L(s)] − KL[q_λ ‖ p_α]        L(s): the usual sparse GP bound with the points in s

* :class:`SelectiveSGPR`: L(s) is Titsias' collapsed bound with the optimal q(u) of the selected points (spec
  §2.4), entered as the factor ``"collapsed_bound"``.
* :class:`SelectiveSVGP`: L(s) is the uncollapsed bound with one **unwhitened** Gaussian q(u*) = N(m, S) over all
  K candidates, of which the selected sub-vector m_s and sub-block S_ss are used (Gaussian marginalisation).
  Whitened parameters cannot be subset this way (deleting entries of v = L⁻¹u is not marginalising u), so
  ``whiten=True`` is refused. Any likelihood, minibatches and several outputs work as in :class:`SVGP`.

Both evaluate L(s) at fixed shapes through the masked construction of
:mod:`ppl_sparsegp.core.masking` (exactly the subset bound), so every step compiles once and the S draws
of the guide are vectorised. The empty subset is allowed: L(∅) is the prior-only bound, which keeps the
estimator unbiased (the released code redraws empty masks instead).

Fit with :class:`ppl_sparsegp.infer.score_function.ScoreFunctionELBO`: the inclusion probabilities learn by the
score-function estimator with a decaying-average baseline, every other parameter by the pathwise gradient
(``pathwise=True``) or not at all (``pathwise=False``, the released code's frozen GP). :meth:`prune` turns a
drawn mask into an ordinary :class:`SGPR` / :class:`SVGP` with the selected points;
:func:`models.selective_fit.fit_selective` runs the paper's pre-train / select / prune / post-train procedure.

Sites (beyond those of SGPR / SVGP): latent ``"inclusion"`` [K] (the mask), guide param ``"inclusion_probs"``
[K] (λ, constrained to (0, 1), i.e. learned as logits), and the guide's mutable
``"score_function_baseline"``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.distributions import constraints
from numpyro.distributions.kl import kl_divergence

from ppl_sparsegp.core import bounds
from ppl_sparsegp.core.masking import masked_cholesky, subset_q
from ppl_sparsegp.infer.score_function import BASELINE_SITE, score_function_baseline
from ppl_sparsegp.numpyro.subset_prior import IndependentInclusion, SubsetPointProcess

from .sgpr import SGPR
from .svgp import SVGP

Array = Any

INCLUSION_SITE = "inclusion"
INCLUSION_PARAM = "inclusion_probs"
SELECTION_PARAMS = (INCLUSION_PARAM, BASELINE_SITE)
"""Names in a fitted parameter dict that belong to the selection, not to the sparse GP."""


@dataclass(eq=False, kw_only=True)
class SubsetSelection:
    """The inclusion sites shared by the selective models (a mixin for SGPR / SVGP).

    Args:
        alpha: prior strength α >= 0 of p_α(s) ∝ exp(−α |s|²) (fixed; the paper's Table 1 uses 0.01 - 0.2).
        initial_inclusion: the initial λ_k of every candidate, in (0, 1) (the released code uses 0.5 on UCI).
    """

    alpha: float = 0.1
    initial_inclusion: float = 0.5

    def __post_init__(self) -> None:
        a = self.alpha
        if isinstance(a, bool) or not isinstance(a, int | float | np.floating) or not (math.isfinite(a) and a >= 0):
            raise ValueError(f"alpha: expected a finite number >= 0 (the prior strength), got {a!r}")
        p = self.initial_inclusion
        if isinstance(p, bool) or not isinstance(p, int | float | np.floating) or not (0.0 < p < 1.0):
            raise ValueError(f"initial_inclusion: expected a probability in (0, 1), got {p!r}")
        super().__post_init__()

    @property
    def num_candidates(self) -> int:
        return int(jnp.shape(self.Z)[0])

    def inclusion_prior(self) -> SubsetPointProcess:
        return SubsetPointProcess(self.num_candidates, self.alpha)

    def inclusion_model(self, dtype: Any) -> Array:
        """The model's ``"inclusion"`` site: a mask [K] under p_α, cast to ``dtype``."""
        return numpyro.sample(INCLUSION_SITE, self.inclusion_prior()).astype(dtype)

    def inclusion_guide(self, dtype: Any) -> Array:
        """The guide's ``"inclusion"`` site under q_λ, its param λ [K] and the score-function baseline."""
        init = jnp.full((self.num_candidates,), self.initial_inclusion, dtype=dtype)
        probs = numpyro.param(INCLUSION_PARAM, init, constraint=constraints.unit_interval)
        score_function_baseline()
        return numpyro.sample(INCLUSION_SITE, IndependentInclusion(probs)).astype(dtype)

    def inclusion_probabilities(self, params: Mapping[str, Array]) -> np.ndarray:
        """Fitted λ [K] (the initial value when ``params`` has none)."""
        default = np.full(self.num_candidates, self.initial_inclusion)
        return np.asarray(params.get(INCLUSION_PARAM, default))

    def kl_selection(self, params: Mapping[str, Array]) -> Array:
        """KL[q_λ ‖ p_α] at fitted λ (scalar, including −log C)."""
        q = IndependentInclusion(jnp.asarray(self.inclusion_probabilities(params)))
        return kl_divergence(q, self.inclusion_prior())

    def _selected(self, mask: Array) -> np.ndarray:
        """Indices of the candidates in a concrete mask [K]; raises when it is empty or malformed."""
        m = np.asarray(mask)
        if m.shape != (self.num_candidates,) or not np.all((m == 0) | (m == 1)):
            raise ValueError(f"mask: expected a 0/1 array of shape ({self.num_candidates},), got {m!r}")
        index = np.flatnonzero(m)
        if index.size == 0:
            raise ValueError("mask: selects no candidate; a pruned model needs at least one inducing point")
        return index

    def _sparse_gp_params(self, params: Mapping[str, Array], index: np.ndarray) -> dict[str, Array]:
        """Fitted parameters without the selection's, with Z restricted to ``index``."""
        kept = {k: v for k, v in params.items() if k not in SELECTION_PARAMS}
        kept["Z"] = jnp.asarray(params.get("Z", self.Z))[index]
        return kept


def base_fields(obj: Any, base: type) -> dict[str, Any]:
    """The values of ``obj``'s fields that the dataclass ``base`` declares (to build a ``base`` from ``obj``)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(base)}


@dataclass(eq=False)
class SelectiveSGPR(SubsetSelection, SGPR):
    """SGPR over a random subset of the K candidates ``Z`` [K, D] (collapsed bound per subset)."""

    pruned_class: ClassVar[type[SGPR]] = SGPR
    """The ordinary model :meth:`prune` returns (a subclass sets its own, e.g. a GP-LVM)."""

    def model(self, X: Array, y: Array) -> None:
        self.check_data(X, y)
        kernel, likelihood = self.hyperparameters()
        Z = self.inducing_inputs()
        mask = self.inclusion_model(Z.dtype)
        numpyro.factor("collapsed_bound", self._bound(kernel, likelihood, Z, mask, X, y))

    def guide(self, X: Array, y: Array) -> None:
        self.hyperparameter_guide()
        self.inclusion_guide(jnp.asarray(self.Z).dtype)

    @staticmethod
    def _bound(kernel, likelihood, Z: Array, mask: Array, X: Array, y: Array) -> Array:
        Kmm = kernel(Z)
        Kmn = mask[:, None] * kernel(Z, X)
        Lmm = masked_cholesky(Kmm, mask)
        return bounds.sgpr_elbo(Kmn, Kmm, kernel.diag(X), y, likelihood.variance, Lmm=Lmm)

    def subset_bound(self, params: Mapping[str, Array], X: Array, y: Array, mask: Array) -> Array:
        """L(s): the collapsed bound with the candidates in ``mask`` [K] at fitted values (scalar)."""
        kernel, likelihood = self.fitted(params)
        Z = jnp.asarray(params.get("Z", self.Z))
        return self._bound(kernel, likelihood, Z, jnp.asarray(mask, dtype=Z.dtype), X, y)

    def prune(self, params: Mapping[str, Array], mask: Array) -> tuple[SGPR, dict[str, Array]]:
        """An ordinary ``pruned_class`` on the candidates in ``mask`` [K] and its parameters (fitted values kept)."""
        index = self._selected(mask)
        sparse = self._sparse_gp_params(params, index)
        pruned = self.pruned_class
        model = pruned(**{**base_fields(self, pruned), "Z": np.asarray(sparse["Z"])})
        return model, sparse


@dataclass(eq=False)
class SelectiveSVGP(SubsetSelection, SVGP):
    """SVGP over a random subset of the K candidates ``Z`` [K, D]; q(u) unwhitened over all candidates."""

    whiten: bool = False

    pruned_class: ClassVar[type[SVGP]] = SVGP
    """The ordinary model :meth:`prune` returns (a subclass sets its own, e.g. a GP-LVM)."""

    def __post_init__(self) -> None:
        if self.whiten:
            raise ValueError(
                "whiten: SelectiveSVGP needs whiten=False; a subset of whitened v = L⁻¹u is not the marginal of "
                "the selected u, so q(u) must be parameterised over u itself"
            )
        super().__post_init__()

    def model(self, X: Array, y: Array) -> None:
        self._model(X, y, self.inclusion_model(jnp.asarray(self.Z).dtype))

    def guide(self, X: Array, y: Array) -> None:
        self._guide(self.inclusion_guide(jnp.asarray(self.Z).dtype))

    def subset_bound(self, params: Mapping[str, Array], X: Array, y: Array, mask: Array) -> Array:
        """L(s): the full-batch uncollapsed bound with the candidates in ``mask`` [K] (scalar)."""
        model, sparse = self.prune(params, mask)
        return model.elbo(sparse, X, y)

    def prune(self, params: Mapping[str, Array], mask: Array) -> tuple[SVGP, dict[str, Array]]:
        """An ordinary (unwhitened) ``pruned_class`` on the candidates in ``mask`` [K], with q(u_s) = N(m_s, S_ss)."""
        index = self._selected(mask)
        sparse = self._sparse_gp_params(params, index)
        scale_site = "u_scale" if self.q_diag else "u_scale_tril"
        sparse["u_loc"], sparse[scale_site] = subset_q(
            jnp.asarray(params["u_loc"]), jnp.asarray(params[scale_site]), index
        )
        pruned = self.pruned_class
        model = pruned(**{**base_fields(self, pruned), "Z": np.asarray(sparse["Z"])})
        return model, sparse
