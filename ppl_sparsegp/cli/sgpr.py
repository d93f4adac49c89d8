"""sgpr: sparse GP regression on Titsias' collapsed bound (Gaussian likelihood, full batch), fitted by SVI.

Outputs, checkpoint and resumption as svgp (:func:`ppl_sparsegp.cli.svgp.fit_by_svi`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from functools import partial
from typing import Any

from ppl_sparsegp.cli import svgp
from ppl_sparsegp.models.numpyro.sgpr import SGPR

CHECKPOINT, METHOD_DEFAULTS = svgp.CHECKPOINT, svgp.METHOD_DEFAULTS
add_arguments = partial(svgp.add_arguments, method="sgpr")


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    return svgp.fit_by_svi(args, argv, lambda opts, d, parts: SGPR(**parts), "sgpr needs regression data (use svgp)")
