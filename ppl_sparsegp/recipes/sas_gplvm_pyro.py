"""SAS-GP's recipe (Moreno-Muñoz, Feldager & Hauberg 2022, §4; spec 004 §2) on the Pyro twin and engine, the twin of
:func:`ppl_sparsegp.recipes.sas_gplvm.fit_sas` with the same settings (:class:`~ppl_sparsegp.recipes.sas_gplvm.
SASConfig`): Adam on the encoder, the kernel and the noise, a batch of B distinct rows per step split into A active
and B − A held-out rows, for ``num_epochs`` epochs of ``ceil(N / B)`` steps
(:func:`ppl_sparsegp.recipes.epochs_pyro.fit_by_epochs`, Pyro's ``TraceMeanField_ELBO``: Bayesian SAS's latent KL in
closed form).

The model is :class:`models.pyro.sas_gplvm.SASGPLVM`, the twin (:func:`ppl_sparsegp.models.pyro._base.twin_of`) of
the NumPyro recipe's :func:`~ppl_sparsegp.recipes.sas_gplvm.build_sas`, so that a fit from ``seed`` starts at the
NumPyro fit's initial encoder weights and hyperparameters. Torch's generator, seeded by ``seed``, draws the batches,
the splits and Bayesian SAS's latents. Tensors are of torch's default dtype
(:func:`ppl_sparsegp.pyro.dtype.default_dtype`). The fit is evaluated by the NumPyro side's
:func:`~ppl_sparsegp.recipes.sas_gplvm.evaluate_sas` once its params carry NumPyro's names
(:func:`ppl_sparsegp.cli.pyro_backend.fit_sas`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ppl_sparsegp.models.pyro._base import twin_of

from .epochs import EpochFit
from .epochs_pyro import fit_by_epochs
from .phases import configure
from .sas_gplvm import SASConfig, build_sas, check_observations

Array = Any


def fit_sas(
    Y: Array,
    config: SASConfig | None = None,
    *,
    seed: int = 0,
    checkpoint: str | None = None,
    checkpoint_every: int = 1000,
    progress: bool | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> EpochFit:
    """Fit SAS-GP to the observations Y [N, D] by Adam for ``num_epochs`` epochs on the Pyro side (module docstring);
    arguments as :func:`ppl_sparsegp.recipes.sas_gplvm.fit_sas`'s (no ``callback``: the Pyro loop takes none).

    Returns:
        An :class:`~ppl_sparsegp.recipes.epochs.EpochFit` of the Pyro SASGPLVM, its params detached tensors (the
        encoder's weights as ``"encoder.<parameter>"``).

    Raises:
        ValueError: a setting out of range, or Y not [N, D] with N > ``num_active``, before any step.
        ppl_sparsegp.infer.checkpoint.CheckpointError: the checkpoint is another run's (or a NumPyro run's).
    """
    c = configure(SASConfig, config, overrides)
    Y = np.asarray(Y)
    check_observations(c, Y)
    model = twin_of(build_sas(c, Y, seed))
    return fit_by_epochs(
        model, (Y,), c, "sas", seed=seed, label="Bayesian SAS (Pyro)" if c.bayesian else "SAS (Pyro)",
        checkpoint=checkpoint, checkpoint_every=checkpoint_every, progress=progress, fingerprint=fingerprint,
    )  # fmt: skip
