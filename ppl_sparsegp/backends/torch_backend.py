"""torch implementations of the operations :mod:`ppl_sparsegp.core.ops` cannot write with the array API.

Imported by :mod:`ppl_sparsegp.core.ops` (by name, lazily) only when it is handed a torch tensor. torch runs
eagerly, so the jitter escalation is the ordinary Python loop of ``ops``; this module only supplies one attempt.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import torch

Array = Any


def raw_cholesky(A: Array) -> Array | None:
    """Lower Cholesky factor of A [..., n, n], or None when any matrix of the batch is not positive definite."""
    L, info = torch.linalg.cholesky_ex(A)
    return None if bool(torch.any(info != 0)) else L


def solve_triangular(L: Array, B: Array, lower: bool = True, transpose: bool = False) -> Array:
    """``L X = B`` (``Lᵀ X = B`` when ``transpose``): L [..., n, n], B [..., n, k] -> [..., n, k]."""
    T = L.mT if transpose else L
    return torch.linalg.solve_triangular(T, B, upper=(lower == transpose))


def stop_gradient(x: Array) -> Array:
    return x.detach()


def special() -> SimpleNamespace:
    """The special functions ops uses, under the names of ``scipy.special``. ``ndtr`` is ``erfc(-x / sqrt 2) / 2``:
    ``torch.special.ndtr`` returns 0 below about -8.3 in float64, where the Beta likelihood still needs Phi."""
    return SimpleNamespace(
        ndtr=lambda x: 0.5 * torch.special.erfc(-x / math.sqrt(2.0)),
        log_ndtr=torch.special.log_ndtr,
        gammaln=torch.lgamma,
        logsumexp=lambda x, axis: torch.logsumexp(x, dim=axis),
    )
