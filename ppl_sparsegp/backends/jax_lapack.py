"""Keep jaxlib 0.10's batched CPU Cholesky factorisations and triangular solves from waiting on XLA's thread pool.

The hang (issue 27, item 1): jaxlib 0.10.0-0.10.2 run a batched LAPACK call (``lapack_dpotrf_ffi``,
``lapack_dtrsm_ffi``, ...) on a thread of XLA's intra-op pool, split a batch that carries enough work into chunks
(``ParallelBatchMap``), schedule the chunks on the same pool and block in ``BlockingCounter::Wait`` without running
any itself. XLA runs independent operations of a program side by side, one per pool thread, so with as many such calls
in flight as the pool has threads (one per core: two on a 2-core machine, e.g. the factorisations over outputs x
particles of the selective deep GP and GP-LVM), every thread waits for chunks that no thread is left to run and the
process stops for good at 0 % CPU. Pinning the process to one core hid it (a one-thread pool never splits).
jaxlib 0.11 removes the splitting from open-source builds.

The remedy: the CPU lowerings of ``cholesky_p`` and ``triangular_solve_p`` are wrapped so that a batch jaxlib would
split is lowered as a loop (``lax.map``) over chunks small enough that jaxlib runs each inline on the calling thread;
every other call is lowered as before. Each matrix goes through the same LAPACK routine, so results are bitwise
unchanged. The wrapping is process-wide and installed only for jaxlib 0.10, when :mod:`ppl_sparsegp.backends.
jax_backend` is imported, which happens on the first jax array through :mod:`ppl_sparsegp.core.ops`, before any of
the library's programs is lowered.

Cost (2 cores shared with other jobs, float64, OpenBLAS on one thread): a factorisation and solve of 48 matrices
225 x 225 took 161-187 ms against 258-343 ms unguarded; an SVGP ELBO gradient at M = 256 compiles to the identical
program (its factorisations are not batched); 40 GP-LVM steps on oil flow took 110 s on 2 cores against 120-171 s
unguarded on one core (unguarded on two it hung in 3 runs of 3).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import jax
import jaxlib.version
import numpy as np
from jax import lax
from jax.interpreters import mlir

PARALLEL_WORK = 200_000
"""jaxlib 0.10's ``kMinWorkPerTask`` (``jaxlib/cpu/lapack_kernels.cc``): a batch of B matrices of c FLOPs each is split
over XLA's pool when (B - 1) c reaches it."""


@lru_cache(maxsize=1)
def inline_batched_lapack() -> bool:
    """Install the chunked CPU lowerings on jaxlib 0.10 (once per process); whether they are installed."""
    version = tuple(int(part) for part in jaxlib.version.__version__.split(".")[:2])
    if not (0, 10) <= version < (0, 11):
        return False
    try:
        from jax._src.interpreters import mlir as mlir_internals
        from jax.extend.core import primitives

        rules = mlir_internals._platform_specific_lowerings["cpu"]
        originals = {p: rules[p].rule for p in (primitives.cholesky_p, primitives.triangular_solve_p)}
    except (ImportError, AttributeError, KeyError) as error:  # a jax 0.10 whose internals moved
        warnings.warn(
            f"could not guard jaxlib's batched LAPACK kernels ({error!r}); on a machine with few cores, pin the "
            "process to one core (os.sched_setaffinity) to avoid a hang",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    for primitive, original in originals.items():
        mlir.register_lowering(primitive, _chunked_lowering(primitive, original), platform="cpu")
    return True


def lapack_cost(primitive_name: str, avals: list, params: dict[str, Any]) -> int:
    """jaxlib 0.10's FLOP estimate for one matrix of a batched ``cholesky`` / ``triangular_solve`` call."""
    if primitive_name == "cholesky":
        n = avals[0].shape[-1]
        cost = n * n * n // 3
    else:
        rows, cols = avals[1].shape[-2:]
        cost = rows * cols * (rows if params["left_side"] else cols)
    return max(1, 3 * cost if np.issubdtype(avals[0].dtype, np.complexfloating) else cost)


def _chunked_lowering(primitive: jax.extend.core.Primitive, original: Callable) -> Callable:
    """A CPU lowering of ``primitive`` that hands jaxlib only batches it runs inline: a batch of B matrices of cost c
    with (B - 1) c >= :data:`PARALLEL_WORK` becomes a loop over chunks of ``(PARALLEL_WORK - 1) // c`` matrices (at
    least one)."""

    def rule(ctx, *operands, **params):
        batch = ctx.avals_out[0].shape[:-2]
        count = math.prod(batch)
        cost = lapack_cost(primitive.name, ctx.avals_in, params)
        if (count - 1) * cost < PARALLEL_WORK:
            return original(ctx, *operands, **params)
        chunk = max(1, (PARALLEL_WORK - 1) // cost)

        def chunked(*arrays):
            flat = [a.reshape((count, *a.shape[len(batch) :])) for a in arrays]
            out = lax.map(lambda xs: primitive.bind(*xs, **params), flat, batch_size=chunk)
            return out.reshape((*batch, *out.shape[1:]))

        return mlir.lower_fun(chunked, multiple_results=False)(ctx, *operands)

    return rule
