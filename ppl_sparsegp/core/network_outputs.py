"""How the amortising networks' outputs are read, written once for jax (NumPyro) and torch (Pyro).

* :func:`split_inducing_outputs` reads the IDSGP network's output vector (Jafrasteh et al. 2022, §3.2 and Fig 1) as
  the inducing inputs Z(x) [M, D], the mean m(x) [M] and the lower-triangular L(x) [M, M] of q(u | x) with a
  positive (exponentiated) diagonal, S(x) = L Lᵀ; :func:`inducing_output_size` is that vector's length.
* :func:`dropped_out` is inverted dropout on the network's outputs (the authors' UCI launchers put dropout 0.5 on
  the IDSGP network's output layer; spec 002 §1.5): the kept outputs scaled by 1/(1 - rate), so that their mean
  over masks is the undropped output; each backend draws the keep mask as a sample site.
* :func:`positive_variance` is the variance head of an amortised Gaussian q(x | y) = N(μ(y), diag σ²(y)):
  σ² = softplus(r) + floor (the Bayesian SAS-GP and VAE encoders).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops

Array = Any


def inducing_output_size(num_inducing: int, input_dim: int) -> int:
    """O = M·D + M + M(M+1)/2: Z(x), m(x) and the lower triangle of L(x)."""
    M = int(num_inducing)
    return M * int(input_dim) + M + M * (M + 1) // 2


def _lower_triangle_gather(num_inducing: int) -> tuple[np.ndarray, np.ndarray]:
    """For the row-major flattened [M·M] matrix: the position in [0, raw...] (0 = a zero above the diagonal, k + 1
    = the k-th lower-triangle entry, row by row) each entry is gathered from [M·M], and the diagonal mask [M·M]."""
    M = int(num_inducing)
    gather = np.zeros((M, M), dtype=np.int64)
    rows, cols = np.tril_indices(M)
    gather[rows, cols] = np.arange(1, rows.size + 1)
    return gather.reshape(-1), np.eye(M, dtype=bool).reshape(-1)


def split_inducing_outputs(out: Array, num_inducing: int, input_dim: int) -> tuple[Array, Array, Array]:
    """The network's outputs [..., O] as Z [..., M, D], m [..., M] and L [..., M, M]: the first M·D numbers are Z
    row by row, the next M are m, the rest fill L's lower triangle row by row, its diagonal through exp.

    The diagonal is replaced, not corrected by adding exp(r) - r: for r far below 0 that sum cancels to rounding
    error (or to 0, whose log in the KL is -inf), where exp(r) itself is still a tiny positive number. exp is taken
    of the diagonal entries only, so a large off-diagonal entry cannot overflow into the gradient.
    """
    xp = ops.namespace(out)
    M, D = int(num_inducing), int(input_dim)
    batch = tuple(out.shape[:-1])
    Z = xp.reshape(out[..., : M * D], batch + (M, D))
    m = out[..., M * D : M * D + M]
    tri = out[..., M * D + M :]
    padded = xp.concat([xp.zeros(batch + (1,), dtype=out.dtype), tri], axis=-1)
    gather, diagonal = _lower_triangle_gather(M)
    flat = xp.take(padded, xp.asarray(gather), axis=-1)  # [..., M·M]
    on_diagonal = xp.asarray(diagonal)
    positive = xp.exp(xp.where(on_diagonal, flat, xp.zeros_like(flat)))
    return Z, m, xp.reshape(xp.where(on_diagonal, positive, flat), batch + (M, M))


def dropped_out(out: Array, keep: Array, rate: float) -> Array:
    """Inverted dropout: out [..., O] · keep [..., O] / (1 - rate), keep holding 1 (kept) or 0 (dropped), each 1
    with probability 1 - rate, so that E[result] = out."""
    return out * keep / (1.0 - rate)


def positive_variance(raw: Array, floor: float) -> Array:
    """σ² = softplus(raw) + floor = log(1 + e^raw) + floor, elementwise, of any shape."""
    xp = ops.namespace(raw)
    return xp.logaddexp(raw, xp.zeros_like(raw)) + floor
