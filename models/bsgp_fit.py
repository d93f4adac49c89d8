"""BSGP in one call: k-means Z, the shallow or deep model, and the released sampler schedule (spec 001 §2).

:func:`fit_bsgp` builds :class:`models.bsgp.BSGP` (one layer) or :class:`models.deep_bsgp.DeepBSGP`, then runs

* ``engine="sghmc"`` (default): :class:`ppl_sparsegp.infer.sghmc.AdaptiveSGHMC` with the released settings of
  :func:`ppl_sparsegp.infer.sghmc.bsgp_schedule` (ε = 0.01, momentum decay 0.05, 21 updates per iteration of
  warmup with scale adaptation, thinning 32, minibatch min(1000, N)); the Gaussian noise is optimised alongside
  the chain by Adam (lr 0.01) on states drawn from a window of the last 64 iterations (``noise="point"``) or
  sampled (``noise="sampled"``);
* ``engine="nuts"``: NUTS on the same shallow model with full-data gradients (small data), every site sampled.

Predictions (:meth:`BSGPFit.log_predictive_density`, :meth:`BSGPFit.predict`) are mixtures over the kept draws
with K_zz recomputed for every draw (spec §2.5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import NUTS, init_to_value
from numpyro.infer.mcmc import MCMCKernel

from ppl_sparsegp import validation
from ppl_sparsegp.core.likelihoods import Gaussian, Likelihood
from ppl_sparsegp.data import Standardizer
from ppl_sparsegp.inducing.initialise import kmeans
from ppl_sparsegp.infer.checkpoint import tree_sha256
from ppl_sparsegp.infer.mcmc import MCMCResult, run_mcmc
from ppl_sparsegp.infer.sghmc import AdaptiveSGHMC, PointEstimates, bsgp_schedule
from ppl_sparsegp.posterior.predict import PosteriorPredictive, log_predictive_density, posterior_predictive

from ._base import part_fingerprint
from .bsgp import BSGP, bsgp_kernel, bsgp_priors, check_likelihood_term, check_z_prior, noise_prior
from .deep_bsgp import DeepBSGP, deep_bsgp

Array = Any

BSGP_ENGINES = ("sghmc", "nuts")
NOISE_MODES = ("point", "sampled")


@dataclass
class BSGPFit:
    """What :func:`fit_bsgp` returns (and its ``callback`` receives during the run): the model, the MCMC kernel
    and the run so far (draws in ``mcmc.samples``, [C, S, ...])."""

    model: BSGP | DeepBSGP
    kernel: MCMCKernel
    mcmc: MCMCResult

    def window_draws(self, X: Array, y: Array) -> dict[str, np.ndarray]:
        """The SGHMC window (the last 64 iteration states, one chain) as constrained draws: site -> [W, ...].

        These are the states the noise estimate is drawn from; their mixture gives an anytime predictive during
        warmup. X, y: the training data the model was run on. The point estimates are at their current values.
        """
        state = self.mcmc.last_state
        point = getattr(state, "point_state", None)
        if point is None or jnp.ndim(point.filled) > 0:
            raise ValueError("window_draws: needs a single-chain SGHMC run with a point-estimated noise")
        count = int(min(int(point.filled), self.kernel.point_estimates.window))
        if count == 0:
            raise ValueError("window_draws: the window is empty (no warmup iteration has finished)")
        draws = {k: v[:count] for k, v in point.window.items()}
        draws.update({k: jnp.broadcast_to(v, (count, *jnp.shape(v))) for k, v in state.z.items() if k not in draws})
        constrain = jax.jit(jax.vmap(self.kernel.postprocess_fn((jnp.asarray(X), jnp.asarray(y)), {})))
        return {k: np.asarray(v) for k, v in constrain(draws).items()}

    def log_predictive_density(
        self,
        X_new: Array,
        y_new: Array,
        *,
        samples: dict[str, Array] | None = None,
        standardizer: Standardizer | None = None,
        key: Array | None = None,
    ) -> np.ndarray:
        """log p(y_new | D) per test point (and output) of the mixture over the kept draws (or ``samples``,
        site -> [S, ...]): [S_new] or [S_new, P]."""
        samples = self.mcmc.flat_samples() if samples is None else samples
        key = self._key(key)
        return log_predictive_density(self.model, samples, X_new, y_new, standardizer=standardizer, key=key)

    def predict(
        self, X_new: Array, *, standardizer: Standardizer | None = None, key: Array | None = None
    ) -> PosteriorPredictive:
        """Mean and variance of the mixture predictive of f and y at X_new [S, D]."""
        key = self._key(key)
        return posterior_predictive(self.model, self.mcmc.flat_samples(), X_new, standardizer=standardizer, key=key)

    def _key(self, key: Array | None) -> Array | None:
        if isinstance(self.model, DeepBSGP):
            return jax.random.PRNGKey(0) if key is None else key
        return None


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")


def fit_bsgp(
    X: Array,
    y: Array,
    *,
    key: Array,
    likelihood: Likelihood | None = None,
    num_layers: int = 1,
    num_inducing: int = 100,
    Z: Array | None = None,
    z_prior: str = "normal",
    z_prior_options: dict[str, Any] | None = None,
    likelihood_term: str = "log_expected",
    noise: str = "point",
    engine: str = "sghmc",
    num_iterations: int = 10_000,
    num_kept: int = 256,
    num_warmup: int | None = None,
    num_samples: int | None = None,
    thinning: int | None = None,
    step_size: float = 0.01,
    mdecay: float = 0.05,
    target_accept_prob: float = 0.9,
    batch_size: int = 1000,
    num_chains: int = 1,
    warmup_chunk_size: int | None = None,
    chunk_size: int | None = None,
    checkpoint: str | None = None,
    progress: bool = False,
    callback: Callable[[BSGPFit], None] | None = None,
    fingerprint: Mapping[str, Any] | None = None,
) -> BSGPFit:
    """Sample BSGP (``num_layers`` = 1) or deep BSGP with the paper's settings.

    Args:
        X [N, D], y [N] or [N, P]: standardised training data (the Normal Z prior assumes standardised X).
        key: JAX PRNG key.
        likelihood: default ``Gaussian(variance=1.0)`` (= var(y) of standardised y, spec §2.4); Bernoulli for
            classification.
        num_layers, num_inducing: L and M per layer (paper: M = 100; hidden width = D).
        Z: initial inducing inputs [M, D] (default: k-means on X).
        z_prior, z_prior_options: the prior over every layer's Z (``"normal"``, ``"dpp"``, ``"strauss"``,
            ``"uniform"``) and its options.
        likelihood_term: ``"log_expected"`` (Table 6) or ``"expected_log"`` (Eq. 6).
        noise: ``"point"`` (optimised alongside the chain, SGHMC only) or ``"sampled"`` (LogNormal(0, 1) prior).
        engine: ``"sghmc"`` or ``"nuts"`` (shallow model only: the deep model's potential is stochastic).
        num_iterations, num_kept: SGHMC warmup of 21 × ``num_iterations`` updates and ``num_kept`` draws 32
            updates apart; ``num_warmup``, ``num_samples``, ``thinning`` override them (NUTS: 500, 500, 1).
        step_size, mdecay: ε and the momentum decay of :class:`AdaptiveSGHMC`.
        target_accept_prob: NUTS's step-size adaptation target. Above NumPyro's 0.8 because sampled inducing inputs
            make the curvature uneven: on a 40-point, M = 4 problem (150 + 150 steps, 8 seeds) 0.8 gave 6.2% divergent
            transitions on average (up to 11%) and 0.9 gave 2.9% (up to 6%), for 1.3x the gradient evaluations.
        batch_size: minibatch size of the SGHMC gradients (min(batch_size, N) are used).
        num_chains, warmup_chunk_size, chunk_size, checkpoint, progress: see :func:`run_mcmc`.
        callback: called with the :class:`BSGPFit` so far after every warmup piece and sampling chunk.
        fingerprint: the caller's settings, recorded in the checkpoint beside this function's own (model, Z, prior,
            likelihood, sampler settings) and ``run_mcmc``'s; a checkpoint that differs in any of them is refused.
    """
    _check_choice("engine", engine, BSGP_ENGINES)
    _check_choice("noise", noise, NOISE_MODES)
    check_likelihood_term(likelihood_term)
    target_accept_prob = validation.check_open_unit_interval("target_accept_prob", target_accept_prob)
    X, y = np.asarray(X), np.asarray(y)
    validation.check_inputs(X, y)
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers: expected a positive integer, got {num_layers!r}")
    if engine == "nuts" and num_layers > 1:
        raise ValueError("engine: NUTS needs a deterministic potential; deep BSGP's is stochastic, use 'sghmc'")
    likelihood = Gaussian(variance=1.0) if likelihood is None else likelihood
    has_noise = bool(likelihood.parameters())
    if engine == "nuts" and has_noise and noise == "point":
        raise ValueError("noise: NUTS samples every site; use noise='sampled' (or engine='sghmc' for 'point')")
    N, D = X.shape
    Z = kmeans(X, num_inducing) if Z is None else np.asarray(Z, dtype=X.dtype)
    check_z_prior(z_prior, Z.shape[0], D)
    P = 1 if y.ndim == 1 else y.shape[1]
    batch = None if engine == "nuts" else min(batch_size, N)
    noise_priors = {f"likelihood.{k}": noise_prior() for k in likelihood.parameters()} if noise == "sampled" else {}
    common = dict(
        z_prior=z_prior, z_prior_options=dict(z_prior_options or {}), likelihood_term=likelihood_term, batch_size=batch
    )
    if num_layers == 1:
        kernel = bsgp_kernel(D)
        priors = {**bsgp_priors(kernel), **noise_priors}
        model: BSGP | DeepBSGP = BSGP(kernel=kernel, likelihood=likelihood, Z=Z, num_latent=P, priors=priors, **common)
    else:
        model = deep_bsgp(X, P, likelihood, num_layers=num_layers, Z=Z, likelihood_priors=noise_priors, **common)
    initial = model.initial_values()
    initial.update(
        {site: jnp.asarray(likelihood.parameters()[site.removeprefix("likelihood.")]) for site in noise_priors}
    )
    init_strategy = init_to_value(values=initial)

    if engine == "nuts":
        kernel = NUTS(model.model, init_strategy=init_strategy, max_tree_depth=8, target_accept_prob=target_accept_prob)
        warmup, samples, thin = num_warmup or 500, num_samples or 500, thinning or 1
        chain_method = "vectorized"
    else:
        schedule = bsgp_schedule(num_iterations, num_kept)
        sites = model.point_estimate_sites()
        kernel = AdaptiveSGHMC(
            model.model,
            step_size=step_size,
            mdecay=mdecay,
            num_data=N,
            init_strategy=init_strategy,
            point_estimates=PointEstimates(sites) if sites else None,
        )
        warmup = schedule.num_warmup if num_warmup is None else num_warmup
        samples = schedule.num_samples if num_samples is None else num_samples
        thin = schedule.thinning if thinning is None else thinning
        # a point-estimate update is a lax.cond, which vmapped chains would evaluate at every step
        chain_method = "sequential" if sites and num_chains > 1 else "vectorized"
    own = {
        "bsgp.num_layers": num_layers,
        "bsgp.Z_sha256": tree_sha256(Z),
        "bsgp.z_prior": z_prior,
        "bsgp.z_prior_options": dict(z_prior_options or {}),
        "bsgp.likelihood_term": likelihood_term,
        "bsgp.noise": noise,
        "bsgp.likelihood": part_fingerprint(likelihood),
        "bsgp.engine": engine,
        "bsgp.step_size": step_size,
        "bsgp.mdecay": mdecay,
        "bsgp.target_accept_prob": target_accept_prob,
        "bsgp.batch_size": batch,
    }
    mcmc = run_mcmc(
        kernel,
        jnp.asarray(X),
        jnp.asarray(y),
        num_warmup=warmup,
        num_samples=samples,
        thinning=thin,
        key=key,
        num_chains=num_chains,
        chain_method=chain_method,
        warmup_chunk_size=warmup_chunk_size,
        chunk_size=chunk_size,
        checkpoint=checkpoint,
        progress=progress,
        callback=None if callback is None else lambda result: callback(BSGPFit(model, kernel, result)),
        fingerprint={**own, **dict(fingerprint or {})},
        validate=model.check_data,
    )
    return BSGPFit(model=model, kernel=kernel, mcmc=mcmc)
