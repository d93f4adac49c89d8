"""SGPMC's recipe (thesis §5.5) on the Pyro twins and engines, the twin of :func:`ppl_sparsegp.recipes.sgpmc.fit_sgpmc`
with the same settings (:class:`~ppl_sparsegp.recipes.sgpmc.SGPMCConfig`) and phases: the Pyro SVGP with the same
priors fitted by :func:`ppl_sparsegp.pyro.svi.fit_svi` (Z held at its initial value for the first steps, then free),
Z fixed, θ started at its point estimate and v at a draw of q(v) (:func:`ppl_sparsegp.pyro.mcmc.init_from_svi`), then
the chains of :func:`ppl_sparsegp.pyro.mcmc.run_mcmc` on the Pyro SGPMC (thinned and checkpointed every
``chunk_size`` steps as the NumPyro recipe's; ``chain_method`` does not apply: the Pyro runner runs the chains one
after another). Randomness is torch's, seeded by ``seed``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import pyro
import pyro.distributions as dist
import torch

from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.models.pyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.models.pyro.svgp import SVGP
from ppl_sparsegp.pyro.mcmc import init_from_svi, kernel_from_name, run_mcmc
from ppl_sparsegp.pyro.svi import fit_svi

from .phases import configure
from .sgpmc import SGPMCConfig, SGPMCFit

Array = Any


def fit_sgpmc(
    X: Array,
    y: Array,
    config: SGPMCConfig | None = None,
    *,
    kernel: Kernel,
    likelihood: Likelihood,
    Z: Array,
    seed: int = 0,
    priors: Mapping[str, dist.TorchDistribution] | None = None,
    num_latent: int = 1,
    engine_options: Mapping[str, Any] | None = None,
    checkpoint: str | None = None,
    progress: bool | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> SGPMCFit:
    """The thesis recipe on the Pyro side; arguments as :func:`ppl_sparsegp.recipes.sgpmc.fit_sgpmc`'s, with
    ``seed`` in place of a JAX key and Pyro ``priors`` (default :func:`models.pyro.sgpmc.default_priors`).

    Returns:
        An :class:`~ppl_sparsegp.recipes.sgpmc.SGPMCFit` of the Pyro models (the SVI phase's result with tensors as
        params, and the chains as an :class:`~ppl_sparsegp.infer.mcmc.MCMCResult`).

    Raises:
        ValueError: a bad setting, before anything runs.
    """
    c = configure(SGPMCConfig, config, overrides)
    priors = default_priors(kernel, likelihood) if priors is None else dict(priors)
    common = dict(kernel=kernel, likelihood=likelihood, priors=priors, num_latent=num_latent, batch_size=c.batch_size)
    svgp = SVGP(Z=Z, learn_Z=c.fixed_z_steps == 0, **common)
    fixed = [site for site in svgp.hyperparameter_sites() if site not in priors]
    model = SGPMC(Z=Z, fixed=fixed, **{**common, "batch_size": None})  # checks priors and Z before any fit
    model.check_data(X, y)
    own = {
        **c.fingerprint(num_latent, engine_options, Z, kernel, likelihood),
        "sgpmc.priors": {site: repr(prior) for site, prior in sorted(priors.items())},
    }
    params: dict[str, Array] = {}
    svi = None
    for phase, learn_Z, steps in c.svi_phases():
        svgp = SVGP(Z=params.get("Z", Z), learn_Z=learn_Z, **common)
        svi = fit_svi(
            svgp.model, svgp.guide, X, y, optimizer=partial(torch.optim.Adam, lr=c.learning_rate), num_steps=steps,
            seed=seed + phase, init_params={k: v for k, v in params.items() if k != "Z"} or None, progress=progress,
            label="SVI (Pyro), Z learned" if learn_Z else "SVI (Pyro), Z fixed", validate=svgp.check_data,
        )  # fmt: skip
        params.update(svi.params)
    fitted_kernel, fitted_likelihood = svgp.fitted(params)
    model = SGPMC(
        kernel=fitted_kernel, likelihood=fitted_likelihood, priors=priors, fixed=fixed, Z=params.get("Z", Z),
        num_latent=num_latent, batch_size=c.batch_size if c.engine in ("sghmc", "sgld") else None,
    )  # fmt: skip
    pyro.set_rng_seed(seed)
    init = init_from_svi(model.model, svgp.guide, params, X, y, num_chains=c.num_chains)
    mcmc = run_mcmc(
        kernel_from_name(c.engine, model.model, **c.kernel_options(len(X), engine_options)), X, y,
        num_warmup=c.num_warmup, num_samples=c.num_samples, num_chains=c.num_chains, seed=seed, thinning=c.thinning,
        chunk_size=c.chunk_size, initial_params=init,
        checkpoint=checkpoint, progress=progress, fingerprint={**own, **dict(fingerprint or {})},
        validate=model.check_data,
    )  # fmt: skip
    return SGPMCFit(svgp=svgp, svi=svi, model=model, mcmc=mcmc)
