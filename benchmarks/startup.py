"""Time to the first step: imports, a whole one-step ``ppl-sparsegp fit`` process, and a one-step ``fit_svi``,
each with an empty (cold) and a filled (warm) persistent compilation cache.

Run (from the repository root, with the development environment)::

    PPL_SPARSEGP_DATA_DIR=/work/shared/data .venv/bin/python benchmarks/startup.py             # 5 repeats
    git worktree add /tmp/before 813b325 && ln -s ../models /tmp/before/ppl_sparsegp/models
    PPL_SPARSEGP_DATA_DIR=... .venv/bin/python benchmarks/startup.py --repeats 3 --baseline /tmp/before

What is timed, each figure in a fresh process, ``--repeats`` times (the table gives the medians):

* ``import ppl_sparsegp`` and ``import ppl_sparsegp.cli.__main__`` (the command line's module, which builds the
  parser): seconds inside the process (wall and CPU), interpreter start-up excluded.
* ``ppl-sparsegp fit svgp --data diabetes --steps 1 --quiet --out TMP``: the wall-clock time of the whole process
  (the console script beside the interpreter), and its CPU time (user + system, from ``getrusage``), which a busy
  machine inflates less than the wall clock.
* the same command with a warm cache, run in-process (``--fit-phases``): the CPU seconds of importing the command
  line's module and of each phase of :data:`FIT_PHASES` (loading the data, placing Z, ``fit_svi``, the
  predictions, posterior.nc's draws, fit.png's figure, writing the files; each with what it imports first), and
  the rest.
* a one-step fit in-process: ``psg.fit_svi`` of an SVGP on diabetes (the command's defaults: M = 128 k-means
  inducing inputs, RBF with lengthscale sqrt(D), noise variance 0.1, Adam 0.01, float64, whitened), timed around
  the ``fit_svi`` call (wall and the process's CPU time), and from the process's launch to the end of that step.

Cold: ``PPL_SPARSEGP_COMPILATION_CACHE`` names a new empty folder for every repeat. Warm: a folder that one
unmeasured run of the same command filled first. ``--baseline DIR`` also times the checkout in DIR (put first on
``PYTHONPATH`` of its processes; an installed checkout maps ``models/`` to ``ppl_sparsegp.models``, hence the link
above), interleaved with this one figure by figure, so that both see the same load. A checkout that predates the
cache ignores the variable, so its cold and warm figures differ only by the operating system's file cache. Every
process runs in a scratch folder, so that neither checkout shadows the other; the record names each one's commit.

The developer machines have 2 cores shared with other work: the record keeps the 1-minute load average before and
after, and the CPU seconds beside the wall clock.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

CACHE_VARIABLE = "PPL_SPARSEGP_COMPILATION_CACHE"
FIT_ARGS = ["fit", "svgp", "--data", "diabetes", "--steps", "1", "--quiet"]
IMPORTS = {"import_ppl_sparsegp": "ppl_sparsegp", "import_cli": "ppl_sparsegp.cli.__main__"}
IMPORT_TIMER = (
    "import json, time; t, c = time.perf_counter(), time.process_time(); import {module}; "
    "print(json.dumps({{'import_s': time.perf_counter() - t, 'import_cpu_s': time.process_time() - c}}))"
)
"""The code that times an import in a fresh interpreter."""


def one_step_fit(launched: float) -> dict[str, float]:
    """The in-process figure (run in a child process): a one-step ``fit_svi`` of the command's SVGP on diabetes."""
    start, start_cpu = time.perf_counter(), time.process_time()
    import jax

    jax.config.update("jax_enable_x64", True)
    import numpy as np
    import optax

    import ppl_sparsegp as psg

    imported = time.perf_counter()
    ds, _ = psg.standardize(psg.load_dataset("diabetes"))
    X, y = ds.X_train, ds.y_train
    D = X.shape[1]
    kernel = psg.kernels.RBF(variance=1.0, lengthscale=np.full(D, np.sqrt(D)))
    gp = psg.SVGP(kernel=kernel, likelihood=psg.likelihoods.Gaussian(0.1), Z=psg.kmeans(X, 128))
    before, before_cpu = time.perf_counter(), time.process_time()
    fit = psg.fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=1, progress=False)
    after, after_cpu = time.perf_counter(), time.process_time()
    return {
        "fit_svi_s": after - before,
        "fit_svi_cpu_s": after_cpu - before_cpu,
        "compile_s": fit.compile_seconds,
        "imports_s": imported - start,
        "launch_to_first_step_s": time.time() - launched,
        "launch_to_first_step_cpu_s": after_cpu - start_cpu,
    }


FIT_PHASES = {
    "load_data": ("ppl_sparsegp.data", "load_dataset"),
    "inducing_init": ("ppl_sparsegp.inducing.initialise", "by_name"),
    "fit_svi": ("ppl_sparsegp.cli.svgp", "fit_svi"),
    "predict": ("ppl_sparsegp.cli.run", "predict_gp"),
    "posterior": ("ppl_sparsegp.runs.store", "svi_posterior"),
    "plot": ("ppl_sparsegp.results", "plot_fit"),
    "write_files": ("ppl_sparsegp.results", "write_output_set"),
}
"""The phases of a ``fit svgp`` run that :func:`fit_phases` times: phase -> (module, function), each function
looked up by the command at call time (so a wrapper put in the module's place sees every call)."""


def fit_phases(out: str) -> dict[str, float]:
    """The in-process breakdown (run in a child process): ``ppl-sparsegp fit svgp`` (:data:`FIT_ARGS`, ``--out
    out``) with the CPU seconds of the process spent importing the command line's module, in each phase of
    :data:`FIT_PHASES` (what it imports on first use included) and in the rest (``other``), and the total."""
    import functools
    import importlib

    start = time.process_time()
    from ppl_sparsegp.cli import __main__ as cli

    spent = {"import_cli": time.process_time() - start}

    def timed(phase: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            begun = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[phase] = spent.get(phase, 0.0) + time.process_time() - begun

        return wrapper

    for phase, (module_name, name) in FIT_PHASES.items():
        module = importlib.import_module(module_name)
        setattr(module, name, timed(phase, getattr(module, name)))
    if cli.main([*FIT_ARGS, "--out", out]) != 0:
        raise RuntimeError("the fit failed")
    total = time.process_time() - start
    return {**{f"{k}_cpu_s": v for k, v in spent.items()}, "other_cpu_s": total - sum(spent.values()),
            "total_cpu_s": total}  # fmt: skip


def timed_process(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, str]:
    """Run ``command`` in ``cwd``; its wall-clock seconds, its CPU seconds (user + system) and its stdout. Raises on
    failure."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    return wall, cpu, done.stdout


def command_line() -> list[str]:
    """``ppl-sparsegp`` beside this interpreter (the console script), else ``python -m ppl_sparsegp.cli``."""
    script = Path(sys.executable).parent / "ppl-sparsegp"
    return [str(script)] if script.exists() else [sys.executable, "-m", "ppl_sparsegp.cli"]


Figures = dict[str, dict[str, list[float]]]
"""figure -> measured quantity -> [repeats] seconds."""


def measure(repeats: int, scratch: Path, checkouts: dict[str, Path | None]) -> dict[str, Figures]:
    """Every figure ``repeats`` times for every checkout (name -> the folder put first on ``PYTHONPATH``, None: the
    installed one), the checkouts interleaved figure by figure."""
    figures: dict[str, Figures] = {name: {} for name in checkouts}
    fit_command = [*command_line(), *FIT_ARGS, "--out"]
    script = str(Path(__file__).resolve())

    def run(checkout: str, figure: str, command: list[str], cache: Path, parsed: Callable[[str], dict]) -> None:
        """Run ``command`` for ``checkout`` with the cache folder ``cache``; record its times and what ``parsed``
        reads from its stdout as ``figure`` (nothing for an empty name)."""
        env = {**os.environ, CACHE_VARIABLE: str(cache)}
        if checkouts[checkout] is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkouts[checkout]), env.get("PYTHONPATH")]))
        wall, cpu, out = timed_process(command, env, scratch)
        if figure:
            for key, value in {"seconds": wall, "cpu_seconds": cpu, **parsed(out)}.items():
                figures[checkout].setdefault(figure, {}).setdefault(key, []).append(value)

    def nothing(out: str) -> dict:
        return {}

    def last_json(out: str) -> dict:
        return json.loads(out.splitlines()[-1])

    def in_process() -> list[str]:
        return [sys.executable, script, "--one-step-fit", repr(time.time())]

    def phases(checkout: str, repeat: int) -> list[str]:
        return [sys.executable, script, "--fit-phases", str(scratch / f"phases-{checkout}-{repeat}")]

    for checkout in checkouts:  # fill the warm caches once
        prime = [*fit_command, str(scratch / f"prime-{checkout}")]
        run(checkout, "", prime, scratch / checkout / "warm-cli", parsed=nothing)
        run(checkout, "", in_process(), scratch / checkout / "warm-fit", parsed=nothing)
    for repeat in range(repeats):
        for name, module in IMPORTS.items():
            code = IMPORT_TIMER.format(module=module)
            for checkout in checkouts:
                run(checkout, name, [sys.executable, "-c", code], scratch / "unused", parsed=last_json)
        for kind in ("cold", "warm"):
            for checkout in checkouts:
                cache = scratch / checkout / (f"cold-cli-{repeat}" if kind == "cold" else "warm-cli")
                out_dir = scratch / f"out-{checkout}-{kind}-{repeat}"
                run(checkout, f"cli_fit_{kind}", [*fit_command, str(out_dir)], cache, parsed=nothing)
                shutil.rmtree(out_dir, ignore_errors=True)
        for kind in ("cold", "warm"):
            for checkout in checkouts:
                cache = scratch / checkout / (f"cold-fit-{repeat}" if kind == "cold" else "warm-fit")
                run(checkout, f"one_step_fit_{kind}", in_process(), cache, parsed=last_json)
        for checkout in checkouts:
            cache = scratch / checkout / "warm-cli"
            run(checkout, "cli_fit_warm_phases", phases(checkout, repeat), cache, parsed=last_json)
        print(f"repeat {repeat + 1}/{repeats} done", file=sys.stderr, flush=True)
    return figures


def code_version(folder: Path) -> dict[str, object]:
    """The commit of the checkout holding ``folder`` and whether its tracked files differ from it."""
    git = ["git", "-C", str(folder)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    return {"path": str(folder), "commit": commit or None, "uncommitted_changes": bool(dirty.stdout.strip())}


def provenance() -> dict[str, object]:
    """The versions, the machine and the date."""
    import importlib.metadata

    versions = {"python": platform.python_version()}
    versions.update({p: importlib.metadata.version(p) for p in ("jax", "jaxlib", "numpyro", "scikit-learn", "arviz")})
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "cpus": os.cpu_count()},
        "versions": versions,
    }


def table(figures: dict[str, Figures]) -> str:
    """A markdown table of the medians, a column per checkout."""
    names = list(figures)
    rows = [f"| figure | {' | '.join(names)} |", "|---|" + "---:|" * len(names)]
    first = figures[names[0]]
    for figure, values in first.items():
        for key in values:
            medians = [statistics.median(figures[n][figure][key]) for n in names]
            rows.append(f"| {figure} {key} | {' | '.join(f'{m:.2f}' for m in medians)} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of every figure (default: 5)")
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results" / "startup.json")
    parser.add_argument("--baseline", type=Path, metavar="DIR", help="also time the checkout in DIR, interleaved")
    parser.add_argument("--one-step-fit", type=float, metavar="LAUNCHED", help=argparse.SUPPRESS)
    parser.add_argument("--fit-phases", metavar="OUT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_step_fit is not None:
        print(json.dumps(one_step_fit(args.one_step_fit)))
        return
    if args.fit_phases is not None:
        print(json.dumps(fit_phases(args.fit_phases)))
        return
    import ppl_sparsegp

    checkouts: dict[str, Path | None] = {"this": None}
    folders = {"this": Path(ppl_sparsegp.__file__).resolve().parents[1]}
    if args.baseline is not None:
        checkouts["baseline"] = folders["baseline"] = args.baseline.resolve()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as scratch:
        figures = measure(args.repeats, Path(scratch), checkouts)
    record = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        **provenance(),
        "code": {name: code_version(folder) for name, folder in folders.items()},
        "repeats": args.repeats,
        "loadavg_1min_before": load_before,
        "loadavg_1min_after": os.getloadavg()[0],
        "medians": {
            checkout: {name: {k: statistics.median(v) for k, v in values.items()} for name, values in found.items()}
            for checkout, found in figures.items()
        },
        "runs": figures,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(record, indent=2) + "\n")
    print(table(figures))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
