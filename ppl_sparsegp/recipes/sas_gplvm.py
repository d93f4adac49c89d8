"""SAS-GP's recipe (Moreno-Muñoz, Feldager & Hauberg 2022, §4 and the released code's defaults; spec 004 §2): Adam
on the encoder, the kernel and the noise, a batch of B distinct rows per step split into A active and B − A held-out
rows, for a number of epochs of ``ceil(N / B)`` steps.

:func:`fit_sas` builds :class:`models.numpyro.sas_gplvm.SASGPLVM` from :class:`SASConfig` and fits it with
:func:`ppl_sparsegp.infer.svi.fit_svi` (``TraceMeanField_ELBO``: Bayesian SAS's latent KL in closed form).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ppl_sparsegp import metrics
from ppl_sparsegp.core.active_sets import WEIGHTS
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.models.numpyro.sas_gplvm import SASGPLVM
from ppl_sparsegp.numpyro.nn import ACTIVATIONS
from ppl_sparsegp.validation import check_count, check_positive_float

from .epochs import EpochFit, fit_by_epochs
from .phases import check_choice, configure

Array = Any


@dataclass(frozen=True)
class SASConfig:
    """The settings of :func:`fit_sas`, each default written here only.

    num_active: A; batch_size: B > A (the paper's 1024); latent_dim: Q (2 in every experiment of the paper);
    bayesian: Bayesian SAS (q(x | y), paper §3.1) rather than deterministic SAS; weight: the held-out sum's
    weight (:data:`ppl_sparsegp.core.active_sets.WEIGHTS`; ``"unbiased"`` (N − A)/(B − A)); hidden, activation: the
    encoder's (the paper's 512-256 ReLU); kernel_variance, lengthscale, noise_variance: the initial RBF-ARD
    variance and lengthscales over the Q latent dimensions and the Gaussian noise variance (the released code's 0.5
    each); learning_rate: Adam's (the paper's range is 1e-4 to 1e-2); num_epochs: epochs of ``ceil(N / B)`` steps.
    """

    num_active: int = 100
    batch_size: int = 1024
    latent_dim: int = 2
    bayesian: bool = False
    weight: str = "unbiased"
    hidden: tuple[int, ...] = (512, 256)
    activation: str = "relu"
    kernel_variance: float = 0.5
    lengthscale: float = 0.5
    noise_variance: float = 0.5
    learning_rate: float = 1e-3
    num_epochs: int = 100

    def __post_init__(self) -> None:
        check_count("num_active", self.num_active, 1)
        check_count("batch_size", self.batch_size, self.num_active + 1)
        check_count("latent_dim", self.latent_dim, 1)
        check_choice("weight", self.weight, WEIGHTS)
        for width in self.hidden:
            check_count("hidden", width, 1)
        check_choice("activation", self.activation, tuple(ACTIVATIONS))
        for name in ("kernel_variance", "lengthscale", "noise_variance", "learning_rate"):
            check_positive_float(name, getattr(self, name))
        check_count("num_epochs", self.num_epochs, 1)

    def steps_per_epoch(self, num_data: int) -> int:
        """``ceil(N / batch_size)``."""
        return math.ceil(num_data / self.batch_size)


def check_observations(config: SASConfig, Y: Array) -> None:
    """Y [N, D] with more rows than the active set (N > ``num_active``), checked before anything is built.

    Raises:
        ValueError: naming Y and the shape expected.
    """
    if Y.ndim != 2 or Y.shape[0] <= config.num_active:
        raise ValueError(f"Y: expected [N, D] with N > num_active = {config.num_active}, got {tuple(Y.shape)}")


def build_sas(config: SASConfig, Y: Array, seed: int = 0) -> SASGPLVM:
    """The model :func:`fit_sas` fits to Y [N, D] (N > A; its batch capped at N), weights and kernel in Y's dtype."""
    N, D = Y.shape
    dtype = np.dtype(Y.dtype)
    kernel = RBF(np.asarray(config.kernel_variance, dtype), np.full(config.latent_dim, config.lengthscale, dtype))
    return SASGPLVM(
        kernel, Gaussian(np.asarray(config.noise_variance, dtype)), data_dim=D, latent_dim=config.latent_dim,
        num_active=config.num_active, batch_size=min(config.batch_size, N), bayesian=config.bayesian,
        weight=config.weight, hidden=config.hidden, activation=config.activation, seed=seed,
    )  # fmt: skip


def fit_sas(
    Y: Array,
    config: SASConfig | None = None,
    *,
    seed: int = 0,
    checkpoint: str | None = None,
    checkpoint_every: int = 1000,
    progress: bool | None = None,
    callback: Callable[[int, np.ndarray, dict[str, Array]], bool | None] | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> EpochFit:
    """Fit SAS-GP to the observations Y [N, D] by Adam for ``num_epochs`` epochs (module docstring).

    Args:
        config: the settings (:class:`SASConfig`); ``overrides``: fields of it, e.g. ``num_active=200``.
        seed: the seed of the encoder's initial weights, of the batches and of the splits.
        checkpoint, checkpoint_every, progress, callback: those of :func:`ppl_sparsegp.infer.svi.fit_svi`; the
            checkpoint records ``fingerprint`` and the config, and is refused by a run that differs in either.

    Raises:
        ValueError: a setting out of range, or Y not [N, D] with N > ``num_active``, before anything compiles.
    """
    c = configure(SASConfig, config, overrides)
    Y = jnp.asarray(Y)
    check_observations(c, Y)
    model = build_sas(c, Y, seed)
    return fit_by_epochs(
        model, (Y,), c, "sas", seed=seed, label="Bayesian SAS" if c.bayesian else "SAS", checkpoint=checkpoint,
        checkpoint_every=checkpoint_every, progress=progress, callback=callback, fingerprint=fingerprint,
    )  # fmt: skip


def evaluate_sas(
    model: SASGPLVM,
    params: Mapping[str, Array],
    Y: Array,
    Y_test: Array,
    labels: Array | None = None,
    labels_test: Array | None = None,
    *,
    num_conditioning: int = 5000,
    chunk_size: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """The paper's test metrics (spec 004 §1.10 and §3.2): the rows of Y_test [S, D] encoded (Bayesian: the mean)
    and reconstructed by the decoder conditioned on ``num_conditioning`` encoded training rows of Y [N, D] drawn
    without replacement (``seed``; all N if fewer), ``chunk_size`` test rows at a time; RMSE, MAE and NLPD per
    entry (the mean of −log N(y | m, v) over rows and columns, no absolute value); with labels, the accuracy of
    the 1-nearest-neighbour classifier from the encoded training rows to the encoded test rows.
    """
    Y, Y_test = jnp.asarray(Y), jnp.asarray(Y_test)
    K = min(int(num_conditioning), Y.shape[0])
    conditioning = Y[jax.random.permutation(jax.random.PRNGKey(seed), Y.shape[0])[:K]]
    # params and data go in as arguments: closed over, XLA would fold the encoder through them as constants
    reconstruct = jax.jit(lambda p, rows, Yc: model.reconstruct(p, rows, Yc))
    parts = [
        reconstruct(params, Y_test[i : i + chunk_size], conditioning) for i in range(0, Y_test.shape[0], chunk_size)
    ]
    mean, var = (np.concatenate([np.asarray(p[k]) for p in parts]) for k in range(2))
    found = {"rmse": metrics.rmse(Y_test, mean), "mae": metrics.mae(Y_test, mean),
             "nlpd": metrics.nlpd_gaussian(Y_test, mean, var), "num_conditioning": K}  # fmt: skip
    if labels is not None and labels_test is not None:
        found["nearest_neighbour_accuracy"] = metrics.nearest_neighbour_accuracy(
            encode_rows(model, params, Y, chunk_size),
            labels,
            encode_rows(model, params, Y_test, chunk_size),
            labels_test,
        )
    return found


def encode_rows(model: SASGPLVM, params: Mapping[str, Array], Y: Array, chunk_size: int = 5000) -> np.ndarray:
    """The latents [N, Q] of the rows of Y [N, D] (:meth:`SASGPLVM.encode`), ``chunk_size`` rows per compiled call."""
    encode = jax.jit(model.encode)
    return np.concatenate([np.asarray(encode(params, Y[i : i + chunk_size])) for i in range(0, Y.shape[0], chunk_size)])
