"""sgpmc: an SVGP fit with priors on the hyperparameters (MAP), then MCMC on the SGPMC target with Z fixed.

The thesis recipe, :func:`ppl_sparsegp.recipes.sgpmc.fit_sgpmc`. Writes posterior.nc (ArviZ InferenceData in
standardised units), fit.png (every chain's potential energy and the predictive picture of the mixture) and
results.json (test metrics of the mixture predictive in original units, sampler statistics, R-hat and ESS of the
hyperparameters). The chains are checkpointed to OUT/mcmc.ckpt after the warmup and every --chunk draws;
re-running the same command repeats the (deterministic) SVI fit and resumes the chains. With ``--backend pyro`` the
Pyro twins and engines run the same recipe (:mod:`ppl_sparsegp.recipes.sgpmc_pyro`; the chains one after another,
checkpointed and resumed as the NumPyro ones) and the draws are evaluated as a NumPyro run's
(:mod:`ppl_sparsegp.cli.pyro_backend`).
"""

from __future__ import annotations

import argparse
import inspect
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from ppl_sparsegp import results
from ppl_sparsegp.cli import run as shared
from ppl_sparsegp.cli.run import DEFAULTS
from ppl_sparsegp.inducing import initialise
from ppl_sparsegp.infer.mcmc import ENGINES
from ppl_sparsegp.models.numpyro.sgpmc import default_priors
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.posterior.predict import log_predictive_density, posterior_predictive
from ppl_sparsegp.recipes.sgpmc import SGPMCConfig, fit_sgpmc
from ppl_sparsegp.runs import store
from ppl_sparsegp.runs.rebuild import latent_functions

CHECKPOINT = "mcmc.ckpt"
NOISE_VARIANCE = DEFAULTS.noise_variance
METHOD_DEFAULTS = {"noise_variance": NOISE_VARIANCE, "inducing": DEFAULTS.inducing, "init": DEFAULTS.init}
CONFIG = SGPMCConfig(num_chains=2)
"""The recipe's settings but two chains, so that R-hat means something."""
PRIOR = inspect.signature(default_priors).parameters["family"].default
SG_ENGINES = ("sghmc", "sgld")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c = CONFIG
    shared.add_common_arguments(parser, "sgpmc")
    names = (*shared.KERNEL_OPTIONS, "noise_variance", "likelihood", "inducing", "init", "steps", "lr", "batch_size",
             "backend")  # fmt: skip
    shared.add_options(  # lengthscale sqrt(D): from 1.0 the Gamma prior can pull a high-dimensional fit into the
        parser, names, " of the SVI fit and the sghmc/sgld engines",  # all-short-lengthscales mode
        lengthscale=None, steps=c.svi_steps, lr=c.learning_rate, batch_size=c.batch_size,
    )  # fmt: skip
    group, add = parser.add_argument_group("MCMC"), shared.add
    add(group, "engine", c.engine, "sampler", choices=ENGINES)
    add(group, "warmup", c.num_warmup, "adaptation steps", type=int)
    add(group, "samples", c.num_samples, "post-warmup steps per chain", type=int)
    add(group, "chains", c.num_chains, "chains, vectorised", type=int)
    add(group, "thinning", c.thinning, "keep every k-th draw; divides --samples", type=int)
    add(group, "step_size", None, "sghmc and sgld: step size", "sghmc's; needed for sgld", type=float, metavar="EPS")
    add(group, "prior", PRIOR, "prior of every hyperparameter: Gamma(1.1, 1) as the thesis, or LogNormal(0, 1)",
        choices=("gamma", "lognormal"))  # fmt: skip
    add(group, "chunk", c.chunk_size, "post-warmup steps between checkpoints", "all at once", type=int)


def _check(opts: dict[str, Any]) -> None:
    """The MCMC options against each other."""
    shared.check_options(opts, positive=("samples", "chains", "thinning", "chunk"), non_negative=("warmup",))
    sg = opts["engine"] in SG_ENGINES
    if opts["step_size"] is not None and not sg:
        raise ValueError(f"--step-size applies to the sghmc and sgld engines, not {opts['engine']}")
    if opts["engine"] == "sgld" and opts["step_size"] is None:
        raise ValueError("--step-size is required with --engine sgld (there is no safe default)")
    if opts["step_size"] is not None and not opts["step_size"] > 0:
        raise ValueError(f"--step-size must be positive, got {opts['step_size']}")
    if opts["batch_size"] is not None and not sg:
        raise ValueError(f"--batch-size applies to the SVI fit and the sghmc/sgld engines, not {opts['engine']}")
    if opts["chunk"] is not None and opts["chunk"] % opts["thinning"]:
        raise ValueError(f"--chunk ({opts['chunk']}) must be a multiple of --thinning ({opts['thinning']})")


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    opts, d = shared.start(args, _check, NOISE_VARIANCE)
    settings, _ = shared.checkpoints(opts, (d.X, d.y), [opts["out"] / CHECKPOINT])
    kernel = shared.initial_kernel(opts, d.X.shape[1], opts["lengthscale"] or math.sqrt(d.X.shape[1]))
    config = SGPMCConfig(
        svi_steps=opts["steps"], fixed_z_steps=min(CONFIG.fixed_z_steps, opts["steps"] // 10),
        learning_rate=opts["lr"], batch_size=shared.batch(opts, d.X.shape[0]), engine=opts["engine"],
        num_warmup=opts["warmup"], num_samples=opts["samples"], num_chains=opts["chains"],
        thinning=opts["thinning"], chunk_size=opts["chunk"],
    )  # fmt: skip
    common = {
        "kernel": kernel, "likelihood": d.likelihood,
        "Z": initialise.by_name(opts["init"], d.X, opts["inducing"], kernel, seed=opts["seed"]),
        "num_latent": latent_functions(d.likelihood, d.ds.num_outputs),
        "engine_options": {"step_size": opts["step_size"]} if opts["step_size"] else {},
        "checkpoint": opts["out"] / CHECKPOINT, "progress": shared.progress(opts), "fingerprint": settings,
    }  # fmt: skip
    if opts["backend"] == "pyro":
        from ppl_sparsegp.cli import pyro_backend

        fit, seconds = shared.timed(pyro_backend.fit_sgpmc, d.X, d.y, config, opts, **common)
    else:
        fit, seconds = shared.timed(
            fit_sgpmc, d.X, d.y, config, key=jax.random.PRNGKey(opts["seed"]),
            priors=default_priors(kernel, d.likelihood, opts["prior"]), **common,
        )  # fmt: skip
    if fit.mcmc.interrupted:
        raise KeyboardInterrupt
    idata = diagnostics.from_mcmc(fit.mcmc, fit.model, d.X, d.y, log_likelihood_of="predictive")
    diagnostics.with_constant_data(idata, {"Z": np.asarray(fit.model.Z), **store.standardizer_arrays(d.scaler)})
    draws, mcmc = fit.mcmc.flat_samples(), fit.mcmc
    pred = posterior_predictive(fit.model, draws, d.X_eval)
    m, mean, var = d.evaluate(
        (pred.y_mean, pred.y_var, log_predictive_density(fit.model, draws, d.X_eval, d.y_eval_std))
    )
    hyper = [v for v in idata.posterior.data_vars if v != "u"]
    import arviz as az  # on first use, as every heavy module of the command line

    record = {
        "engine": opts["engine"], "metrics": m, "draws_per_chain": mcmc.num_draws, "chains": mcmc.num_chains,
        "divergences": mcmc.divergences,
        "max_rhat": float(max(float(az.rhat(idata, var_names=hyper)[v].max()) for v in hyper)),
        "min_ess_bulk": float(min(float(az.ess(idata, var_names=hyper)[v].min()) for v in hyper)),
        "svi_final_loss": float(fit.svi.losses[-1]), "warmup_seconds": mcmc.warmup_seconds,
        "sample_seconds": mcmc.sample_seconds, "total_seconds": seconds,
        "files": {"posterior": "posterior.nc", "figure": "fit.png", "checkpoint": CHECKPOINT},
    }  # fmt: skip
    summary = [
        f"sgpmc ({opts['engine']}) on {d.ds.name} (split {opts['split']}; {shared.size(opts, d)})",
        f"  {mcmc.num_chains} chains x {mcmc.num_draws} draws in {mcmc.sample_seconds:.1f} s (+ "
        f"{mcmc.warmup_seconds:.1f} s warmup){shared.divergences(mcmc)}; "
        f"hyperparameters: max R-hat {record['max_rhat']:.3f}, min bulk ESS {record['min_ess_bulk']:.0f}",
        f"  {shared.scores(m, d, ('rmse', 'nlpd'), ('accuracy', 'nll'))}",
    ]
    files = {"posterior.nc": diagnostics.netcdf_file(idata)}
    figure = d.plot(np.zeros(0), mean, var)  # the chains on the left (the SVI start's loss is in results.json)
    minibatch = opts["engine"] in SG_ENGINES and shared.batch(opts, d.X.shape[0]) is not None
    results.plot_energy(figure.axes[0], mcmc.extra_fields.get("potential_energy"), minibatch)
    figure.tight_layout()
    return shared.finish(opts, d, argv, record, files, figure, summary)
