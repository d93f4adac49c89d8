"""The terms of one particle of the score-function ELBO estimator, from a model's and a guide's trace, for both
engines (NumPyro's traces are dicts of sites, Pyro's ``Trace.nodes`` too; the arithmetic is the backend's own).

For discrete guide sites s ~ q_λ(s) the ELBO splits as E_{q_λ(s)}[L(s)] − KL[q_λ(s) ‖ p(s)] (Uhrenholt, Charvet &
Jensen, UAI 2021, Eq. 3), where L(s) gathers every observed site and, for each continuous latent, minus its KL in
closed form where one is registered, else log p − log q of the particle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Array = Any
Site = Mapping[str, Any]


def particle_terms(
    model_sites: Mapping[str, Site],
    guide_sites: Mapping[str, Site],
    log_prob_sum: Callable[[Site], Array],
    closed_form_kl: Callable[[Site, Site], Array | None],
    zero: Array,
) -> tuple[Array, Array, Array]:
    """``(L(s), Σ log q(s) over the discrete guide sites, −KL of the discrete sites in closed form)`` of one particle,
    scalars: a discrete site whose KL has no closed form contributes log p − log q to L(s) instead.

    Args:
        model_sites, guide_sites: name -> site of the model's trace (the guide's draws replayed) and the guide's.
        log_prob_sum: a site's scaled (and masked) log-density of its value, summed.
        closed_form_kl: KL[q ‖ p] of a guide site against the model's, scaled and summed, or None if not registered.
        zero: the backend's scalar zero.

    Raises:
        ValueError: a latent site of one program missing from the other.
    """
    bound = score = exact = zero
    for name, site in model_sites.items():
        if site["type"] != "sample":
            continue
        if site["is_observed"]:
            bound = bound + log_prob_sum(site)
            continue
        if name not in guide_sites:
            raise ValueError(f"model: latent site {name!r} has no counterpart in the guide")
        guide_site = guide_sites[name]
        kl = closed_form_kl(guide_site, site)
        if guide_site["fn"].support.is_discrete:
            score = score + log_prob_sum(guide_site)
            if kl is not None:
                exact = exact - kl
                continue
        if kl is not None:
            bound = bound - kl
        else:
            bound = bound + log_prob_sum(site) - log_prob_sum(guide_site)
    for name, site in guide_sites.items():
        if site["type"] == "sample" and name not in model_sites and not site["is_observed"]:
            raise ValueError(f"guide: site {name!r} has no counterpart in the model")
    return bound, score, exact
