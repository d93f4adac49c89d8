"""IDSGP's recipe (Jafrasteh et al. 2022, §5.2 with the authors' code's defaults; spec 002 §2): Adam on the network,
the kernel and the likelihood, in minibatches, for a number of epochs.

:func:`fit_idsgp` builds :class:`models.numpyro.idsgp.IDSGP` from :class:`IDSGPConfig` and fits it with
:func:`ppl_sparsegp.infer.svi.fit_svi`. An epoch is ``ceil(N / batch_size)`` steps; every step draws its batch
i.i.d. with replacement (the data plate), so an epoch sees N points on average, not each point once.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from ppl_sparsegp.core.kernels import Kernel, White, kernel_from_name
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.models.numpyro.idsgp import IDSGP
from ppl_sparsegp.numpyro.nn import ACTIVATIONS
from ppl_sparsegp.validation import check_count, check_positive_float, check_rate

from .epochs import EpochFit, fit_by_epochs
from .phases import check_choice, configure

Array = Any

DISCRETE_LATENT_WARNING = "Currently, SVI with .* loss does not support models with discrete latent variables"


@dataclass(frozen=True)
class IDSGPConfig:
    """The settings of :func:`fit_idsgp`, each default written here only (the authors' UCI setting).

    num_inducing: M per input; hidden: the network's hidden widths; activation: theirs (a name in
    :data:`ppl_sparsegp.numpyro.nn.ACTIVATIONS`); kernel: an ARD kernel by name
    (:func:`ppl_sparsegp.core.kernels.kernel_from_name`), lengthscales and variance starting at 1; white_variance:
    the initial variance of a learned white-noise term added to the kernel, which puts it on K(Z(x), Z(x)) and
    k(x, x) but not between them, as the authors' code does (it keeps the per-input Choleskys well conditioned
    while the network moves Z; it also adds to the latent variance), or None for none; white_floor: a fixed white
    variance added beside the learned one (the authors' code adds 1e-3: the learned term can then not fall to
    zero), or None for none; learning_rate: Adam's;
    batch_size: B; num_epochs: epochs of ``ceil(N / B)`` steps; dropout: the rate in [0, 1) of dropout on the
    network's outputs in training steps (:class:`~ppl_sparsegp.models.numpyro.idsgp.IDSGP`; off when predicting).
    The authors' UCI launchers set 0.5, but the paper never mentions dropout and their loss calls the network without
    a training flag, so whether it was active is unclear (spec 002 §1.5, pitfall 5): the default is 0, the paper's
    method as written; 0.5 is the launchers' setting.
    """

    num_inducing: int = 50
    hidden: tuple[int, ...] = (50,)
    activation: str = "sigmoid"
    kernel: str = "matern32"
    white_variance: float | None = 1.0
    white_floor: float | None = None
    learning_rate: float = 0.01
    batch_size: int = 100
    num_epochs: int = 100
    dropout: float = 0.0

    def __post_init__(self) -> None:
        check_count("num_inducing", self.num_inducing, 1)
        for width in self.hidden:
            check_count("hidden", width, 1)
        check_choice("activation", self.activation, tuple(ACTIVATIONS))
        kernel_from_name(self.kernel, 1)  # an unknown name is refused here, by name
        for name in ("white_variance", "white_floor"):
            if getattr(self, name) is not None:
                check_positive_float(name, getattr(self, name))
        check_positive_float("learning_rate", self.learning_rate)
        check_count("batch_size", self.batch_size, 1)
        check_count("num_epochs", self.num_epochs, 1)
        check_rate("dropout", self.dropout)

    def steps_per_epoch(self, num_data: int) -> int:
        """``ceil(N / batch_size)``."""
        return math.ceil(num_data / self.batch_size)


def idsgp_kernel(config: IDSGPConfig, input_dim: int, dtype: Any = np.float64) -> Kernel:
    """The initial kernel of ``config``: ``kernel`` over D inputs (ARD), plus the learned white term and the fixed
    floor where it has them (in that order, so the floor's site is the last part's ``variance``)."""
    kernel = kernel_from_name(config.kernel, input_dim, dtype=dtype)
    for variance in (config.white_variance, config.white_floor):
        if variance is not None:
            kernel = kernel + White(np.asarray(variance, dtype))
    return kernel


def _floor_site(kernel: Kernel) -> str:
    """The site of the last part's variance: ``"kernel.k<i>.variance"``."""
    return f"kernel.{[name for name in kernel.parameters() if name.endswith('.variance')][-1]}"


def build_idsgp(config: IDSGPConfig, X: Array, likelihood: Likelihood, seed: int = 0,
                kernel: Kernel | None = None) -> IDSGP:  # fmt: skip
    """The IDSGP model that :func:`fit_idsgp` fits to X [N, D] (its batch size capped at N: full batch), with
    ``kernel`` or :func:`idsgp_kernel`; with ``white_floor`` set, the last part's variance is held fixed."""
    N, D = X.shape
    kernel = idsgp_kernel(config, D, X.dtype) if kernel is None else kernel
    return IDSGP(
        kernel, likelihood, input_dim=D, num_inducing=config.num_inducing, hidden=config.hidden,
        activation=config.activation, seed=seed, batch_size=config.batch_size if config.batch_size < N else None,
        dropout=config.dropout,
        fixed=(_floor_site(kernel),) if config.white_floor is not None else (),
    )  # fmt: skip


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
    callback: Callable[[int, np.ndarray, dict[str, Array]], bool | None] | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> EpochFit:
    """Fit IDSGP to X [N, D], y [N] by Adam for ``num_epochs`` epochs (module docstring).

    Args:
        config: the settings (:class:`IDSGPConfig`); ``overrides``: fields of it, e.g. ``num_epochs=10``.
        likelihood: p(y | f) with its initial values (Gaussian, probit or logit Bernoulli, ...).
        seed: the seed of the network's initial weights and of the batches.
        kernel: the initial kernel (default :func:`idsgp_kernel` of the config at X's dtype).
        checkpoint, checkpoint_every, progress, callback: those of :func:`ppl_sparsegp.infer.svi.fit_svi`; the
            checkpoint records ``fingerprint`` and the config, and is refused by a run that differs in either.
    """
    c = configure(IDSGPConfig, config, overrides)
    X, y = jnp.asarray(X), jnp.asarray(y)
    model = build_idsgp(c, X, likelihood, seed, kernel)
    with warnings.catch_warnings():
        # NumPyro's SVI warns of any discrete latent site; the dropout mask is one whose distribution has no
        # parameters, for which the gradient given the draw is the objective's (models.numpyro.idsgp's docstring)
        warnings.filterwarnings("ignore", DISCRETE_LATENT_WARNING, UserWarning)
        return fit_by_epochs(
            model, (X, y), c, "idsgp", seed=seed, label="IDSGP", checkpoint=checkpoint,
            checkpoint_every=checkpoint_every, progress=progress, callback=callback, fingerprint=fingerprint,
            train=True,
        )  # fmt: skip
