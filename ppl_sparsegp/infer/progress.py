"""When progress bars are shown, and how often they move: what every engine's ``progress=`` means.

``progress=None`` (every engine's and recipe's default) shows the bars where someone watches them: when standard
error is a terminal, or in a Jupyter notebook (an IPython ``ZMQInteractiveShell``, where ``tqdm.auto`` draws
widgets). ``True`` or ``False`` decides outright.
"""

from __future__ import annotations

import sys

UPDATES = 20
"""How many times a bar over compiled pieces of work (MCMC warmup, MCMC sampling) moves: the work is dispatched in
about this many pieces when a bar is shown, whatever the checkpoint interval."""


def shown(progress: bool | None) -> bool:
    """Whether to show progress bars for ``progress`` (None: stderr is a terminal, or this is a notebook)."""
    if progress is not None:
        return bool(progress)
    return sys.stderr.isatty() or _in_notebook()


def _in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's shell is a ``ZMQInteractiveShell``); importing IPython
    or ipykernel, as tools do, is not enough."""
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return get_ipython is not None and type(get_ipython()).__name__ == "ZMQInteractiveShell"


def pieces(total: int, size: int) -> list[int]:
    """``total`` split into consecutive pieces of ``size`` and a last, smaller one: (10, 4) -> [4, 4, 2]."""
    return [size] * (total // size) + ([total % size] if total % size else [])


def piece_size(total: int, multiple: int = 1) -> int:
    """The size of the pieces that move a bar about :data:`UPDATES` times over ``total`` (itself a multiple of
    ``multiple``): the smallest multiple of ``multiple`` that covers ``total / UPDATES``; at least ``multiple``."""
    units = total // multiple
    return multiple * max(1, -(-units // UPDATES))
