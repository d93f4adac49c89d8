"""``ppl-sparsegp`` (also ``python -m ppl_sparsegp.cli``): the top-level parser, ``fit`` with one sub-command per
method (each a module with ``add_arguments`` and ``run``) and ``diagnose``, and the exit codes.

A method's options belong to its sub-command only; argparse refuses them elsewhere ("unrecognized arguments").
``fit --help`` shows every method's options.

Exit codes: 0 success; 2 bad options or data (argparse's own errors included), or a checkpoint in ``--out`` that
is damaged, non-finite or another run's; 1 a run-time failure that is not the user's input (missing or corrupt data
files, a failed Cholesky, a non-finite loss, a full disk), printed as one line ``error: ...``; 130 interrupted
(Ctrl-C), after the checkpoint that a re-run resumes from has been saved.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import jax

from ppl_sparsegp import data
from ppl_sparsegp.cli import bsgp, compare, diagnose, fetch, gpr, idsgp, predict, sas, selective, sgpmc, sgpr, svgp
from ppl_sparsegp.cli.run import RESTART_HINT, join_processes
from ppl_sparsegp.data import DataIntegrityError
from ppl_sparsegp.infer import compilation_cache
from ppl_sparsegp.infer.checkpoint import CheckpointError

METHODS: dict[str, ModuleType] = {
    "svgp": svgp, "sgpr": sgpr, "gpr": gpr, "sgpmc": sgpmc, "bsgp": bsgp, "selective": selective, "idsgp": idsgp,
    "sas": sas,
}  # fmt: skip
"""The ``fit`` sub-commands: method -> its module (``add_arguments``, ``run``, ``CHECKPOINT``,
``METHOD_DEFAULTS``)."""
COMMANDS: dict[str, ModuleType] = {"predict": predict, "compare": compare, "diagnose": diagnose, "data": fetch}
"""The commands beside ``fit``, each a module with ``add_arguments`` and ``run``."""
PLOTTING = ("fit", "compare", "diagnose")
"""The commands that draw figures: matplotlib is imported (with its non-interactive Agg backend) only for them."""


class Parser(argparse.ArgumentParser):
    """An argument parser (no abbreviated flags) whose help is followed by that of its ``sections``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, allow_abbrev=False, **kwargs)
        self.sections: list[argparse.ArgumentParser] = []

    def format_help(self) -> str:
        return "\n".join([super().format_help(), *(section.format_help() for section in self.sections)])


def _by_value(option: str) -> str:
    """``"svgp, sgpr, gpr and sgpmc: 0.1; bsgp and selective: 1.0"``: the methods grouped by their default of
    ``option`` (their modules' ``METHOD_DEFAULTS``)."""
    groups: dict[object, list[str]] = {}
    for name, module in METHODS.items():
        if option in module.METHOD_DEFAULTS:
            groups.setdefault(module.METHOD_DEFAULTS[option], []).append(name)
    joined = {v: ", ".join(ns[:-1]) + " and " + ns[-1] if len(ns) > 1 else ns[0] for v, ns in groups.items()}
    return "; ".join(f"{names}: {value}" for value, names in joined.items())


def build_parser(argv: Sequence[str] = ()) -> Parser:
    """The parser of ``ppl-sparsegp``: ``fit METHOD [options]``, ``predict``, ``compare`` and ``diagnose``; for
    ``argv`` that name a method, only that method's options are added (a run reads no other method's module)."""
    only = argv[1] if len(argv) > 1 and argv[0] == "fit" and argv[1] in METHODS else None
    parser = Parser(prog="ppl-sparsegp", description="Sparse Gaussian processes as NumPyro programs.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fit = commands.add_parser(
        "fit",
        help="fit a GP to a dataset, evaluate it and write the results",
        description="Fit a GP, evaluate it on the test set and write results.json, fit.png and the fitted parameters "
        "or posterior to --out. Data are standardised with training statistics; metrics are in original units. "
        "Re-running the same command resumes from its checkpoint in --out (a run with other settings is refused; "
        f"--restart discards it). Defaults that differ by method: --noise-variance {_by_value('noise_variance')}; "
        f"--inducing {_by_value('inducing')}; --init {_by_value('init')}.",
    )
    methods = fit.add_subparsers(dest="method", required=True)
    for name, module in METHODS.items():
        summary = module.__doc__.splitlines()[0].removeprefix(f"{name}: ")
        fit.sections.append(methods.add_parser(name, help=summary, description=module.__doc__))
        if only in (None, name):
            module.add_arguments(fit.sections[-1])
    for name, module in COMMANDS.items():
        summary = module.__doc__.splitlines()[0]
        command = commands.add_parser(name, help=summary, description=module.__doc__)
        if only is None:
            module.add_arguments(command)
    return parser


def skip_the_final_collection() -> None:
    """At the interpreter's exit: freeze the garbage collector's objects and stop it, so that the interpreter's
    final collections do not walk every object that jax, scikit-learn, xarray and matplotlib left (0.7 s of CPU
    after a one-step ``fit svgp``); the operating system reclaims the memory. Registered with :mod:`atexit` by
    :func:`main`, so it runs only when the process ends, after the handlers registered later (the libraries'
    own shutdown handlers run as they would)."""
    gc.freeze()
    gc.disable()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ppl-sparsegp`` with ``argv`` (default: the process's); returns the exit code."""
    atexit.unregister(skip_the_final_collection)  # once per process, however often main runs
    atexit.register(skip_the_final_collection)
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(argv).parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    module = METHODS[args.method] if args.command == "fit" else COMMANDS[args.command]
    if args.command == "fit" and args.out is None:
        name = Path(args.data).stem if data.is_table_path(args.data) else args.data.replace("/", "_")
        args.out = Path("runs") / f"{args.method}-{name}-{args.split}"
    if args.command != "data":  # every other command compiles: JAX's persistent cache from the start
        compilation_cache.enable()
    if args.command in PLOTTING:
        import matplotlib

        matplotlib.use("Agg")  # files only, never a window
    precision = jax.enable_x64(args.dtype == "float64") if args.command == "fit" else contextlib.nullcontext()
    try:
        if args.command == "fit":
            join_processes(args)  # --coordinator etc.: before any JAX computation
        with precision:  # --dtype float64 (the default) computes in 64 bits whatever the process's x64 flag
            module.run(args, argv)
    except (ValueError, OSError, FloatingPointError, DataIntegrityError) as err:
        if isinstance(err, CheckpointError):
            err.hint = RESTART_HINT
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2 if isinstance(err, ValueError) else 1
    except KeyboardInterrupt:
        resume = (
            f"; run the same command again to resume from {args.out / module.CHECKPOINT}"
            if args.command == "fit"
            else ""
        )
        print(f"interrupted{resume}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
