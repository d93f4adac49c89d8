"""The update rules of the stochastic-gradient MCMC kernels, written once for jax arrays and torch tensors.

The NumPyro kernels (:mod:`ppl_sparsegp.infer.sghmc`) and their Pyro twins (:mod:`ppl_sparsegp.pyro.sgmcmc`) keep
their own bookkeeping (state, minibatch potential, NaN guard, point estimates) and apply these functions to every
latent array (a leaf of ``z``) with the gradient ``grad`` of the potential U (negative log joint in unconstrained
space, a minibatch estimate scaled by N/B) at the current ``z`` and standard normal ``noise``, all of one shape.
The derivations (and the scale-adapted kernel's relation to the BSGP spec's per-datapoint form) are in the
docstrings of the kernels.

References: Welling & Teh (2011), ICML; Chen, Fox & Guestrin (2014), ICML; Springenberg, Klein, Falkner & Hutter
(2016), NeurIPS; BSGP spec (``shared/specs/001_bsgp.md``) section 2.2.
"""

from __future__ import annotations

import math
from typing import Any

import array_api_compat

Array = Any

MOMENT_FLOOR = 1e-16
"""The floor of the scale-adapted kernel's moments and noise variance (as the released BSGP code)."""


def sgld_step(z: Array, grad: Array, noise: Array, step_size: float) -> Array:
    """SGLD (Welling & Teh 2011, eq 4 with a constant ε): ``z ← z − (ε/2) ∇U(z) + √ε ξ``; all arrays one shape."""
    return z - 0.5 * step_size * grad + math.sqrt(step_size) * noise


def sghmc_step(
    z: Array, r: Array, grad: Array, noise: Array, step_size: float, friction: float, inv_mass: float
) -> tuple[Array, Array]:
    """SGHMC (Chen et al. 2014, eq 15 with B̂ = 0), momentum first, then the position with the new momentum::

        r ← (1 − ε C M⁻¹) r − ε ∇U(z) + √(2εC) ξ,    z ← z + ε M⁻¹ r

    Returns the new (z, r); all arrays one shape, ``inv_mass`` the scalar M⁻¹.
    """
    r = (1 - step_size * friction * inv_mass) * r - step_size * grad + math.sqrt(2 * step_size * friction) * noise
    return z + step_size * inv_mass * r, r


def inverse_mass(v_hat: Array) -> Array:
    """The scale-adapted kernel's diagonal preconditioner M̃⁻¹ = 1/(√(v̂ + 1e-16) + 1e-16) from v̂, the running mean
    of ∇U² (Springenberg et al. 2016, section 4.2); same shape as ``v_hat``."""
    xp = array_api_compat.array_namespace(v_hat)
    return 1 / (xp.sqrt(v_hat + MOMENT_FLOOR) + MOMENT_FLOOR)


def adaptive_sghmc_step(
    z: Array, p: Array, grad: Array, noise: Array, v_hat: Array, step_size: float, mdecay: float
) -> tuple[Array, Array]:
    """One scale-adapted SGHMC step (Springenberg et al. 2016, eq 9 as BSGP uses it) with h = ε² M̃⁻¹(v̂)::

        p ← (1 − α) p − h ∇U(z) + N(0, max(2αh, 1e-16)),    z ← z + p

    Returns the new (z, p); all arrays one shape, α = ``mdecay``.
    """
    xp = array_api_compat.array_namespace(z)
    h = step_size**2 * inverse_mass(v_hat)
    p = (1 - mdecay) * p - h * grad + xp.sqrt(xp.clip(2 * mdecay * h, min=MOMENT_FLOOR)) * noise
    return z + p, p


def adapt_moments(tau: Array, g_bar: Array, v_hat: Array, grad: Array) -> tuple[Array, Array, Array]:
    """The warmup update of the scale-adapted kernel's per-element moments, all right-hand sides at old values::

        r = 1/(τ+1);  ḡ ← (1−r) ḡ + r ∇U;  v̂ ← (1−r) v̂ + r ∇U²;  τ ← 1 + τ (1 − ḡ²/(v̂ + 1e-16))

    Returns the new (τ, ḡ, v̂); all arrays one shape.
    """
    r = 1 / (tau + 1)
    return (
        1 + tau * (1 - g_bar**2 / (v_hat + MOMENT_FLOOR)),
        (1 - r) * g_bar + r * grad,
        (1 - r) * v_hat + r * grad**2,
    )
