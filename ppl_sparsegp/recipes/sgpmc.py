"""SGPMC's recipe (thesis §5.5): a Gaussian fit (SVGP, MAP for θ), then MCMC on the free-form q*(v, θ), Z fixed.

:func:`fit_sgpmc` fits :class:`models.numpyro.svgp.SVGP` with the same priors by Adam (Z held at its initial value for
the first steps, then free), fixes Z, starts θ at its point estimate and v at a draw of q(v), and runs NUTS (or another
engine of :func:`ppl_sparsegp.infer.mcmc.kernel_from_name`) on :class:`models.numpyro.sgpmc.SGPMC`. Its settings and
their defaults are :class:`SGPMCConfig`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import optax

from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.infer.checkpoint import key_data, tree_sha256
from ppl_sparsegp.infer.mcmc import ENGINES, MCMCResult, init_from_svi, kernel_from_name, run_mcmc
from ppl_sparsegp.infer.svi import SVIResult, fit_svi
from ppl_sparsegp.models.numpyro._base import part_fingerprint
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.validation import check_count, check_positive_float

from .phases import check_choice, configure

Array = Any


@dataclass(frozen=True)
class SGPMCConfig:
    """The settings of :func:`fit_sgpmc`, each default written here only.

    svi_steps: Adam steps of the Gaussian fit in all (0 runs none); fixed_z_steps: the first of them, with Z held
    at its initial value (at most ``svi_steps``); learning_rate: Adam's; batch_size: minibatch of the SVI fit and of
    the SG-MCMC engines (None: full batch); engine: ``"nuts"``, ``"hmc"``, ``"sghmc"`` or ``"sgld"``; num_warmup,
    num_samples, num_chains, thinning, chain_method, chunk_size: see :func:`ppl_sparsegp.infer.mcmc.run_mcmc`.
    """

    svi_steps: int = 2000
    fixed_z_steps: int = 200
    learning_rate: float = 0.01
    batch_size: int | None = None
    engine: str = "nuts"
    num_warmup: int = 500
    num_samples: int = 1000
    num_chains: int = 1
    thinning: int = 1
    chain_method: str = "vectorized"
    chunk_size: int | None = None

    def __post_init__(self) -> None:
        check_count("svi_steps", self.svi_steps, 0)
        check_count("fixed_z_steps", self.fixed_z_steps, 0)
        if self.fixed_z_steps > self.svi_steps:
            raise ValueError(
                f"fixed_z_steps: expected an integer in [0, svi_steps={self.svi_steps}], got {self.fixed_z_steps!r}"
            )
        check_positive_float("learning_rate", self.learning_rate)
        check_count("batch_size", self.batch_size, 1, optional=True)
        check_choice("engine", self.engine, ENGINES)
        check_count("num_warmup", self.num_warmup, 0)
        for name in ("num_samples", "num_chains", "thinning"):
            check_count(name, getattr(self, name), 1)
        check_count("chunk_size", self.chunk_size, 1, optional=True)

    def svi_phases(self) -> list[tuple[int, bool, int]]:
        """The SVI phases that take steps, as (phase, learn_Z, steps): Z fixed for ``fixed_z_steps``, then free."""
        phases = ((0, False, self.fixed_z_steps), (1, True, self.svi_steps - self.fixed_z_steps))
        return [phase for phase in phases if phase[2] > 0]

    def kernel_options(self, num_data: int, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The MCMC kernel's options: the recipe's own (NUTS's tree depth 8, adaptive SGHMC's N) under ``given``."""
        own = {"nuts": {"max_tree_depth": 8}, "sghmc": {"num_data": int(num_data)}}.get(self.engine, {})
        return {**own, **dict(given or {})}

    def fingerprint(self, num_latent: int, engine_options: Mapping[str, Any] | None, Z: Array, kernel: Kernel,
                    likelihood: Likelihood) -> dict[str, Any]:  # fmt: skip
        """The recipe's settings a checkpoint records (both engines; each adds its priors and randomness)."""
        return {
            "sgpmc.svi_steps": int(self.svi_steps),
            "sgpmc.fixed_z_steps": self.fixed_z_steps,
            "sgpmc.learning_rate": self.learning_rate,
            "sgpmc.batch_size": self.batch_size,
            "sgpmc.num_latent": num_latent,
            "sgpmc.engine": self.engine,
            "sgpmc.engine_options": dict(engine_options or {}),
            "sgpmc.Z_sha256": tree_sha256(np.asarray(Z)),
            "sgpmc.kernel": part_fingerprint(kernel),
            "sgpmc.likelihood": part_fingerprint(likelihood),
        }


def _prior_fingerprint(prior: dist.Distribution) -> str:
    """A prior for a checkpoint's fingerprint: its class chain, shapes and parameter values (a sha256), e.g.
    ``"Independent/ExpandedDistribution/Gamma [3] 1a2b..."``. Not the pytree structure, whose auxiliary data NumPyro
    orders differently from one process to the next."""
    names, base = [], prior
    while base is not None:
        names.append(type(base).__name__)
        inner = getattr(base, "base_dist", None)
        if inner is None:
            break
        base = inner
    values = {name: np.asarray(getattr(base, name)) for name in sorted(base.arg_constraints) if hasattr(base, name)}
    shape = [*prior.batch_shape, *prior.event_shape]
    return f"{'/'.join(names)} {shape} {tree_sha256(values)[:16]}"


@dataclass
class SGPMCFit:
    """What :func:`fit_sgpmc` returns: the Gaussian fit, the SGPMC model built from it, and the MCMC run.

    ``svi`` is the result of the last SVI phase, or None when ``svi_steps=0`` (the chains then start at the initial
    values of the kernel, the likelihood and q(v) = N(0, I) draws).
    """

    svgp: SVGP
    svi: SVIResult | None
    model: SGPMC
    mcmc: MCMCResult


def fit_sgpmc(
    X: Array,
    y: Array,
    config: SGPMCConfig | None = None,
    *,
    kernel: Kernel,
    likelihood: Likelihood,
    Z: Array,
    key: Array,
    priors: Mapping[str, dist.Distribution] | None = None,
    num_latent: int = 1,
    engine_options: Mapping[str, Any] | None = None,
    checkpoint: str | None = None,
    progress: bool | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> SGPMCFit:
    """The thesis recipe (§5.5): Gaussian fit, then NUTS on the free-form q*(v, θ) with Z fixed.

    1. SVGP with the same priors (MAP for θ) by Adam: ``fixed_z_steps`` steps with Z held at its initial value
       (e.g. k-means), then ``svi_steps - fixed_z_steps`` with Z free.
    2. Z fixed at the fit; sites without a prior fixed at their point estimates; θ starts at its MAP and v at a
       draw of q(v) (one per chain).
    3. NUTS (in place of the thesis' Bayesian-optimisation-tuned HMC; NUTS adapts step size and path length),
       or another ``engine`` of :func:`ppl_sparsegp.infer.mcmc.kernel_from_name` ("hmc", "sghmc", "sgld"; the
       SG-MCMC engines take minibatch gradients when ``batch_size`` is set).

    Args:
        X [N, D], y [N] or [N, P]: training data. kernel, likelihood: their initial values.
        config: the settings (:class:`SGPMCConfig`); ``overrides``: fields of it, e.g. ``num_samples=200``.
        Z: initial inducing inputs [M, D]. priors: default :func:`default_priors` (Gamma) on every site.
        key: JAX PRNG key. num_latent: P. engine_options: passed to the kernel (NUTS default: ``max_tree_depth=8``).
        checkpoint: the MCMC checkpoint (see :func:`run_mcmc`); the SVI fit is not checkpointed, it is repeated
            (deterministically) by a resumed call.
        fingerprint: the caller's settings, recorded in the checkpoint beside this function's own (the SVI
            settings, Z, the initial kernel and likelihood, the priors, the engine and its options) and
            ``run_mcmc``'s; a checkpoint that differs in any of them is refused.
    """
    c = configure(SGPMCConfig, config, overrides)
    priors = default_priors(kernel, likelihood) if priors is None else dict(priors)
    X, y = jnp.asarray(X), jnp.asarray(y)
    common = dict(kernel=kernel, likelihood=likelihood, priors=priors, num_latent=num_latent, batch_size=c.batch_size)
    svgp = SVGP(Z=Z, learn_Z=c.fixed_z_steps == 0, **common)
    fixed = [site for site in svgp.hyperparameter_sites() if site not in priors]
    model = SGPMC(Z=Z, fixed=fixed, **{**common, "batch_size": None})  # checks priors and Z before any fit
    model.check_data(X, y)
    svi_key, init_key, mcmc_key = jax.random.split(key, 3)
    own = {
        **c.fingerprint(num_latent, engine_options, Z, kernel, likelihood),
        "sgpmc.priors": {site: _prior_fingerprint(prior) for site, prior in sorted(priors.items())},
        "sgpmc.key": key_data(key),
    }
    params: dict[str, Array] = {}
    svi = None
    for phase, learn_Z, steps in c.svi_phases():
        svgp = SVGP(Z=params.get("Z", Z), learn_Z=learn_Z, **common)
        svi = fit_svi(
            svgp.model,
            svgp.guide,
            X,
            y,
            optimizer=optax.adam(c.learning_rate),
            num_steps=steps,
            key=jax.random.fold_in(svi_key, phase),
            init_params={k: v for k, v in params.items() if k != "Z"} or None,
            progress=progress,
            label="SVI, Z learned" if learn_Z else "SVI, Z fixed",
            validate=svgp.check_data,
        )
        params.update(svi.params)
    fitted_kernel, fitted_likelihood = svgp.fitted(params)
    model = SGPMC(
        kernel=fitted_kernel,
        likelihood=fitted_likelihood,
        priors=priors,
        fixed=fixed,
        Z=params.get("Z", Z),
        num_latent=num_latent,
        batch_size=c.batch_size if c.engine in ("sghmc", "sgld") else None,
    )
    init = init_from_svi(model.model, svgp.guide, params, X, y, key=init_key, num_chains=c.num_chains)
    mcmc_kernel = kernel_from_name(c.engine, model.model, **c.kernel_options(X.shape[0], engine_options))
    mcmc = run_mcmc(
        mcmc_kernel,
        X,
        y,
        num_warmup=c.num_warmup,
        num_samples=c.num_samples,
        num_chains=c.num_chains,
        thinning=c.thinning,
        chain_method=c.chain_method,
        key=mcmc_key,
        init_params=init,
        chunk_size=c.chunk_size,
        checkpoint=checkpoint,
        progress=progress,
        fingerprint={**own, **dict(fingerprint or {})},
        validate=model.check_data,
    )
    return SGPMCFit(svgp=svgp, svi=svi, model=model, mcmc=mcmc)
