"""Probabilistic selection of inducing points (Uhrenholt, Charvet & Jensen, UAI 2021; spec 000) as Pyro programs, the
twins of :mod:`models.numpyro.selective` (its docstring states the model, the guide and both bounds L(s)).

Site names (as the NumPyro twin's): the hyperparameter sites; param ``"Z"`` [K, D] (the candidates); latent
``"inclusion"`` [K] (the mask s); guide param ``"inclusion_probs"`` [K] (λ in (0, 1), learned as logits).
:class:`SelectiveSGPR` adds the factor ``"collapsed_bound"``; :class:`SelectiveSVGP` the latent ``"u"`` [P, K], the
plate ``"data"``, the factor ``"y"`` [B] and the guide params ``"u_loc"`` [P, K] and ``"u_scale_tril"`` [P, K, K]
(``"u_scale"`` [P, K] when ``q_diag``).

    s ~ p_α(s) ∝ exp(−α |s|²),   q(s) = Π_k Bernoulli(s_k | λ_k),   ELBO = E_{q_λ(s)}[L(s)] − KL[q_λ ‖ p_α]

L(s) is evaluated at fixed shapes by :mod:`ppl_sparsegp.core.masking`, the functions the NumPyro twins call.

Fitting: the recipes (:mod:`ppl_sparsegp.recipes.selective_pyro`) use
:class:`ppl_sparsegp.pyro.score_function.ScoreFunctionELBO`, the NumPyro twin's estimator on Pyro: λ by the score
function against a normalised decaying-average baseline, KL[q_λ ‖ p_α] (:meth:`SelectiveModel.kl_selection`, through
the KL registered with torch's ``kl_divergence``) and, for the SVGP, the KL of q(u) in closed form. The guide's
``"inclusion"`` site is not reparameterisable and also carries ``infer={"baseline": ...}``
(:func:`ppl_sparsegp.pyro.sites.score_function_baseline`), so ``pyro.infer.TraceGraph_ELBO`` fits it too: λ gets
(L̃(s) − b) ∇_λ log q_λ(s), with L̃(s) the downstream cost of s and b Pyro's decaying average of past L̃, every KL
estimated from the draws (same expectation, noisier). That baseline's running average is the param
``"__baseline_avg_downstream_cost_inclusion"`` (:func:`~ppl_sparsegp.pyro.sites.baseline_param_name`), which
:func:`gp_parameters` drops, as it drops the running sums of ``ScoreFunctionELBO``'s baseline.

:meth:`SelectiveModel.prune` turns a drawn mask into an ordinary Pyro :class:`SGPR` / :class:`SVGP` with the
selected points.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import pyro
import torch
from torch.distributions.kl import kl_divergence

from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.core.masking import masked_cholesky, masked_conditional, masked_q, masked_sgpr_elbo, subset_q
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor, float_dtype
from ppl_sparsegp.pyro.score_function import BASELINE_TOTAL, BASELINE_WEIGHT
from ppl_sparsegp.pyro.subset_prior import IndependentInclusion, SubsetPointProcess

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
BASELINE_PARAM = sites.baseline_param_name(INCLUSION_SITE)
SCORE_FUNCTION_BASELINE = (BASELINE_TOTAL, BASELINE_WEIGHT)
"""The param-store entries of :class:`~ppl_sparsegp.pyro.score_function.ScoreFunctionELBO`'s baseline."""

__all__ = [
    "SelectiveModel",
    "SelectiveSGPR",
    "SelectiveSVGP",
    "SubsetSelection",
    "gp_parameters",
    "selected_inducing_outputs",
]


def gp_parameters(params: Mapping[str, Array]) -> dict[str, Array]:
    """Fitted parameters without the selection's (λ of every layer and the score-function baselines)."""
    baseline = sites.baseline_param_name("")
    return {
        k: v
        for k, v in params.items()
        if k not in (INCLUSION_PARAM, *SCORE_FUNCTION_BASELINE)
        and not k.endswith(f".{INCLUSION_PARAM}")
        and not k.startswith(baseline)
    }


@dataclass(frozen=True)
class SubsetSelection:
    """The inducing set s over K candidates that a selective model holds: the prior p_α, the guide's λ, the KL
    between them, and the restriction of fitted values to a drawn subset; the fields of
    :class:`models.numpyro.selective.SubsetSelection`."""

    num_candidates: int
    alpha: float = 0.1
    initial_inclusion: float = 0.5
    prefix: str = ""

    def __post_init__(self) -> None:
        check_alpha(self.alpha)
        check_initial_inclusion(self.initial_inclusion)

    def parameter_names(self) -> set[str]:
        """The selection's sites: ``"<prefix>inclusion"``, ``"<prefix>inclusion_probs"``, the baseline's average of
        ``TraceGraph_ELBO`` and the running sums of :class:`~ppl_sparsegp.pyro.score_function.ScoreFunctionELBO`'s."""
        site = f"{self.prefix}{INCLUSION_SITE}"
        return {site, f"{self.prefix}{INCLUSION_PARAM}", sites.baseline_param_name(site), *SCORE_FUNCTION_BASELINE}

    def prior(self) -> SubsetPointProcess:
        """p_α over masks [K]."""
        return SubsetPointProcess(self.num_candidates, torch.as_tensor(self.alpha, dtype=float_dtype()))

    def probabilities(self, params: Mapping[str, Array]) -> Array:
        """Fitted λ [K] (the initial value when ``params`` has none)."""
        default = torch.full((self.num_candidates,), self.initial_inclusion, dtype=float_dtype())
        return as_tensor(params.get(f"{self.prefix}{INCLUSION_PARAM}", default))

    def check_initial(self, init_params: Mapping[str, Array]) -> None:
        """Refuse an initial λ (``"<prefix>inclusion_probs"``) that is not K probabilities in (0, 1)."""
        check_initial_probabilities(init_params, f"{self.prefix}{INCLUSION_PARAM}", self.num_candidates)

    def kl(self, params: Mapping[str, Array]) -> Array:
        """KL[q_λ ‖ p_α] at fitted λ (scalar, including −log C)."""
        return kl_divergence(IndependentInclusion(self.probabilities(params)), self.prior())

    def selected(self, mask: Array, name: str = "mask") -> Array:
        """Indices [M] of the candidates in a concrete mask [K]; raises when it is empty or malformed."""
        return torch.as_tensor(selected_indices(mask, self.num_candidates, name))

    def restrict(
        self, params: Mapping[str, Array], mask: Array, Z: Array, q_scale: str | None = None, name: str = "mask"
    ) -> dict[str, Array]:
        """The sparse GP's values on the candidates in ``mask`` [K]: ``"<prefix>Z"`` [M, D] (fitted, else ``Z``)
        and, when ``q_scale`` names q(u)'s square root (``"u_scale_tril"`` or ``"u_scale"``), its marginal
        q(u_I) = N(m_I, S_II) at ``"<prefix>u_loc"`` and ``"<prefix><q_scale>"``."""
        index = self.selected(mask, name)
        p = self.prefix
        out = {f"{p}Z": as_tensor(params.get(f"{p}Z", Z))[index]}
        if q_scale is not None:
            loc, scale = as_tensor(params[f"{p}u_loc"]), as_tensor(params[f"{p}{q_scale}"])
            scale = torch.tril(scale) if q_scale == "u_scale_tril" else scale  # a Cholesky factor: its lower triangle
            out[f"{p}u_loc"], out[f"{p}{q_scale}"] = subset_q(loc, scale, index)
        return out


def selected_inducing_outputs(
    gp: Any, kernel: Kernel, s: Array, given_u: bool = False
) -> tuple[Array, Array, Array, Array | None]:
    """Model side of the inducing outputs of an uncollapsed selective model whose ordinary model ``gp`` has
    P = ``gp.num_latent`` outputs over the K candidates ``gp.Z``, given the mask ``s`` [K]: the param ``"Z"`` and
    u | s ~ N(0, K̂mm) at site ``"u"`` [P, K]; returns Z [K, D], the masked Cholesky factor [K, K] and the q(u_s)
    the data term is scored under (the marginal N(m_s, S_ss) of the guide's q(u), or, ``data_term="sampled"`` or
    ``given_u``, the sampled u with q_sqrt None), as :func:`models.numpyro.selective.selected_inducing_outputs`."""
    P, K = gp.num_latent, int(gp.Z.shape[0])
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
    """Model side of a collapsed selective model once s and X are drawn: L(s) as the factor ``"collapsed_bound"``;
    with ``y=None`` (``pyro.infer.Predictive``), the prior f and y at X."""
    if y is None:
        sites.prior_predictive(kernel, likelihood, X)
        return
    pyro.factor("collapsed_bound", selected_collapsed_bound(kernel, likelihood, Z, X, y, s))


@scoped_methods
@dataclass(eq=False)
class SelectiveModel:
    """What every selective model is made of: the ordinary Pyro model over all K candidates ``ordinary.Z`` [K, D]
    and the :class:`SubsetSelection` over them (:class:`models.numpyro.selective.SelectiveModel`)."""

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
        """The ordinary model's relative jitter."""
        return self.ordinary.jitter

    @property
    def num_candidates(self) -> int:
        """K, the number of candidate inducing inputs."""
        return int(self.ordinary.Z.shape[0])

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the ordinary model's and the selection's."""
        return self.ordinary.parameter_names() | self.selection.parameter_names()

    def check_data(self, *data: Array) -> None:
        """The ordinary model's checks of the data (X [N, D] and y, or a GP-LVM's Y [N, D])."""
        self.ordinary.check_data(*data)

    def fitted(self, params: Mapping[str, Array]) -> Any:
        """The ordinary model's kernel and likelihood at fitted values."""
        return self.ordinary.fitted(params)

    def inclusion_probabilities(self, params: Mapping[str, Array]) -> Array:
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
        return replace(self.ordinary, Z=sparse["Z"]), sparse


class SelectiveSGPR(SelectiveModel):
    """SGPR over a random subset s of the K candidates: L(s) is Titsias' bound of the selected ones.

    ``SelectiveSGPR(SGPR(kernel, likelihood, Z=candidates), alpha=0.1)``.
    """

    ordinary_class = SGPR

    def model(self, X: Array, y: Array | None = None) -> None:
        """s ~ p_α(s), then L(s) as the factor ``"collapsed_bound"``; with ``y=None`` the prior f and y at X."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        gp = self.ordinary
        kernel, likelihood = gp.hyperparameters()
        Z = sites.inducing_inputs(gp.Z, gp.learn_Z)
        s = sites.inclusion(self.num_candidates, self.alpha, Z.dtype)
        selected_collapsed_data(kernel, likelihood, Z, X, y, s)

    def guide(self, X: Array, y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors; s ~ q_λ(s) with the score-function baseline."""
        self.ordinary.hyperparameter_guide()
        sites.inclusion_posterior(self.num_candidates, self.initial_inclusion, self.ordinary.Z.dtype)

    def subset_bound(self, params: Mapping[str, Array], X: Array, y: Array, mask: Array) -> Array:
        """L(s): the collapsed bound with the candidates in ``mask`` [K] at fitted values (scalar)."""
        kernel, likelihood = self.fitted(params)
        Z = as_tensor(params.get("Z", self.ordinary.Z))
        return selected_collapsed_bound(kernel, likelihood, Z, as_tensor(X), as_tensor(y), as_tensor(mask).to(Z.dtype))


class SelectiveSVGP(SelectiveModel):
    """SVGP over a random subset s of the K candidates; q(u) unwhitened over all candidates.

    ``SelectiveSVGP(SVGP(kernel, likelihood, Z=candidates, whiten=False), alpha=0.1)``.
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
        """s ~ p_α(s), u | s ~ N(0, K̂mm), and the data term of the SVGP on Z*_s for the batch as the factor
        ``"y"``; with ``y=None``, f and y at every row of X given s and u as the sites ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        gp = self.ordinary
        check_output_columns(y, gp.num_latent, gp.likelihood)
        s = sites.inclusion(self.num_candidates, self.alpha, gp.Z.dtype)
        kernel, likelihood = gp.hyperparameters()
        Z, Lmm, q_mu, q_sqrt = selected_inducing_outputs(gp, kernel, s, given_u=y is None)
        if y is None:
            sites.predictive(likelihood, *masked_conditional(kernel(Z, X), Lmm, kernel.diag(X), s, q_mu, q_sqrt))
            return
        with sites.data_plate(y.shape[0], gp.batch_size, gp.num_data) as idx:
            Xb, Yb = sites.batch(X, y, idx)
            mean, var = masked_conditional(kernel(Z, Xb), Lmm, kernel.diag(Xb), s, q_mu, q_sqrt)
            pyro.factor("y", torch.sum(likelihood.expectation_by_output(Yb, mean, var), dim=0))

    def guide(self, X: Array, y: Array | None = None) -> None:
        """s ~ q_λ(s), point masses of the hyperparameters with priors, and u ~ q(u_s) (the marginal of q(u))."""
        gp = self.ordinary
        P, K, dtype = gp.num_latent, self.num_candidates, gp.Z.dtype
        s = sites.inclusion_posterior(K, self.initial_inclusion, dtype)
        gp.hyperparameter_guide()
        sites.inducing_posterior(*masked_q(*sites.inducing_posterior_parameters(P, K, dtype, gp.q_diag), s))

    def subset_bound(self, params: Mapping[str, Array], X: Array, y: Array, mask: Array) -> Array:
        """L(s): the full-batch uncollapsed bound with the candidates in a concrete ``mask`` [K] (scalar)."""
        model, sparse = self.prune(params, mask)
        return model.elbo(sparse, X, y)
