"""gpr: exact GP regression (O(N^3) per step; at most 5000 training points), fitted by SVI with Adam.

Outputs, checkpoint and resumption as svgp (:func:`ppl_sparsegp.cli.svgp.fit_by_svi`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from functools import partial
from typing import Any

from ppl_sparsegp.cli import svgp
from ppl_sparsegp.cli.run import Data
from ppl_sparsegp.models.numpyro.gpr import GPR

CHECKPOINT = svgp.CHECKPOINT
METHOD_DEFAULTS = {"noise_variance": svgp.NOISE_VARIANCE}
MAX_N = 5000
"""Largest training set gpr accepts: its cost is O(N^3) time and O(N^2) memory per step."""
add_arguments = partial(svgp.add_arguments, method="gpr")


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    def build(opts: dict[str, Any], d: Data, parts: dict[str, Any]) -> GPR:
        if d.X.shape[0] > MAX_N:
            raise ValueError(
                f"--data: gpr is exact, O(N^3) time and O(N^2) memory, and {d.ds.name} has N = {d.X.shape[0]} > "
                f"{MAX_N} training points; use sgpr or svgp"
            )
        return GPR(**parts)

    return svgp.fit_by_svi(args, argv, build, "gpr needs regression data (use svgp)")
