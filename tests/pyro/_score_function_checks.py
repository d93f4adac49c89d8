"""What the tests of the Pyro ``ScoreFunctionELBO`` against the NumPyro one share: the ELBO a recipe hands to its
``fit_svi``, and each engine's loss and gradients at the same params and the same draws of the guide's sites."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pyro
import pytest
import torch
from numpyro import handlers
from pyro import poutine
from pyro.poutine.messenger import Messenger

from ppl_sparsegp.infer.score_function import BASELINE_SITE
from ppl_sparsegp.pyro.score_function import BASELINE_TOTAL, BASELINE_WEIGHT


class _Captured(Exception):
    """Raised by the stand-in of a recipe's ``fit_svi`` once it holds the loss it was given."""


class Drawn(Messenger):
    """Gives the guide's sample sites named in ``values`` those values as their draws (still latent, unlike
    ``poutine.condition``), the twin of NumPyro's ``handlers.substitute`` of sample sites."""

    def __init__(self, values: dict[str, torch.Tensor]):
        super().__init__()
        self.values = values

    def _pyro_sample(self, msg):
        if msg["name"] in self.values:
            msg["value"], msg["done"] = self.values[msg["name"]], True


def captured_loss(monkeypatch, trainer: Any, fit: Callable, *args, **kwargs) -> Any:
    """The ELBO that ``fit(*args, progress=False, **kwargs)`` hands first to ``trainer.fit_svi`` (``trainer``: the
    module whose ``fit_svi`` the recipe calls), before anything is trained."""
    captured = {}

    def capture(*_, **options):
        captured["loss"] = options["loss"]
        raise _Captured

    monkeypatch.setattr(trainer, "fit_svi", capture)
    with pytest.raises(_Captured):
        fit(*args, progress=False, **kwargs)
    monkeypatch.undo()
    return captured["loss"]


def numpyro_loss_and_grads(elbo, model, params, draws, args, baseline: float) -> tuple[float, dict[str, np.ndarray]]:
    """The NumPyro ``elbo``'s loss and its gradients in ``params`` with the guide's sites in ``draws`` substituted and
    the baseline's running sums at (``baseline``, 1)."""
    guide = handlers.substitute(model.guide, data={name: jnp.asarray(v) for name, v in draws.items()})
    state = {"total": jnp.asarray(baseline), "weight": jnp.asarray(1.0)}

    def loss(values):
        param_map = {**values, BASELINE_SITE: state}
        return elbo.loss_with_mutable_state(jax.random.PRNGKey(0), param_map, model.model, guide, *args)["loss"]

    value, grads = jax.value_and_grad(loss)({name: jnp.asarray(v) for name, v in params.items()})
    return float(value), {name: np.asarray(g) for name, g in grads.items()}


def pyro_loss_and_grads(elbo, model, params, draws, args, baseline: float) -> tuple[float, dict[str, Any]]:
    """The Pyro ``elbo``'s loss and every param's ``.grad`` (None where backpropagation does not reach it), at the
    same params, draws and baseline as :func:`numpyro_loss_and_grads`; ``TraceGraph_ELBO``'s per-site running
    average is set to the same b."""
    leaves = {name: torch.tensor(v, requires_grad=True) for name, v in params.items()}
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    store = pyro.get_param_store()
    store[BASELINE_TOTAL], store[BASELINE_WEIGHT] = torch.tensor(baseline), torch.tensor(1.0)
    store["__baseline_avg_downstream_cost_inclusion"] = torch.tensor(baseline)
    guide = Drawn({name: torch.as_tensor(v) for name, v in draws.items()})(poutine.substitute(model.guide, data=leaves))
    value = elbo.loss_and_grads(poutine.substitute(model.model, data=leaves), guide, *map(torch.as_tensor, args))
    return float(value), {name: leaf.grad for name, leaf in leaves.items()}
