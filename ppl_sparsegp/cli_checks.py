"""Checks shared by the ``fit`` options of every method: an option's flag, options given to a method they do not
apply to, and integer counts. Each raises a ValueError naming the flag, before anything is loaded or compiled."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
