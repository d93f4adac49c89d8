"""An ELBO for guides with discrete sites: score-function gradients with a decaying-average baseline.

Uhrenholt, Charvet & Jensen (UAI 2021) Eq. 3 and spec §3.1. For a guide whose discrete sites (those whose
support is discrete) s ~ q_λ(s) select what the rest of the model sees, the ELBO splits as

    ELBO = E_{q_λ(s)}[L(s)] − KL[q_λ(s) ‖ p(s)],

where L(s) gathers every model and guide term of one particle except those of the discrete sites themselves:
observed sites and factors, and minus the KL (closed form where registered, else log p − log q) of each
reparameterised latent. The discrete sites' own term, −KL[q_λ ‖ p], is taken in closed form when a KL is
registered for the pair (e.g. :func:`ppl_sparsegp.numpyro.subset_prior.kl_inclusion_point_process`) and is then
differentiated exactly; otherwise it joins L(s) as log p(s) − log q(s).

With S particles s⁽¹⁾..s⁽ˢ⁾ ~ q_λ (``num_particles``), the gradient is

    ∇_λ ≈ (1/S) Σ_i (L(s⁽ⁱ⁾) − b) ∇_λ log q_λ(s⁽ⁱ⁾) − ∇_λ KL            (score function, Eq. 3)
    ∇_θ ≈ (1/S) Σ_i ∇_θ L(s⁽ⁱ⁾)                                          (pathwise, θ: every other parameter)

built as a surrogate whose value is the ELBO estimate (1/S) Σ_i L(s⁽ⁱ⁾) − KL and whose gradient is the above.
``pathwise=False`` stops the gradient of L(s) itself, so only the discrete sites' parameters learn (the released
code's "GP frozen" phase); θ then gets an exact zero gradient.

Baseline b (spec §3.1): the decaying average of the past steps' mean bounds L̄_t = (1/S) Σ_i L(s⁽ⁱ⁾),
b_t = Σ_{j≥1} β^j L̄_{t−j} / Σ_{j≥1} β^j with β = ``baseline_decay`` (the released code truncates the same
weights at 200 steps, where 0.95²⁰⁰ = 3.5e-5). The current step's draws are not in b_t, so the estimator stays
unbiased. Before there is any history (the first step, or a guide without the declaration below) draw i uses the
mean bound of the other S − 1 draws, which is independent of draw i and so keeps the estimator unbiased (0 when
S = 1). The released code uses b = 1 there; since bounds are often thousands of nats, that first gradient is
orders of magnitude larger than the later ones and would stay in Adam's second moment for thousands of steps.
The running sums live in NumPyro's mutable state: the guide declares them by calling
:func:`score_function_baseline` once, and ``SVI`` carries them from step to step (and ``fit_svi`` checkpoints
them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from numpyro.distributions.kl import kl_divergence
from numpyro.distributions.util import scale_and_mask
from numpyro.handlers import replay, seed, substitute, trace
from numpyro.infer.elbo import ELBO
from numpyro.primitives import mutable

from ppl_sparsegp import validation
from ppl_sparsegp.core.score_function_terms import particle_terms

Array = Any

BASELINE_SITE = "score_function_baseline"
"""Name of the mutable site holding the baseline's running sums {"total": Σ β^j L̄, "weight": Σ β^j}."""


def score_function_baseline() -> dict[str, Array]:
    """Declare the baseline's running sums in a guide (call once per guide execution); returns them."""
    zero = jnp.zeros((), dtype=jnp.result_type(float))
    return mutable(BASELINE_SITE, {"total": zero, "weight": zero})


def _log_prob_sum(site: dict[str, Any]) -> Array:
    return jnp.sum(scale_and_mask(site["fn"].log_prob(site["value"]), site["scale"]))


def _closed_form_kl(guide_site: dict[str, Any], model_site: dict[str, Any]) -> Array | None:
    try:
        kl = kl_divergence(guide_site["fn"], model_site["fn"])
    except NotImplementedError:
        return None
    return jnp.sum(scale_and_mask(kl, guide_site["scale"]))


class ScoreFunctionELBO(ELBO):
    """ELBO with score-function gradients for discrete guide sites and pathwise gradients for the rest.

    Args:
        num_particles: S, draws of the guide per step (the paper's default is 4).
        baseline_decay: β of the decaying-average baseline, in (0, 1) (0.95 in the released code).
        pathwise: also differentiate L(s) with respect to the continuous parameters (joint training); False
            freezes them (their gradients are exactly zero) so that only the discrete sites' parameters learn.
    """

    can_infer_discrete = True

    def __init__(self, num_particles: int = 4, *, baseline_decay: float = 0.95, pathwise: bool = True):
        validation.check_count("num_particles", num_particles, minimum=1)
        baseline_decay = validation.check_open_unit_interval("baseline_decay", baseline_decay)
        validation.check_bool("pathwise", pathwise)
        super().__init__(num_particles=num_particles)
        self.baseline_decay = float(baseline_decay)
        self.pathwise = pathwise

    def _particle(self, key: Array, param_map: dict, model: Callable, guide: Callable, args, kwargs):
        """One draw: (L(s), Σ log q(s) over discrete sites, −KL of discrete sites in closed form)."""
        model_key, guide_key = jax.random.split(key)
        guide_trace = trace(substitute(seed(guide, guide_key), data=param_map)).get_trace(*args, **kwargs)
        model_trace = trace(substitute(replay(seed(model, model_key), guide_trace), data=param_map)).get_trace(
            *args, **kwargs
        )
        return particle_terms(model_trace, guide_trace, _log_prob_sum, _closed_form_kl, jnp.zeros(()))

    def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        """Negative surrogate ELBO (its value is −ELBO estimate) and the updated baseline sums."""
        state = param_map.get(BASELINE_SITE)
        keys = jax.random.split(rng_key, self.num_particles)
        bounds, scores, exacts = self.vectorize_particles_fn(
            lambda k: self._particle(k, param_map, model, guide, args, kwargs), keys
        )
        fixed_bounds = jax.lax.stop_gradient(bounds)
        S = self.num_particles
        leave_one_out = (jnp.sum(fixed_bounds) - fixed_bounds) / (S - 1) if S > 1 else jnp.zeros_like(fixed_bounds)
        if state is None:
            baseline = leave_one_out
        else:
            weight = state["weight"]
            average = state["total"] / jnp.where(weight > 0, weight, 1.0)
            baseline = jnp.where(weight > 0, average, leave_one_out)
        learning_signal = fixed_bounds - jax.lax.stop_gradient(baseline)
        differentiated = bounds if self.pathwise else fixed_bounds
        surrogate = differentiated + learning_signal * (scores - jax.lax.stop_gradient(scores)) + exacts
        loss = -jnp.mean(surrogate)
        if state is None:
            return {"loss": loss, "mutable_state": None}
        beta = self.baseline_decay
        new_state = {
            "total": jax.lax.stop_gradient(beta * (state["total"] + jnp.mean(fixed_bounds))),
            "weight": jax.lax.stop_gradient(beta * (state["weight"] + 1.0)),
        }
        return {"loss": loss, "mutable_state": {BASELINE_SITE: new_state}}
