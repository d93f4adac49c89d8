"""Compare fitted runs on the same data by PSIS-LOO (or, --by test, their test-set density) and plot them.

By PSIS-LOO (the default) it reads RUN_DIR/posterior.nc of every run (:func:`ppl_sparsegp.runs.compare_runs`: the
runs must share data and split; idsgp runs are refused), prints ArviZ's comparison (elpd_loo, its standard error,
differences and stacking weights) and says for each run how many points have a Pareto k above 0.7 (where PSIS-LOO
is unreliable: 0.7, or less for fewer draws as ArviZ reckons it). With --by test it loads every run and ranks them by
the elpd of the test points in original units (any loadable method, idsgp included), with the standard errors of
each elpd and of its difference to the best. It writes compare.json and compare.png to --out.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ppl_sparsegp import results, validation
from ppl_sparsegp.runs.compare import CRITERIA, compare_runs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="output folders of `fit` runs")
    parser.add_argument(
        "--by",
        choices=CRITERIA,
        default="loo",
        help="rank by PSIS-LOO on the training data, or by the test points' log density (default: loo)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/compare"), metavar="DIR",
                        help="where to write compare.json and compare.png (default: runs/compare)")  # fmt: skip


def run(args: argparse.Namespace, argv: Sequence[str] = ()) -> Any:
    """Check, compare, write and print; returns the comparison table (a pandas DataFrame)."""
    validation.check_output_folder(args.out)
    comparison = compare_runs(args.run_dirs, args.by)
    figure = comparison.figure()
    try:
        files = {"compare.json": results.json_file({**comparison.record(), "argv": list(argv)}),
                 "compare.png": results.figure_file(figure)}  # fmt: skip
        results.write_output_set(args.out, files)
    finally:
        results.close_figure(figure)
    print("\n".join([*comparison.lines, f"wrote {args.out / 'compare.json'}, {args.out / 'compare.png'}"]))
    return comparison.table
