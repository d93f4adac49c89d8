"""Download datasets from their original sources, with checksums: ``ppl-sparsegp data fetch NAME [NAME ...]``.

Each file is checked against the sha256 the library ships (:mod:`ppl_sparsegp.data_fetch`) before anything is
stored; the data folder is ``--dest``, else the one the loaders read (``$PPL_SPARSEGP_DATA_DIR``, ``shared/data``
beside the checkout, or ``~/.cache/ppl_sparsegp/data``). A dataset already there intact is left alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ppl_sparsegp.data_fetch import Fetched, fetch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    command = actions.add_parser("fetch", help="download datasets and check their checksums", description=__doc__)
    command.add_argument("names", nargs="+", metavar="NAME", help="datasets as --data names them, e.g. kin8nm")
    command.add_argument(
        "--dest",
        type=Path,
        default=None,
        metavar="DIR",
        help="the data folder to write into (default: where the loaders look)",
    )
    command.add_argument("--mirror", default=None, metavar="URL",
                         help="read https://HOST/PATH from URL/HOST/PATH (a mirror)")  # fmt: skip


def run(args: argparse.Namespace, argv: Sequence[str] = ()) -> list[Fetched]:
    """Fetch every named dataset in turn; returns what each fetch did."""
    done = [fetch(name, args.dest, mirror=args.mirror) for name in args.names]
    for item in done:
        if item.downloaded:
            print(f"fetched {item.key} into {item.folder}")
    return done
