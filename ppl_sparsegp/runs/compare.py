"""Fitted runs on the same data ranked (:func:`compare_runs`) by PSIS-LOO or by their test-set log predictive density,
with the comparison table and a plot.

``criterion="loo"``: ArviZ's comparison and the points whose Pareto k makes a run's estimate unreliable. Every run's
posterior.nc must hold the ``"predictive"`` log-likelihood, log p(y_n | draw) with f_n integrated out, so that the
methods are scored alike (every method's runs write it; idsgp runs are refused, :data:`NOT_COMPARED` says why).
``criterion="test"``: elpd on the held-out points, Σ_n log p(y*_n | run) from the loaded run
(:meth:`ppl_sparsegp.runs.load.Run.log_density`, original units), with the standard errors of each elpd and of its
paired difference to the best; it ranks every loadable method, IDSGP included. Either way the runs must share data,
split and task.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ppl_sparsegp import results, validation
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.runs.load import load_run
from ppl_sparsegp.runs.store import read_record

PARETO_K_LIMIT = 0.7
"""Pareto k above which PSIS-LOO's estimate for a point is unreliable (Vehtari et al. 2017), where ArviZ does not
give its own sample-size-dependent limit (``good_k``: min(1 - 1/log10 S, 0.7) for S draws)."""
NOT_COMPARED = {
    "idsgp": "its q(u | x) comes from a network fitted to every y_n, so draws of u_n carry little of y_n's influence "
    "and PSIS-LOO is far too optimistic (diabetes: elpd_loo -291 against SVGP's -355 while its test NLPD was the "
    "worse); rank it by its test-set density instead (--by test)",
}
"""Methods whose runs PSIS-LOO cannot rank, and why."""
CRITERIA = ("loo", "test")
"""What :func:`compare_runs` ranks by: PSIS-LOO on the training data, or the elpd of the held-out points."""
SAME = ("data", "split", "task", "n_train")
"""What the compared runs must share (results.json)."""


def _posterior(folder: Path, record: dict[str, Any]) -> Any:
    """The run's InferenceData, refused unless it has the predictive log-likelihood."""
    if record["method"] in NOT_COMPARED:
        raise ValueError(f"run_dirs: {folder} is an {record['method']} run, which compare cannot rank: "
                         f"{NOT_COMPARED[record['method']]}")  # fmt: skip
    path = folder / "posterior.nc"
    if not path.is_file():
        raise ValueError(f"run_dirs: {folder} has no posterior.nc (its {record['method']} run writes none, or predates "
                         "it; re-run the fit)")  # fmt: skip
    idata = diagnostics.load(path)
    kind = (
        idata["log_likelihood"].attrs.get("log_likelihood")
        if "log_likelihood" in diagnostics.group_names(idata)
        else None
    )
    if kind != "predictive":
        raise ValueError(f"run_dirs: {path} has no predictive log-likelihood to compare (found {kind or 'none'}); "
                         "re-run the fit with this version")  # fmt: skip
    return idata


def _names(folders: Sequence[Path]) -> list[str]:
    """The folders' names, or their paths where two names coincide."""
    names = [folder.name for folder in folders]
    return names if len(set(names)) == len(names) else [str(folder) for folder in folders]


def _units(task: str, criterion: str) -> str:
    """What the log-likelihood is of: y in standardised (PSIS-LOO) or original (test) units, or class labels."""
    if task != "regression":
        return "class labels"
    return "standardised units" if criterion == "loo" else "original units"


@dataclass
class Comparison:
    """The ranking of runs by ``criterion``: ``table`` (``az.compare``'s DataFrame, or the same columns with
    ``elpd_test``, best first), the runs' ``names`` (their folders' names, or paths where two coincide),
    ``folders`` and ``records`` (results.json), per run the number of points with Pareto k above its ``limits``
    (``unreliable``; PSIS-LOO only), and ``lines``, the report as printed."""

    table: Any
    names: list[str]
    folders: list[Path]
    records: list[dict[str, Any]]
    unreliable: dict[str, int]
    limits: dict[str, float]
    lines: list[str]
    criterion: str = "loo"

    def record(self) -> dict[str, Any]:
        """compare.json: the criterion, the runs, the table, the Pareto-k counts and limits, versions and date."""
        runs = zip(self.names, self.folders, self.records, strict=True)
        return {
            "criterion": self.criterion,
            "runs": {name: {"folder": str(folder), "method": record["method"]} for name, folder, record in runs},
            "table": {name: self.table.loc[name].to_dict() for name in self.table.index},
            "pareto_k_above_limit": self.unreliable, "pareto_k_limit": self.limits, **results.provenance(),
        }  # fmt: skip

    def figure(self) -> Any:
        """elpd_loo ± its standard error of every run, best on top, the best's value dashed (drawn here rather than
        by ``az.plot_compare``, whose return type differs between ArviZ 0.x and 1.x); with matplotlib's backend as
        the caller left it (``ppl-sparsegp compare`` selects Agg)."""
        import matplotlib.pyplot as plt

        table = self.table
        elpd = table[next(c for c in ("elpd_loo", "elpd", "elpd_test") if c in table.columns)]
        figure, ax = plt.subplots(figsize=(6.0, 1.0 + 0.45 * len(table)))
        rows = np.arange(len(table))[::-1]
        ax.errorbar(elpd.to_numpy(), rows, xerr=table["se"].to_numpy(), fmt="o", capsize=3)
        ax.axvline(float(elpd.iloc[0]), linestyle="--", color="grey")
        ax.set_yticks(rows, [str(name) for name in table.index])
        what = "elpd_loo" if self.criterion == "loo" else "elpd on the test points"
        ax.set_xlabel(f"{what} (log predictive density, {_units(self.records[0]['task'], self.criterion)})")
        figure.tight_layout()
        return figure


def compare_runs(run_dirs: Sequence[Path], criterion: str = "loo") -> Comparison:
    """Rank the runs in the folders ``run_dirs`` (two or more ``ppl-sparsegp fit`` outputs) by ``criterion``
    (:data:`CRITERIA`; module docstring).

    Raises:
        ValueError: an unknown criterion, fewer than two runs, a run named twice, runs fitted on different data, or
            a run the criterion cannot score (each message about the runs starts ``run_dirs:``).
    """
    validation.check_choice("criterion", criterion, CRITERIA)
    folders = [Path(folder) for folder in run_dirs]
    if len(folders) < 2:
        raise ValueError(f"run_dirs: compare needs at least two runs, got {len(folders)}")
    if len(set(map(Path.resolve, folders))) < len(folders):
        raise ValueError("run_dirs: a run is named twice")
    records = [read_record(folder) for folder in folders]
    for folder, record in zip(folders[1:], records[1:], strict=True):
        differ = [k for k in SAME if record.get(k) != records[0].get(k)]
        if differ:
            shown = ", ".join(f"{k} {records[0].get(k)!r} vs {record.get(k)!r}" for k in differ)
            raise ValueError(f"run_dirs: {folders[0]} and {folder} were fitted on different data ({shown})")
    names = _names(folders)
    if criterion == "test":
        return _by_test_density(names, folders, records)
    import arviz as az

    idatas = {name: _posterior(folder, record) for name, folder, record in zip(names, folders, records, strict=True)}
    with warnings.catch_warnings():  # ArviZ warns once per run; the Pareto-k lines below say which and how many
        warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto", category=UserWarning)
        table = az.compare(idatas, ic="loo")
        loo = {name: az.loo(idata, pointwise=True) for name, idata in idatas.items()}
    limits = {name: float(getattr(found, "good_k", PARETO_K_LIMIT)) for name, found in loo.items()}
    unreliable = {name: int(np.sum(np.asarray(found.pareto_k) > limits[name])) for name, found in loo.items()}
    first = records[0]
    lines = [f"PSIS-LOO on {first['data']} (split {first['split']}, N = {first['n_train']}; "
             f"log-likelihood of {_units(first['task'], 'loo')})", table.to_string()]  # fmt: skip
    for name, idata in idatas.items():
        if idata["posterior"].attrs.get("point_estimates"):
            lines.append(f"note: {name} is a fit by SVI: its hyperparameters are point estimates fitted to every y_n, "
                         "which makes its elpd_loo somewhat optimistic")  # fmt: skip
    for name, count in unreliable.items():
        if count:
            lines.append(f"warning: {name}: {count} of {first['n_train']} points have Pareto k > "
                         f"{limits[name]:.2f}; its elpd_loo is unreliable there")  # fmt: skip
    return Comparison(table, names, folders, records, unreliable, limits, lines)


def _by_test_density(names: list[str], folders: list[Path], records: list[dict[str, Any]]) -> Comparison:
    """The runs ranked by elpd on their common evaluation points: Σ_n log p(y*_n | run), its standard error
    √(S Var_n log p), and for each run the difference to the best with the standard error of the paired differences
    (the columns of ``az.compare``)."""
    pointwise = {}
    for name, folder in zip(names, folders, strict=True):
        try:
            run = load_run(folder)
            pointwise[name] = run.log_density(*run.stored.evaluation())
        except ValueError as err:
            raise ValueError(f"run_dirs: {err}") from None
    order = sorted(names, key=lambda name: -pointwise[name].sum())
    best = pointwise[order[0]]
    S = len(best)
    rows = {
        name: {"rank": rank, "elpd_test": float(pointwise[name].sum()),
               "se": float(np.sqrt(S * np.var(pointwise[name]))),
               "elpd_diff": float(best.sum() - pointwise[name].sum()),
               "dse": float(np.sqrt(S * np.var(best - pointwise[name])))}
        for rank, name in enumerate(order)
    }  # fmt: skip
    import pandas as pd

    table = pd.DataFrame.from_dict(rows, orient="index")
    first = records[0]
    lines = [f"Test-set log predictive density on {first['data']} (split {first['split']}, "
             f"{first.get('evaluated_on', 'test')} points S = {S}; {_units(first['task'], 'test')})",
             table.to_string()]  # fmt: skip
    return Comparison(table, names, folders, records, {}, {}, lines, criterion="test")
