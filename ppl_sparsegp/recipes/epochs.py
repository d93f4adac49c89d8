"""Adam by epochs, the loop the amortised recipes share (IDSGP, SAS-GP): ``num_epochs`` epochs of
``ceil(N / batch_size)`` SVI steps, checkpointed, with the config in the checkpoint's fingerprint so that a run with
other settings is refused and one with more epochs resumes. :func:`fit_by_epochs` is NumPyro's loop;
:mod:`ppl_sparsegp.recipes.epochs_pyro` is its Pyro twin, and both take :func:`epoch_plan`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import optax

from ppl_sparsegp.infer.svi import SVIResult, fit_svi

Array = Any


@dataclass
class EpochFit:
    """What an epoch recipe returns: the model, its SVI fit and the epoch length in steps."""

    model: Any
    svi: SVIResult
    steps_per_epoch: int

    @property
    def params(self) -> dict[str, Array]:
        return self.svi.params

    @property
    def epochs_run(self) -> float:
        """Epochs run in this call (a resumed call runs only the rest)."""
        return self.svi.steps_run / self.steps_per_epoch

    @property
    def seconds_per_epoch(self) -> float | None:
        """Training seconds per epoch in this call, compilation excluded (None if no step ran)."""
        return self.svi.run_seconds / self.epochs_run if self.svi.steps_run else None


def fit_by_epochs(
    model: Any,
    data: tuple[Array, ...],
    config: Any,
    name: str,
    *,
    seed: int,
    label: str,
    checkpoint: str | None,
    checkpoint_every: int,
    progress: bool | None,
    callback: Callable[[int, np.ndarray, dict[str, Array]], bool | None] | None,
    fingerprint: Mapping[str, Any] | None,
    train: bool = False,
) -> EpochFit:
    """Fit ``model`` (its ``model``, ``guide`` and ``check_data``) to ``data`` (the first array's rows are the N
    points) by Adam at ``config.learning_rate`` for ``config.num_epochs`` epochs of ``config.steps_per_epoch(N)``
    steps; the checkpoint's fingerprint holds every field of ``config`` but ``num_epochs`` as ``"<name>.<field>"``
    and ``fingerprint``; ``train``: the steps call ``model.model`` and ``model.guide`` with ``train=True`` (their
    training-only behaviour, e.g. IDSGP's output dropout; :func:`steps_of`); the other arguments are
    :func:`ppl_sparsegp.infer.svi.fit_svi`'s."""
    steps_per_epoch, settings = epoch_plan(config, name, data[0].shape[0], fingerprint)
    svi = fit_svi(
        *steps_of(model, train), *data, optimizer=optax.adam(config.learning_rate),
        num_steps=config.num_epochs * steps_per_epoch, key=seed, progress=progress, label=label, callback=callback,
        checkpoint=checkpoint, checkpoint_every=checkpoint_every, fingerprint=settings, validate=model.check_data,
    )  # fmt: skip
    return EpochFit(model=model, svi=svi, steps_per_epoch=steps_per_epoch)


def steps_of(model: Any, train: bool) -> tuple[Callable, Callable]:
    """The (model, guide) programs that the SVI steps run: ``model.model`` and ``model.guide``, called with
    ``train=True`` when ``train``."""
    if not train:
        return model.model, model.guide
    return partial(model.model, train=True), partial(model.guide, train=True)


def epoch_plan(config: Any, name: str, num_data: int, fingerprint: Mapping[str, Any] | None) -> tuple[int, dict]:
    """What every backend's epoch loop shares: the steps of an epoch over ``num_data`` points,
    ``config.steps_per_epoch(N)``, and the checkpoint's fingerprint, every field of ``config`` but ``num_epochs``
    (more epochs may resume a run) as ``"<name>.<field>"``, then ``fingerprint``."""
    own = {f"{name}.{k}": v for k, v in vars(config).items() if k != "num_epochs"}
    return config.steps_per_epoch(num_data), {**own, **dict(fingerprint or {})}
