"""BSGP's recipe (spec 001 §2) on the Pyro twins and engines, the twin of :func:`ppl_sparsegp.recipes.bsgp.fit_bsgp`
with the same settings (:class:`~ppl_sparsegp.recipes.bsgp.BSGPConfig`), the same plan
(:func:`~ppl_sparsegp.recipes.bsgp.plan_bsgp`: k-means Z, the released schedule of
:func:`~ppl_sparsegp.recipes.bsgp.bsgp_schedule`, the checkpoint fingerprint) and the same start
(:func:`~ppl_sparsegp.recipes.bsgp.build_model`), run by :func:`ppl_sparsegp.pyro.mcmc.run_mcmc` on

* ``engine="sghmc"``: :class:`ppl_sparsegp.pyro.sgmcmc.AdaptiveSGHMC` over :class:`models.pyro.bsgp.BSGP` (one
  layer) or :class:`models.pyro.deep_bsgp.DeepBSGP`, with the Gaussian noise a point estimate
  (:class:`~ppl_sparsegp.pyro.sgmcmc.PointEstimates`, Adam lr 0.01 on a window of 64 states, as the NumPyro
  kernel's) or sampled;
* ``engine="nuts"``: Pyro's ``NUTS`` on the shallow model with full-data gradients, every site sampled.

The draws carry the NumPyro model's site names, so the NumPyro twin of the model (built from the same plan)
evaluates them: the returned :class:`~ppl_sparsegp.recipes.bsgp.BSGPFit` holds it as ``model`` (its mixture
predictive, InferenceData), the Pyro kernel that drew them as ``kernel``. Randomness is torch's, seeded by ``seed``;
the model's ``pyro.param`` sites (the point-estimated noise) live in a param store of their own during the run, so
a run does not depend on the global store's contents.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyro
import pyro.infer
from pyro.infer.autoguide.initialization import init_to_value

from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.models.numpyro import bsgp as numpyro_bsgp
from ppl_sparsegp.models.numpyro import deep_bsgp as numpyro_deep_bsgp
from ppl_sparsegp.models.pyro import bsgp as pyro_bsgp
from ppl_sparsegp.models.pyro import deep_bsgp as pyro_deep_bsgp
from ppl_sparsegp.pyro.dtype import as_tensor
from ppl_sparsegp.pyro.mcmc import run_mcmc
from ppl_sparsegp.pyro.sgmcmc import AdaptiveSGHMC, PointEstimates
from ppl_sparsegp.pyro.z_priors import Z_PRIORS

from .bsgp import BSGPConfig, BSGPFit, BSGPPlan, build_model, plan_bsgp

Array = Any


def fit_bsgp(
    X: Array,
    y: Array,
    config: BSGPConfig | None = None,
    *,
    seed: int = 0,
    likelihood: Likelihood | None = None,
    Z: Array | None = None,
    z_prior_options: dict[str, Any] | None = None,
    checkpoint: str | None = None,
    progress: bool | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> BSGPFit:
    """Sample BSGP (``num_layers`` = 1) or deep BSGP with the paper's settings in Pyro, at torch's default dtype.

    Args:
        X [N, D], y [N] or [N, P]: standardised training data (the Normal Z prior assumes standardised X).
        config: the settings (:class:`~ppl_sparsegp.recipes.bsgp.BSGPConfig`, ``z_prior`` by name, as the NumPyro
            twin that evaluates the draws is built with the same one); ``overrides``: fields of it.
        seed: the run's seed (:func:`ppl_sparsegp.pyro.mcmc.run_mcmc`: each chain's torch seed is drawn from it).
        likelihood: default ``Gaussian(variance=config.noise_variance)``; Bernoulli for classification.
        Z: initial inducing inputs [M, D] (default: k-means on X).
        z_prior_options: options of the Z prior.
        checkpoint, progress: see :func:`ppl_sparsegp.pyro.mcmc.run_mcmc`.
        fingerprint: the caller's settings, recorded in the checkpoint beside the recipe's own (those of
            :func:`~ppl_sparsegp.recipes.bsgp.plan_bsgp`) and ``run_mcmc``'s; a checkpoint that differs is refused.

    Returns:
        A :class:`~ppl_sparsegp.recipes.bsgp.BSGPFit` with the Pyro draws in ``mcmc`` ([C, S, ...], the NumPyro
        site names), the NumPyro twin of the sampled model as ``model`` and the Pyro kernel as ``kernel``.

    Raises:
        ValueError: a bad setting or input (as the NumPyro recipe), before anything runs.
    """
    p = plan_bsgp(X, y, config, overrides, likelihood=likelihood, Z=Z, z_prior_options=z_prior_options)
    c = p.config
    if not isinstance(c.z_prior, str):
        raise ValueError(f"z_prior: the Pyro recipe takes a prior by name (one of {Z_PRIORS}), got {c.z_prior!r}")
    model, initial = build_model(p, pyro_bsgp, pyro_deep_bsgp, as_tensor)
    evaluator, _ = build_model(p, numpyro_bsgp, numpyro_deep_bsgp, np.asarray)
    init_strategy = init_to_value(values=initial)
    if c.engine == "nuts":
        kernel = pyro.infer.NUTS(
            model.model, init_strategy=init_strategy, max_tree_depth=8, target_accept_prob=c.target_accept_prob
        )
    else:
        sites = model.point_estimate_sites()
        kernel = AdaptiveSGHMC(
            model.model, step_size=c.step_size, mdecay=c.mdecay, num_data=p.X.shape[0], init_strategy=init_strategy,
            point_estimates=PointEstimates(sites) if sites else None,
        )  # fmt: skip
    return run_plan(p, model, evaluator, kernel, seed=seed, checkpoint=checkpoint, progress=progress,
                    fingerprint=fingerprint)  # fmt: skip


def run_plan(
    p: BSGPPlan,
    model: Any,
    evaluator: Any,
    kernel: Any,
    *,
    seed: int,
    checkpoint: str | None,
    progress: bool | None,
    fingerprint: Mapping[str, Any] | None,
) -> BSGPFit:
    """Run the Pyro ``kernel`` over ``model`` (a Pyro twin) on the plan's data and schedule in a param store of its
    own; the draws go to ``evaluator``, the NumPyro twin. Shared by :func:`fit_bsgp` and
    :func:`ppl_sparsegp.recipes.sghmc_dgp_pyro.fit_sghmc_dgp`; arguments as :func:`fit_bsgp`'s."""
    c = p.config
    with pyro.get_param_store().scope():
        mcmc = run_mcmc(
            kernel, p.X, p.y, num_warmup=p.num_warmup, num_samples=p.num_samples, thinning=p.thinning,
            num_chains=c.num_chains, seed=seed, warmup_chunk_size=c.warmup_chunk_size, chunk_size=c.chunk_size,
            checkpoint=checkpoint, progress=progress, fingerprint={**p.fingerprint, **dict(fingerprint or {})},
            validate=model.check_data,
        )  # fmt: skip
    return BSGPFit(model=evaluator, kernel=kernel, mcmc=mcmc)
