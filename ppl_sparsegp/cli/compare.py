"""Compare fitted runs on the same data by PSIS-LOO: the ``az.compare`` table, Pareto-k warnings and a plot.

Reads RUN_DIR/posterior.nc of every run (svgp, sgpr, gpr, selective, sgpmc and shallow bsgp write one with the
``"predictive"`` log-likelihood, log p(y_n | draw) with f_n integrated out, so the methods are scored alike; idsgp
runs are refused, :data:`NOT_COMPARED` says why),
checks that the runs were fitted on the same data and split, prints ArviZ's comparison (elpd_loo, its standard
error, differences and stacking weights), says for each run how many points have a Pareto k above 0.7 (where
PSIS-LOO is unreliable: 0.7, or less for fewer draws as ArviZ reckons it), and writes compare.json and
compare.png to --out.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import arviz as az
import numpy as np

from ppl_sparsegp import results, validation
from ppl_sparsegp.cli.load import read_record
from ppl_sparsegp.cli.run import plt
from ppl_sparsegp.posterior import diagnostics

PARETO_K_LIMIT = 0.7
"""Pareto k above which PSIS-LOO's estimate for a point is unreliable (Vehtari et al. 2017), where ArviZ does not
give its own sample-size-dependent limit (``good_k``: min(1 - 1/log10 S, 0.7) for S draws)."""
NOT_COMPARED = {
    "idsgp": "its q(u | x) comes from a network fitted to every y_n, so draws of u_n carry little of y_n's influence "
    "and PSIS-LOO is far too optimistic (diabetes: elpd_loo -291 against SVGP's -355 while its test NLPD was the "
    "worse); compare it by the test metrics in results.json",
}
"""Methods whose runs PSIS-LOO cannot rank, and why."""
SAME = ("data", "split", "task", "n_train")
"""What the compared runs must share (results.json)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR", help="output folders of `fit` runs")
    parser.add_argument("--out", type=Path, default=Path("runs/compare"), metavar="DIR",
                        help="where to write compare.json and compare.png (default: runs/compare)")  # fmt: skip


def _posterior(folder: Path, record: dict[str, Any]) -> Any:
    """The run's InferenceData, refused unless it has the predictive log-likelihood."""
    if record["method"] in NOT_COMPARED:
        raise ValueError(f"RUN_DIR: {folder} is an {record['method']} run, which compare cannot rank: "
                         f"{NOT_COMPARED[record['method']]}")  # fmt: skip
    path = folder / "posterior.nc"
    if not path.is_file():
        raise ValueError(f"RUN_DIR: {folder} has no posterior.nc (its {record['method']} run writes none, or predates "
                         "it; re-run the fit)")  # fmt: skip
    idata = diagnostics.load(path)
    kind = idata["log_likelihood"].attrs.get("log_likelihood") if "log_likelihood" in _groups(idata) else None
    if kind != "predictive":
        raise ValueError(f"RUN_DIR: {path} has no predictive log-likelihood to compare (found {kind or 'none'}); "
                         "re-run the fit with this version")  # fmt: skip
    return idata


def _groups(idata: Any) -> list[str]:
    return list(idata.children) if hasattr(idata, "children") else list(idata.groups())


def _names(folders: Sequence[Path]) -> list[str]:
    """The folders' names, or their paths where two names coincide."""
    names = [folder.name for folder in folders]
    return names if len(set(names)) == len(names) else [str(folder) for folder in folders]


def _units(task: str) -> str:
    """What the log-likelihood is of: y in standardised units (regression), or class labels."""
    return "standardised units" if task == "regression" else "class labels"


def _plot(table: Any, units: str) -> Any:
    """elpd_loo ± its standard error of every run, best on top, the best's value dashed (drawn here rather than by
    ``az.plot_compare``, whose return type differs between ArviZ 0.x and 1.x)."""
    elpd = table[next(c for c in ("elpd_loo", "elpd") if c in table.columns)]
    figure, ax = plt.subplots(figsize=(6.0, 1.0 + 0.45 * len(table)))
    rows = np.arange(len(table))[::-1]
    ax.errorbar(elpd.to_numpy(), rows, xerr=table["se"].to_numpy(), fmt="o", capsize=3)
    ax.axvline(float(elpd.iloc[0]), linestyle="--", color="grey")
    ax.set_yticks(rows, [str(name) for name in table.index])
    ax.set_xlabel(f"elpd_loo (log predictive density, {units})")
    return figure


def run(args: argparse.Namespace, argv: Sequence[str] = ()) -> Any:
    """Check, compare, print and write; returns the comparison table (a pandas DataFrame)."""
    folders = list(args.run_dirs)
    if len(folders) < 2:
        raise ValueError(f"RUN_DIR: compare needs at least two runs, got {len(folders)}")
    if len(set(map(Path.resolve, folders))) < len(folders):
        raise ValueError("RUN_DIR: a run is named twice")
    validation.check_output_folder(args.out)
    records = [read_record(folder) for folder in folders]
    for folder, record in zip(folders[1:], records[1:], strict=True):
        differ = [k for k in SAME if record.get(k) != records[0].get(k)]
        if differ:
            shown = ", ".join(f"{k} {records[0].get(k)!r} vs {record.get(k)!r}" for k in differ)
            raise ValueError(f"RUN_DIR: {folders[0]} and {folder} were fitted on different data ({shown})")
    names = _names(folders)
    idatas = {name: _posterior(folder, record) for name, folder, record in zip(names, folders, records, strict=True)}
    with warnings.catch_warnings():  # ArviZ warns once per run; the Pareto-k lines below say which and how many
        warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto", category=UserWarning)
        table = az.compare(idatas, ic="loo")
        loo = {name: az.loo(idata, pointwise=True) for name, idata in idatas.items()}
    limits = {name: float(getattr(found, "good_k", PARETO_K_LIMIT)) for name, found in loo.items()}
    unreliable = {name: int(np.sum(np.asarray(found.pareto_k) > limits[name])) for name, found in loo.items()}
    lines = [f"PSIS-LOO on {records[0]['data']} (split {records[0]['split']}, N = {records[0]['n_train']}; "
             f"log-likelihood of {_units(records[0]['task'])})", table.to_string()]  # fmt: skip
    for name, idata in idatas.items():
        if idata["posterior"].attrs.get("point_estimates"):
            lines.append(f"note: {name} is a fit by SVI: its hyperparameters are point estimates fitted to every y_n, "
                         "which makes its elpd_loo somewhat optimistic")  # fmt: skip
    for name, count in unreliable.items():
        if count:
            lines.append(f"warning: {name}: {count} of {records[0]['n_train']} points have Pareto k > "
                         f"{limits[name]:.2f}; its elpd_loo is unreliable there")  # fmt: skip
    figure = _plot(table, _units(records[0]["task"]))
    summary = {
        "runs": {name: {"folder": str(folder), "method": record["method"]}
                 for name, folder, record in zip(names, folders, records, strict=True)},
        "table": {name: table.loc[name].to_dict() for name in table.index},
        "pareto_k_above_limit": unreliable, "pareto_k_limit": limits, "argv": list(argv),
        **results.provenance(),
    }  # fmt: skip
    try:
        figure.tight_layout()
        files = {"compare.json": results.json_file(summary), "compare.png": results.figure_file(figure)}
        results.write_output_set(args.out, files)
    finally:
        plt.close(figure)
    lines.append(f"wrote {args.out / 'compare.json'}, {args.out / 'compare.png'}")
    print("\n".join(lines))
    return table
