"""Checks shared by the ``fit`` options of every method: an option's flag, options given to a method they do not
apply to, integer counts and the output folder. Each raises a ValueError naming the flag, before anything is loaded
or compiled. Also the checkpoints' side of every method: the settings a checkpoint's fingerprint records, and
:func:`prepare_checkpoints`, which discards them (``--restart``) or refuses a changed run before any work."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ppl_sparsegp.infer.checkpoint import Checkpoint, verify

NOT_IN_FINGERPRINT = ("out", "no_progress", "quiet", "restart", "checkpoint_every")
"""Options that do not change a run's result (where it writes, what it prints, how often it checkpoints)."""
RESTART_HINT = "start afresh with --restart or choose another --out"
"""How the CLI says to start afresh in a refusal of a checkpoint (``CheckpointError.hint``)."""

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


def fingerprint_settings(opts: Mapping[str, Any], resumable: Iterable[str] = ()) -> dict[str, Any]:
    """The options a checkpoint's fingerprint records, keyed by flag (``--lr``; the method as ``method``).

    Every option but those of :data:`NOT_IN_FINGERPRINT` and ``resumable`` (step counts that a resumed run may
    raise, e.g. ``steps`` for the SVI methods), given or not: a value left out records its default.
    """
    skip = {*NOT_IN_FINGERPRINT, *resumable}
    return {("method" if k == "method" else flag(k)): v for k, v in opts.items() if k not in skip}


def prepare_checkpoints(
    opts: Mapping[str, Any],
    checkpoints: Sequence[Path],
    settings: Mapping[str, Any],
    *data: Any,
    also_discard: Sequence[Path] = (),
) -> dict[Path, Checkpoint]:
    """Before any work: with ``--restart`` delete ``checkpoints`` (and ``also_discard``); else read every existing one
    and refuse it if it is damaged or was written with other ``settings`` or ``data`` (the model's arguments).

    Returns:
        path -> the checkpoint found there (a run resumes from these).

    Raises:
        ppl_sparsegp.infer.checkpoint.CheckpointError: a ``ValueError`` naming the file and, for another run's
            checkpoint, every setting that differs.
    """
    if opts.get("restart"):
        for path in (*checkpoints, *also_discard):
            Path(path).unlink(missing_ok=True)
        return {}
    found = {}
    for path in checkpoints:
        checkpoint = verify(path, settings, *data)
        if checkpoint is not None:
            found[Path(path)] = checkpoint
    return found
