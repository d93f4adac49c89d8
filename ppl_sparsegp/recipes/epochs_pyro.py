"""Adam by epochs on the Pyro side, the twin of :func:`ppl_sparsegp.recipes.epochs.fit_by_epochs` (IDSGP's and
SAS-GP's Pyro recipes): ``num_epochs`` epochs of ``ceil(N / batch_size)`` steps of
:func:`ppl_sparsegp.pyro.svi.fit_svi` with ``torch.optim.Adam``, checkpointed, the same fingerprint
(:func:`ppl_sparsegp.recipes.epochs.epoch_plan`) so that a run with other settings is refused and one with more
epochs resumes. Torch's generator, seeded by ``seed``, draws the batches and any sample.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import torch

from ppl_sparsegp.pyro.svi import fit_svi

from .epochs import EpochFit, epoch_plan, steps_of

Array = Any


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
    fingerprint: Mapping[str, Any] | None,
    train: bool = False,
) -> EpochFit:
    """Fit the Pyro ``model`` (its ``model``, ``guide`` and ``check_data``) to ``data`` (the first array's rows are
    the N points) by Adam at ``config.learning_rate`` for ``config.num_epochs`` epochs of
    ``config.steps_per_epoch(N)`` steps; the checkpoint's fingerprint is :func:`epoch_plan`'s; ``train`` as
    :func:`ppl_sparsegp.recipes.epochs.fit_by_epochs`'s (:func:`steps_of`); the other arguments
    are :func:`ppl_sparsegp.pyro.svi.fit_svi`'s. The result's params are detached tensors."""
    steps_per_epoch, settings = epoch_plan(config, name, data[0].shape[0], fingerprint)
    svi = fit_svi(
        *steps_of(model, train), *data, optimizer=partial(torch.optim.Adam, lr=config.learning_rate),
        num_steps=config.num_epochs * steps_per_epoch, seed=seed, progress=progress, label=label,
        checkpoint=checkpoint, checkpoint_every=checkpoint_every, fingerprint=settings, validate=model.check_data,
    )  # fmt: skip
    return EpochFit(model=model, svi=svi, steps_per_epoch=steps_per_epoch)
