"""The Gaussians over inducing outputs u [P, M] that both PPLs wrap as distributions: their log densities and their
reparameterised draws from standard normal noise (thesis eqs 4.21, 4.23, 5.25).

* the prior p(u) = Π_p N(u_p | 0, Kmm) with Kmm = Lmm Lmmᵀ, or, whitened (``Lmm=None``), p(v) = N(0, I);
* the variational q(u) = Π_p N(u_p | m_p, R_p R_pᵀ) with R_p lower triangular [P, M, M] or diagonal [P, M].

``ppl_sparsegp.numpyro.distributions`` and ``ppl_sparsegp.pyro.distributions`` draw the noise ε with their own
generators and call these, so both compute every density with the same formula.
"""

from __future__ import annotations

import math
from typing import Any

from . import ops

Array = Any


def _gaussian(white: Array, logdet: Array, size: int) -> Array:
    """-½ (|white|² + log det + size log 2π), summed over the last two axes of ``white`` [..., P, M]."""
    xp = ops.namespace(white)
    maha = xp.sum(xp.sum(white * white, axis=-1), axis=-1)
    return -0.5 * (maha + logdet + size * math.log(2.0 * math.pi))


def prior_log_prob(value: Array, Lmm: Array | None) -> Array:
    """log p(u) of u [..., P, M] under Π_p N(0, Lmm Lmmᵀ), Lmm [M, M]; whitened (``Lmm=None``) log N(v | 0, I)
    -> [...]."""
    P, M = value.shape[-2:]
    if Lmm is None:
        return _gaussian(value, 0.0, P * M)
    white = ops.matrix_transpose(ops.solve_triangular(Lmm, ops.matrix_transpose(value), lower=True))
    return _gaussian(white, P * ops.logdet_from_cholesky(Lmm), P * M)


def posterior_log_prob(value: Array, loc: Array, scale: Array) -> Array:
    """log q(u) of u [..., P, M] under Π_p N(loc_p, R_p R_pᵀ), loc [P, M], R = ``scale`` [P, M, M] (lower) or its
    diagonal [P, M] -> [...]."""
    xp = ops.namespace(value, loc, scale)
    P, M = loc.shape
    r = value - loc
    if scale.ndim == loc.ndim:
        return _gaussian(r / scale, 2.0 * xp.sum(xp.log(xp.abs(scale))), P * M)
    white = ops.solve_triangular(scale, r[..., None], lower=True)[..., 0]
    return _gaussian(white, xp.sum(ops.logdet_from_cholesky(scale)), P * M)


def prior_draw(eps: Array, Lmm: Array | None) -> Array:
    """u = Lmm ε_p per row of ε [..., P, M] (whitened, ``Lmm=None``: v = ε)."""
    return eps if Lmm is None else eps @ ops.matrix_transpose(Lmm)


def posterior_draw(eps: Array, loc: Array, scale: Array) -> Array:
    """u_p = loc_p + R_p ε_p for ε [..., P, M]: R = ``scale`` [P, M, M] (lower) or its diagonal [P, M]."""
    if scale.ndim == loc.ndim:
        return loc + scale * eps
    return loc + (scale @ eps[..., None])[..., 0]
