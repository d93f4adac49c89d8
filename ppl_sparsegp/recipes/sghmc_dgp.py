"""SGHMC-DGP (Havasi et al. 2018; one layer: "SGHMC-GP"), the baseline of the BSGP paper (spec 001 §2.6, Table 6).

The model is BSGP's (:class:`models.numpyro.bsgp.BSGP`, or :class:`models.numpyro.deep_bsgp.DeepBSGP` for
``num_layers`` > 1, with BSGP's architecture: inner width D, fixed linear means) with Z and the kernel
hyperparameters θ of every layer made point estimates (``optimised=SGHMC_DGP_OPTIMISED``): they and the Gaussian
noise σ² are ``param`` sites without priors, and only the whitened inducing outputs v (``"u"``, ``"layer<ℓ>.u"``)
are sampled. Inference is Havasi et al.'s Monte-Carlo EM ("moving window
MCEM"), run by BSGP's engine (:class:`ppl_sparsegp.infer.sghmc.AdaptiveSGHMC` with
:class:`~ppl_sparsegp.infer.sghmc.PointEstimates`): during warmup, every ``updates_per_iteration`` scale-adapted
SGHMC updates of v (ε = 0.01, momentum decay 0.05), the state is pushed into a window of the last ``window`` states
and one Adam step (lr 0.01) is taken on (Z, θ, σ²) with the gradient of the minibatch potential

    U(v; Z, θ, σ²) = −(N/B) Σ_{n∈B} log E_{N(f_n; m_n, s_n)} p(y_n | f_n) + ½‖v‖²

at a window state drawn uniformly (Havasi's ``train_hypers``; the released code's objective is U/N, which Adam's
scale invariance makes the same step). After warmup (Z, θ, σ²) stay fixed and ``num_kept`` draws of v are kept
``thinning`` updates apart. With the learning rate 0 the point estimates stay at their start and the chain is
BSGP's sampler over v alone at that (Z, θ, σ²).

Defaults (:class:`SGHMCDGPConfig`): Havasi et al.'s released ``RegressionModel`` (``cambridge-mlg/sghmc_dgp``,
``models.py``): 10,000 iterations of one SGHMC update and one Adam step, 100 draws 50 updates apart, Adam 0.01,
ε = 0.01, α = 0.05, M = 100, Z from k-means, λ = √D, σ_k² = 0.1 (BSGP's start), σ² = var(y); with two settings
of the BSGP protocol instead of that file's: minibatch min(1000, N) (the file: 10,000) and a window of 64 states
(the file: 1; BSGP's code, which grew from Havasi's, keeps 64). The data term is ``log E[p]`` (Havasi's
``predict_density``), as BSGP's default.

The noise variance is a point estimate, and on small training sets Adam can drive it towards zero while the test
error stays put, which makes the predictive densities overconfident: on energy (heating, 614 training rows) every
fold ended at σ² ≈ 4e-7 (standardised) with test RMSE 0.53 and MNLL 5.01 on fold 0, against BSGP's 1.05
(benchmarks/README.md, "SGHMC-GP on energy, naval, power and protein"). Check the fitted ``likelihood.variance``
on small sets; BSGP samples σ² under its prior instead.

**Which sites are point estimates** (``optimised``, default :data:`SGHMC_DGP_OPTIMISED`): any non-empty subset of
Z and the kernel's two hyperparameters; the others are sampled with v under BSGP's priors (LogNormal on θ). The BSGP
paper's "inducing points optimised, hyperparameters inferred" variant (spec 001 §3.5, Fig. 1) is
``optimised=("Z",)``: θ and v sampled, Z by the MCEM steps. Run it with BSGP's schedule (``updates_per_iteration=21``,
``num_kept=256``, ``thinning=32``) to compare it with BSGP at equal gradient evaluations.

**Held point estimates** (``held``, default none): sites among ``optimised`` kept at their start while the others
(and σ²) take the MCEM steps. ``optimised=("Z",), held=("Z",)`` with ``Z`` from a variational fit is Hensman et al.
(2015b)'s MCMC for a sparse GP: Z optimised by SVGP first, then held while θ and v are sampled. On NAVAL (M = 100,
folds 0–2) that scores −8.56 against BSGP's −7.79, while moving Z by the MCEM steps scored −4.69 on fold 0
(benchmarks/README.md, "read as Hensman et al. (2015b)").

The draws carry BSGP's site names (``"Z"``, ``"kernel.*"``, ``"likelihood.variance"``, the point estimates among
them constant over the kept draws), so :class:`~ppl_sparsegp.recipes.bsgp.BSGPFit` predicts from them as from BSGP's.
The Pyro twin is :func:`ppl_sparsegp.recipes.sghmc_dgp_pyro.fit_sghmc_dgp` (the same config and plan).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import optax
from numpyro.infer import init_to_value

from ppl_sparsegp import validation
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.infer.sghmc import AdaptiveSGHMC, PointEstimates
from ppl_sparsegp.models.numpyro import bsgp as bsgp_models
from ppl_sparsegp.models.numpyro import deep_bsgp as deep_models
from ppl_sparsegp.models.numpyro.bsgp import LIKELIHOOD_TERMS
from ppl_sparsegp.validation import check_count, check_positive_float

from .bsgp import CHAIN_METHODS, BSGPConfig, BSGPFit, BSGPPlan, build_model, plan_bsgp, run_plan
from .phases import check_choice, configure

Array = Any

SGHMC_DGP_OPTIMISED = ("Z", "kernel.lengthscale", "kernel.variance")
"""The sites (of every layer) SGHMC-DGP point-estimates beside the likelihood's: Z and the RBF kernel's θ (the default
of :attr:`SGHMCDGPConfig.optimised`, and the sites it may name)."""


@dataclass(frozen=True)
class SGHMCDGPConfig:
    """The settings of :func:`fit_sghmc_dgp`, each default written here only (module docstring: where each is from).

    num_layers, num_inducing: L and M per layer (hidden width D, as BSGP's). likelihood_term: ``"log_expected"`` or
    ``"expected_log"`` (as BSGP's). noise_variance: the Gaussian noise's start (1.0 = var(y) of standardised y).
    num_iterations, updates_per_iteration: warmup of
    ``num_iterations`` × ``updates_per_iteration`` SGHMC updates with one Adam step after each iteration.
    num_kept, thinning: draws kept after warmup and the updates between them. learning_rate: Adam's (>= 0; 0 holds
    the point estimates at their start). window: the states the Adam step's state is drawn from. step_size, mdecay:
    ε and the momentum decay of :class:`AdaptiveSGHMC`. batch_size: minibatch (min(batch_size, N) are used).
    num_chains, warmup_chunk_size, chunk_size, chain_method: as :class:`~ppl_sparsegp.recipes.bsgp.BSGPConfig`'s.
    optimised: the sites of every layer that are point estimates (a non-empty subset of :data:`SGHMC_DGP_OPTIMISED`,
    stored in that order); the rest of them are sampled under BSGP's priors. ``("Z",)``: the BSGP paper's "Z
    optimised, θ and u sampled". held: sites among ``optimised`` (of every layer) that keep their start: Z as given,
    θ at the kernel's values (stored in the order of :data:`SGHMC_DGP_OPTIMISED`).
    """

    num_layers: int = 1
    num_inducing: int = 100
    likelihood_term: str = "log_expected"
    noise_variance: float = 1.0
    num_iterations: int = 10_000
    updates_per_iteration: int = 1
    num_kept: int = 100
    thinning: int = 50
    learning_rate: float = 0.01
    window: int = 64
    step_size: float = 0.01
    mdecay: float = 0.05
    batch_size: int = 1000
    num_chains: int = 1
    warmup_chunk_size: int | None = None
    chunk_size: int | None = None
    chain_method: str = "vectorized"
    optimised: tuple[str, ...] = SGHMC_DGP_OPTIMISED
    held: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        sites = self.optimised
        if (
            not isinstance(sites, tuple | list)
            or not sites
            or any(s not in SGHMC_DGP_OPTIMISED for s in sites)
            or len(set(sites)) != len(sites)
        ):
            raise ValueError(
                f"optimised: expected a non-empty list of distinct sites among {SGHMC_DGP_OPTIMISED}, got {sites!r}"
            )
        object.__setattr__(self, "optimised", tuple(s for s in SGHMC_DGP_OPTIMISED if s in sites))
        held = self.held
        if (
            not isinstance(held, tuple | list)
            or any(s not in self.optimised for s in held)
            or len(set(held)) != len(held)
        ):
            raise ValueError(f"held: expected a list of distinct sites among optimised {self.optimised}, got {held!r}")
        object.__setattr__(self, "held", tuple(s for s in SGHMC_DGP_OPTIMISED if s in held))
        check_choice("likelihood_term", self.likelihood_term, LIKELIHOOD_TERMS)
        check_choice("chain_method", self.chain_method, CHAIN_METHODS)
        validation.check_positive("noise_variance", self.noise_variance)
        check_count("num_iterations", self.num_iterations, 0)
        for name in (
            "num_layers",
            "num_inducing",
            "updates_per_iteration",
            "num_kept",
            "thinning",
            "window",
            "batch_size",
        ):
            check_count(name, getattr(self, name), 1)
        check_count("num_chains", self.num_chains, 1)
        for name in ("warmup_chunk_size", "chunk_size"):
            check_count(name, getattr(self, name), 1, optional=True)
        check_positive_float("step_size", self.step_size)
        check_positive_float("mdecay", self.mdecay)
        rate = self.learning_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not rate >= 0 or rate == float("inf"):
            raise ValueError(f"learning_rate: expected a finite number >= 0, got {rate!r}")

    @property
    def num_warmup(self) -> int:
        """SGHMC updates of the warmup (the MCEM phase)."""
        return self.num_iterations * self.updates_per_iteration


def plan_sghmc_dgp(
    X: Array,
    y: Array,
    config: SGHMCDGPConfig | None,
    overrides: Mapping[str, Any],
    *,
    likelihood: Likelihood | None,
    Z: Array | None,
) -> tuple[SGHMCDGPConfig, BSGPPlan]:
    """The settings with ``overrides`` and BSGP's plan for them (:func:`~ppl_sparsegp.recipes.bsgp.plan_bsgp`:
    checked inputs, likelihood, k-means Z, minibatch), its schedule SGHMC-DGP's and its fingerprint extended by the
    MCEM settings; shared by both twins.

    Raises:
        ValueError: a bad setting or input, before anything is built.
    """
    c = configure(SGHMCDGPConfig, config, dict(overrides))
    bsgp = BSGPConfig(
        num_layers=c.num_layers, num_inducing=c.num_inducing, likelihood_term=c.likelihood_term, noise="point",
        noise_variance=c.noise_variance, engine="sghmc", num_warmup=c.num_warmup, num_samples=c.thinning * c.num_kept,
        thinning=c.thinning, step_size=c.step_size, mdecay=c.mdecay, batch_size=c.batch_size, num_chains=c.num_chains,
        warmup_chunk_size=c.warmup_chunk_size, chunk_size=c.chunk_size, chain_method=c.chain_method,
    )  # fmt: skip
    p = plan_bsgp(X, y, bsgp, {}, likelihood=likelihood, Z=Z, z_prior_options=None)
    own = {
        "sghmc_dgp.optimised": list(c.optimised),
        "sghmc_dgp.held": list(c.held),
        "sghmc_dgp.learning_rate": c.learning_rate,
        "sghmc_dgp.window": c.window,
        "sghmc_dgp.updates_per_iteration": c.updates_per_iteration,
    }
    return c, p._replace(fingerprint={**p.fingerprint, **own})


def held_sites(config: SGHMCDGPConfig, sites: Sequence[str]) -> tuple[str, ...]:
    """The point-estimate ``sites`` of the model (``"Z"`` or ``"layer<ℓ>.Z"``, ...) that ``config.held`` names."""
    return tuple(s for s in sites if re.sub(r"^layer\d+\.", "", s) in config.held)


def fit_sghmc_dgp(
    X: Array,
    y: Array,
    config: SGHMCDGPConfig | None = None,
    *,
    key: Array,
    likelihood: Likelihood | None = None,
    Z: Array | None = None,
    checkpoint: str | None = None,
    progress: bool | None = None,
    callback: Callable[[BSGPFit], None] | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    devices: int | str | None = None,
    **overrides: Any,
) -> BSGPFit:
    """Sample v of SGHMC-GP (or SGHMC-DGP) with (Z, θ, σ²) optimised by moving-window MCEM (module docstring); with
    ``optimised`` a subset of (Z, θ), the rest of θ is sampled with v.

    Args:
        X [N, D], y [N] or [N, P]: standardised training data.
        config: the settings (:class:`SGHMCDGPConfig`); ``overrides``: fields of it, e.g. ``num_iterations=100``.
        key: JAX PRNG key.
        likelihood: default ``Gaussian(variance=config.noise_variance)``.
        Z: initial inducing inputs [M, D] (default: k-means on X).
        checkpoint, progress, callback, fingerprint, devices: as :func:`~ppl_sparsegp.recipes.bsgp.fit_bsgp`'s.

    Returns:
        A :class:`~ppl_sparsegp.recipes.bsgp.BSGPFit`: draws [C, S, ...] of ``"u"`` and, constant after warmup, of
        the point estimates ``"Z"``, ``"kernel.*"``, ``"likelihood.*"`` (``"layer<ℓ>."`` before each but the
        likelihood's with several layers).
    """
    c, p = plan_sghmc_dgp(X, y, config, overrides, likelihood=likelihood, Z=Z)
    model, initial = build_model(p, bsgp_models, deep_models, jnp.asarray, c.optimised)
    sites = model.point_estimate_sites()
    estimates = PointEstimates(
        sites, optimizer=optax.adam(c.learning_rate), every=c.updates_per_iteration, window=c.window,
        held=held_sites(c, sites),
    )  # fmt: skip
    kernel = AdaptiveSGHMC(
        model.model, step_size=c.step_size, mdecay=c.mdecay, num_data=p.X.shape[0],
        init_strategy=init_to_value(values=initial), point_estimates=estimates,
    )  # fmt: skip
    return run_plan(
        p, model, kernel, key=key, checkpoint=checkpoint, progress=progress, callback=callback,
        fingerprint=fingerprint, devices=devices,
    )  # fmt: skip
