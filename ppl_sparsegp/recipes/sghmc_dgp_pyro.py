"""SGHMC-DGP's recipe (Havasi et al. 2018; spec 001 §2.6) on the Pyro twins and engines, the twin of
:func:`ppl_sparsegp.recipes.sghmc_dgp.fit_sghmc_dgp` with the same settings
(:class:`~ppl_sparsegp.recipes.sghmc_dgp.SGHMCDGPConfig`), plan (:func:`~ppl_sparsegp.recipes.sghmc_dgp.plan_sghmc_dgp`)
and start: :class:`models.pyro.bsgp.BSGP` (or :class:`models.pyro.deep_bsgp.DeepBSGP`) with the config's
``optimised`` sites (Z and θ by default) point estimates, v (and any θ not among them) sampled by
:class:`ppl_sparsegp.pyro.sgmcmc.AdaptiveSGHMC` while :class:`~ppl_sparsegp.pyro.sgmcmc.PointEstimates` takes a
``torch.optim.Adam`` step on the point estimates and σ² after every iteration at a window state, run by
:func:`ppl_sparsegp.pyro.mcmc.run_mcmc` (chains one after another, whatever ``chain_method`` says). The draws carry
the NumPyro site names and are evaluated by the NumPyro twin of the model, as in
:mod:`ppl_sparsegp.recipes.bsgp_pyro`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np
import torch
from pyro.infer.autoguide.initialization import init_to_value

from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.models.numpyro import bsgp as numpyro_bsgp
from ppl_sparsegp.models.numpyro import deep_bsgp as numpyro_deep_bsgp
from ppl_sparsegp.models.pyro import bsgp as pyro_bsgp
from ppl_sparsegp.models.pyro import deep_bsgp as pyro_deep_bsgp
from ppl_sparsegp.pyro.dtype import as_tensor
from ppl_sparsegp.pyro.sgmcmc import AdaptiveSGHMC, PointEstimates

from .bsgp import BSGPFit, build_model
from .bsgp_pyro import run_plan
from .sghmc_dgp import SGHMCDGPConfig, held_sites, plan_sghmc_dgp

Array = Any


def fit_sghmc_dgp(
    X: Array,
    y: Array,
    config: SGHMCDGPConfig | None = None,
    *,
    seed: int = 0,
    likelihood: Likelihood | None = None,
    Z: Array | None = None,
    checkpoint: str | None = None,
    progress: bool | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> BSGPFit:
    """Sample v of SGHMC-GP (or SGHMC-DGP) with (Z, θ, σ²) optimised by moving-window MCEM in Pyro, at torch's
    default dtype.

    Args:
        X [N, D], y [N] or [N, P]: standardised training data.
        config: the settings (:class:`~ppl_sparsegp.recipes.sghmc_dgp.SGHMCDGPConfig`); ``overrides``: fields of it.
        seed: the run's seed (each chain's torch seed is drawn from it).
        likelihood, Z, checkpoint, progress, fingerprint: as the NumPyro twin's.

    Returns:
        A :class:`~ppl_sparsegp.recipes.bsgp.BSGPFit` with the Pyro draws (NumPyro site names), the NumPyro twin of
        the model as ``model`` and the Pyro kernel as ``kernel``.

    Raises:
        ValueError: a bad setting or input (as the NumPyro recipe), before anything runs.
    """
    c, p = plan_sghmc_dgp(X, y, config, overrides, likelihood=likelihood, Z=Z)
    model, initial = build_model(p, pyro_bsgp, pyro_deep_bsgp, as_tensor, c.optimised)
    evaluator, _ = build_model(p, numpyro_bsgp, numpyro_deep_bsgp, np.asarray, c.optimised)
    sites = model.point_estimate_sites()
    estimates = PointEstimates(
        sites, optimizer=partial(torch.optim.Adam, lr=c.learning_rate), every=c.updates_per_iteration,
        window=c.window, held=held_sites(c, sites),
    )  # fmt: skip
    kernel = AdaptiveSGHMC(
        model.model, step_size=c.step_size, mdecay=c.mdecay, num_data=p.X.shape[0],
        init_strategy=init_to_value(values=initial), point_estimates=estimates,
    )  # fmt: skip
    return run_plan(p, model, evaluator, kernel, seed=seed, checkpoint=checkpoint, progress=progress,
                    fingerprint=fingerprint)  # fmt: skip
