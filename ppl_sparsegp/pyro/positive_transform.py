"""The Pyro twin of :mod:`ppl_sparsegp.infer.positive_transform` (its docstring says why softplus): positive params
through exp (torch's ``constraints.positive``, the default) or softplus (Pyro's ``constraints.softplus_positive``)."""

from __future__ import annotations

from typing import Any

from pyro.distributions.constraints import softplus_positive
from pyro.poutine.messenger import Messenger
from torch.distributions import constraints


class SoftplusPositive(Messenger):
    """Every ``pyro.param`` of ``fn`` declared with ``constraints.positive`` lives on the real line through softplus
    instead of exp, when the param store creates it; other params are left as they are. Wrap both the model and the
    guide, ``SoftplusPositive()(model)``, with an empty param store (a param keeps the constraint it was created
    with)."""

    def _process_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "param" and msg["kwargs"].get("constraint") is constraints.positive:
            msg["kwargs"] = {**msg["kwargs"], "constraint": softplus_positive}
