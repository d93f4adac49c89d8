"""What every compiled chunk of the engines shares, so that a step never stalls an accelerator.

* **Data on the device once**: :func:`on_device` places the model's arguments before the first chunk; every chunk
  then takes device arrays, and the call runs under ``jax.transfer_guard("disallow")`` (:func:`call_guarded`), so
  an implicit host-device copy inside the hot loop is an error rather than a silent stall.
* **Arrays as arguments, Python values as constants**: :func:`split_static` separates the model's array data (a
  program's arguments) from its Python values (a plate size ``n=10``, an option string), which a program can only hold
  as compile-time constants, as NumPyro's own engines hold them.
* **Explicit matmul precision**: float32 matrix products run at :data:`MATMUL_PRECISION` (``"highest"``: full
  float32, never TF32 or bfloat16 passes on a GPU), applied when a chunk is traced (:func:`precision_scope`).
* **Jitter escalation outside the step**: the Cholesky inside a compiled program is one factorisation at a static
  jitter (:mod:`ppl_sparsegp.core.ops`). When a chunk's loss or state goes non-finite, :class:`Escalation` re-runs
  it from the same state (the same keys, so the same minibatches) with the jitter raised by an escalation step,
  recompiled once per step; the step that worked is kept for the rest of the run and named in a
  :class:`~ppl_sparsegp.core.ops.JitterWarning`. It first tries the largest step: a chunk that is still
  non-finite there was not broken by a factorisation (a too large learning rate, say), and the engine raises after
  that one retry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

import jax
import numpy as np

from ppl_sparsegp.core import ops

Result = TypeVar("Result")

MATMUL_PRECISIONS = ("highest", "high", "default")
"""float32 matmul precisions an engine accepts: ``"highest"`` full float32; ``"high"`` three bfloat16 passes (or
TF32) on GPUs and TPUs; ``"default"`` the accelerator's fastest (one bfloat16 pass on TPUs, TF32 on recent NVIDIA
GPUs). CPUs compute float32 products in full precision whatever the setting; float64 is unaffected."""

MATMUL_PRECISION = "highest"
"""The engines' default: full float32 products, so a float32 fit on a GPU computes what it computes on a CPU."""

FLOAT32_TOLERANCE = 1e-4
"""Relative difference between the losses of a float32 fit at :data:`MATMUL_PRECISION` and a float64 fit with the
same jitter that the tests hold (tests/infer/test_hot_path.py: SGPR on 40 points, 50 Adam steps, measured 6.9e-6 on
a CPU)."""


def check_precision(value: Any) -> str:
    """``value`` if it is one of :data:`MATMUL_PRECISIONS`, else ValueError naming ``matmul_precision``."""
    if value not in MATMUL_PRECISIONS:
        raise ValueError(f"matmul_precision: expected one of {', '.join(MATMUL_PRECISIONS)}, got {value!r}")
    return value


@contextlib.contextmanager
def precision_scope(precision: str, step: int = 0) -> Iterator[None]:
    """Trace within: float32 matmuls at ``precision``, Cholesky factorisations at jitter escalation ``step``."""
    with jax.default_matmul_precision(precision), ops.escalated_jitter(step):
        yield


def on_device(tree: Any) -> Any:
    """``tree`` with every array leaf placed on the default device (an explicit transfer, once per run)."""
    return jax.device_put(tree)


@dataclass(frozen=True)
class StaticValues:
    """The non-array leaves of a model's ``(args, kwargs)``, kept out of the compiled programs' arguments."""

    treedef: Any
    leaves: tuple
    """One per leaf of ``treedef``: the Python value, or None where the leaf is an array (a program argument)."""

    def full(self, arrays: tuple[tuple, dict]) -> tuple[tuple, dict]:
        """The model's ``(args, kwargs)`` from the array part (traced or not) and these values."""
        given = self.treedef.flatten_up_to(arrays)
        return self.treedef.unflatten([v if v is not None else a for a, v in zip(given, self.leaves, strict=True)])

    def bind(self, fn: Callable) -> Callable:
        """``fn`` (a model or guide) called with the array part of its arguments: it gets them all back."""
        if all(v is None for v in self.leaves):
            return fn

        @wraps(fn)
        def bound(*args: Any, **kwargs: Any) -> Any:
            full_args, full_kwargs = self.full((args, kwargs))
            return fn(*full_args, **full_kwargs)

        return bound


def split_static(args: tuple, kwargs: Mapping[str, Any]) -> tuple[tuple[tuple, dict], StaticValues]:
    """Split a model's data into the arrays a compiled program takes as arguments and the other leaves (Python
    numbers, strings, functions): those decide shapes and control flow (``numpyro.plate("data", n)``), so the program
    holds them as constants, as ``numpyro.infer.MCMC`` does with all of its model arguments.

    Returns:
        ``((args, kwargs) with None for every non-array leaf, StaticValues)``; ``StaticValues.full`` inverts it.
    """
    leaves, treedef = jax.tree.flatten((tuple(args), dict(kwargs)))
    arrays = [isinstance(x, (jax.Array, np.ndarray, np.generic)) for x in leaves]
    dynamic = treedef.unflatten([x if is_array else None for x, is_array in zip(leaves, arrays, strict=True)])
    static = tuple(None if is_array else x for x, is_array in zip(leaves, arrays, strict=True))
    return dynamic, StaticValues(treedef, static)


def call_guarded(compiled: Callable[..., Result], *args: Any) -> Result:
    """``compiled(*args)`` with implicit host-device transfers refused: every argument must already be on the
    device (the results stay there until the engine fetches them with ``jax.device_get``)."""
    with jax.transfer_guard("disallow"):
        return compiled(*args)


class Escalation:
    """The jitter escalation step of one engine run (0: the base jitter), raised when a chunk goes non-finite."""

    def __init__(self) -> None:
        self.step = 0

    def run(
        self, attempt: Callable[[int], Result], finite: Callable[[Result], bool], where: str
    ) -> tuple[Result, bool]:
        """``attempt(step)`` at the current step; if ``finite`` says no, once more at the largest step, and if that
        is finite, at each step from the next one up until one is (the smallest jitter that works).

        Args:
            attempt: runs the chunk from its starting state with factorisations at escalation ``step``.
            finite: whether a chunk's result is usable.
            where: the chunk for the warning, e.g. ``"SVI steps 100-199"``.

        Returns:
            The result to keep and whether it is finite (the current step's when no step helped).
        """
        result = attempt(self.step)
        if finite(result) or self.step == ops.MAX_ESCALATIONS:
            return result, finite(result)
        kept = attempt(ops.MAX_ESCALATIONS)
        if not finite(kept):
            return result, False
        chosen = ops.MAX_ESCALATIONS
        for step in range(self.step + 1, ops.MAX_ESCALATIONS):
            retry = attempt(step)
            if finite(retry):
                chosen, kept = step, retry
                break
        self.step = chosen
        ops.warn_escalated(chosen, where)
        return kept, True


class EscalatingJit:
    """``jax.jit(fn)`` for the library's prediction paths, whose calls go through an :class:`Escalation` as an
    engine's chunks do: a call whose result has non-finite entries is run again with the Cholesky jitter escalated,
    and the step that worked is kept for later calls (a result that no step mends is returned as it is, and later
    calls are not retried: its non-finite entries are the function's own, e.g. a log density of -inf). Called with
    traced arguments (from inside another compiled function) it is ``fn`` itself, under the caller's step.

    Args:
        fn: the function to compile; called with the arguments the wrapper is called with.
        where: what it computes, for the warning (e.g. "predictions over the posterior draws").
    """

    def __init__(self, fn: Callable[..., Result], where: str) -> None:
        self.fn, self.where = fn, where
        self.escalation = Escalation()
        self.futile = False
        self._compiled: dict[int, Callable[..., Result]] = {}

    def _at(self, step: int) -> Callable[..., Result]:
        """``fn`` compiled with its factorisations at escalation ``step`` (read inside the traced function)."""
        if step not in self._compiled:

            def traced(*args: Any, **kwargs: Any) -> Result:
                with ops.escalated_jitter(step):
                    return self.fn(*args, **kwargs)

            self._compiled[step] = jax.jit(traced)
        return self._compiled[step]

    def __call__(self, *args: Any, **kwargs: Any) -> Result:
        if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((args, kwargs))):
            return self.fn(*args, **kwargs)  # inside another program: its escalation step applies
        if self.futile:
            return self._at(self.escalation.step)(*args, **kwargs)
        result, finite = self.escalation.run(lambda step: self._at(step)(*args, **kwargs), _all_finite, self.where)
        self.futile = not finite
        return result


def _all_finite(tree: Any) -> bool:
    """Whether every floating leaf of ``tree`` is finite (fetched to the host)."""
    leaves = jax.device_get(jax.tree.leaves(tree))
    return all(np.all(np.isfinite(x)) for x in leaves if np.issubdtype(np.asarray(x).dtype, np.inexact))


NOT_THE_JITTER = (
    f"; it stayed non-finite with every Cholesky jitter raised {10**ops.MAX_ESCALATIONS:.0e}-fold, so a factorisation "
    "is not the cause"
)
"""What an engine adds to its error when :meth:`Escalation.run` found no step that helps."""
