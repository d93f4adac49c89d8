"""Eager input checks shared by the models, the SVI engine and the CLI.

Every check raises :class:`ValueError` whose message names the offending argument and says what was expected,
so a user sees ``X must be 2-D [N, D] ...`` instead of a shape error from deep inside a compiled kernel.

The checks work on numpy, jax and torch arrays alike (through ``array_api_compat``) and return their inputs
unchanged: no copy, no conversion to another backend. They are meant to run *before* jax compiles anything.
If a value is nevertheless a jax tracer (the check was called inside ``jit``), only its static properties
(shape, dtype) can be checked; the value checks (finiteness, positivity) are then skipped, because a tracer has
no values to inspect.
"""

from __future__ import annotations

import math
import numbers
import os
import weakref
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import array_api_compat
import numpy as np

Array = Any

_Y_LAYOUTS = {1: "1-D [N]", 2: "2-D [N, P]"}
POSITIVE_TRANSFORMS = ("exp", "softplus")
"""How a fit keeps its positive params on the real line (``fit_svi(positive_transform=...)``, both backends;
:mod:`ppl_sparsegp.infer.positive_transform`)."""


def _is_tracer(x: Any) -> bool:
    """True for an abstract jax value (inside ``jit``/``grad``), whose entries cannot be read."""
    if not array_api_compat.is_jax_array(x):
        return False
    import jax

    return isinstance(x, jax.core.Tracer)


def _require_array(name: str, x: Any) -> None:
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        raise ValueError(
            f"{name} must be an array (numpy, jax or torch), got {type(x).__name__}; wrap it with numpy.asarray({name})"
        )


def _shape(x: Array) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape)


_FINITE_TENSORS: dict[int, tuple[weakref.ref, int]] = {}
"""torch tensors found finite, by ``id``: a weak reference and the tensor's version counter (which every in-place
change raises) when it was checked."""


def _all_finite(x: Array) -> bool:
    if array_api_compat.is_jax_array(x):  # a concrete jax array; jnp ops would be staged out inside a trace
        return bool(np.isfinite(np.asarray(x)).all())
    if array_api_compat.is_torch_array(x):
        return _finite_tensor(x)
    xp = array_api_compat.array_namespace(x)
    return bool(xp.all(xp.isfinite(x)))


def _finite_tensor(x: Array) -> bool:
    """Whether torch tensor ``x`` is finite, checked once per tensor and version: a Pyro model checks its data at
    every step (eagerly, where a NumPyro model's check is traced away), which cost 0.7-1 ms a step at N = 20000 and
    grows with N."""
    seen = _FINITE_TENSORS.get(id(x))
    if seen is not None and seen[0]() is x and seen[1] == x._version:
        return True
    xp = array_api_compat.array_namespace(x)
    finite = bool(xp.all(xp.isfinite(x)))
    if finite:
        key = id(x)
        _FINITE_TENSORS[key] = (weakref.ref(x, lambda _, key=key: _FINITE_TENSORS.pop(key, None)), x._version)
    return finite


def _is_real_numeric(x: Array) -> bool:
    xp = array_api_compat.array_namespace(x)
    return bool(xp.isdtype(x.dtype, ("real floating", "integral")))


def as_array(x: Any) -> Any:
    """A pandas DataFrame or Series as its numpy array (``to_numpy()``: [N, D] or [N]); anything else as it is.

    The library's entry points (model methods, the engines, the recipes, model fields ``Z``) pass their data
    through this, so that pandas data work wherever arrays do.
    """
    return x.to_numpy() if type(x).__module__.startswith("pandas") and hasattr(x, "to_numpy") else x


def as_arrays(args: tuple, kwargs: Mapping[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """:func:`as_array` of every positional and keyword argument of a call: ``(args, kwargs)``."""
    return tuple(map(as_array, args)), {name: as_array(value) for name, value in kwargs.items()}


def check_inputs(
    X: Array,
    y: Array | None = None,
    *,
    x_name: str = "X",
    y_name: str = "y",
    y_ndim: tuple[int, ...] = (1, 2),
) -> tuple[Array, Array | None]:
    """Check training inputs ``X`` [N, D] and, if given, targets ``y`` [N] or [N, P].

    Requirements: ``X`` is a 2-D array of finite floating-point numbers with N >= 1 rows and D >= 1 columns;
    ``y`` (if not ``None``) is a real-valued array of finite numbers whose number of dimensions is in ``y_ndim``
    and whose first dimension is N. Integer ``y`` is accepted (class labels).

    Args:
        X: inputs [N, D], numpy/jax/torch.
        y: targets [N] or [N, P], or ``None`` for unsupervised use.
        x_name, y_name: the argument names used in error messages.
        y_ndim: the allowed numbers of dimensions of ``y``, e.g. ``(1,)`` for class labels.

    Returns:
        ``(X, y)``, the very objects passed in.

    Raises:
        ValueError: naming the argument and what was expected.
    """
    _require_array(x_name, X)
    shape = _shape(X)
    if len(shape) == 1:
        raise ValueError(
            f"{x_name} must be 2-D [N, D], got a 1-D array of shape {shape}; "
            f"for one input dimension use {x_name}[:, None]"
        )
    if len(shape) != 2:
        raise ValueError(f"{x_name} must be 2-D [N, D], got shape {shape}")
    if shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"{x_name} must have N >= 1 rows and D >= 1 columns, got shape {shape}")
    xp = array_api_compat.array_namespace(X)
    if not xp.isdtype(X.dtype, "real floating"):
        raise ValueError(
            f"{x_name} must hold floating-point numbers, got dtype {X.dtype}; convert it, e.g. {x_name}.astype(float)"
        )
    if not _is_tracer(X) and not _all_finite(X):
        raise ValueError(f"{x_name} must be finite, but it contains NaN or infinite entries")
    if y is None:
        return X, y

    _require_array(y_name, y)
    y_shape = _shape(y)
    if len(y_shape) not in y_ndim:
        allowed = " or ".join(_Y_LAYOUTS.get(k, f"{k}-D") for k in y_ndim)
        raise ValueError(f"{y_name} must be {allowed}, got shape {y_shape}")
    if y_shape[0] != shape[0]:
        raise ValueError(
            f"{y_name} must have as many rows as {x_name}: len({x_name}) = {shape[0]} but len({y_name}) = {y_shape[0]}"
        )
    if not _is_real_numeric(y):
        raise ValueError(f"{y_name} must hold real numbers, got dtype {y.dtype}")
    if not _is_tracer(y) and not _all_finite(y):
        raise ValueError(f"{y_name} must be finite, but it contains NaN or infinite entries")
    return X, y


def check_finite(name: str, x: Array) -> Array:
    """Check that the array ``x`` (any shape) holds finite real numbers; a traced ``x`` is not checked.

    Returns ``x`` unchanged. Raises ``ValueError`` naming ``name`` otherwise.
    """
    _require_array(name, x)
    if not _is_real_numeric(x):
        raise ValueError(f"{name} must hold real numbers, got dtype {x.dtype}")
    if not _is_tracer(x) and not _all_finite(x):
        raise ValueError(f"{name} must be finite, but it contains NaN or infinite entries")
    return x


def check_labels(name: str, y: Array, num_classes: int) -> Array:
    """Check that ``y`` [N] holds class labels: whole numbers in 0 .. ``num_classes`` - 1 (as integers or floats); a
    traced ``y`` is not checked. Returns ``y`` unchanged. Raises ``ValueError`` naming ``name`` otherwise."""
    if _shape(y) and len(_shape(y)) != 1:
        raise ValueError(f"{name}: expected class labels of shape [N], got shape {_shape(y)}")
    if _is_tracer(y):
        return y
    values = np.asarray(y)
    whole = np.all(np.mod(values, 1) == 0) if values.size else True
    if not whole or (values.size and (values.min() < 0 or values.max() > num_classes - 1)):
        shown = np.unique(values)[:8]
        raise ValueError(
            f"{name}: expected class labels 0..{num_classes - 1} (whole numbers) for {num_classes} classes, "
            f"got values {shown.tolist()}{' ...' if np.unique(values).size > 8 else ''}"
        )
    return y


def check_positive(name: str, value: Any) -> Any:
    """Check that ``value`` (a number or an array of any shape) is finite and strictly positive everywhere.

    Returns ``value`` unchanged. Raises ``ValueError`` naming ``name`` otherwise.
    """
    if isinstance(value, bool) or not (
        isinstance(value, numbers.Real) or (hasattr(value, "shape") and hasattr(value, "dtype"))
    ):
        raise ValueError(f"{name} must be a positive number or array, got {value!r}")
    if isinstance(value, numbers.Real):
        ok = np.isfinite(value) and value > 0
    elif _is_tracer(value):
        return value
    else:
        if not _is_real_numeric(value):
            raise ValueError(f"{name} must hold real numbers, got dtype {value.dtype}")
        xp = array_api_compat.array_namespace(value)
        ok = bool(xp.all(xp.isfinite(value))) and bool(xp.all(value > 0))
    if not ok:
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return value


def check_open_unit_interval(name: str, value: Any) -> float:
    """Check that ``value`` is a real number strictly between 0 and 1 (a probability, a decay rate).

    Returns it as a float. Raises ``ValueError`` naming ``name`` otherwise.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 < value < 1.0:
        raise ValueError(f"{name}: expected a number in (0, 1), got {value!r}")
    return float(value)


def check_rate(name: str, value: Any) -> float:
    """Check a rate in [0, 1) (a dropout rate: 0 keeps everything, 1 would keep nothing). Returns it as a float.
    Raises ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name}: expected a number in [0, 1), got {value!r}")
    return float(value)


def check_inducing_count(M: Any, N: int, name: str = "num_inducing") -> int:
    """Check a number of inducing points ``M`` chosen from ``N`` data points: an integer with 1 <= M <= N.

    Returns ``M`` as a Python ``int``.
    """
    if isinstance(M, bool) or not isinstance(M, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {M!r}")
    if not 1 <= M <= N:
        raise ValueError(
            f"{name} must satisfy 1 <= {name} <= N = {N} (inducing points are initialised from the "
            f"training inputs), got {int(M)}"
        )
    return int(M)


def check_point_estimates(sites: Any, every: Any, window: Any, held: Any = ()) -> None:
    """The settings of an SG-MCMC chain's point estimates (``PointEstimates`` of both engines): ``sites`` a
    non-empty sequence of param site names, ``every`` and ``window`` counts >= 1, ``held`` a sequence of distinct
    names among ``sites`` that leaves at least one of them optimised.

    Raises:
        ValueError: naming the setting and what was expected.
    """
    if isinstance(sites, str) or not sites or not all(isinstance(s, str) for s in sites):
        raise ValueError(f"sites: expected a non-empty sequence of param site names, got {sites!r}")
    check_count("every", every, minimum=1)
    check_count("window", window, minimum=1)
    if (
        isinstance(held, str)
        or not all(isinstance(s, str) and s in sites for s in held)
        or len(set(held)) != len(held)
        or len(set(held)) >= len(set(sites))
    ):
        raise ValueError(
            f"held: expected distinct names among the sites {tuple(sites)} that leave at least one optimised, "
            f"got {held!r}"
        )


def check_count(name: str, value: Any, minimum: int = 0, optional: bool = False) -> int | None:
    """Check a count (steps, draws, points, dimensions): an integer >= ``minimum`` (or None when ``optional``).
    Returns it as a Python ``int`` (or None)."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        what = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
        raise ValueError(f"{name}: expected {what}, got {value!r}")
    return int(value)


def check_positive_float(name: str, value: Any) -> float:
    """Check a finite number > 0 (a scale, a radius). Returns it as a Python ``float``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    """Check a Python ``True`` or ``False`` (not 0/1, not a string); returns it."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return value


def check_choice(name: str, value: Any, choices: Collection[Any]) -> Any:
    """Check that ``value`` is one of ``choices``; returns ``value``."""
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {options}; got {value!r}")
    return value


def check_same_dim(Z: Array, X: Array, *, z_name: str = "Z", x_name: str = "X") -> tuple[Array, Array]:
    """Check inducing inputs ``Z`` [M, D] against inputs ``X`` [N, D]: both 2-D with the same D.

    Returns ``(Z, X)`` unchanged.
    """
    for name, arr in ((z_name, Z), (x_name, X)):
        _require_array(name, arr)
        if len(_shape(arr)) != 2:
            raise ValueError(f"{name} must be 2-D, got shape {_shape(arr)}")
    if Z.shape[1] != X.shape[1]:
        raise ValueError(
            f"{z_name} must have the same number of columns as {x_name}: {z_name} has shape "
            f"{_shape(Z)} (D = {Z.shape[1]}) but {x_name} has shape {_shape(X)} (D = {X.shape[1]})"
        )
    return Z, X


def check_keys(name: str, given: Collection[str], valid: Collection[str]) -> None:
    """Refuse keys of ``given`` (e.g. a params dict) that are not in ``valid``, naming them and listing ``valid``.

    A misspelt key of a parameter dict would otherwise be ignored silently (the initial value used instead).
    """
    unknown = sorted(set(given) - set(valid))
    if unknown:
        raise ValueError(f"{name}: unknown key(s) {unknown}; valid keys for this model are {sorted(valid)}")


def check_output_folder(out: str | os.PathLike) -> None:
    """``out`` (the command line's ``--out``) must be a folder this process can create files in, or one it can create
    (checked, not created); the error names ``--out``."""
    path = Path(out).absolute()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out: {out} exists and is not a folder")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"--out: cannot create {out}, since {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is not writable" if existing == path else f"cannot be created: {existing} is not writable"
        raise ValueError(f"--out: {out} {what}")
