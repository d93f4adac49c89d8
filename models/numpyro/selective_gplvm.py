"""Probabilistic selection of inducing points for the Bayesian GP-LVM (Uhrenholt et al. 2021, §5.3, App. C.5).

Sites: those of the GP-LVM (:mod:`models.numpyro.gplvm`: latent ``"X"`` [B, Q] in the plate ``"data"``, guide params
``"X_loc"``, ``"X_scale"`` [N, Q], hyperparameters, ``"Z"`` [K, Q]; :class:`SelectiveGPLVM` also ``"u"`` [D, K],
factor ``"y"``, ``"u_loc"`` [D, K], ``"u_scale_tril"`` [D, K, K]; :class:`SelectiveCollapsedGPLVM` the factor
``"collapsed_bound"``) and of the selection (:mod:`models.numpyro.selective`: latent ``"inclusion"`` [K], guide param
``"inclusion_probs"`` [K], the guide's mutable ``"score_function_baseline"``).

The inducing inputs of a :class:`BayesianGPLVM` are a random subset S of a **fixed** grid Z* [K, Q] of candidates
in latent space (:func:`ppl_sparsegp.recipes.selective.latent_grid`; the paper: 15 × 15 = 225 points, α = 3),
with the point-process prior and
guide of :mod:`models.numpyro.selective` (spec §2, paper Eq. 2)::

    s ~ p_α(s) ∝ exp(−α |s|²),   q_λ(s) = Π_k Bernoulli(s_k | λ_k)
    ELBO = E_{q_λ(s)}[L(s)] − KL[q_λ ‖ p_α],

where L(s) is a GP-LVM bound of :mod:`models.numpyro.gplvm` with the candidates in s, at reparameterised latent draws:

* :class:`SelectiveGPLVM` (the paper's): the uncollapsed bound (closed-form KLs of q(u) and q(X)), evaluated by
  :func:`~ppl_sparsegp.core.masking.masked_conditional` on one unwhitened q(u) over all K candidates;
  :meth:`~SelectiveGPLVM.prune` yields an ordinary BayesianGPLVM with the kept grid points.
* :class:`SelectiveCollapsedGPLVM`: Titsias' collapsed bound of the selected candidates (q(u) optimal for each
  subset and latent draw; :func:`~ppl_sparsegp.core.masking.masked_sgpr_elbo`); it prunes to a CollapsedGPLVM and
  converges in far fewer steps.

Each writes its ``model`` and ``guide`` in full with the site helpers and holds the ordinary GP-LVM over all K
candidates (``ordinary``: its checks, its :class:`~models.numpyro.gplvm.LatentInputs`, its start values) and a
:class:`~models.numpyro.selective.SubsetSelection` (λ, the selection's KL, pruning).

The recipe :func:`ppl_sparsegp.recipes.selective.fit_selective_gplvm` trains everything **jointly, without
phases** (paper §5.3): λ by the score-function
estimator (Adam 0.2), the latents, kernel, q(u) (and the noise, unless fixed) by their pathwise gradient (Adam
0.01), recording λ along the way so one can watch grid points switch on as the latents move. With ``pre_steps``
it first fits the GP-LVM on all K grid points and starts the joint phase from there, as the released demo does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import numpyro

from ppl_sparsegp.core.masking import masked_cholesky, masked_conditional, masked_q, masked_sgpr_elbo
from ppl_sparsegp.infer.score_function import ScoreFunctionELBO
from ppl_sparsegp.numpyro import sites

from ._base import GPModel, base_fields
from .gplvm import BayesianGPLVM, CollapsedGPLVM, LatentInputs
from .selective import SubsetSelection, gp_parameters

Array = Any


def _selection_elbo(model: Any, params: Mapping[str, Array], Y: Array, key: Array, num_samples: int) -> Array:
    """E_{q_λ}[L(s)] − KL[q_λ ‖ p_α] of a full-batch selective GP-LVM from ``num_samples`` joint draws of (s, X)."""
    loss = ScoreFunctionELBO(num_samples)
    estimate = jax.jit(lambda k, p, Y: -loss.loss(k, p, model.model, model.guide, Y))
    return estimate(key, dict(params), jnp.asarray(Y))


@dataclass(eq=False)
class SelectiveGPLVM(GPModel):
    """Bayesian GP-LVM over a random subset of the K candidate inducing inputs ``Z`` [K, Q] (q(u) unwhitened).

    Args (beyond :class:`GPModel`'s): those of :class:`BayesianGPLVM`; keyword-only ``alpha`` and
    ``initial_inclusion`` as :class:`models.numpyro.selective.SubsetSelection`.
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
    components = ("ordinary", "selection")

    def __post_init__(self) -> None:
        self.ordinary = BayesianGPLVM(**base_fields(self, BayesianGPLVM))  # the GP-LVM on every candidate
        self.selection = SubsetSelection(self.num_candidates, self.alpha, self.initial_inclusion)
        super().__post_init__()

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
    ``initial_inclusion`` as :class:`models.numpyro.selective.SubsetSelection`.
    """

    Z: Array = None
    learn_Z: bool = True
    X_init: Array = field(default=None, kw_only=True)
    X_scale_init: float = field(default=0.1, kw_only=True)
    alpha: float = field(default=0.1, kw_only=True)
    initial_inclusion: float = field(default=0.5, kw_only=True)
    ordinary: CollapsedGPLVM = field(init=False, repr=False)
    selection: SubsetSelection = field(init=False, repr=False)
    components = ("ordinary", "selection")

    def __post_init__(self) -> None:
        self.ordinary = CollapsedGPLVM(**base_fields(self, CollapsedGPLVM))  # the GP-LVM on every candidate
        self.selection = SubsetSelection(self.num_candidates, self.alpha, self.initial_inclusion)
        super().__post_init__()

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
