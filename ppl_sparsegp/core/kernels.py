"""Covariance functions written once against the Python array API: jax.numpy, torch and numpy.

A kernel is a small immutable object that holds its hyperparameters and maps inputs to a
covariance matrix::

    k = RBF(variance=1.0, lengthscale=[1.0, 2.0]) + Linear(variance=0.5)
    K = k(X)            # X [N, D]          -> K [N, N]
    Kxz = k(X, Z)       # X [N, D], Z [M, D] -> [N, M]
    kdiag = k.diag(X)   # X [N, D]          -> [N]

**Hyperparameters** are exposed as a flat dictionary, which is how the models turn a kernel into
random variables. Every entry is positive, so a model can give each one a positive prior (or
constraint) without knowing which kernel it is looking at::

    kernel = kernel_from_name("rbf+linear", input_dim=D)

    def model(X, y):
        values = {
            name: numpyro.sample(name, dist.LogNormal(0.0, 1.0).expand(np.shape(v)).to_event())
            for name, v in kernel.parameters().items()
        }
        K = kernel.with_parameters(values)(X)     # rebuilt from the sampled values on every call
        ...

Composite kernels prefix the keys of their parts with ``"k0."``, ``"k1."``...: the kernel above
has ``k0.variance``, ``k0.lengthscale`` and ``k1.variance``. ``a + b + c`` flattens to one ``Sum``
of three parts (keys ``k0.``, ``k1.``, ``k2.``); ``Sum([Sum([a, b]), c])`` built explicitly keeps
its nesting (``k0.k1.lengthscale``).

**Backends.** The namespace is the one of the inputs *and* the hyperparameters: a numpy ``X``
with jax hyperparameters (sampled values, tracers under ``jit``) is computed in jax.numpy, a numpy
``X`` with torch hyperparameters in torch; numpy is used only when everything is numpy or a
Python number. Mixing jax and torch raises. Computation happens in the floating dtype of the
inputs (``result_type(X, X2)``; integer inputs are promoted to the namespace's default floating
dtype) and hyperparameters are cast to it, so Python floats and numpy arrays are fine as values.

**Construction is cheap and pure**: positivity and shapes are checked for Python numbers, numpy arrays and
concrete jax arrays (a jax tracer has no values to check; torch tensors are not checked, since reading them would
synchronise a device on every step of an eager torch loop). The length of an ARD vector is checked against the
inputs' columns when the kernel is evaluated.

**Numerics.** Scaled squared distances are computed by the expansion ``|a|^2 + |b|^2 - 2 a.b`` on
inputs centred by their common mean (to limit cancellation), clipped at 0, and set exactly to 0
on the diagonal when ``X2`` is ``None``. The Matérn kernels take ``r = sqrt(max(r^2, tiny))`` so
that gradients at coincident points (``r = 0``) are finite. The periodic kernel uses a cosine/sine
feature expansion so that no ``[N, M, D]`` array is formed. The price of the expansion (O(N M)
memory instead of O(N M D)): between two *separate* arrays that share points (``K(Z, X)`` with
``Z`` drawn from ``X``) ``r^2`` at the shared points is rounding noise of order
``eps |x / ell|^2`` rather than 0. The smooth kernels do not notice (errors ~1e-14 in float64), but
Matérn-1/2, which moves like ``r`` near 0, is off there by about ``sqrt(eps) |x / ell|`` (1e-7 to
1e-6 in float64 for standardised inputs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import reduce
from typing import Any, ClassVar

import array_api_compat
import numpy as np

from .ops import concrete_values, is_array, is_jax, namespace

Array = Any

__all__ = [
    "Kernel",
    "Stationary",
    "RBF",
    "Matern12",
    "Matern32",
    "Matern52",
    "Linear",
    "Periodic",
    "White",
    "Constant",
    "Combination",
    "Sum",
    "Product",
    "kernel_from_name",
]


# --------------------------------------------------------------------------------------------------
# Backend helpers
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Stationary kernels
# --------------------------------------------------------------------------------------------------


class Stationary(Kernel):
    """``k(x, x') = variance * g(r^2)`` with ``r^2 = sum_d ((x_d - x'_d) / lengthscale_d)^2``.

    Args:
        variance: signal variance ``sigma^2`` (scalar > 0), equal to ``k(x, x)``.
        lengthscale: ``ell``, a scalar (isotropic) or a vector [D] (ARD), > 0.
        active_dims: input columns used (see :class:`Kernel`).
    """

    __slots__ = ("variance", "lengthscale")
    param_names = ("variance", "lengthscale")
    ard_names = ("lengthscale",)

    def __init__(
        self,
        variance: Any = 1.0,
        lengthscale: Any = 1.0,
        active_dims: Iterable[int] | None = None,
    ) -> None:
        super().__init__(active_dims)
        name = type(self).__name__
        object.__setattr__(self, "variance", _check_hyperparameter(name, "variance", variance, 0))
        object.__setattr__(self, "lengthscale", _check_hyperparameter(name, "lengthscale", lengthscale, 1))

    def _profile(self, xp, r2: Array) -> Array:
        """``g(r^2)`` with ``g(0) = 1``, elementwise."""
        raise NotImplementedError

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        variance, lengthscale = _cast(xp, self.variance, X), _cast(xp, self.lengthscale, X)
        r2 = _scaled_sqdist(xp, X / lengthscale, None if X2 is None else X2 / lengthscale)
        return variance * self._profile(xp, r2)

    def _diag(self, xp, X: Array) -> Array:
        return _cast(xp, self.variance, X) * _ones(xp, X.shape[0], X)


class RBF(Stationary):
    """Squared exponential (radial basis function) kernel: ``k = sigma^2 exp(-r^2 / 2)``.

    Shapes: X [N, D], X2 [M, D] -> [N, M]; lengthscale scalar or [D].
    """

    __slots__ = ()

    def _profile(self, xp, r2: Array) -> Array:
        return xp.exp(-0.5 * r2)


class Matern12(Stationary):
    """Matérn 1/2 (exponential, Ornstein-Uhlenbeck) kernel: ``k = sigma^2 exp(-r)``.

    Shapes: X [N, D], X2 [M, D] -> [N, M]; lengthscale scalar or [D].
    """

    __slots__ = ()

    def _profile(self, xp, r2: Array) -> Array:
        return xp.exp(-_safe_sqrt(xp, r2))


class Matern32(Stationary):
    """Matérn 3/2 kernel: ``k = sigma^2 (1 + sqrt(3) r) exp(-sqrt(3) r)``.

    Shapes: X [N, D], X2 [M, D] -> [N, M]; lengthscale scalar or [D].
    """

    __slots__ = ()

    def _profile(self, xp, r2: Array) -> Array:
        s = math.sqrt(3.0) * _safe_sqrt(xp, r2)
        return (1.0 + s) * xp.exp(-s)


class Matern52(Stationary):
    """Matérn 5/2 kernel: ``k = sigma^2 (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)``.

    Shapes: X [N, D], X2 [M, D] -> [N, M]; lengthscale scalar or [D].
    """

    __slots__ = ()

    def _profile(self, xp, r2: Array) -> Array:
        s = math.sqrt(5.0) * _safe_sqrt(xp, r2)
        return (1.0 + s + (5.0 / 3.0) * r2) * xp.exp(-s)


# --------------------------------------------------------------------------------------------------
# Other leaf kernels
# --------------------------------------------------------------------------------------------------


class Periodic(Kernel):
    """MacKay's periodic (exp-sine-squared) kernel, as a product over input dimensions.

    ``k(x, x') = sigma^2 exp(-2 sum_d sin^2(pi (x_d - x'_d) / p_d) / ell_d^2)``

    In one dimension this is scikit-learn's ``ExpSineSquared(length_scale=ell, periodicity=p)``
    times ``sigma^2``. It is evaluated through ``2 sin^2(t) = 1 - cos(2 t)`` and
    ``cos(u - u') = cos u cos u' + sin u sin u'`` with ``u_d = 2 pi x_d / p_d``, i.e. as inner
    products of cosine and sine features, so memory is O(N M) rather than O(N M D).

    Args:
        variance: ``sigma^2``, scalar > 0.
        lengthscale: ``ell``, scalar or [D], > 0.
        period: ``p``, scalar or [D], > 0.
        active_dims: input columns used (see :class:`Kernel`).

    Shapes: X [N, D], X2 [M, D] -> [N, M].
    """

    __slots__ = ("variance", "lengthscale", "period")
    param_names = ("variance", "lengthscale", "period")
    ard_names = ("lengthscale", "period")

    def __init__(
        self,
        variance: Any = 1.0,
        lengthscale: Any = 1.0,
        period: Any = 1.0,
        active_dims: Iterable[int] | None = None,
    ) -> None:
        super().__init__(active_dims)
        for name, value, max_ndim in (
            ("variance", variance, 0),
            ("lengthscale", lengthscale, 1),
            ("period", period, 1),
        ):
            object.__setattr__(self, name, _check_hyperparameter("Periodic", name, value, max_ndim))

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        variance = _cast(xp, self.variance, X)
        weight = _ones(xp, X.shape[1], X) / _cast(xp, self.lengthscale, X) ** 2  # [D]
        period = _cast(xp, self.period, X)

        def features(Z: Array) -> tuple[Array, Array]:
            u = (2.0 * math.pi) * Z / period
            return xp.cos(u), xp.sin(u)

        cos1, sin1 = features(X)
        cos2, sin2 = (cos1, sin1) if X2 is None else features(X2)
        # s[i, j] = sum_d w_d (1 - cos(u_id - u'_jd)) = 2 sum_d w_d sin^2(pi (x_id - x'_jd) / p_d)
        s = xp.sum(weight) - (cos1 * weight) @ cos2.T - (sin1 * weight) @ sin2.T
        s = xp.clip(s, min=0.0)
        if X2 is None:
            s = _zero_diagonal(xp, s)
        return variance * xp.exp(-s)

    def _diag(self, xp, X: Array) -> Array:
        return _cast(xp, self.variance, X) * _ones(xp, X.shape[0], X)


class Linear(Kernel):
    """Linear (dot-product) kernel: ``k(x, x') = sum_d sigma_d^2 x_d x'_d``.

    Args:
        variance: ``sigma^2``, a scalar or a vector [D] (ARD), > 0.
        active_dims: input columns used (see :class:`Kernel`).

    Shapes: X [N, D], X2 [M, D] -> [N, M].
    """

    __slots__ = ("variance",)
    param_names = ("variance",)
    ard_names = ("variance",)

    def __init__(self, variance: Any = 1.0, active_dims: Iterable[int] | None = None) -> None:
        super().__init__(active_dims)
        object.__setattr__(self, "variance", _check_hyperparameter("Linear", "variance", variance, 1))

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        return (X * _cast(xp, self.variance, X)) @ (X if X2 is None else X2).T

    def _diag(self, xp, X: Array) -> Array:
        return xp.sum(X * X * _cast(xp, self.variance, X), axis=1)


class White(Kernel):
    """White noise: ``K(X) = sigma^2 I``; ``K(X, X2) = 0`` for any given ``X2`` (distinct inputs).

    Only ``X2 is None`` counts as "the same inputs": ``K(X, X)`` with an explicit second argument
    is zero.

    Args:
        variance: ``sigma^2``, scalar > 0.

    Shapes: X [N, D] -> [N, N]; X [N, D], X2 [M, D] -> [N, M] zeros; diag -> [N] of ``sigma^2``.
    """

    __slots__ = ("variance",)
    param_names = ("variance",)

    def __init__(self, variance: Any = 1.0, active_dims: Iterable[int] | None = None) -> None:
        super().__init__(active_dims)
        object.__setattr__(self, "variance", _check_hyperparameter("White", "variance", variance, 0))

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        device = array_api_compat.device(X)
        if X2 is None:
            eye = xp.eye(X.shape[0], dtype=X.dtype, device=device)
            return _cast(xp, self.variance, X) * eye
        return xp.zeros((X.shape[0], X2.shape[0]), dtype=X.dtype, device=device)

    def _diag(self, xp, X: Array) -> Array:
        return _cast(xp, self.variance, X) * _ones(xp, X.shape[0], X)


class Constant(Kernel):
    """Constant kernel: ``k(x, x') = sigma^2`` (a random offset shared by all inputs).

    Args:
        variance: ``sigma^2``, scalar > 0.

    Shapes: X [N, D], X2 [M, D] -> [N, M].
    """

    __slots__ = ("variance",)
    param_names = ("variance",)

    def __init__(self, variance: Any = 1.0, active_dims: Iterable[int] | None = None) -> None:
        super().__init__(active_dims)
        object.__setattr__(self, "variance", _check_hyperparameter("Constant", "variance", variance, 0))

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        m = X.shape[0] if X2 is None else X2.shape[0]
        ones = xp.ones((X.shape[0], m), dtype=X.dtype, device=array_api_compat.device(X))
        return _cast(xp, self.variance, X) * ones

    def _diag(self, xp, X: Array) -> Array:
        return _cast(xp, self.variance, X) * _ones(xp, X.shape[0], X)


# --------------------------------------------------------------------------------------------------
# Sums and products
# --------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------
# Kernels by name
# --------------------------------------------------------------------------------------------------


def _default(input_dim: int, ard: bool) -> Any:
    return np.ones(input_dim) if ard else 1.0


_BY_NAME: dict[str, Callable[[int, bool], Kernel]] = {
    "rbf": lambda d, ard: RBF(1.0, _default(d, ard)),
    "matern12": lambda d, ard: Matern12(1.0, _default(d, ard)),
    "matern32": lambda d, ard: Matern32(1.0, _default(d, ard)),
    "matern52": lambda d, ard: Matern52(1.0, _default(d, ard)),
    "linear": lambda d, ard: Linear(_default(d, ard)),
    "periodic": lambda d, ard: Periodic(1.0, _default(d, ard), _default(d, ard)),
}


def kernel_from_name(name: str, input_dim: int, ard: bool = True) -> Kernel:
    """A kernel with default initial hyperparameters from a name like ``"rbf"`` or ``"rbf+linear"``.

    Defaults: variances 1.0; lengthscales (and periods) ``ones(input_dim)`` when ``ard`` else 1.0;
    the linear kernel's variance is ``ones(input_dim)`` when ``ard`` else 1.0.

    Args:
        name: one of ``"rbf"``, ``"matern12"``, ``"matern32"``, ``"matern52"``, ``"linear"``,
            ``"periodic"`` (case-insensitive), or several joined by ``"+"`` for their :class:`Sum`.
        input_dim: D, the number of input columns.
        ard: one lengthscale per input dimension (vectors [D]) rather than a shared scalar.

    Raises:
        ValueError: an unknown name (the message lists the valid ones) or ``input_dim < 1``.
    """
    if int(input_dim) < 1:
        raise ValueError(f"input_dim must be a positive integer, got {input_dim!r}")
    parts = [part.strip().lower() for part in name.split("+")]
    for part in parts:
        if part not in _BY_NAME:
            raise ValueError(
                f"unknown kernel {part!r} in {name!r}; valid names are {sorted(_BY_NAME)} "
                "and '+'-joined combinations such as 'rbf+linear'"
            )
    kernels = [_BY_NAME[part](int(input_dim), ard) for part in parts]
    return kernels[0] if len(kernels) == 1 else Sum(kernels)
