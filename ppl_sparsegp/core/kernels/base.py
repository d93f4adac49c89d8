"""The kernel base class, the array-API helpers every kernel uses, and sums and products of kernels.

:class:`Kernel` holds the hyperparameters, selects ``active_dims``, resolves the namespace (numpy, jax.numpy or
torch) from the inputs and the hyperparameters, and exposes the hyperparameters as a flat dictionary
(:meth:`Kernel.parameters`, :meth:`Kernel.with_parameters`); subclasses write ``_K`` and ``_diag``. ``a + b`` and
``a * b`` build :class:`Sum` and :class:`Product`. See :mod:`ppl_sparsegp.core.kernels` for the conventions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import reduce
from typing import Any, ClassVar

import array_api_compat
import numpy as np

from ppl_sparsegp.core.ops import concrete_values, is_array, is_jax, namespace

Array = Any


def _resolve_namespace(values: Iterable[Any]):
    """Namespace of the arrays among ``values`` (numbers are skipped; numpy yields to jax or torch)."""
    return namespace(*(v for v in values if is_array(v)))


def _to_namespace(xp, x: Array) -> Array:
    """``x`` as an array of namespace ``xp`` (no copy when it already is one)."""
    if is_array(x) and namespace(x) is xp:
        return x
    return xp.asarray(x)


def _cast(xp, value: Any, like: Array) -> Array:
    """A hyperparameter (number, numpy or ``xp`` array) as an ``xp`` array of ``like``'s dtype."""
    if is_array(value) and namespace(value) is xp:
        return value if value.dtype == like.dtype else xp.astype(value, like.dtype)
    return xp.asarray(value, dtype=like.dtype, device=array_api_compat.device(like))


def _eye_bool(xp, n: int, like: Array) -> Array:
    return xp.eye(n, dtype=xp.bool, device=array_api_compat.device(like))


def _zero_diagonal(xp, A: Array) -> Array:
    """``A`` [N, N] with its diagonal set exactly to zero."""
    return xp.where(_eye_bool(xp, A.shape[0], A), xp.zeros_like(A), A)


def _ones(xp, n: int, like: Array) -> Array:
    return xp.ones(n, dtype=like.dtype, device=array_api_compat.device(like))


def _scaled_sqdist(xp, A: Array, B: Array | None) -> Array:
    """Squared Euclidean distances ``|a_i - b_j|^2`` between rows, clipped at 0.

    Args:
        A: [N, D], inputs already divided by the lengthscales.
        B: [M, D], or ``None`` for ``B = A`` (then the diagonal is exactly 0).

    Returns:
        [N, M] (or [N, N]).
    """
    offset = xp.mean(A, axis=0) if B is None else xp.mean(xp.concat([A, B], axis=0), axis=0)
    A = A - offset
    a2 = xp.sum(A * A, axis=1)
    if B is None:
        r2 = a2[:, None] + a2[None, :] - 2.0 * (A @ A.T)
        return _zero_diagonal(xp, xp.clip(r2, min=0.0))
    B = B - offset
    r2 = a2[:, None] + xp.sum(B * B, axis=1)[None, :] - 2.0 * (A @ B.T)
    return xp.clip(r2, min=0.0)


def _safe_sqrt(xp, r2: Array) -> Array:
    """``sqrt(max(r2, tiny))``: ``sqrt(r2)`` to machine precision, with a finite gradient at 0."""
    return xp.sqrt(xp.clip(r2, min=float(xp.finfo(r2.dtype).tiny)))


def _check_hyperparameter(owner: str, name: str, value: Any, max_ndim: int) -> Any:
    """Validate a concrete hyperparameter (Python number, numpy or concrete jax array); lists become numpy arrays.

    jax tracers (no values yet) and torch tensors (reading them would sync a device) pass through
    unchecked; every value is returned unchanged.
    """
    if isinstance(value, list | tuple):
        value = np.asarray(value, dtype=float)
    if is_jax(value):
        values = concrete_values(value)  # None for a tracer
    elif isinstance(value, bool) or not isinstance(value, int | float | np.ndarray | np.generic):
        values = None
    else:
        values = value
    if values is None:
        return value
    concrete = np.asarray(values, dtype=float)
    if concrete.ndim > max_ndim:
        shape = "a scalar" if max_ndim == 0 else "a scalar or a vector [D]"
        raise ValueError(f"{owner}.{name} must be {shape}, got shape {concrete.shape}")
    if not np.all(np.isfinite(concrete) & (concrete > 0)):
        raise ValueError(f"{owner}.{name} must be positive and finite, got {value!r}")
    return value


class Kernel:
    """Base class: a positive-definite covariance ``k(x, x')`` with positive hyperparameters.

    Subclasses implement ``_K(xp, X, X2)`` and ``_diag(xp, X)`` on inputs that are already arrays
    of the namespace ``xp``, floating, and restricted to ``active_dims``.

    Attributes:
        active_dims: the input columns the kernel looks at (``None``: all of them).
            ``X[:, active_dims]`` is taken before anything else, so ARD vectors have length
            ``len(active_dims)``.
    """

    __slots__ = ("active_dims",)
    param_names: ClassVar[tuple[str, ...]] = ()
    """Names of the hyperparameters of a leaf kernel (also its constructor's keyword arguments)."""
    ard_names: ClassVar[tuple[str, ...]] = ()
    """The hyperparameters that may be a vector [D] with one entry per input column (ARD)."""

    def __init__(self, active_dims: Iterable[int] | None = None) -> None:
        dims = None if active_dims is None else tuple(int(d) for d in active_dims)
        if dims is not None and (not dims or min(dims) < 0):
            raise ValueError(f"active_dims must be non-negative column indices, got {active_dims!r}")
        object.__setattr__(self, "active_dims", dims)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use with_parameters() to change {name!r}")

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """Restore the slots when unpickling or copying (``__setattr__`` is disabled)."""
        for name, value in state[1].items():
            object.__setattr__(self, name, value)

    # -- evaluation --------------------------------------------------------------------------------

    def __call__(self, X: Array, X2: Array | None = None) -> Array:
        """Covariance matrix ``K[i, j] = k(X[i], X2[j])``.

        Args:
            X: [N, D] inputs.
            X2: [M, D] inputs, or ``None`` meaning the same inputs as ``X`` (which is what makes
                ``White`` add its noise, and makes the diagonal of stationary kernels exact).

        Returns:
            K, shape [N, M] (or [N, N]), in the namespace resolved from the inputs and the
            hyperparameters.
        """
        xp, X, X2 = self._prepare(X, X2)
        X = self._select(xp, X)
        self._check_ard(X)
        return self._K(xp, X, None if X2 is None else self._select(xp, X2))

    def diag(self, X: Array) -> Array:
        """The diagonal ``k(X[i], X[i])`` of ``K(X)`` without forming it: X [N, D] -> [N]."""
        xp, X, _ = self._prepare(X, None)
        X = self._select(xp, X)
        self._check_ard(X)
        return self._diag(xp, X)

    def _check_ard(self, X: Array) -> None:
        """Refuse an ARD vector whose length is not the number of input columns the kernel sees (X [N, D])."""
        for name in self.ard_names:
            value = getattr(self, name)
            shape = tuple(getattr(value, "shape", np.shape(value)))
            if len(shape) == 1 and shape[0] != X.shape[1]:
                seen = "" if self.active_dims is None else f" (its active_dims {list(self.active_dims)})"
                raise ValueError(
                    f"{type(self).__name__}.{name} has {shape[0]} entries but X has {X.shape[1]} columns{seen}; "
                    f"give one {name} per input column, or a scalar"
                )

    def _prepare(self, X: Array, X2: Array | None):
        """Resolve the namespace, move the inputs to it and to one float dtype, check shapes."""
        xp = _resolve_namespace([X, X2, *self.parameters().values()])
        X = _to_namespace(xp, X)
        X2 = None if X2 is None else _to_namespace(xp, X2)
        for name, Z in (("X", X), ("X2", X2)):
            if Z is not None and Z.ndim != 2:
                raise ValueError(f"{name} must have shape [N, D], got shape {tuple(Z.shape)}")
        if X2 is not None and X2.shape[1] != X.shape[1]:
            raise ValueError(f"X has {X.shape[1]} columns but X2 has {X2.shape[1]}")
        if self.active_dims is not None and max(self.active_dims) >= X.shape[1]:
            raise ValueError(f"active_dims {self.active_dims} out of range for X with {X.shape[1]} columns")
        dtype = X.dtype if X2 is None else xp.result_type(X.dtype, X2.dtype)
        if not xp.isdtype(dtype, "real floating"):
            dtype = xp.__array_namespace_info__().default_dtypes()["real floating"]
        X = X if X.dtype == dtype else xp.astype(X, dtype)
        X2 = X2 if X2 is None or X2.dtype == dtype else xp.astype(X2, dtype)
        return xp, X, X2

    def _select(self, xp, X: Array) -> Array:
        if self.active_dims is None:
            return X
        index = xp.asarray(self.active_dims, device=array_api_compat.device(X))
        return xp.take(X, index, axis=1)

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        raise NotImplementedError

    def _diag(self, xp, X: Array) -> Array:
        raise NotImplementedError

    # -- hyperparameters ---------------------------------------------------------------------------

    def parameters(self) -> dict[str, Any]:
        """Flat ``{name: value}`` of all hyperparameters as stored (numbers or arrays, any backend).

        Composite kernels prefix their parts' names with ``"k0."``, ``"k1."``... recursively.
        """
        return {name: getattr(self, name) for name in self.param_names}

    def with_parameters(self, values: Mapping[str, Any]) -> Kernel:
        """A kernel of the same structure with some hyperparameters replaced.

        Args:
            values: ``{name: value}`` with names as in :meth:`parameters`; missing names keep
                their value.

        Raises:
            ValueError: a name is not one of :meth:`parameters`.
        """
        unknown = [key for key in values if key not in self.parameters()]
        if unknown:
            raise ValueError(
                f"unknown hyperparameter(s) {unknown} for {type(self).__name__}; "
                f"valid names are {sorted(self.parameters())}"
            )
        return self._rebuild(values)

    def _rebuild(self, values: Mapping[str, Any]) -> Kernel:
        return type(self)(**{**self.parameters(), **values}, active_dims=self.active_dims)

    # -- algebra -----------------------------------------------------------------------------------

    def __add__(self, other: Kernel) -> Sum:
        if not isinstance(other, Kernel):
            return NotImplemented
        return Sum([*_flat_parts(self, Sum), *_flat_parts(other, Sum)])

    def __mul__(self, other: Kernel) -> Product:
        if not isinstance(other, Kernel):
            return NotImplemented
        return Product([*_flat_parts(self, Product), *_flat_parts(other, Product)])

    def __repr__(self) -> str:
        args = [f"{name}={value!r}" for name, value in self.parameters().items()]
        if self.active_dims is not None:
            args.append(f"active_dims={self.active_dims}")
        return f"{type(self).__name__}({', '.join(args)})"


class Combination(Kernel):
    """A kernel made of parts ``kernels[0], kernels[1], ...``; their names get ``"k{i}."`` prefixes.

    Args:
        kernels: one or more kernels.
        active_dims: columns selected before the parts apply their own ``active_dims``.
    """

    __slots__ = ("kernels",)

    def __init__(self, kernels: Sequence[Kernel], active_dims: Iterable[int] | None = None) -> None:
        super().__init__(active_dims)
        kernels = tuple(kernels)
        if not kernels:
            raise ValueError(f"{type(self).__name__} needs at least one kernel")
        for k in kernels:
            if not isinstance(k, Kernel):
                raise TypeError(f"{type(self).__name__} parts must be Kernels, got {type(k).__name__}")
        object.__setattr__(self, "kernels", kernels)

    def parameters(self) -> dict[str, Any]:
        return {f"k{i}.{name}": value for i, k in enumerate(self.kernels) for name, value in k.parameters().items()}

    def _rebuild(self, values: Mapping[str, Any]) -> Kernel:
        parts = []
        for i, k in enumerate(self.kernels):
            prefix = f"k{i}."
            own = {key[len(prefix) :]: v for key, v in values.items() if key.startswith(prefix)}
            parts.append(k.with_parameters(own) if own else k)
        return type(self)(parts, active_dims=self.active_dims)

    def __repr__(self) -> str:
        dims = "" if self.active_dims is None else f", active_dims={self.active_dims}"
        return f"{type(self).__name__}({list(self.kernels)!r}{dims})"


class Sum(Combination):
    """``k(x, x') = sum_i k_i(x, x')``. Shapes: X [N, D], X2 [M, D] -> [N, M]."""

    __slots__ = ()

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        return reduce(lambda a, b: a + b, (k(X, X2) for k in self.kernels))

    def _diag(self, xp, X: Array) -> Array:
        return reduce(lambda a, b: a + b, (k.diag(X) for k in self.kernels))


class Product(Combination):
    """``k(x, x') = prod_i k_i(x, x')`` (elementwise). Shapes: X [N, D], X2 [M, D] -> [N, M]."""

    __slots__ = ()

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        return reduce(lambda a, b: a * b, (k(X, X2) for k in self.kernels))

    def _diag(self, xp, X: Array) -> Array:
        return reduce(lambda a, b: a * b, (k.diag(X) for k in self.kernels))


def _flat_parts(kernel: Kernel, kind: type[Combination]) -> tuple[Kernel, ...]:
    """The parts of ``kernel`` if it is a ``kind`` without ``active_dims``, else ``(kernel,)``."""
    if type(kernel) is kind and kernel.active_dims is None:
        return kernel.kernels
    return (kernel,)
