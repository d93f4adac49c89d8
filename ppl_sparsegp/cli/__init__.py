"""The ``ppl-sparsegp`` command line: fit a sparse GP to a dataset, evaluate it, write the results; diagnose a run.

Usage::

    ppl-sparsegp fit {svgp,sgpr,gpr,sgpmc,bsgp,selective} [--data diabetes] [--split 0] ... [--out DIR]
    ppl-sparsegp diagnose RUN_DIR

``ppl-sparsegp fit --help`` lists every method's options with their defaults, which are those of the method's
recipe config (:mod:`ppl_sparsegp.recipes`) or of :class:`ppl_sparsegp.cli.run.Defaults`. One run checks every
option (``--out`` included) and then the dataset before anything is compiled, loads and standardises the data,
fits, evaluates in original units and writes its outputs as one set (:func:`ppl_sparsegp.cli.run.write_outputs`).

Layout: :mod:`.__main__` (the parser, one sub-command per method, exit codes), :mod:`.run` (what the methods share:
options added by one helper each, checks, data, checkpoints, evaluation, the picture, the run record), and one
module per method (``svgp``, ``sgpr``, ``gpr``, ``sgpmc``, ``bsgp``, ``selective``) plus ``diagnose``, each with
``add_arguments(parser)`` and ``run(args, argv)``.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``ppl-sparsegp``: :func:`ppl_sparsegp.cli.__main__.main` (imported here on first call, so
    that ``python -m ppl_sparsegp.cli`` runs that module once)."""
    from ppl_sparsegp.cli.__main__ import main as run_main

    return run_main(argv)
