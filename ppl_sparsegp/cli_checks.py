"""Checks shared by the ``fit`` options of every method: an option's flag, options given to a method they do not
apply to, integer counts and the output folder. Each raises a ValueError naming the flag, before anything is loaded
or compiled."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

SPECIAL_FLAGS = {"whiten": "--whiten/--no-whiten"}
"""Options whose flag is not ``--`` + the name with dashes (a ``BooleanOptionalAction`` pair)."""


def flag(name: str) -> str:
    """The command-line flag of option ``name``: ``batch_size`` -> ``--batch-size``."""
    return SPECIAL_FLAGS.get(name, f"--{name.replace('_', '-')}")


def refuse_options_of(owner: str, opts: Mapping[str, Any], names: Iterable[str]) -> None:
    """Unless ``opts["method"]`` is ``owner``, refuse every option of ``names`` that was given (is not None)."""
    if opts["method"] == owner:
        return
    for name in names:
        if opts.get(name) is not None:
            raise ValueError(f"{flag(name)} applies to {owner} only, not {opts['method']}")


def refuse_inapplicable(opts: Mapping[str, Any], reasons: Mapping[str, str]) -> None:
    """Refuse every option named in ``reasons`` that was given, with its reason (for ``opts["method"]``)."""
    for name, why in reasons.items():
        if opts.get(name) is not None:
            raise ValueError(f"{flag(name)} does not apply to {opts['method']} ({why})")


def check_counts(opts: Mapping[str, Any], positive: Iterable[str] = (), non_negative: Iterable[str] = ()) -> None:
    """Options of ``positive`` must be >= 1 and those of ``non_negative`` >= 0 where given (not None)."""
    for names, least, what in ((positive, 1, "a positive"), (non_negative, 0, "a non-negative")):
        for name in names:
            value = opts.get(name)
            if value is not None and value < least:
                raise ValueError(f"{flag(name)} must be {what} integer, got {value}")


def check_output_folder(out: str | os.PathLike) -> None:
    """``--out`` must be a folder this process can create files in, or one it can create (checked, not created).

    Raises:
        ValueError: naming ``--out``: it is a file, lies under a file, or is not writable.
    """
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
