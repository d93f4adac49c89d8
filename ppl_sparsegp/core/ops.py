"""The few array functions the Python array API lacks, for jax.numpy, torch and numpy, and the jitter policy.

Everything numerical in :mod:`ppl_sparsegp.core` is written against the array API (``array_api_compat``) plus the
functions here, so one implementation serves NumPyro (jax) and Pyro (torch). This module imports neither jax nor
torch: handed a jax array or a torch tensor, it loads :mod:`ppl_sparsegp.backends.jax_backend` or
:mod:`ppl_sparsegp.backends.torch_backend` by name, which hold what only that library can do (jax's Cholesky with
its in-program escalation and closed-form derivatives, torch's ``cholesky_ex``). numpy arrays use numpy and scipy.

The jitter policy lives here and nowhere else (ARCHITECTURE: "one place for each decision"):

* :func:`cholesky` adds a *relative* jitter ``j * mean(diag(A))`` to the diagonal, where ``j`` is, in order of
  precedence, the call's ``jitter=`` argument, the innermost :func:`relative_jitter` scope (the caller's
  per-call setting, like GPyTorch's ``settings.cholesky_jitter``), the innermost :func:`model_jitter` scope (a
  model's ``jitter`` field, set around each of its public methods), or ``JITTER[dtype]``;
* called on concrete arrays, a factorisation that fails (non-finite entries) is retried with the jitter multiplied
  by 10, up to ``MAX_ESCALATIONS`` times, with a :class:`JitterWarning` naming the jitter that worked, and
  :class:`CholeskyError` is raised when every level fails;
* inside a compiled jax program (a traced matrix) there is one factorisation, at the level of the innermost
  :func:`escalated_jitter` scope (the base jitter unless an engine raised it): no data-dependent loop, no host
  callback, so the compiled step never stalls an accelerator. A failed factorisation there is NaN, and the engines
  check for it after every compiled chunk: ``fit_svi`` and the SG-MCMC runs re-run a chunk whose loss or state went
  non-finite with the jitter escalated (:mod:`ppl_sparsegp.infer.hot_path`), with the same warning, and raise when
  no level helps. An HMC/NUTS proposal through a failed factorisation has non-finite energy and is rejected (a
  divergence). A failed factorisation never passes silently; inside your own ``jax.jit`` the NaN is what you see.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import math
import sys
import warnings
from collections.abc import Iterator
from functools import lru_cache
from types import ModuleType
from typing import Any

import array_api_compat
import numpy as np

Array = Any

JITTER: dict[str, float] = {"float64": 1e-8, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}
"""Relative diagonal jitter, by dtype name, added before every Cholesky factorisation."""

MAX_ESCALATIONS = 5
"""How many times :func:`cholesky` multiplies the jitter by 10 before giving up."""


class CholeskyError(FloatingPointError):
    """A Cholesky factorisation failed even after the jitter was escalated."""


class JitterWarning(RuntimeWarning):
    """The base jitter was not enough and a larger one was used."""


class ConditioningWarning(RuntimeWarning):
    """A matrix is so close to singular that a result computed through its inverse is unreliable."""


CONDITION_MARGIN = 0.01
""":func:`warn_if_ill_conditioned` warns above ``CONDITION_MARGIN / JITTER[dtype]`` (1e6 in float64, 1e3 in float32).

The jitter bounds the condition number of a jittered factorisation near ``1 / jitter``, so the limit says: the
smallest pivot is within a factor 100 of the jitter, i.e. the matrix is singular up to the jitter and results that
go through its inverse depend on it (e.g. inducing inputs closer than about 1e-3 lengthscales in float64)."""


def namespace(*arrays: Array):
    """The array-API namespace of ``arrays`` (``jax.numpy``, a torch wrapper or a numpy wrapper).

    numpy arrays mixed with jax or torch arrays take the other backend's namespace (jax and torch
    accept numpy operands), so fixed numpy inputs combine with traced or sampled values.
    """
    present = [a for a in arrays if a is not None]
    backend = [a for a in present if not isinstance(a, np.ndarray | np.generic)]
    return array_api_compat.array_namespace(*(backend or present))


def is_array(x: Any) -> bool:
    """Whether ``x`` is an array of numpy, jax, torch or another array-API library (Python numbers are not).

    Unlike ``array_api_compat.is_array_api_obj`` this never touches a library that is blocked in ``sys.modules``."""
    return isinstance(x, np.ndarray | np.generic) or is_jax(x) or is_torch(x) or hasattr(x, "__array_namespace__")


def is_jax(x: Array) -> bool:
    """Whether ``x`` is a jax array (False without asking array_api_compat while jax is not imported or blocked)."""
    return sys.modules.get("jax") is not None and array_api_compat.is_jax_array(x)


def is_torch(x: Array) -> bool:
    """Whether ``x`` is a torch tensor (False while torch is not imported or blocked)."""
    return sys.modules.get("torch") is not None and array_api_compat.is_torch_array(x)


def is_traced(x: Any) -> bool:
    """Whether ``x`` is an abstract jax value (a tracer inside ``jit``, ``grad`` or ``vmap``) whose entries are not
    known yet. Never imports jax: a tracer can exist only once jax has been imported."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.core.Tracer)


def concrete_values(x: Array) -> np.ndarray | None:
    """The entries of ``x`` as a numpy array when they can be read now, None when they cannot (a jax tracer).

    For eager checks of values (positivity, finiteness) that must skip traced values. A concrete jax array is
    copied to the host; torch tensors are read through numpy (CPU tensors without gradient only, else None).
    """
    if is_traced(x):
        return None
    try:
        return np.asarray(x)
    except (TypeError, RuntimeError, ValueError):
        return None


def dtype_name(x: Array) -> str:
    """``'float64'``, ``'float32'``... for any backend's array."""
    return str(x.dtype).replace("torch.", "")


_SCOPED_JITTER: contextvars.ContextVar[float | None] = contextvars.ContextVar("relative_jitter", default=None)
_MODEL_JITTER: contextvars.ContextVar[float | None] = contextvars.ContextVar("model_jitter", default=None)
_ESCALATION: contextvars.ContextVar[int] = contextvars.ContextVar("escalation", default=0)


@contextlib.contextmanager
def _jitter_scope(variable: contextvars.ContextVar[float | None], value: float | None) -> Iterator[None]:
    if value is None:
        yield
        return
    token = variable.set(check_jitter(value))
    try:
        yield
    finally:
        variable.reset(token)


def relative_jitter(value: float | None) -> contextlib.AbstractContextManager[None]:
    """Within the block, :func:`cholesky` starts from the relative jitter ``value`` instead of a model's
    ``jitter`` or :data:`JITTER`: the per-call setting, e.g. ``with ops.relative_jitter(1e-4): gp.predict_f(...)``.

    ``None`` leaves the current setting. The value is read when a function is traced, so a jitted function keeps
    the jitter it was compiled with.

    Raises:
        ValueError: ``value`` is not a finite number >= 0.
    """
    return _jitter_scope(_SCOPED_JITTER, value)


def model_jitter(value: float | None) -> contextlib.AbstractContextManager[None]:
    """A model's default relative jitter within the block (its public methods run in it): it replaces
    :data:`JITTER`, and an enclosing :func:`relative_jitter` scope still takes precedence. ``None`` leaves the
    current setting (e.g. that of the model whose method called this one).

    Raises:
        ValueError: ``value`` is not a finite number >= 0.
    """
    return _jitter_scope(_MODEL_JITTER, value)


@contextlib.contextmanager
def escalated_jitter(step: int) -> Iterator[None]:
    """Within the block, factorisations traced into a compiled jax program use escalation step ``step`` of the
    jitter (:func:`jitter_level`: the base jitter times ``10**step``) instead of the base jitter.

    The engines enter it when they re-run a compiled chunk whose loss or state went non-finite
    (:mod:`ppl_sparsegp.infer.hot_path`); like the other scopes it is read when a function is traced.

    Raises:
        ValueError: ``step`` is not an integer in [0, MAX_ESCALATIONS].
    """
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_ESCALATIONS:
        raise ValueError(f"step: expected an integer in [0, {MAX_ESCALATIONS}], got {step!r}")
    token = _ESCALATION.set(step)
    try:
        yield
    finally:
        _ESCALATION.reset(token)


def escalation() -> int:
    """The escalation step of the innermost :func:`escalated_jitter` scope (0 outside any)."""
    return _ESCALATION.get()


def check_jitter(value: Any) -> float:
    """``value`` as a float, or ValueError naming ``jitter`` unless it is a finite number >= 0."""
    try:
        level = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"jitter: expected a finite relative jitter >= 0, got {value!r}") from None
    if isinstance(value, bool) or not (math.isfinite(level) and level >= 0):
        raise ValueError(f"jitter: expected a finite relative jitter >= 0, got {value!r}")
    return level


def base_jitter(x: Array) -> float:
    """The relative jitter for ``x``: the innermost :func:`relative_jitter` scope, else the innermost
    :func:`model_jitter` scope, else :data:`JITTER` by dtype."""
    for variable in (_SCOPED_JITTER, _MODEL_JITTER):
        scoped = variable.get()
        if scoped is not None:
            return scoped
    return JITTER.get(dtype_name(x), 1e-6)


def _backend(x: Array) -> ModuleType | None:
    """The backend module for a jax or torch array (imported on first use), None for numpy."""
    if is_jax(x):
        return importlib.import_module("ppl_sparsegp.backends.jax_backend")
    if is_torch(x):
        return importlib.import_module("ppl_sparsegp.backends.torch_backend")
    return None


BLAS_THREADS = 1
"""Threads for the BLAS/LAPACK library behind jax's CPU factorisations while the fit loop runs (see below)."""


def blas_threads(limit: int | None = BLAS_THREADS):
    """Context manager limiting BLAS/LAPACK threads (``None``: no limit).

    jaxlib performs CPU Cholesky factorisations and triangular solves through scipy's OpenBLAS. Its thread pool
    spin-waits between the many small (M x M, M x B) calls of a sparse GP step: measured on 2 cores, a 100 x 256
    triangular solve took 8 ms with the default pool and 0.6 ms with one thread, and an SVGP step (M=100,
    B=256) ran 7.5x faster. XLA's own thread pool, which runs the rest of the step, is not affected.
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=limit, user_api="blas")


def eye_like(A: Array) -> Array:
    """The identity [n, n] in the backend, dtype and device of A [..., n, n]."""
    xp = namespace(A)
    return xp.eye(A.shape[-1], dtype=A.dtype, device=array_api_compat.device(A))


def diagonal_scale(A: Array) -> Array:
    """Mean of the diagonal of ``A`` [..., n, n] -> [..., 1, 1], the unit of the relative jitter."""
    xp = namespace(A)
    diag = xp.linalg.diagonal(A)
    return xp.mean(diag, axis=-1)[..., None, None]


def jitter_level(j0: float, A: Array, k: int) -> float:
    """Relative jitter of escalation step ``k`` (0: the requested ``j0``; then ×10 from at least the base)."""
    if k == 0:
        return j0
    return max(j0, base_jitter(A)) * 10.0**k


def jitter_message(level: float) -> str:
    return f"Cholesky needed a relative jitter of {level:.1e} (escalated from the base jitter)."


def failure_message(level: float) -> str:
    return (
        f"Cholesky factorisation failed even with a relative jitter of {level:.1e}; "
        "the matrix is not positive definite (check for duplicated inducing inputs, a tiny "
        "lengthscale or kernel variance, or non-finite inputs)."
    )


def warn_escalated(step: int, where: str) -> None:
    """The :class:`JitterWarning` of an engine that re-ran a compiled chunk (``where``: e.g. "SVI steps 100-199")
    whose loss or state went non-finite, successfully, with every factorisation's jitter at escalation ``step``."""
    factor = 10.0**step
    warnings.warn(
        f"Cholesky factorisations in {where} failed at the base jitter; the chunk was run again with every "
        f"relative jitter raised {factor:.0e}-fold (to {JITTER['float64'] * factor:.0e} in float64, "
        f"{JITTER['float32'] * factor:.0e} in float32 by default), which is kept for the rest of the run.",
        JitterWarning,
        stacklevel=3,
    )


def cholesky(A: Array, jitter: float | None = None) -> Array:
    """Lower Cholesky factor of ``A + j * mean(diag A) * I`` with the escalating jitter policy.

    Args:
        A: symmetric positive (semi-)definite matrices, shape [..., n, n].
        jitter: base relative jitter; defaults to :data:`JITTER` for the dtype of ``A``.

    Returns:
        L with ``L @ L.T ~= A``, shape [..., n, n], lower triangular.
    """
    j0 = base_jitter(A) if jitter is None else check_jitter(jitter)
    backend = _backend(A)
    first = 0
    if is_jax(A):  # one factorisation, kept when it is part of a compiled program or succeeded
        L = backend.cholesky(A, j0)
        if is_traced(L) or bool(np.all(np.isfinite(np.asarray(L)))):
            return L
        first = 1
    raw = _raw_cholesky if backend is None else backend.raw_cholesky
    eye, scale = eye_like(A), diagonal_scale(A)
    for k in range(first, MAX_ESCALATIONS + 1):
        level = jitter_level(j0, A, k)
        L = raw(A + level * scale * eye)
        if L is not None:
            if k > 0:
                warnings.warn(jitter_message(level), JitterWarning, stacklevel=2)
            return L
    raise CholeskyError(failure_message(level))


def warn_if_ill_conditioned(L: Array, what: str, advice: str = "") -> None:
    """Warn (:class:`ConditioningWarning`) when the lower Cholesky factor ``L`` [..., n, n] shows that its matrix
    is nearly singular: ``(max_i L_ii / min_i L_ii)²``, a lower bound on the condition number, is above
    ``CONDITION_MARGIN / JITTER[dtype]``. Eager only: nothing happens for traced values (inside ``jit``).

    Args:
        L: the factor; ``what``: the matrix's name in the message; ``advice``: what the caller can do about it.
    """
    diagonal = None if is_traced(L) else concrete_values(namespace(L).linalg.diagonal(L))
    if diagonal is None or diagonal.size == 0:
        return
    pivots = np.abs(diagonal.astype(float))
    estimate = float(np.max(np.max(pivots, axis=-1) ** 2 / np.maximum(np.min(pivots, axis=-1), 1e-300) ** 2))
    limit = CONDITION_MARGIN / JITTER.get(dtype_name(L), 1e-6)
    if estimate > limit:
        warnings.warn(
            f"{what} is poorly conditioned (condition number at least {estimate:.1e}, above {limit:.0e} for "
            f"{dtype_name(L)}): it is singular up to the jitter, and a result computed through its inverse may be "
            f"far off. {advice}".rstrip(),
            ConditioningWarning,
            stacklevel=3,
        )


def _raw_cholesky(A: Array) -> Array | None:
    """Cholesky of a numpy array, or None when it fails."""
    try:
        L = np.linalg.cholesky(A)
    except np.linalg.LinAlgError:
        return None
    return L if np.all(np.isfinite(L)) else None


def stop_gradient(x: Array) -> Array:
    """``x`` as a constant for automatic differentiation (jax ``lax.stop_gradient``, torch ``detach``)."""
    backend = _backend(x)
    return x if backend is None else backend.stop_gradient(x)


def solve_triangular(L: Array, B: Array, lower: bool = True, transpose: bool = False) -> Array:
    """Solve ``L X = B`` (or ``L^T X = B`` when ``transpose``) for triangular ``L``.

    Args:
        L: [..., n, n] triangular (lower when ``lower``).
        B: [..., n, k] right-hand sides (batch dims broadcast against ``L``).

    Returns:
        X, shape [..., n, k].
    """
    backend = _backend(L)
    if backend is not None:
        return backend.solve_triangular(L, B, lower=lower, transpose=transpose)
    import scipy.linalg

    if L.ndim == 2 and B.ndim == 2:
        return scipy.linalg.solve_triangular(L, B, lower=lower, trans=1 if transpose else 0)
    Lb, Bb = np.broadcast_arrays(L[..., :, :1], B[..., :, :1])
    out_shape = Lb.shape[:-2] + B.shape[-2:]
    Lf = np.broadcast_to(L, Lb.shape[:-2] + L.shape[-2:]).reshape(-1, *L.shape[-2:])
    Bf = np.broadcast_to(B, out_shape).reshape(-1, *B.shape[-2:])
    X = [
        scipy.linalg.solve_triangular(a, b, lower=lower, trans=1 if transpose else 0)
        for a, b in zip(Lf, Bf, strict=True)
    ]
    return np.stack(X).reshape(out_shape)


INVERSE_PROJECTION_RATIO = 4
"""Columns per row from which :func:`lower_solve` multiplies by L⁻¹ instead of solving."""


def lower_solve(L: Array, B: Array, transpose: bool = False) -> Array:
    """L⁻¹ B (or L⁻ᵀ B when ``transpose``) for lower-triangular L [n, n] and B [n, k].

    For wide B (k >= ``INVERSE_PROJECTION_RATIO`` * n) this forms L⁻¹ (O(n³)) and multiplies (O(n² k)) rather
    than solving against k right-hand sides: jaxlib's CPU triangular solve runs at a fraction of the matrix
    product's speed on wide right-hand sides, and so does its gradient. Measured on one core, float64, value and
    gradient: n=100, k=36584 (the collapsed bound on protein) 126 ms against 304 ms; n=64, k=256 0.58 ms against
    0.81 ms. For k close to n the solve is faster (n=1024, k=256: 61 ms against 268 ms). L is a jittered
    Cholesky factor here, so L⁻¹ is well conditioned.
    """
    n, k = L.shape[-1], B.shape[-1]
    if k < INVERSE_PROJECTION_RATIO * n:
        return solve_triangular(L, B, lower=True, transpose=transpose)
    L_inv = solve_triangular(L, eye_like(L), lower=True)
    return (matrix_transpose(L_inv) if transpose else L_inv) @ B


def cholesky_project(K: Array, B: Array, jitter: float | None = None) -> Array:
    """A = L⁻¹ B with L the lower Cholesky factor of K (the jitter policy of :func:`cholesky`).

    The whitening projection of the sparse GP conditional (A = Lmm⁻¹ Kmn, thesis eq 5.26). For 2-D jax arrays
    its gradient is one closed-form rule for the pair (factorisation, solve) instead of the chain of the two:
    with G = ∂f/∂A and H = G Aᵀ,

        ∂f/∂B = L⁻ᵀ G,    ∂f/∂K = -½ L⁻ᵀ (Φ(H) + Φ(H)ᵀ) L⁻¹,

    (Φ: lower triangle with the diagonal halved), which follows from dA = L⁻¹ (dB - dL A) and the Cholesky
    derivative dL = L Φ(L⁻¹ dK L⁻ᵀ) (Murray 2016). It is defined as the tangent dA = L⁻¹ dB - Φ(L⁻¹ dK L⁻ᵀ) A
    (a ``jax.custom_jvp``, so forward mode and higher derivatives work too), whose transpose is the rule above.
    This saves the chain's M×M triangular product and solve: measured on one core, float64, B = 256 columns, the
    gradient of an SVGP data term took 469 ms instead of 632 ms at M = 1024 and 25 ms instead of 54 ms at M = 256.
    The jitter is held constant, as in :func:`cholesky`.

    Args:
        K: symmetric positive (semi-)definite [n, n] (batched inputs take the unfused path).
        B: [n, k].
        jitter: base relative jitter; defaults to :data:`JITTER` for the dtype of ``K``.

    Returns:
        A, [n, k].
    """
    if is_jax(K) and K.ndim == 2 and B.ndim == 2:
        j0 = base_jitter(K) if jitter is None else check_jitter(jitter)
        return _backend(K).cholesky_project(K, B, j0)
    return lower_solve(cholesky(K, jitter), B)


def cho_solve(L: Array, B: Array) -> Array:
    """Solve ``(L L^T) X = B`` given the lower factor ``L`` [..., n, n]; ``B`` [..., n, k]."""
    return solve_triangular(L, solve_triangular(L, B, lower=True), lower=True, transpose=True)


def logdet_from_cholesky(L: Array) -> Array:
    """``log det(L L^T) = 2 sum log diag L``; L [..., n, n] -> [...]."""
    xp = namespace(L)
    return 2.0 * xp.sum(xp.log(xp.abs(xp.linalg.diagonal(L))), axis=-1)


def _special(x: Array):
    """ndtr, log_ndtr, gammaln and logsumexp for the backend of ``x`` (scipy.special for numpy)."""
    backend = _backend(x)
    if backend is not None:
        return backend.special()
    import scipy.special as s

    return s


def normal_cdf(x: Array) -> Array:
    """Standard normal CDF Phi(x), elementwise."""
    return _special(x).ndtr(x)


def normal_logcdf(x: Array) -> Array:
    """log Phi(x), elementwise and accurate in the far left tail."""
    return _special(x).log_ndtr(x)


def gammaln(x: Array) -> Array:
    """log Gamma(x), elementwise."""
    return _special(x).gammaln(x)


def logsumexp(x: Array, axis: int) -> Array:
    """log sum exp along ``axis``, stable. numpy arrays are reduced here rather than by scipy, whose array-API
    layer inspects torch and jax in ``sys.modules`` and fails where they are blocked."""
    if _backend(x) is not None:
        return _special(x).logsumexp(x, axis=axis)
    x = np.asarray(x)
    peak = np.max(x, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    return np.squeeze(peak, axis=axis) + np.log(np.sum(np.exp(x - peak), axis=axis))


def log_sigmoid(x: Array) -> Array:
    """log(1 / (1 + exp(-x))), stable for large |x|."""
    xp = namespace(x)
    return -(xp.maximum(-x, 0.0 * x) + xp.log1p(xp.exp(-xp.abs(x))))


def matrix_transpose(A: Array) -> Array:
    """Swap the last two axes of ``A`` [..., n, m] -> [..., m, n]."""
    return namespace(A).matrix_transpose(A)


@lru_cache(maxsize=32)
def _hermgauss(order: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.hermite.hermgauss(order)
    return x, w


def gauss_hermite(order: int, like: Array) -> tuple[Array, Array]:
    """Nodes and weights for ``E_{N(f | mu, var)}[g(f)] ~= sum_i w_i g(mu + sqrt(var) * t_i)``.

    The physicists' Hermite rule is rescaled to the standard normal: ``t = sqrt(2) x``, ``w = w_H / sqrt(pi)``,
    so the weights sum to 1.

    Args:
        order: number of nodes (>= 1).
        like: an array whose backend, dtype and device the nodes take.

    Returns:
        (t, w), each of shape [order].
    """
    if int(order) < 1:
        raise ValueError(f"quadrature order must be a positive integer, got {order!r}")
    x, w = _hermgauss(int(order))
    xp = namespace(like)
    dev = array_api_compat.device(like)
    t = xp.asarray(x * math.sqrt(2.0), dtype=like.dtype, device=dev)
    wt = xp.asarray(w / math.sqrt(math.pi), dtype=like.dtype, device=dev)
    return t, wt
