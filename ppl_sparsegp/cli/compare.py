"""Compare fitted runs on the same data by PSIS-LOO: the ``az.compare`` table, Pareto-k warnings and a plot.

Reads RUN_DIR/posterior.nc of every run (:func:`ppl_sparsegp.runs.compare_runs`: the runs must share data and
split; idsgp runs are refused), prints ArviZ's comparison (elpd_loo, its standard error, differences and stacking
weights), says for each run how many points have a Pareto k above 0.7 (where PSIS-LOO is unreliable: 0.7, or less
for fewer draws as ArviZ reckons it), and writes compare.json and compare.png to --out.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ppl_sparsegp import results, validation
from ppl_sparsegp.runs.compare import compare_runs, plt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="output folders of `fit` runs")
    parser.add_argument("--out", type=Path, default=Path("runs/compare"), metavar="DIR",
                        help="where to write compare.json and compare.png (default: runs/compare)")  # fmt: skip


def run(args: argparse.Namespace, argv: Sequence[str] = ()) -> Any:
    """Check, compare, write and print; returns the comparison table (a pandas DataFrame)."""
    validation.check_output_folder(args.out)
    comparison = compare_runs(args.run_dirs)
    figure = comparison.figure()
    try:
        files = {"compare.json": results.json_file({**comparison.record(), "argv": list(argv)}),
                 "compare.png": results.figure_file(figure)}  # fmt: skip
        results.write_output_set(args.out, files)
    finally:
        plt.close(figure)
    print("\n".join([*comparison.lines, f"wrote {args.out / 'compare.json'}, {args.out / 'compare.png'}"]))
    return comparison.table
