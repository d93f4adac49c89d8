"""Probabilistic selection of inducing points (Uhrenholt, Charvet & Jensen, UAI 2021; spec 000).

Sites of both models: the hyperparameter sites of :mod:`models.numpyro._base`; param ``"Z"`` [K, D] (the candidates; a
constant when ``learn_Z=False``); latent ``"inclusion"`` [K] (the mask s); guide param ``"inclusion_probs"`` [K]
(λ, constrained to (0, 1), i.e. learned as logits) and the guide's mutable ``"score_function_baseline"``.
:class:`SelectiveSGPR` adds the factor ``"collapsed_bound"``; :class:`SelectiveSVGP` the latent ``"u"`` [P, K], the
plate ``"data"``, the factor ``"y"`` [B] and the guide params ``"u_loc"`` [P, K] and ``"u_scale_tril"`` [P, K, K]
(``"u_scale"`` [P, K] when ``q_diag``).

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

Both evaluate L(s) at fixed shapes through the masked construction of :mod:`ppl_sparsegp.core.masking`
(:func:`~ppl_sparsegp.core.masking.masked_sgpr_elbo`, :func:`~ppl_sparsegp.core.masking.masked_conditional`;
exactly the subset bound), so every step compiles once and the S draws of the guide are vectorised. The empty
subset is allowed: L(∅) is the prior-only bound, which keeps the estimator unbiased (the released code redraws
empty masks instead).

Composition: each model takes the ordinary model over all K candidates as its first argument
(``SelectiveSVGP(SVGP(kernel, likelihood, Z=candidates, whiten=False), alpha=0.1)``; its kernel, likelihood, priors,
jitter, settings and checks are the selective model's), holds a :class:`SubsetSelection` (λ, the KL of the
selection, pruning), and writes its own ``model`` and ``guide`` with the site helpers of
:mod:`ppl_sparsegp.numpyro.sites` (``inclusion`` / ``inclusion_posterior`` for s). :class:`SelectiveModel` is the
base they share.

Fit with :class:`ppl_sparsegp.infer.score_function.ScoreFunctionELBO`: the inclusion probabilities learn by the
score-function estimator with a decaying-average baseline, every other parameter by the pathwise gradient
(``pathwise=True``) or not at all (``pathwise=False``, the released code's frozen GP). :meth:`prune` turns a
drawn mask into an ordinary :class:`SGPR` / :class:`SVGP` with the selected points;
:func:`ppl_sparsegp.recipes.selective.fit_selective` runs the paper's pre-train / select / prune / post-train procedure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.distributions.kl import kl_divergence

from ppl_sparsegp import validation
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.core.masking import masked_cholesky, masked_conditional, masked_q, masked_sgpr_elbo, subset_q
from ppl_sparsegp.infer.score_function import BASELINE_SITE
from ppl_sparsegp.numpyro import sites
from ppl_sparsegp.numpyro.subset_prior import IndependentInclusion, SubsetPointProcess

from .._shared import (
    check_alpha,
    check_initial_inclusion,
    check_initial_probabilities,
    check_output_columns,
    scoped_methods,
    selected_indices,
)
from .sgpr import SGPR
from .svgp import SVGP

Array = Any

INCLUSION_SITE = "inclusion"
INCLUSION_PARAM = "inclusion_probs"
SELECTION_PARAMS = (INCLUSION_PARAM, BASELINE_SITE)
"""Names in a fitted parameter dict that belong to the selection, not to the sparse GP (a deep GP's per-layer
λ are ``"layer<ℓ>.inclusion_probs"``)."""

__all__ = [
    "SelectiveModel",
    "SelectiveSGPR",
    "SelectiveSVGP",
    "SubsetSelection",
    "gp_parameters",
    "selected_inducing_outputs",
]


def gp_parameters(params: Mapping[str, Array]) -> dict[str, Array]:
    """Fitted parameters without the selection's (λ of every layer and the score-function baseline)."""
    return {k: v for k, v in params.items() if k not in SELECTION_PARAMS and not k.endswith(f".{INCLUSION_PARAM}")}


@dataclass(frozen=True)
class SubsetSelection:
    """The inducing set s over K candidates that a selective model holds: the prior p_α, the guide's λ, the KL
    between them, and the restriction of fitted values to a drawn subset (what pruning keeps).

    Args:
        num_candidates: K.
        alpha: prior strength α >= 0 of p_α(s) ∝ exp(−α |s|²) (fixed; the paper's Table 1 uses 0.01 - 0.2).
        initial_inclusion: the initial λ_k of every candidate, in (0, 1) (the released code uses 0.5 on UCI).
        prefix: of the site and parameter names (``"layer<ℓ>."`` in a deep GP).
    """

    num_candidates: int
    alpha: float = 0.1
    initial_inclusion: float = 0.5
    prefix: str = ""

    def __post_init__(self) -> None:
        check_alpha(self.alpha)
        check_initial_inclusion(self.initial_inclusion)

    def parameter_names(self) -> set[str]:
        """The selection's sites: ``"<prefix>inclusion"`` and ``"<prefix>inclusion_probs"``, and the baseline."""
        return {f"{self.prefix}{INCLUSION_SITE}", f"{self.prefix}{INCLUSION_PARAM}", BASELINE_SITE}

    def prior(self) -> SubsetPointProcess:
        """p_α over masks [K]."""
        return SubsetPointProcess(self.num_candidates, self.alpha)

    def probabilities(self, params: Mapping[str, Array]) -> np.ndarray:
        """Fitted λ [K] (the initial value when ``params`` has none)."""
        default = np.full(self.num_candidates, self.initial_inclusion)
        return np.asarray(params.get(f"{self.prefix}{INCLUSION_PARAM}", default))

    def check_initial(self, init_params: Mapping[str, Array]) -> None:
        """Refuse an initial λ (``"<prefix>inclusion_probs"``) that is not K probabilities in (0, 1)."""
        check_initial_probabilities(init_params, f"{self.prefix}{INCLUSION_PARAM}", self.num_candidates)

    def kl(self, params: Mapping[str, Array]) -> Array:
        """KL[q_λ ‖ p_α] at fitted λ (scalar, including −log C)."""
        return kl_divergence(IndependentInclusion(jnp.asarray(self.probabilities(params))), self.prior())

    def selected(self, mask: Array, name: str = "mask") -> np.ndarray:
        """Indices of the candidates in a concrete mask [K]; raises when it is empty or malformed."""
        return selected_indices(mask, self.num_candidates, name)

    def restrict(
        self, params: Mapping[str, Array], mask: Array, Z: Array, q_scale: str | None = None, name: str = "mask"
    ) -> dict[str, Array]:
        """The sparse GP's values on the candidates in ``mask`` [K]: ``"<prefix>Z"`` [M, D] (fitted, else ``Z``)
        and, when ``q_scale`` names q(u)'s square root (``"u_scale_tril"`` or ``"u_scale"``), its marginal
        q(u_I) = N(m_I, S_II) at ``"<prefix>u_loc"`` and ``"<prefix><q_scale>"``."""
        index = self.selected(mask, name)
        p = self.prefix
        out = {f"{p}Z": jnp.asarray(params.get(f"{p}Z", Z))[index]}
        if q_scale is not None:
            loc, scale = jnp.asarray(params[f"{p}u_loc"]), jnp.asarray(params[f"{p}{q_scale}"])
            scale = jnp.tril(scale) if q_scale == "u_scale_tril" else scale  # a Cholesky factor: its lower triangle
            out[f"{p}u_loc"], out[f"{p}{q_scale}"] = subset_q(loc, scale, index)
        return out


def selected_inducing_outputs(
    gp: Any, kernel: Kernel, s: Array, given_u: bool = False
) -> tuple[Array, Array, Array, Array | None]:
    """Model side of the inducing outputs of an uncollapsed selective model whose ordinary model ``gp`` (an SVGP or
    Bayesian GP-LVM) has P = ``gp.num_latent`` outputs over the K candidates ``gp.Z``, given the mask ``s`` [K].

    Registers the candidates (param ``"Z"``, unless fixed) and u | s ~ N(0, K̂mm) at site ``"u"`` [P, K] (the selected
    block of Kmm; :func:`~ppl_sparsegp.core.masking.masked_cholesky`), and returns Z [K, D], the masked Cholesky
    factor [K, K] and the q(u_s) the data term is scored under: the marginal N(m_s, S_ss) of the guide's q(u) over
    all K (``data_term="analytic"``) or a point mass at the sampled u (``"sampled"``, or ``given_u``: f given u, as
    NumPyro's ``Predictive`` draws it; q_sqrt None).
    """
    P, K = gp.num_latent, int(np.shape(gp.Z)[0])
    Z = sites.inducing_inputs(gp.Z, gp.learn_Z)
    Lmm = masked_cholesky(kernel(Z), s)
    u = sites.inducing_outputs(P, K, Lmm, Z.dtype)
    if gp.data_term == "sampled" or given_u:
        return Z, Lmm, u, None
    return Z, Lmm, *masked_q(*sites.inducing_posterior_parameters(P, K, Z.dtype, gp.q_diag), s)


def selected_collapsed_bound(kernel: Kernel, likelihood: Gaussian, Z: Array, X: Array, y: Array, s: Array) -> Array:
    """L(s), Titsias' bound of the candidates in the mask ``s`` [K] among Z [K, D], at inputs X [N, D] for y [N] or
    [N, P] (:func:`~ppl_sparsegp.core.masking.masked_sgpr_elbo`; scalar)."""
    return masked_sgpr_elbo(kernel(Z, X), kernel(Z), kernel.diag(X), y, likelihood.variance, s)


def selected_collapsed_data(
    kernel: Kernel, likelihood: Gaussian, Z: Array, X: Array, y: Array | None, s: Array
) -> None:
    """Model side of a collapsed selective model (SelectiveSGPR, SelectiveCollapsedGPLVM) once s and its inputs X are
    drawn: L(s) (:func:`selected_collapsed_bound`) as the factor ``"collapsed_bound"``; with ``y=None`` (NumPyro's
    ``Predictive``), the prior f and y at X (:func:`~ppl_sparsegp.numpyro.sites.prior_predictive`)."""
    if y is None:
        sites.prior_predictive(kernel, likelihood, X)
        return
    numpyro.factor("collapsed_bound", selected_collapsed_bound(kernel, likelihood, Z, X, y, s))


@scoped_methods
@dataclass(eq=False)
class SelectiveModel:
    """What every selective model is made of: the ordinary model over all K candidates ``ordinary.Z`` [K, D] and
    the :class:`SubsetSelection` over them. Subclasses write ``model`` and ``guide``; the kernel, likelihood,
    priors, fixed sites, jitter and every other setting are the ordinary model's.

    Args:
        ordinary: the model over every candidate (an instance of the subclass's ``ordinary_class``, e.g.
            ``SVGP(kernel, likelihood, Z=candidates, whiten=False)``); :meth:`prune` returns a copy of it on the
            selected candidates.
        alpha, initial_inclusion: keyword only, as :class:`SubsetSelection`.
    """

    ordinary: Any
    alpha: float = field(default=0.1, kw_only=True)
    initial_inclusion: float = field(default=0.5, kw_only=True)
    selection: SubsetSelection = field(init=False, repr=False)
    ordinary_class: ClassVar[type]

    def __post_init__(self) -> None:
        if not isinstance(self.ordinary, self.ordinary_class):
            raise ValueError(
                f"ordinary: expected the {self.ordinary_class.__name__} over every candidate, got {self.ordinary!r}"
            )
        self.selection = SubsetSelection(self.num_candidates, self.alpha, self.initial_inclusion)

    @property
    def jitter(self) -> float | None:
        """The ordinary model's relative jitter (:mod:`models.numpyro._base`)."""
        return self.ordinary.jitter

    @property
    def num_candidates(self) -> int:
        """K, the number of candidate inducing inputs."""
        return int(np.shape(self.ordinary.Z)[0])

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the ordinary model's and the selection's."""
        return self.ordinary.parameter_names() | self.selection.parameter_names()

    def check_data(self, *data: Array, init_params: Mapping[str, Array] | None = None) -> None:
        """The ordinary model's checks of the data and of its initial values, and :meth:`SubsetSelection.check_initial`
        of an initial λ; a key that names neither model's site is refused."""
        given = dict(init_params or {})
        validation.check_keys("init_params", given, self.parameter_names())
        self.selection.check_initial(given)
        own = self.selection.parameter_names()
        self.ordinary.check_data(*data, init_params={k: v for k, v in given.items() if k not in own})

    def fitted(self, params: Mapping[str, Array]) -> Any:
        """The ordinary model's kernel and likelihood at fitted values."""
        return self.ordinary.fitted(params)

    def inclusion_probabilities(self, params: Mapping[str, Array]) -> np.ndarray:
        """Fitted λ [K] (the initial value when ``params`` has none)."""
        return self.selection.probabilities(params)

    def kl_selection(self, params: Mapping[str, Array]) -> Array:
        """KL[q_λ ‖ p_α] at fitted λ (scalar, including −log C)."""
        return self.selection.kl(params)

    def prune(self, params: Mapping[str, Array], mask: Array) -> tuple[Any, dict[str, Array]]:
        """The ordinary model on the candidates in ``mask`` [K] and its parameters: ``Z`` restricted to them, q(u)
        (where the model has one) to its marginal q(u_s) = N(m_s, S_ss), every other fitted value kept."""
        q_diag = getattr(self.ordinary, "q_diag", None)
        q_scale = None if q_diag is None else "u_scale" if q_diag else "u_scale_tril"
        sparse = {**gp_parameters(params), **self.selection.restrict(params, mask, self.ordinary.Z, q_scale)}
        return replace(self.ordinary, Z=np.asarray(sparse["Z"])), sparse


class SelectiveSGPR(SelectiveModel):
    """SGPR over a random subset s of the K candidates: L(s) is Titsias' bound of the selected ones.

    ``SelectiveSGPR(SGPR(kernel, likelihood, Z=candidates), alpha=0.1)``; see :class:`SelectiveModel`.
    """

    ordinary_class = SGPR

    def model(self, X: Array, y: Array | None = None) -> None:
        """s ~ p_α(s), then L(s) = Titsias' bound of the candidates in s, as the factor ``"collapsed_bound"``; with
        ``y=None`` (NumPyro's ``Predictive``), the prior f and y at X as SGPR draws them."""
        self.check_data(X, y)
        gp = self.ordinary
        kernel, likelihood = gp.hyperparameters()
        Z = sites.inducing_inputs(gp.Z, gp.learn_Z)
        s = sites.inclusion(self.num_candidates, self.alpha, Z.dtype)
        selected_collapsed_data(kernel, likelihood, Z, X, y, s)

    def guide(self, X: Array, y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors; s ~ q_λ(s)."""
        self.ordinary.hyperparameter_guide()
        sites.inclusion_posterior(self.num_candidates, self.initial_inclusion, jnp.asarray(self.ordinary.Z).dtype)

    def subset_bound(self, params: Mapping[str, Array], X: Array, y: Array, mask: Array) -> Array:
        """L(s): the collapsed bound with the candidates in ``mask`` [K] at fitted values (scalar; ``mask`` may be
        traced, so this maps over many masks under ``jax.vmap``)."""
        kernel, likelihood = self.fitted(params)
        Z = jnp.asarray(params.get("Z", self.ordinary.Z))
        return selected_collapsed_bound(kernel, likelihood, Z, X, y, jnp.asarray(mask, dtype=Z.dtype))


class SelectiveSVGP(SelectiveModel):
    """SVGP over a random subset s of the K candidates; q(u) unwhitened over all candidates.

    ``SelectiveSVGP(SVGP(kernel, likelihood, Z=candidates, whiten=False), alpha=0.1)``; see
    :class:`SelectiveModel`. The SVGP must be unwhitened (module docstring).
    """

    ordinary_class = SVGP

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ordinary.whiten:
            raise ValueError(
                "ordinary.whiten: SelectiveSVGP needs an SVGP with whiten=False; a subset of whitened v = L⁻¹u is "
                "not the marginal of the selected u, so q(u) must be parameterised over u itself"
            )

    def model(self, X: Array, y: Array | None = None) -> None:
        """s ~ p_α(s), u | s ~ N(0, K̂mm) (the selected block of Kmm; :mod:`ppl_sparsegp.core.masking`), and the
        data term of the SVGP on Z*_s for the batch as the factor ``"y"``; with ``y=None`` (NumPyro's
        ``Predictive``), f and y at every row of X given s and u as the sites ``"f"`` and ``"y"``."""
        self.check_data(X, y)
        gp = self.ordinary
        check_output_columns(y, gp.num_latent, gp.likelihood)
        s = sites.inclusion(self.num_candidates, self.alpha, jnp.asarray(gp.Z).dtype)
        kernel, likelihood = gp.hyperparameters()
        Z, Lmm, q_mu, q_sqrt = selected_inducing_outputs(gp, kernel, s, given_u=y is None)
        if y is None:
            sites.predictive(likelihood, *masked_conditional(kernel(Z, X), Lmm, kernel.diag(X), s, q_mu, q_sqrt))
            return
        with sites.data_plate(y.shape[0], gp.batch_size, gp.num_data) as idx:
            Xb, Yb = sites.batch(X, y, idx)
            mean, var = masked_conditional(kernel(Z, Xb), Lmm, kernel.diag(Xb), s, q_mu, q_sqrt)
            numpyro.factor("y", jnp.sum(likelihood.expectation_by_output(Yb, mean, var), axis=0))

    def guide(self, X: Array, y: Array | None = None) -> None:
        """s ~ q_λ(s), point masses of the hyperparameters with priors, and u ~ q(u_s) (the marginal of q(u))."""
        gp = self.ordinary
        P, K, dtype = gp.num_latent, self.num_candidates, jnp.asarray(gp.Z).dtype
        s = sites.inclusion_posterior(K, self.initial_inclusion, dtype)
        gp.hyperparameter_guide()
        sites.inducing_posterior(*masked_q(*sites.inducing_posterior_parameters(P, K, dtype, gp.q_diag), s))

    def subset_bound(self, params: Mapping[str, Array], X: Array, y: Array, mask: Array) -> Array:
        """L(s): the full-batch uncollapsed bound with the candidates in a concrete ``mask`` [K] (scalar)."""
        model, sparse = self.prune(params, mask)
        return model.elbo(sparse, X, y)
