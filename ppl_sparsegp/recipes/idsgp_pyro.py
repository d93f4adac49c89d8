"""IDSGP's recipe (Jafrasteh et al. 2022, §5.2; spec 002 §2) on the Pyro twin and engine, the twin of
:func:`ppl_sparsegp.recipes.idsgp.fit_idsgp` with the same settings (:class:`~ppl_sparsegp.recipes.idsgp.IDSGPConfig`):
Adam on the network, the kernel and the likelihood, in minibatches drawn i.i.d. with replacement, for ``num_epochs``
epochs of ``ceil(N / batch_size)`` steps (:func:`ppl_sparsegp.recipes.epochs_pyro.fit_by_epochs`).

The model is :class:`models.pyro.idsgp.IDSGP`, the twin (:func:`ppl_sparsegp.models.pyro._base.twin_of`) of the
NumPyro recipe's :func:`~ppl_sparsegp.recipes.idsgp.build_idsgp`, so that a fit from ``seed`` starts at the NumPyro
fit's initial network weights and hyperparameters: full-batch, the two take the same steps. Torch's generator,
seeded by ``seed``, draws the batches. Tensors are of torch's default dtype
(:func:`ppl_sparsegp.pyro.dtype.default_dtype`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.models.pyro._base import twin_of

from .epochs import EpochFit
from .epochs_pyro import fit_by_epochs
from .idsgp import IDSGPConfig, build_idsgp
from .phases import configure

Array = Any


def fit_idsgp(
    X: Array,
    y: Array,
    config: IDSGPConfig | None = None,
    *,
    likelihood: Likelihood,
    seed: int = 0,
    kernel: Kernel | None = None,
    checkpoint: str | None = None,
    checkpoint_every: int = 1000,
    progress: bool | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> EpochFit:
    """Fit IDSGP to X [N, D], y [N] by Adam for ``num_epochs`` epochs on the Pyro side (module docstring); arguments
    as :func:`ppl_sparsegp.recipes.idsgp.fit_idsgp`'s (no ``callback``: the Pyro loop takes none).

    Returns:
        An :class:`~ppl_sparsegp.recipes.epochs.EpochFit` of the Pyro IDSGP, its params detached tensors (the
        network's weights as ``"network.<parameter>"``).

    Raises:
        ValueError: a bad setting, or X, y the model does not take, before any step.
        ppl_sparsegp.infer.checkpoint.CheckpointError: the checkpoint is another run's (or a NumPyro run's).
    """
    c = configure(IDSGPConfig, config, overrides)
    X, y = np.asarray(X), np.asarray(y)
    model = twin_of(build_idsgp(c, X, likelihood, seed, kernel))
    return fit_by_epochs(
        model, (X, y), c, "idsgp", seed=seed, label="IDSGP (Pyro)", checkpoint=checkpoint,
        checkpoint_every=checkpoint_every, progress=progress, fingerprint=fingerprint, train=True,
    )  # fmt: skip
