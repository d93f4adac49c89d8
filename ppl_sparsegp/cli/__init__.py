"""The ``ppl-sparsegp`` command line: fit a sparse GP to a dataset, evaluate it, write the results; diagnose a run.

Usage::

    ppl-sparsegp fit {svgp,sgpr,gpr,sgpmc,bsgp,selective,idsgp,sas} [--data diabetes] [--split 0] ... [--out DIR]
    ppl-sparsegp predict RUN_DIR --input new.csv --out preds.csv
    ppl-sparsegp compare RUN_DIR RUN_DIR ... [--out DIR]
    ppl-sparsegp diagnose RUN_DIR
    ppl-sparsegp data fetch NAME [NAME ...] [--dest DIR]

Defaults are those of the method's recipe config (:mod:`ppl_sparsegp.recipes`) or of
:class:`ppl_sparsegp.cli.run.Defaults`. Layout: :mod:`.__main__` (the parser, exit codes), :mod:`.run` (what the
methods share), one module per method plus ``predict``, ``compare`` and ``diagnose``, each with
``add_arguments(parser)`` and ``run(args, argv)`` (which writes the outputs and returns results.json). What a run
folder holds, and how it is loaded back and compared, is the library's :mod:`ppl_sparsegp.runs`;
docs/architecture.md follows one run through them.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ppl-sparsegp`` (imported on first call, so that ``python -m ppl_sparsegp.cli`` runs
    :mod:`.__main__` once)."""
    from ppl_sparsegp.cli.__main__ import main as run_main

    return run_main(argv)
