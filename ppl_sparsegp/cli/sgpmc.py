"""sgpmc: an SVGP fit with priors on the hyperparameters (MAP), then MCMC on the SGPMC target with Z fixed.

The thesis recipe, :func:`ppl_sparsegp.recipes.sgpmc.fit_sgpmc`. Writes posterior.nc (ArviZ InferenceData in
standardised units), fit.png (the SVI loss trace and the predictive picture of the mixture) and results.json (test
metrics of the mixture predictive in original units, sampler statistics, R-hat and ESS of the hyperparameters). The
chains are checkpointed to OUT/mcmc.ckpt after the warmup and every --chunk draws; re-running the same command
repeats the (deterministic) SVI fit and resumes the chains.
"""

from __future__ import annotations

import argparse
import inspect
import math
import time
from collections.abc import Sequence
from typing import Any

import arviz as az
import jax
import numpy as np

from ppl_sparsegp.cli import run as shared
from ppl_sparsegp.cli.run import DEFAULTS
from ppl_sparsegp.infer.checkpoint import prepare
from ppl_sparsegp.infer.mcmc import ENGINES
from ppl_sparsegp.models.numpyro.sgpmc import default_priors
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.posterior.predict import log_predictive_density, posterior_predictive
from ppl_sparsegp.recipes.sgpmc import SGPMCConfig, fit_sgpmc

CHECKPOINT = "mcmc.ckpt"
NOISE_VARIANCE = DEFAULTS.noise_variance
METHOD_DEFAULTS = {"noise_variance": NOISE_VARIANCE, "inducing": DEFAULTS.inducing, "init": DEFAULTS.init}
CONFIG = SGPMCConfig(num_chains=2)
"""The recipe's settings but two chains, so that R-hat means something."""
PRIOR = inspect.signature(default_priors).parameters["family"].default
SG_ENGINES = ("sghmc", "sgld")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """sgpmc's options."""
    c = CONFIG
    shared.add_common_arguments(parser, "sgpmc")
    shared.add_kernel_arguments(parser, None)  # sqrt(D): from 1.0 the Gamma prior can pull a high-dimensional
    shared.add_noise_arguments(parser, NOISE_VARIANCE)  # fit into the all-short-lengthscales mode
    shared.add_inducing_arguments(parser, DEFAULTS.inducing)
    shared.add_svi_arguments(parser, c.svi_steps, c.learning_rate, None)
    shared.add_batch_argument(parser, c.batch_size, " of the SVI fit and the sghmc/sgld engines")
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
    if opts["samples"] % opts["thinning"]:
        raise ValueError(f"--samples ({opts['samples']}) must be a multiple of --thinning ({opts['thinning']})")
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
    """Fit sgpmc as ``args`` say; write the outputs; return results.json."""
    opts = dict(vars(args))
    _check(opts)
    d = shared.load_data(opts, opts["data"])
    likelihood = shared.settle_likelihood(opts, d.ds.task, NOISE_VARIANCE)
    settings = shared.fingerprint_settings(opts)
    prepare([opts["out"] / CHECKPOINT], settings, d.X, d.y, restart=opts["restart"])
    kernel = shared.initial_kernel(opts, d.X.shape[1], opts["lengthscale"] or math.sqrt(d.X.shape[1]))
    config = SGPMCConfig(
        svi_steps=opts["steps"], fixed_z_steps=min(CONFIG.fixed_z_steps, opts["steps"] // 10),
        learning_rate=opts["lr"], batch_size=shared.batch(opts, d.X.shape[0]), engine=opts["engine"],
        num_warmup=opts["warmup"], num_samples=opts["samples"], num_chains=opts["chains"],
        thinning=opts["thinning"], chunk_size=opts["chunk"],
    )  # fmt: skip
    start = time.perf_counter()
    fit = fit_sgpmc(
        d.X, d.y, config, kernel=kernel, likelihood=likelihood, Z=shared.inducing_inputs(opts, d.X, kernel),
        key=jax.random.PRNGKey(opts["seed"]), priors=default_priors(kernel, likelihood, opts["prior"]),
        num_latent=d.ds.num_outputs, engine_options={"step_size": opts["step_size"]} if opts["step_size"] else {},
        checkpoint=opts["out"] / CHECKPOINT, progress=shared.progress(opts), fingerprint=settings,
    )  # fmt: skip
    if fit.mcmc.interrupted:
        raise KeyboardInterrupt
    seconds = time.perf_counter() - start
    idata = diagnostics.from_mcmc(fit.mcmc, fit.model, d.X, d.y)
    draws = fit.mcmc.flat_samples()
    pred = posterior_predictive(fit.model, draws, d.X_eval)
    logp = log_predictive_density(fit.model, draws, d.X_eval, d.y_eval_std)
    scores, mean, var = d.evaluate((pred.y_mean, pred.y_var, logp))
    hyper = [v for v in idata.posterior.data_vars if v != "u"]
    stats = fit.mcmc.extra_fields
    record = {
        "engine": opts["engine"], "metrics": scores, "draws_per_chain": fit.mcmc.num_draws,
        "chains": fit.mcmc.num_chains,
        "divergences": int(np.sum(stats["diverging"])) if "diverging" in stats else None,
        "max_rhat": float(max(float(az.rhat(idata, var_names=hyper)[v].max()) for v in hyper)),
        "min_ess_bulk": float(min(float(az.ess(idata, var_names=hyper)[v].min()) for v in hyper)),
        "svi_final_loss": float(fit.svi.losses[-1]), "warmup_seconds": fit.mcmc.warmup_seconds,
        "sample_seconds": fit.mcmc.sample_seconds, "total_seconds": seconds,
        "files": {"posterior": "posterior.nc", "figure": "fit.png", "checkpoint": CHECKPOINT},
    }  # fmt: skip
    figure = d.plot(fit.svi.losses, mean, var)
    record = shared.write_outputs(opts, d, argv, record, {"posterior.nc": diagnostics.netcdf_file(idata)}, figure)
    if not opts["quiet"]:
        print(summary(record))
    return record


def summary(record: dict[str, Any]) -> str:
    """What ``fit sgpmc`` prints on success."""
    m, o = record["metrics"], record["options"]
    if record["task"] == "regression":
        scores = f"RMSE {m['rmse']:.4g}  NLPD {m['nlpd']:.4g} (original units)"
    else:
        scores = f"accuracy {m['accuracy']:.4f}  NLL {m['nll']:.4f}"
    divergences = "" if record["divergences"] is None else f", {record['divergences']} divergences"
    return "\n".join(
        [
            f"sgpmc ({record['engine']}) on {record['data']} (split {record['split']}; N = {record['n_train']}, "
            f"D = {record['input_dim']}, M = {o['inducing']})",
            f"  {record['chains']} chains x {record['draws_per_chain']} draws in {record['sample_seconds']:.1f} s "
            f"(+ {record['warmup_seconds']:.1f} s warmup){divergences}; hyperparameters: max R-hat "
            f"{record['max_rhat']:.3f}, min bulk ESS {record['min_ess_bulk']:.0f}",
            f"  {record['evaluated_on']} {scores}",
            f"  wrote {o['out'] / 'results.json'}, posterior.nc, fit.png",
        ]
    )
