"""Print the ArviZ summary of a run's posterior and write trace and rank plots beside it.

Reads RUN_DIR/posterior.nc (written by fit sgpmc or bsgp), writes RUN_DIR/trace.png and RUN_DIR/rank.png (laid out
so that no title covers another plot's labels) and says so.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ppl_sparsegp import results
from ppl_sparsegp.posterior import diagnostics


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="output folder of a fit sgpmc run")
    parser.add_argument(
        "--all", action="store_true", help="summarise every variable, inducing outputs u included (default: not u)"
    )


def run(args: argparse.Namespace, argv: Sequence[str] = ()) -> str:
    """Print the summary table (hyperparameters, or every variable with ``--all``), write the two plots and print
    their paths.

    Raises:
        ValueError: RUN_DIR has no ``posterior.nc``.
    """
    path = args.run_dir / "posterior.nc"
    if not path.is_file():
        raise ValueError(f"RUN_DIR: no posterior.nc in {args.run_dir} (expected the output folder of `fit sgpmc`)")
    idata = diagnostics.load(path)
    hyper = [v for v in idata.posterior.data_vars if v != "u"]
    table = diagnostics.summary(idata, var_names=None if args.all else hyper).to_string()
    figures = {}
    import arviz as az  # on first use, as every heavy module of the command line

    try:
        for name, plot in (("trace.png", az.plot_trace), ("rank.png", az.plot_rank)):
            figures[name] = np.asarray(plot(idata, var_names=hyper)).ravel()[0].figure
            figures[name].tight_layout()  # ArviZ's trace plot otherwise sets titles over the x labels above them
        results.write_output_set(args.run_dir, {name: results.figure_file(f) for name, f in figures.items()})
    finally:
        for figure in figures.values():
            results.close_figure(figure)
    print(table)
    print(f"wrote {', '.join(str(args.run_dir / name) for name in figures)}")
    return table
