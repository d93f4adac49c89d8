"""A Pyro MCMC kernel's state as data, so that a chain can be checkpointed between two steps and resumed.

Pyro's kernels (``HMC``, ``NUTS``, the SG-MCMC kernels of :mod:`ppl_sparsegp.pyro.sgmcmc`) keep their state in
attributes: the step counter, the cached position, potential and gradient, the step-size and mass-matrix adaptation
(Pyro's ``WarmupAdapter``, ``DualAveraging``, ``WelfordCovariance``), the SG-MCMC momentum, moment estimates and the
point estimates' optimiser. :func:`capture` walks those attributes and returns them as a JSON-able skeleton plus the
tensors as numpy arrays; :func:`restore` writes them back into a kernel that has been set up afresh on the same model,
data and settings (``kernel.setup(...)``), after which the next ``kernel.sample`` takes the step the uninterrupted
chain would have taken (given torch's generator state, which the caller saves alongside).

What is walked: tensors, numbers (non-finite floats kept as text), strings and ``None`` (leaves); lists, tuples
(named ones too), and dicts keyed by strings, ints or tuples of strings; instances of classes from ``pyro.infer.mcmc``,
``pyro.ops`` and ``ppl_sparsegp`` (through their ``__dict__``); ``torch.optim`` optimisers (through ``state_dict``).
Everything else
(the model, potential functions, transforms, traces, distributions) is configuration rebuilt by ``setup`` and is
skipped, as are :data:`EXCLUDED` attributes, the model's data and starting point. Nothing is ever imported or
called by name on restore: objects and named tuples are rebuilt only into the instances the fresh kernel holds.

A tensor that is a leaf requiring gradients (an optimiser's parameter) is restored in place, so that the optimiser
that holds it keeps optimising it; other tensors are replaced by new ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

Skeleton = dict[str, Any]

STATE_MODULES = ("pyro.infer.mcmc", "pyro.ops", "ppl_sparsegp")
"""Modules whose classes' instances are walked attribute by attribute."""
EXCLUDED = frozenset({"_args", "_kwargs", "_initial_params", "_prototype_trace"})
"""Attributes never captured: the model's data, the chain's starting point and the model trace, all given again to
``setup`` on resume."""


class _Skip(Exception):
    """Raised inside the walk for a value that is configuration, not state."""


def capture(kernel: Any) -> tuple[Skeleton, dict[str, np.ndarray]]:
    """The kernel's state: (skeleton, arrays), the skeleton JSON-able and naming its tensors by their key in
    ``arrays`` (numpy copies, dtypes kept)."""
    arrays: dict[str, np.ndarray] = {}
    return _capture(kernel, arrays), arrays


def restore(kernel: Any, skeleton: Skeleton, arrays: Mapping[str, np.ndarray]) -> None:
    """Write the state :func:`capture` took back into ``kernel``, a fresh copy set up on the same model and data.

    Raises:
        ValueError: the skeleton does not fit the kernel (another kernel class, or an object the fresh kernel lacks).
    """
    _restore(kernel, skeleton, arrays, "kernel")


def _is_state_object(value: Any) -> bool:
    return type(value).__module__.startswith(STATE_MODULES) and hasattr(value, "__dict__")


def _key(key: Any) -> Any:
    if isinstance(key, (str, int)) and not isinstance(key, bool):
        return key
    if isinstance(key, tuple) and all(isinstance(k, str) for k in key):
        return {"tuple": list(key)}
    raise _Skip


def _unkey(key: Any) -> Any:
    return tuple(key["tuple"]) if isinstance(key, dict) else key


def _capture(value: Any, arrays: dict[str, np.ndarray]) -> Skeleton:
    if isinstance(value, torch.Tensor):
        name = str(len(arrays))
        arrays[name] = value.detach().cpu().numpy().copy()
        return {"kind": "tensor", "array": name}
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return {"kind": "nonfinite", "text": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"kind": "value", "value": value}
    if isinstance(value, torch.optim.Optimizer):
        return {"kind": "optimizer", "state": _capture(value.state_dict(), arrays)}
    if isinstance(value, (list, tuple)):
        items = [_capture(item, arrays) for item in value]
        kind = "list" if isinstance(value, list) else "namedtuple" if hasattr(value, "_fields") else "tuple"
        return {"kind": kind, "items": items}
    if isinstance(value, dict):
        items, complete = [], True
        for key, item in value.items():
            try:
                items.append([_key(key), _capture(item, arrays)])
            except _Skip:
                complete = False
        return {"kind": "dict", "items": items, "complete": complete}
    if _is_state_object(value):
        attributes = {}
        for name, item in vars(value).items():
            if name in EXCLUDED:
                continue
            try:
                attributes[name] = _capture(item, arrays)
            except _Skip:
                continue
        return {"kind": "object", "attributes": attributes}
    raise _Skip


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return a is b
    try:
        return type(a) is type(b) and bool(a == b)
    except (RuntimeError, ValueError, TypeError):
        return False


def _restore(fresh: Any, node: Skeleton, arrays: Mapping[str, np.ndarray], path: str) -> Any:
    kind = node["kind"]
    if kind == "value":
        return node["value"]
    if kind == "nonfinite":
        return float(node["text"])
    if kind == "tensor":
        value = torch.as_tensor(np.array(arrays[node["array"]]))
        if isinstance(fresh, torch.Tensor) and fresh.is_leaf and fresh.requires_grad and fresh.shape == value.shape:
            with torch.no_grad():
                fresh.copy_(value)
            return fresh
        return value
    if kind == "optimizer":
        if not isinstance(fresh, torch.optim.Optimizer):
            raise ValueError(f"kernel state: {path} is an optimiser in the checkpoint, not in this kernel")
        fresh.load_state_dict(_restore(fresh.state_dict(), node["state"], arrays, path))
        return fresh
    if kind in ("list", "tuple", "namedtuple"):
        olds = list(fresh) if isinstance(fresh, (list, tuple)) else []
        items = [
            _restore(olds[i] if i < len(olds) else None, item, arrays, f"{path}[{i}]")
            for i, item in enumerate(node["items"])
        ]  # fmt: skip
        if kind == "list":
            return items
        if kind == "tuple":
            return tuple(items)
        if not (isinstance(fresh, tuple) and hasattr(fresh, "_fields")):
            raise ValueError(f"kernel state: {path} is a named tuple in the checkpoint, not in this kernel")
        return type(fresh)(*items)
    if kind == "dict":
        old = fresh if isinstance(fresh, dict) else {}
        restored = {
            _unkey(key): _restore(old.get(_unkey(key)), item, arrays, f"{path}[{_unkey(key)!r}]")
            for key, item in node["items"]
        }  # fmt: skip
        if node["complete"]:
            return type(old)(restored) if isinstance(fresh, dict) else restored
        old.update(restored)
        return old
    if kind == "object":
        if not _is_state_object(fresh):
            raise ValueError(f"kernel state: {path} is an object in the checkpoint, but {type(fresh).__name__} here")
        for name, item in node["attributes"].items():
            current = getattr(fresh, name, None)
            value = _restore(current, item, arrays, f"{path}.{name}")
            if value is not current and not _same(value, current):
                setattr(fresh, name, value)
        return fresh
    raise ValueError(f"kernel state: unknown entry {kind!r} at {path}")
