"""The Pyro twin of :class:`ppl_sparsegp.infer.score_function.ScoreFunctionELBO`: the same estimator of the ELBO of a
guide with discrete sites (Uhrenholt, Charvet & Jensen, UAI 2021, Eq. 3; spec §3.1), on Pyro's traces.

For discrete guide sites s ~ q_λ(s) (support discrete) the ELBO splits as E_{q_λ(s)}[L(s)] − KL[q_λ(s) ‖ p(s)], where
L(s) gathers, for one particle, every observed site and factor and minus the KL of each reparameterised latent, in
closed form where torch's ``kl_divergence`` has it registered (q(u) against p(u), q(X) against N(0, I)) and as
log p − log q of the particle otherwise; the discrete sites' own KL is taken in closed form where registered
(:func:`ppl_sparsegp.pyro.subset_prior.kl_inclusion_point_process`) and differentiated exactly. With S particles the
surrogate's value is the estimate (1/S) Σ_i L(s⁽ⁱ⁾) − KL and its gradient

    ∇_λ ≈ (1/S) Σ_i (L(s⁽ⁱ⁾) − b) ∇_λ log q_λ(s⁽ⁱ⁾) − ∇_λ KL,      ∇_θ ≈ (1/S) Σ_i ∇_θ L(s⁽ⁱ⁾)   (θ: the rest).

``pathwise=False`` stops the gradient of L(s) itself, as the NumPyro twin does, so only the discrete sites' params
learn (the selection phase with the GP frozen): backpropagation then never reaches θ, whose ``.grad`` stays None
(where the NumPyro twin gives an exact zero). A guide with several discrete sites (one per layer of the deep GP)
gets one score Σ_sites log q(s) per particle and one baseline, as the NumPyro twin.

Pyro's ``TraceGraph_ELBO`` has the same expectation but estimates every KL from the particles (the 12 × |s| entries
of q(u) of the GP-LVM on oil flow among them) and starts its decaying-average baseline at 0, so its gradients are
noisier: at the same params its standard deviation is 2–11 times the NumPyro estimator's on the selective GP-LVM.

Baseline b, as the NumPyro twin: b_t = Σ_{j≥1} β^j L̄_{t−j} / Σ_{j≥1} β^j over the past steps' mean bounds
L̄ = (1/S) Σ_i L(s⁽ⁱ⁾) (β = ``baseline_decay``), and before any step the mean of the other S − 1 particles' bounds
(0 for S = 1). Its running sums are the param-store entries :data:`BASELINE_TOTAL` and :data:`BASELINE_WEIGHT`,
which ``loss_and_grads`` creates and updates (``loss`` only reads them), so that
:func:`ppl_sparsegp.pyro.svi.fit_svi` checkpoints them with the params the ELBO keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyro
import torch
from pyro.distributions.util import scale_and_mask
from pyro.infer import ELBO
from pyro.infer.enum import get_importance_trace
from torch.distributions.kl import kl_divergence

from ppl_sparsegp import validation
from ppl_sparsegp.core.score_function_terms import particle_terms

Array = Any

BASELINE_TOTAL = "__score_function_baseline_total"
"""Param-store name of the baseline's running sum Σ_j β^j L̄_{t−j}."""
BASELINE_WEIGHT = "__score_function_baseline_weight"
"""Param-store name of the baseline's running weight Σ_j β^j."""


def _closed_form_kl(guide_site: dict[str, Any], model_site: dict[str, Any]) -> Array | None:
    try:
        kl = kl_divergence(guide_site["fn"], model_site["fn"])
    except NotImplementedError:
        return None
    return scale_and_mask(kl, guide_site["scale"], guide_site["mask"]).sum()


class ScoreFunctionELBO(ELBO):
    """ELBO with score-function gradients for discrete guide sites and pathwise gradients for the rest.

    Args:
        num_particles: S, draws of the guide per step (the paper's default is 4).
        baseline_decay: β of the decaying-average baseline, in (0, 1) (0.95 in the released code).
        pathwise: also differentiate L(s) with respect to the continuous params (joint training); False freezes
            them (backpropagation does not reach them: their ``.grad`` stays None) so that only the discrete sites'
            params learn.
    """

    def __init__(self, num_particles: int = 4, *, baseline_decay: float = 0.95, pathwise: bool = True):
        validation.check_count("num_particles", num_particles, minimum=1)
        baseline_decay = validation.check_open_unit_interval("baseline_decay", baseline_decay)
        validation.check_bool("pathwise", pathwise)
        super().__init__(num_particles=num_particles)
        self.baseline_decay = float(baseline_decay)
        self.pathwise = pathwise

    def _get_trace(self, model: Callable, guide: Callable, args: tuple, kwargs: dict) -> tuple[Any, Any]:
        """The model's and the guide's trace of one particle (the guide's draws replayed), log-probs computed."""
        return get_importance_trace("flat", self.max_plate_nesting, model, guide, args, kwargs)

    def _particle(self, model: Callable, guide: Callable, args: tuple, kwargs: dict) -> tuple[Array, Array, Array]:
        """One draw: (L(s), Σ log q(s) over discrete sites, −KL of discrete sites in closed form), scalars."""
        model_trace, guide_trace = self._get_trace(model, guide, args, kwargs)
        return particle_terms(
            model_trace.nodes, guide_trace.nodes, lambda site: site["log_prob_sum"], _closed_form_kl, torch.zeros(())
        )

    def _particles(self, model: Callable, guide: Callable, args: tuple, kwargs: dict) -> tuple[Array, Array, Array]:
        """The S particles' (L(s), Σ log q(s), −KL of the discrete sites), each [S]."""
        draws = [self._particle(model, guide, args, kwargs) for _ in range(self.num_particles)]
        return tuple(torch.stack(values) for values in zip(*draws, strict=True))

    def loss(self, model: Callable, guide: Callable, *args: Any, **kwargs: Any) -> float:
        """The −ELBO estimate −((1/S) Σ_i L(s⁽ⁱ⁾) − KL) from S fresh particles, without gradients."""
        with torch.no_grad():
            bounds, _, exacts = self._particles(model, guide, args, kwargs)
        return -float(torch.mean(bounds + exacts))

    def _baseline(self, fixed_bounds: Array) -> Array:
        """b [S] for this step's bounds [S] (no gradient): the normalised decaying average, or leave-one-out."""
        S = self.num_particles
        leave_one_out = (fixed_bounds.sum() - fixed_bounds) / (S - 1) if S > 1 else torch.zeros_like(fixed_bounds)
        store = pyro.get_param_store()
        if BASELINE_WEIGHT not in store or not store[BASELINE_WEIGHT].item() > 0:
            return leave_one_out
        return (store[BASELINE_TOTAL] / store[BASELINE_WEIGHT]).detach().expand_as(fixed_bounds)

    def _update_baseline(self, fixed_bounds: Array) -> None:
        """b's running sums after this step: total ← β (total + L̄), weight ← β (weight + 1)."""
        store, beta = pyro.get_param_store(), self.baseline_decay
        total = store[BASELINE_TOTAL].detach() if BASELINE_TOTAL in store else torch.zeros(())
        weight = store[BASELINE_WEIGHT].detach() if BASELINE_WEIGHT in store else torch.zeros(())
        store[BASELINE_TOTAL] = beta * (total + fixed_bounds.mean())
        store[BASELINE_WEIGHT] = beta * (weight + 1.0)

    def loss_and_grads(self, model: Callable, guide: Callable, *args: Any, **kwargs: Any) -> float:
        """Backpropagate the negative surrogate of S fresh particles into the params and update the baseline;
        returns the −ELBO estimate (the surrogate's value)."""
        bounds, scores, exacts = self._particles(model, guide, args, kwargs)
        fixed_bounds = bounds.detach()
        learning_signal = fixed_bounds - self._baseline(fixed_bounds)
        differentiated = bounds if self.pathwise else fixed_bounds
        surrogate = differentiated + learning_signal * (scores - scores.detach()) + exacts
        loss = -surrogate.mean()
        if loss.requires_grad:
            loss.backward()
        self._update_baseline(fixed_bounds)
        return float(loss.detach())
