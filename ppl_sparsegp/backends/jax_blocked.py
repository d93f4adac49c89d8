"""Blocked Cholesky factorisation and triangular solves for large matrices, built from matrix products.

Why: on CPU, jaxlib hands ``jnp.linalg.cholesky`` and ``solve_triangular`` to LAPACK's ``potrf`` / ``trsm`` (through
scipy's OpenBLAS, on the one BLAS thread that :func:`ppl_sparsegp.core.ops.blas_threads` leaves it inside a fit),
while a matrix product is XLA's own and runs on every core of its pool. The SVGP step at M = 1024 makes one M x M
factorisation, two M x B solves and two M x M solves (in its gradient), and issue 26 measured LAPACK at a fraction
of the product's rate. The algorithms below are LAPACK's own blocked ones, written with ``jnp``: all but a
fraction ~ ``block / n`` of the work is matrix products, and only the diagonal blocks (``block x block``) go to
LAPACK. They are backward stable like the unblocked ones (the same operations in another order), so the results
match LAPACK's to round-off, not bit for bit.

Notation: ``n`` the matrix order, ``b`` the block size (:func:`block_size`), ``p = ceil(n / b)`` blocks; block ``j``
covers rows and columns ``s_j = j b`` to ``e_j = min(s_j + b, n)``. Every loop is a Python loop over static
blocks, so the compiled program holds ``p`` small LAPACK calls and ``p`` matrix products with static shapes (no
control flow). Batch dimensions ``[...]`` are carried through every slice and product.

On by default on CPU, for matrices of order at least :data:`MIN_ORDER` (:func:`use_blocked`); other platforms keep their
own routines (cuSOLVER on a GPU) unless :data:`ENV_SWITCH` asks for this path. Measured on this 2-core CPU with nothing
else running (benchmarks/README.md, "The blocked path on by default"): the SVGP step ran 1.2-1.4x faster than with
LAPACK at M = 512, 1024 and 2048 in float32 and float64, and fits of 60 steps at M = 1024 and 300 at M = 512 took less
time despite the longer compilation (0.3-3 s more, growing with M). At M = 256 (two blocks) the step was 1.13x faster in
float32 and 1.02x in float64, but 1,000-step fits were slower with the compilation counted, hence :data:`MIN_ORDER`. On
a host whose cores are shared with other jobs the gain was smaller (1.1-1.2x in float32, none in float64; "Blocked
Cholesky" in the same file), and :data:`ENV_SWITCH` ``=0`` restores LAPACK everywhere. The setting is read when a
function is traced.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import solve_triangular as _lapack_solve_triangular

Array = Any

BLOCK = 128
"""Smallest block size b. At n = 1024, float32, the projection's value and gradient ran 1.18x LAPACK's with 128,
1.11x with 256 and 0.90x with 64 (2 cores, loaded; at n = 512 64 and 128 both 1.10x, 256 0.86x)."""

MAX_BLOCKS = 8
"""Largest number of blocks p: above n = 8 b the block grows with n (:func:`block_size`). The compiled program holds
O(p) LAPACK calls and O(p²) slices: with b = 128 the SVGP step took 4.5-4.8 s to compile at M = 2048 and 11.1-11.7 s
at M = 4096; with b = n / 8, 2.6-2.8 and 2.9-3.2 s, and the step ran 1.02-1.07x (M = 2048) and 1.08-1.13x (M = 4096)
faster, with the same loss (2 cores shared with other jobs; benchmarks/README.md, "Blocks that grow with M")."""

MIN_ORDER = 512
"""Smallest matrix order that takes the blocked path (smaller ones call LAPACK once)."""

ENV_SWITCH = "PPL_SPARSEGP_BLOCKED_LINALG"
"""Environment variable: ``1`` / ``true`` / ``on`` / ``yes`` takes the blocked path on every platform; ``0`` /
``false`` / ``off`` / ``no`` sends every factorisation and solve to the platform's routines (LAPACK on CPU); unset or
empty: the blocked path on CPU only. Read when a function is traced; any other value is refused by name."""

_ON, _OFF = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def enabled() -> bool:
    """Whether the blocked path is on: as :data:`ENV_SWITCH` says, and when it is unset, on the CPU platform only
    (``jax.default_backend()``).

    Raises:
        ValueError: :data:`ENV_SWITCH` holds a value other than those listed there.
    """
    setting = os.environ.get(ENV_SWITCH, "").strip().lower()
    if setting in _ON:
        return True
    if setting in _OFF:
        return False
    if setting:
        raise ValueError(
            f"environment variable {ENV_SWITCH}={os.environ[ENV_SWITCH]!r}: expected one of "
            f"{', '.join(_ON + _OFF)}, or unset for the default (the blocked path on CPU only)"
        )
    return jax.default_backend() == "cpu"


def use_blocked(n: int) -> bool:
    """Whether a matrix of order ``n`` is factorised / solved by the blocked algorithms here."""
    return n >= MIN_ORDER and enabled()


def block_size(n: int) -> int:
    """The block size b for a matrix of order ``n``: :data:`BLOCK`, or ``ceil(n / MAX_BLOCKS)`` when that is larger."""
    return max(BLOCK, -(-n // MAX_BLOCKS))


def _spans(n: int, block: int) -> list[tuple[int, int]]:
    """The blocks ``[(s_j, e_j)]`` covering ``0..n``."""
    return [(s, min(s + block, n)) for s in range(0, n, block)]


def _mT(A: Array) -> Array:
    return jnp.swapaxes(A, -1, -2)


def cholesky(A: Array, block: int | None = None) -> Array:
    """Lower Cholesky factor of the symmetric positive definite ``A`` [..., n, n] -> L [..., n, n].

    The semantics of ``jnp.linalg.cholesky``: ``A`` is symmetrised first (``(A + Aᵀ) / 2``), and a factorisation
    that fails gives non-finite entries (here from the failing block on; the caller tests ``isfinite``). Orders
    below :data:`MIN_ORDER` (or with the path switched off) call ``jnp.linalg.cholesky`` itself.

    Algorithm: LAPACK ``potrf``'s left-looking blocked Cholesky. For each block column j, with
    ``L[:, :s_j]`` the columns already factorised,

        C      = A[s_j:, s_j:e_j] - L[s_j:, :s_j] L[s_j:e_j, :s_j]ᵀ     one product, (n - s_j) x s_j x b
        L_jj   = chol(C[:b])                                            LAPACK, b x b
        L_ij   = C[b:] L_jj⁻ᵀ                                           triangular solve, (n - e_j) x b

    so the products carry ~ n³/3 of the ~ n³/3 + n² b / 2 flops. Block column j is stored as the panel
    ``L[s_j:, s_j:e_j]`` [..., n - s_j, b]; the factor is assembled (zeros above the diagonal) at the end.

    Args:
        A: [..., n, n], symmetric positive definite (only its symmetric part is read).
        block: block size (default :func:`block_size` of n).

    Returns:
        L [..., n, n], lower triangular, ``L Lᵀ ≈ A``.
    """
    n = A.shape[-1]
    if not use_blocked(n):
        return jnp.linalg.cholesky(A)
    A = 0.5 * (A + _mT(A))
    spans = _spans(n, block or block_size(n))
    panels = []  # panel j: L[..., s_j:, s_j:e_j]
    for s, e in spans:
        C = A[..., s:, s:e]
        if panels:
            # L[s:, :s] and its rows s:e, gathered from the earlier panels (panel k starts at row s_k).
            left = jnp.concatenate([P[..., s - sk :, :] for P, (sk, _) in zip(panels, spans, strict=False)], axis=-1)
            C = C - left @ _mT(left[..., : e - s, :])
        L_jj = lax.linalg.cholesky(C[..., : e - s, :], symmetrize_input=False)
        if e < n:
            (inverse,) = _diagonal_inverses(L_jj, [(0, e - s)])
            panels.append(jnp.concatenate([L_jj, C[..., e - s :, :] @ _mT(inverse)], axis=-2))
        else:
            panels.append(L_jj)
    batch = A.shape[:-2]
    columns = [
        jnp.concatenate([jnp.zeros((*batch, s, e - s), A.dtype), P], axis=-2) if s else P
        for P, (s, e) in zip(panels, spans, strict=True)
    ]
    return jnp.concatenate(columns, axis=-1)


def solve_triangular(L: Array, B: Array, transpose: bool = False, block: int | None = None) -> Array:
    """``L X = B`` (``Lᵀ X = B`` when ``transpose``) for lower-triangular ``L`` [..., n, n], ``B`` [..., n, k].

    Blocked substitution, LAPACK ``trsm``'s algorithm, left-looking. Forward (``L X = B``), for j = 1..p:

        X_j = L_jj⁻¹ (B_j - L[s_j:e_j, :s_j] X[:s_j])          product b x s_j x k, then LAPACK b x b x k

    and backward (``Lᵀ X = B``), for j = p..1:

        X_j = L_jj⁻ᵀ (B_j - L[e_j:, s_j:e_j]ᵀ X[e_j:])

    so all but ~ n b k of the ~ n² k flops are products. The derivative is the closed form of a triangular solve
    (a ``jax.custom_jvp``, as jax's own): ``dX = L⁻¹ (dB - tril(dL) X)`` (with ``Lᵀ``, ``tril(dL)ᵀ`` when
    ``transpose``), whose solve is this blocked one again; its reverse-mode transpose is the blocked solve in the
    other direction plus one product for ``dL``. ``B`` enters through one ``split`` into row blocks, so that the
    transpose gathers the blocks' cotangents by one concatenation (slicing ``B`` block by block instead made
    the transpose sum ``p`` zero-padded n x k arrays, which cost more than the solve at n = 1024).
    Orders below :data:`MIN_ORDER`, batch dimensions that differ between ``L`` and ``B``, or a 1-D ``B`` call LAPACK's
    ``trsm`` through ``jax.scipy.linalg.solve_triangular``.

    Args:
        L: [..., n, n] lower triangular (the strict upper triangle is not read).
        B: [..., n, k] right-hand sides, the same batch dimensions as ``L``.
        transpose: solve with ``Lᵀ``.
        block: block size (default :func:`block_size` of n).

    Returns:
        X [..., n, k].
    """
    n = L.shape[-1]
    if not use_blocked(n) or B.ndim < 2 or B.shape[:-2] != L.shape[:-2]:
        return _lapack_solve_triangular(L, B, lower=True, trans=1 if transpose else 0)
    return _blocked_solve(L, B, bool(transpose), int(block or block_size(n)))


@partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _blocked_solve(L: Array, B: Array, transpose: bool, block: int) -> Array:
    """The blocked substitution of :func:`solve_triangular` (``L`` [..., n, n], ``B`` [..., n, k])."""
    n = L.shape[-1]
    spans = _spans(n, block)
    rows = jnp.split(B, [e for _, e in spans[:-1]], axis=-2)  # B_j [..., e_j - s_j, k]
    inverses = _diagonal_inverses(L, spans)
    X: list[Array | None] = [None] * len(spans)
    order = range(len(spans) - 1, -1, -1) if transpose else range(len(spans))
    for j in order:
        s, e = spans[j]
        R = rows[j]
        if transpose and e < n:  # X[e:] are solved: R -= L[e:, s:e]ᵀ X[e:]
            R = R - _mT(L[..., e:, s:e]) @ jnp.concatenate(X[j + 1 :], axis=-2)
        elif not transpose and s > 0:  # X[:s] are solved: R -= L[s:e, :s] X[:s]
            R = R - L[..., s:e, :s] @ jnp.concatenate(X[:j], axis=-2)
        X[j] = (_mT(inverses[j]) if transpose else inverses[j]) @ R
    return jnp.concatenate(X, axis=-2)


def _diagonal_inverses(L: Array, spans: list[tuple[int, int]]) -> list[Array]:
    """L_jj⁻¹ [..., b, b] for every diagonal block of the lower-triangular ``L`` (LAPACK ``trsm`` against I)."""
    out = []
    for s, e in spans:
        eye = jnp.broadcast_to(jnp.eye(e - s, dtype=L.dtype), (*L.shape[:-2], e - s, e - s))
        out.append(lax.linalg.triangular_solve(L[..., s:e, s:e], eye, left_side=True, lower=True))
    return out


def _blocked_solve_jvp(transpose: bool, block: int, primals: tuple, tangents: tuple) -> tuple[Array, Array]:
    """dX = L⁻¹ (dB - tril(dL) X), or with Lᵀ and tril(dL)ᵀ; symbolic zeros skip their terms."""
    (L, B), (dL, dB) = primals, tangents
    X = _blocked_solve(L, B, transpose, block)
    zero = jax.custom_derivatives.SymbolicZero
    rhs = None if isinstance(dB, zero) else dB
    if not isinstance(dL, zero):
        dLX = (_mT(jnp.tril(dL)) if transpose else jnp.tril(dL)) @ X
        rhs = -dLX if rhs is None else rhs - dLX
    if rhs is None:
        return X, jnp.zeros_like(X)
    return X, _blocked_solve(L, rhs, transpose, block)


_blocked_solve.defjvp(_blocked_solve_jvp, symbolic_zeros=True)
