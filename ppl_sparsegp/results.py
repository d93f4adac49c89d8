"""Atomic writers for run outputs: JSON, ``.npz`` arrays and matplotlib figures.

Every writer follows the same protocol, so that a reader (or a re-run after a crash) sees either the old file
or the complete new one, never a torn one:

1. write to a temporary file in the *same* folder as the target (``os.replace`` is atomic only within one
   file system), named ``.<target name>.<random>.tmp``;
2. flush and ``fsync`` it, so the bytes are on disk before the rename;
3. ``os.replace`` it onto the target, then ``fsync`` the folder so the rename itself survives a power cut.

If anything fails before step 3 (a value that cannot be serialised, a full disk, an interrupt) the temporary
file is removed and the target is left exactly as it was.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["atomic_write", "to_jsonable", "write_figure", "write_json", "write_npz"]


def _fsync_folder(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process umask (read without changing it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Create or replace ``path`` atomically with the bytes that ``write(binary_file)`` writes.

    The parent folder is created if needed. Returns the target path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)
    return path


def to_jsonable(value: Any) -> Any:
    """``value`` with numpy/jax scalars and arrays as Python numbers and lists, paths as strings.

    Non-finite floats become ``None`` (JSON has no NaN or infinity). Mappings keep their keys (as strings);
    tuples become lists. Anything else that JSON cannot hold raises ``TypeError`` naming its type.
    """
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "__array__") and not isinstance(value, str | bytes):
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"cannot write an array of dtype {arr.dtype} to JSON")
        return to_jsonable(arr.tolist()) if arr.ndim else to_jsonable(arr.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot write a value of type {type(value).__name__} to JSON: {value!r}")


def write_json(path: str | os.PathLike, obj: Mapping[str, Any]) -> Path:
    """Write ``obj`` (see :func:`to_jsonable` for what it may hold) as indented UTF-8 JSON, atomically."""
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n"
    return atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))


def write_npz(path: str | os.PathLike, arrays: Mapping[str, Any]) -> Path:
    """Write named arrays to an uncompressed ``.npz`` atomically; readable with ``np.load(allow_pickle=False)``.

    Raises:
        ValueError: an array holds Python objects (it would need pickle, which is never used).
    """
    converted = {name: np.asarray(value) for name, value in arrays.items()}
    for name, arr in converted.items():
        if arr.dtype.hasobject:
            raise ValueError(f"arrays[{name!r}] has dtype object, which cannot be saved without pickle")
    return atomic_write(path, lambda fh: np.savez(fh, **converted))


def write_figure(path: str | os.PathLike, figure: Any, dpi: int = 120) -> Path:
    """Save a matplotlib ``figure`` atomically in the format named by the suffix of ``path`` (e.g. ``.png``)."""
    fmt = Path(path).suffix.lstrip(".") or "png"
    return atomic_write(path, lambda fh: figure.savefig(fh, format=fmt, dpi=dpi, bbox_inches="tight"))
