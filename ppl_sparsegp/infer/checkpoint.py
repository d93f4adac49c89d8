"""Checkpoints as data: one ``.npz`` file with a pytree's leaves, counters, named arrays, JSON metadata and the
fingerprint of the run that wrote it. Used by both engines, :func:`ppl_sparsegp.infer.svi.fit_svi` and
:func:`ppl_sparsegp.infer.mcmc.run_mcmc`.

No pickle: the file is an uncompressed ``.npz`` read with ``np.load(allow_pickle=False)``, so a crafted file can be
refused but never run. Nor is the tree's *structure* stored as code: the caller rebuilds it from a template
(``like``: the state ``SVI.init`` or the MCMC kernel's ``init`` returns), and the file's recorded structure text,
leaf shapes and dtypes must match that template (:meth:`Checkpoint.restore`).

File layout (the file name is the caller's: ``checkpoint.npz``, ``selective_<phase>.npz``, or ``mcmc.ckpt``, which
is an ``.npz`` despite its suffix):

================  ==================================================================================================
member            content
================  ==================================================================================================
``checkpoint``    uint8 [B]: the header, UTF-8 JSON (below)
``leaf_<i>``      the i-th leaf of the tree in ``jax.tree_util`` order, any shape and dtype (a typed PRNG key is
                  stored as its uint32 key data)
``<counter>``     int64 scalar per counter, e.g. ``step`` (SVI) or ``warmup_done`` and ``draws_done`` (MCMC)
``<array>``       one per named array, e.g. ``losses`` [steps] (SVI)
``<group>_<j>``   the j-th array of a named group whose names are arbitrary strings, e.g. ``samples_0``, the draws
                  [C, S, ...] of the first sampled site (MCMC); the names are in the header
================  ==================================================================================================

Header: ``{"format": "ppl_sparsegp.checkpoint", "version": 1, "treedef": str, "leaves": [[dtype, shape, is_key],
...], "counters": {name: int}, "arrays": [name, ...], "groups": {group: [name, ...]}, "fingerprint": {...},
"metadata": {...}}``.

Fingerprint (:func:`make_fingerprint`): ``{"settings": {...}, "data_sha256": str, "run": {...}}``. ``settings``
are the caller's (e.g. the CLI's options, or a recipe's arguments), ``data_sha256`` hashes the model's arguments
(:func:`data_sha256`: dtypes, shapes and bytes of every array), and ``run`` is what the engine adds (its random key,
a hash of the initial values, its schedule). :func:`read` compares the stored fingerprint with the resuming run's and
raises :class:`CheckpointMismatchError`, naming every difference as ``name old -> new``, before the caller compiles
anything; :func:`verify` makes the same check with the caller's settings and data alone, for a caller (the CLI)
that wants to refuse a changed run before any work at all.

Damaged files (truncated, corrupted, not an ``.npz``, written by another version, or holding a NaN or infinite
value) raise :class:`CheckpointError`, a ``ValueError`` whose message is one line naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ppl_sparsegp import results

FORMAT = "ppl_sparsegp.checkpoint"
VERSION = 1
HEADER = "checkpoint"
LIBRARY_HINT = "delete it to start afresh, or use another checkpoint path"
"""How to start afresh, as :class:`CheckpointError` says it by default (the CLI says ``--restart`` or ``--out``)."""

_ZIP_MAGIC = b"PK\x03\x04"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_RESERVED = re.compile(r"(checkpoint|leaf_\d+)\Z")
_MISSING = "(not recorded)"
_DATA = "the data (sha256 of the model's arguments)"


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed: unreadable, damaged, of another format or structure, or non-finite.

    ``str(error)`` is one line, ``checkpoint: PATH PROBLEM; HINT``; ``hint`` (how to start afresh) may be replaced by
    a caller that knows its own words for it (the CLI does).
    """

    def __init__(self, path: str | os.PathLike, problem: str, hint: str = LIBRARY_HINT) -> None:
        super().__init__(f"checkpoint: {path} {problem}")
        self.path, self.problem, self.hint = Path(path), problem, hint

    def __str__(self) -> str:
        return f"checkpoint: {self.path} {self.problem}; {self.hint}"


class CheckpointMismatchError(CheckpointError):
    """The checkpoint was written by a run with other settings or data.

    Attributes:
        differences: ``(name, old, new)`` for every setting that differs, in the order settings, data, run.
    """

    def __init__(self, path: str | os.PathLike, differences: list[tuple[str, Any, Any]], hint: str = LIBRARY_HINT):
        shown = "; ".join(f"{name} {_show(old)} -> {_show(new)}" for name, old, new in differences)
        super().__init__(path, f"was written for a different model, data or other settings ({shown})", hint)
        self.differences = differences


def _show(value: Any) -> str:
    if value is _MISSING:
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value):
        return repr(value[:12] + "...")  # a sha256: the first 12 hex digits tell two apart
    return repr(value)


# --------------------------------------------------------------------------------------------------------
# Fingerprints


def _is_key(leaf: Any) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


def _host(leaf: Any) -> np.ndarray:
    """A leaf as a numpy array (a typed PRNG key as its uint32 key data)."""
    return np.asarray(jax.random.key_data(leaf) if _is_key(leaf) else leaf)


def tree_sha256(tree: Any) -> str:
    """sha256 (hex) of a pytree: its structure and, for every leaf, dtype, shape and bytes (C order).

    Equal for numpy and jax arrays of the same dtype, shape and values. Leaves that are not numeric arrays are hashed
    by their ``repr``. Meant for trees of containers (tuples, lists, dicts, namedtuples) and arrays, whose structure
    text is the same in every process; not for objects whose pytree auxiliary data is not (e.g. NumPyro
    distributions, whose auxiliary data comes in a different order from one process to the next).
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    digest = hashlib.sha256(str(treedef).encode())
    for leaf in leaves:
        array = _host(leaf)
        if array.dtype.hasobject:
            digest.update(b"object:" + repr(leaf).encode())
            continue
        digest.update(f"|{array.dtype.str}{array.shape}|".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def data_sha256(*args: Any, **kwargs: Any) -> str:
    """sha256 of a model's arguments ``(args, kwargs)`` (e.g. ``X [N, D]``, ``y [N]``): see :func:`tree_sha256`."""
    return tree_sha256((args, kwargs))


def key_data(key: Any) -> list[int] | int:
    """A random key as JSON: an integer seed as itself, a JAX key as its key data (a list of uint32)."""
    if isinstance(key, int | np.integer):
        return int(key)
    return _host(key).tolist()


def _jsonable(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """``value`` as JSON would read it back (tuples as lists, numpy scalars as numbers, NaN as None)."""
    return json.loads(json.dumps(results.to_jsonable(dict(value or {})), allow_nan=False))


def make_fingerprint(
    settings: Mapping[str, Any] | None,
    args: tuple = (),
    kwargs: Mapping[str, Any] | None = None,
    run: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The fingerprint a checkpoint records: ``{"settings", "data_sha256", "run"}`` (see the module docstring).

    Args:
        settings: the caller's settings, name -> JSON-able value (None: none).
        args, kwargs: the model's arguments, hashed by :func:`data_sha256`.
        run: what the engine adds (its key, a hash of its initial values, its schedule).
    """
    return {
        "settings": _jsonable(settings),
        "data_sha256": data_sha256(*args, **dict(kwargs or {})),
        "run": _jsonable(run),
    }


def _differences(old: Mapping[str, Any], new: Mapping[str, Any], subset: bool) -> list[tuple[str, Any, Any]]:
    """What differs between two fingerprints; with ``subset``, only the settings ``new`` names, and the data."""
    found = []
    sections = ("settings",) if subset else ("settings", "run")
    for section in sections:
        before, after = old.get(section) or {}, new.get(section) or {}
        names = list(after) + ([] if subset else [k for k in before if k not in after])
        for name in names:
            a, b = before.get(name, _MISSING), after.get(name, _MISSING)
            if a != b:
                found.append((name, a, b))
        if section == "settings" and old.get("data_sha256") != new.get("data_sha256"):
            found.append((_DATA, old.get("data_sha256", _MISSING), new.get("data_sha256")))
    return found


# --------------------------------------------------------------------------------------------------------
# Writing


def save(
    path: str | os.PathLike,
    tree: Any,
    *,
    counters: Mapping[str, int],
    arrays: Mapping[str, Any] | None = None,
    groups: Mapping[str, Mapping[str, Any]] | None = None,
    metadata: Mapping[str, Any] | None = None,
    fingerprint: Mapping[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically (:func:`ppl_sparsegp.results.write_npz`: temporary file, fsync, rename).

    Args:
        path: the file to create or replace; its folder is created if needed.
        tree: the pytree to store (e.g. an ``SVIState`` or an MCMC kernel state); only its leaves are stored.
        counters: name -> integer, e.g. ``{"step": 300}``.
        arrays: name -> array, e.g. ``{"losses": losses [300]}``.
        groups: group -> (any name -> array), e.g. ``{"samples": {"kernel.lengthscale": [C, S, D], ...}}``.
        metadata: JSON-able facts to keep (e.g. timings); not compared on resume.
        fingerprint: from :func:`make_fingerprint`.

    Counter, array and group names must be identifiers (letters, digits, ``_``) other than ``checkpoint`` and
    ``leaf_<i>``.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    host = [_host(leaf) for leaf in leaves]  # device -> host; a typed key as its key data
    arrays, groups = dict(arrays or {}), {g: dict(members) for g, members in (groups or {}).items()}
    for name in (*counters, *arrays, *groups):
        if not _NAME.match(name) or _RESERVED.match(name):
            raise ValueError(f"checkpoint: {name!r} cannot name a counter, array or group")
    header = {
        "format": FORMAT,
        "version": VERSION,
        "treedef": str(treedef),
        "leaves": [[a.dtype.str, list(a.shape), _is_key(leaf)] for a, leaf in zip(host, leaves, strict=True)],
        "counters": {k: int(v) for k, v in counters.items()},
        "arrays": list(arrays),
        "groups": {g: list(members) for g, members in groups.items()},
        "fingerprint": dict(fingerprint or {}),
        "metadata": results.to_jsonable(dict(metadata or {})),
    }
    text = json.dumps(results.to_jsonable(header), allow_nan=False).encode("utf-8")
    members: dict[str, Any] = {HEADER: np.frombuffer(text, dtype=np.uint8)}
    members.update({f"leaf_{i}": a for i, a in enumerate(host)})
    members.update({k: np.int64(v) for k, v in header["counters"].items()})
    members.update(arrays)
    for group, entries in groups.items():
        members.update({f"{group}_{j}": value for j, value in enumerate(entries.values())})
    return results.write_npz(path, members)


# --------------------------------------------------------------------------------------------------------
# Reading


@dataclass
class Checkpoint:
    """What :func:`read` returns: the stored leaves and everything beside them (numpy arrays).

    Attributes:
        path: the file read.
        leaves: the tree's leaves, in ``jax.tree_util`` order; :meth:`restore` puts them back into a tree.
        treedef: the text of the stored tree's structure.
        counters, arrays, groups, metadata, fingerprint: as passed to :func:`save`.
    """

    path: Path
    leaves: list[np.ndarray]
    treedef: str
    counters: dict[str, int]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    groups: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)

    def restore(self, like: Any) -> Any:
        """The stored tree in the structure of ``like`` (jax arrays with ``like``'s dtypes).

        Raises:
            CheckpointError: the stored tree has another structure or other leaf shapes (it was written for a
                different model, guide, optimiser or kernel).
        """
        leaves, treedef = jax.tree_util.tree_flatten(like)
        if (
            str(treedef) != self.treedef
            or len(leaves) != len(self.leaves)
            or any(np.shape(_host(a)) != b.shape for a, b in zip(leaves, self.leaves, strict=True))
        ):
            raise CheckpointError(
                self.path, "was written for a different model, guide, optimiser or kernel (its state has another shape)"
            )
        restored = []
        for template, saved in zip(leaves, self.leaves, strict=True):
            if _is_key(template):
                restored.append(jax.random.wrap_key_data(jnp.asarray(saved), impl=jax.random.key_impl(template)))
            else:
                restored.append(jnp.asarray(saved, dtype=jnp.asarray(template).dtype))
        return jax.tree_util.tree_unflatten(treedef, restored)


def _members(path: Path) -> dict[str, np.ndarray]:
    """Every member of the ``.npz`` at ``path``, read without pickle; CheckpointError if that fails."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(len(_ZIP_MAGIC))
    except OSError as err:
        raise CheckpointError(path, f"cannot be read ({err.strerror or err})") from None
    if magic != _ZIP_MAGIC:
        raise CheckpointError(
            path,
            "is not a checkpoint this version can read (an .npz archive); pickle files, which older versions wrote, "
            "are never loaded",
        )
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except Exception as err:  # any failure to parse the archive means a damaged file (nothing in it is run)
        raise CheckpointError(path, f"is damaged or truncated ({type(err).__name__}: {err})") from None


def _header(path: Path, members: Mapping[str, np.ndarray]) -> dict[str, Any]:
    raw = members.get(HEADER)
    if raw is None:
        old = {"step", "treedef"} <= set(members)
        what = "was written by an older version, without a fingerprint" if old else "has no checkpoint header"
        raise CheckpointError(path, what)
    try:
        if raw.dtype != np.uint8 or raw.ndim != 1:
            raise ValueError(f"a {raw.dtype} array of shape {raw.shape}")
        header = json.loads(raw.tobytes().decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as err:
        raise CheckpointError(path, f"has a damaged header ({err})") from None
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise CheckpointError(
            path, f"has format {header.get('format')!r} version {header.get('version')!r}, not {FORMAT!r} {VERSION}"
        )
    return header


def _check_finite(path: Path, what: str, value: np.ndarray) -> None:
    if np.issubdtype(value.dtype, np.inexact) and not np.all(np.isfinite(value)):
        raise CheckpointError(path, f"holds NaN or infinite values in {what}, so it cannot be resumed")


def read(path: str | os.PathLike, *, fingerprint: Mapping[str, Any] | None = None) -> Checkpoint:
    """Read and check a checkpoint written by :func:`save`.

    Args:
        path: the checkpoint file.
        fingerprint: the resuming run's (:func:`make_fingerprint`); every setting, the data hash and every run entry
            must equal the stored ones. None: not compared.

    Raises:
        CheckpointError: the file cannot be read, is not an ``.npz`` (e.g. a pickle), is truncated or corrupted, was
            written by another format or version, or holds a NaN or infinite value in its state or arrays.
        CheckpointMismatchError: ``fingerprint`` differs from the stored one (every difference is named).
    """
    path = Path(path)
    members = _members(path)
    header = _header(path, members)
    try:
        counters = {str(k): int(v) for k, v in header["counters"].items()}
        specs = [(str(dtype), tuple(shape), bool(key)) for dtype, shape, key in header["leaves"]]
        leaves = [members[f"leaf_{i}"] for i in range(len(specs))]
        arrays = {str(name): members[name] for name in header["arrays"]}
        groups = {
            str(g): {str(name): members[f"{g}_{j}"] for j, name in enumerate(names)}
            for g, names in header["groups"].items()
        }
        treedef = str(header["treedef"])
        for i, ((dtype, shape, _), leaf) in enumerate(zip(specs, leaves, strict=True)):
            if leaf.dtype.str != dtype or leaf.shape != shape:
                raise ValueError(f"leaf {i} is {leaf.dtype.str}{leaf.shape}, the header says {dtype}{shape}")
        for name, value in counters.items():
            if name in members and int(members[name]) != value:
                raise ValueError(f"counter {name} is {int(members[name])}, the header says {value}")
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CheckpointError(path, f"is damaged (its header does not match its arrays: {err!s})") from None
    for i, leaf in enumerate(leaves):
        _check_finite(path, f"leaf {i} of the saved state (shape {leaf.shape})", leaf)
    for name, value in arrays.items():
        _check_finite(path, name, value)
    for g, entries in groups.items():
        for name, value in entries.items():
            _check_finite(path, f"{g} {name!r}", value)
    checkpoint = Checkpoint(
        path=path,
        leaves=leaves,
        treedef=treedef,
        counters=counters,
        arrays=arrays,
        groups=groups,
        metadata=dict(header.get("metadata") or {}),
        fingerprint=dict(header.get("fingerprint") or {}),
    )
    if fingerprint is not None:
        differences = _differences(checkpoint.fingerprint, fingerprint, subset=False)
        if differences:
            raise CheckpointMismatchError(path, differences)
    return checkpoint


def verify(path: str | os.PathLike, settings: Mapping[str, Any], *args: Any, **kwargs: Any) -> Checkpoint | None:
    """Check an existing checkpoint against the caller's ``settings`` and data, before anything else is done.

    Only the settings named in ``settings`` and the data hash of ``(args, kwargs)`` are compared (the engine's own
    run entries are compared later, by :func:`read` inside the engine). Returns the checkpoint, or None when ``path``
    does not exist.

    Raises:
        CheckpointError, CheckpointMismatchError: as :func:`read`.
    """
    if not Path(path).exists():
        return None
    checkpoint = read(path)
    new = {"settings": _jsonable(settings), "data_sha256": data_sha256(*args, **kwargs)}
    differences = _differences(checkpoint.fingerprint, new, subset=True)
    if differences:
        raise CheckpointMismatchError(path, differences)
    return checkpoint


def prepare(
    paths: Sequence[str | os.PathLike],
    settings: Mapping[str, Any],
    *args: Any,
    restart: bool = False,
    also: Sequence[str | os.PathLike] = (),
) -> dict[Path, Checkpoint]:
    """Before any work: with ``restart`` delete the checkpoints at ``paths`` (and the files ``also``); else
    :func:`verify` every one that exists against ``settings`` and the model's ``args``.

    Returns:
        path -> the checkpoint found there (a run resumes from these).

    Raises:
        CheckpointError: a checkpoint is damaged or another run's (naming the file and what differs).
    """
    if restart:
        for path in (*paths, *also):
            Path(path).unlink(missing_ok=True)
        return {}
    found = {Path(path): verify(path, settings, *args) for path in paths}
    return {path: checkpoint for path, checkpoint in found.items() if checkpoint is not None}
