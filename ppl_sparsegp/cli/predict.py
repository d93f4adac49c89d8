"""Predict with a fitted run at new inputs: RUN_DIR (a ``fit`` output folder), a CSV of inputs, a CSV of predictions.

Reads the inputs in original units (one row per point, one column per input in the order of the training data; a
first line that is not numeric is taken as a header), loads the run with
:func:`ppl_sparsegp.runs.load_run`, predicts in chunks (bounded memory whatever the number of rows) and
writes, atomically, one row per input: for regression ``mean``, ``variance`` and the central ``--level`` interval
``lower``, ``upper``; for binary data ``p1`` = p(y = 1) and ``variance``; for multi-class data the class
probabilities ``p0`` .. ``p<J-1>`` (:func:`ppl_sparsegp.runs.load.prediction_columns`).
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ppl_sparsegp import results
from ppl_sparsegp.runs.load import DEFAULT_CHUNK, load_run, prediction_columns


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="output folder of a `fit` run")
    parser.add_argument("--input", type=Path, required=True, metavar="CSV", help="inputs, one row per point")
    parser.add_argument("--out", type=Path, required=True, metavar="CSV", help="where to write the predictions")
    parser.add_argument("--level", type=float, default=0.95, help="probability of the interval (default: 0.95)")
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK, metavar="ROWS",
                        help=f"rows predicted per compiled call (default: {DEFAULT_CHUNK})")  # fmt: skip


def read_inputs(path: Path) -> np.ndarray:
    """The rows of the CSV ``path`` as floats [S, D] (a non-numeric first line skipped as a header).

    Raises:
        ValueError: the file is missing, empty or not numeric; the message names ``--input``.
    """
    if not path.is_file():
        raise ValueError(f"--input: {path} is not a file")
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    try:
        X = np.loadtxt(lines[_is_header(lines[0]) :] if lines else [], delimiter=",", ndmin=2, dtype=np.float64)
    except ValueError as err:
        raise ValueError(f"--input: {path} is not a CSV of numbers ({' '.join(str(err).split())})") from None
    if X.shape[0] == 0:
        raise ValueError(f"--input: {path} has no rows")
    return X


def _is_header(line: str) -> bool:
    try:
        [float(v) for v in line.split(",")]
    except ValueError:
        return True
    return False


def run(args: argparse.Namespace, argv: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """Check the options, read, predict, write ``--out`` and say so; returns the columns written."""
    if not 0.0 < args.level < 1.0:
        raise ValueError(f"--level must be in (0, 1), got {args.level}")
    if args.chunk_size < 1:
        raise ValueError(f"--chunk-size must be a positive integer, got {args.chunk_size}")
    if args.out.is_dir():
        raise ValueError(f"--out: {args.out} is a folder; give the path of the CSV to write")
    X = read_inputs(args.input)
    fitted = load_run(args.run_dir)
    if X.shape[1] != fitted.stored.input_dim:
        raise ValueError(f"--input: {args.input} has {X.shape[1]} columns; the run was fitted on "
                         f"{fitted.stored.input_dim} inputs")  # fmt: skip
    mean, var = fitted.predict(X, chunk_size=args.chunk_size)
    columns = prediction_columns(mean, var, fitted.task, args.level)
    text = io.StringIO()
    np.savetxt(text, np.column_stack(list(columns.values())), delimiter=",", header=",".join(columns), comments="")
    results.atomic_write(args.out, lambda fh: fh.write(text.getvalue().encode()))
    print(f"{fitted.method} run {args.run_dir}: {len(X)} predictions written to {args.out}")
    return columns
