"""Posterior predictives as equal-weight mixtures over S posterior draws (thesis §5.5; BSGP §2.5), on any backend.

Each draw s gives a Gaussian N(m_s, v_s) (of f, or y's predictive moments) and a log density log p(y_* | draw s)::

    E = (1/S) Σ_s m_s,    Var = (1/S) Σ_s (v_s + m_s²) − E²          (the law of total variance)
    log p(y_* | D) = logsumexp_s log p(y_* | draw s) − log S         (averaged before the log)
"""

from __future__ import annotations

import math
from typing import Any

from ppl_sparsegp.core import ops

Array = Any


def mixture_moments(means: Array, variances: Array) -> tuple[Array, Array]:
    """Mean and variance of the mixture of per-draw Gaussians ``means``, ``variances`` [S, ...] -> each [...]."""
    xp = ops.namespace(means, variances)
    mean = xp.mean(means, axis=0)
    return mean, xp.mean(variances + means**2, axis=0) - mean**2


def mixture_log_density(log_densities: Array) -> Array:
    """log of the mean over draws of ``exp(log_densities)`` [S, ...] -> [...], stable."""
    return ops.logsumexp(log_densities, axis=0) - math.log(log_densities.shape[0])
