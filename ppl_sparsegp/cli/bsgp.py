"""bsgp: BSGP (Rossi et al. 2021): v, Z and θ of every layer sampled by SGHMC or, for one layer, by NUTS.

:func:`ppl_sparsegp.recipes.bsgp.fit_bsgp` with the released code's scale-adapted SGHMC schedule by default. A bare BSGP
UCI name (boston, concrete, energy, kin8nm, naval, power, protein, yacht) loads bsgp/<name>, the paper's protocol with
--split as the fold; other data load as for the other methods. Writes posterior.nc (the kept draws, standardised units,
and a ``predictions`` group of every draw's predictive mean at the evaluation inputs, dims chain, draw, point), fit.png
(the potential energy of the kept draws and the predictive picture) and results.json (metrics of the mixture predictive
in original units, sampler settings and speed, and ``predictive_rhat``: R-hat of the test predictive means across
chains, None with fewer than 2 chains or 4 draws). The chain is checkpointed to OUT/mcmc.ckpt every 100 warmup
iterations (its settings, for reading, in OUT/mcmc.ckpt.json). With ``--backend pyro`` the Pyro twins and engines run
the same recipe (:mod:`ppl_sparsegp.recipes.bsgp_pyro`: the scale-adapted SGHMC of :mod:`ppl_sparsegp.pyro.sgmcmc` or
Pyro's NUTS, torch's randomness from --seed) and the draws, which carry the same site names, are evaluated and stored as
a NumPyro run's (the same files); --devices needs --backend numpyro. With ``--data-npy X.npy Y.npy`` the training data
are streamed from the two files, never loaded (:func:`sample_streamed_bsgp`, SGHMC through NumPyro only).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ppl_sparsegp import data, results, validation
from ppl_sparsegp.cli import npy_stream
from ppl_sparsegp.cli import run as shared
from ppl_sparsegp.cli.run import DEFAULTS, Data, flag
from ppl_sparsegp.inducing import initialise
from ppl_sparsegp.infer.streaming import sample_streamed
from ppl_sparsegp.models.numpyro import bsgp as bsgp_models
from ppl_sparsegp.models.numpyro import deep_bsgp as deep_models
from ppl_sparsegp.models.numpyro.bsgp import LIKELIHOOD_TERMS, bsgp_kernel
from ppl_sparsegp.numpyro.z_priors import Z_PRIORS
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.recipes.bsgp import (
    BSGP_ENGINES,
    NOISE_MODES,
    UPDATES_PER_ITERATION,
    BSGPConfig,
    BSGPFit,
    build_model,
    fit_bsgp,
    plan_bsgp,
    sghmc_kernel,
)
from ppl_sparsegp.recipes.bsgp import bsgp_schedule as schedule
from ppl_sparsegp.runs import store
from ppl_sparsegp.runs.rebuild import bsgp_prediction_key

CHECKPOINT = "mcmc.ckpt"
SETTINGS_FILE = "mcmc.ckpt.json"
"""A readable copy of the settings in the checkpoint's fingerprint (the checkpoint's own copy is the one compared)."""
CONFIG = BSGPConfig()
NOISE_VARIANCE = CONFIG.noise_variance
METHOD_DEFAULTS = {"noise_variance": NOISE_VARIANCE, "inducing": CONFIG.num_inducing, "init": DEFAULTS.init}
CHECKPOINT_ITERATIONS = 100
RESUME_COUNTERS = {
    "numpyro": ("warmup_done", "draws_done"),
    "pyro": ("chains_done", "steps_done"),
    "stream": ("steps",),
}
"""The checkpoint's counters recorded as results.json's ``resumed_from``, per ``--backend`` (and ``--data-npy``): the
NumPyro engine runs the chains side by side (warmup updates and post-warmup updates done), the Pyro one chain after
another (chains finished, updates of the next done), the streamed one side by side (updates done, warmup included)."""
ENGINE_OPTIONS = {
    "sghmc": {"iterations": ("num_iterations", f"warmup iterations of {UPDATES_PER_ITERATION} updates"),
              "kept": ("num_kept", "draws kept"), "thinning": ("sghmc_thinning", "updates between kept draws"),
              "step_size": ("step_size", "step size"), "batch_size": ("batch_size", None)},
    "nuts": {"warmup": ("nuts_warmup", "warmup steps"), "samples": ("nuts_samples", "post-warmup steps per chain"),
             "thinning": ("nuts_thinning", "keep every k-th draw; divides --samples")},
}  # fmt: skip
"""Each engine's own options, option -> (field of BSGPConfig, help; None: a shared option); an option of the other
engine only is refused. ``--thinning`` is both engines': SGHMC's updates between kept draws, NUTS's every k-th draw."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c = CONFIG
    shared.add_common_arguments(parser, "bsgp")
    names = ("noise_variance", "likelihood", "inducing", "init", "batch_size", "backend")
    shared.add_options(parser, names, " of the sghmc gradients, at most N", **METHOD_DEFAULTS, batch_size=c.batch_size)
    group = parser.add_argument_group(
        "BSGP (bsgp only)", f"--engine sghmc|nuts (default: {c.engine}); sghmc takes --iterations, --kept, "
        "--thinning, --step-size and --batch-size, nuts --warmup, --samples and --thinning. The chain checkpoints to "
        "OUT/mcmc.ckpt.",
    )  # fmt: skip
    add = shared.add
    add(group, "engine", c.engine, "the sampler", metavar="|".join(BSGP_ENGINES))
    add(group, "chains", c.num_chains, "chains", type=int)
    add(group, "layers", c.num_layers, "GP layers; > 1 is deep BSGP", type=int, metavar="L")
    add(group, "z_prior", c.z_prior, "prior over every layer's Z", choices=Z_PRIORS)
    add(group, "data_term", c.likelihood_term, "log E[p(y|f)] (the released code) or E[log p(y|f)] (Eq. 6)",
        choices=LIKELIHOOD_TERMS)  # fmt: skip
    add(group, "noise", None, "a point estimate or sampled", "point with sghmc, sampled with nuts", choices=NOISE_MODES)
    group.add_argument(
        "--noise-per-output", action="store_true", default=c.noise_per_output,
        help="the Gaussian likelihood of targets with several columns (naval's two, or a --data-npy y [N, P]) gets "
        "one noise variance per column, each started at --noise-variance, as the released code "
        "(BSGPConfig.noise_per_output); one column has one either way (default: one noise variance shared by the "
        "columns)",
    )  # fmt: skip
    helps: dict[str, list[str]] = {}
    for engine, options in ENGINE_OPTIONS.items():
        for name, (field, help_) in options.items():
            if help_ is not None:
                helps.setdefault(name, []).append(f"{engine}: {help_} (default: {getattr(c, field)})")
    for name, texts in helps.items():
        group.add_argument(flag(name), type=float if name == "step_size" else int, help="; ".join(texts))
    data_npy = npy_stream.DATA_NPY_OPTION
    parser.add_argument(
        "--data-npy", **{**data_npy, "help": data_npy["help"].format(fitted="sampled by --engine sghmc (NumPyro)")}
    )
    shared.add_device_options(parser)


def _check(opts: dict[str, Any]) -> None:
    """The engine's options: the other engine's are refused, the engine's own filled in and checked."""
    engine = opts["engine"]
    if engine not in BSGP_ENGINES:
        raise ValueError(f"--engine {engine}: bsgp samples with {' or '.join(BSGP_ENGINES)}")
    other = "nuts" if engine == "sghmc" else "sghmc"
    for name in ENGINE_OPTIONS[other].keys() - ENGINE_OPTIONS[engine].keys():
        if opts.get(name) is not None:
            use = {"sghmc": "--iterations and --kept", "nuts": "--warmup and --samples"}[engine]
            hint = f" (with {engine} use {use})" if name in ("iterations", "kept", "warmup", "samples") else ""
            raise ValueError(f"{flag(name)} applies to bsgp with --engine {other}, not {engine}{hint}")
    for name, (field, _) in ENGINE_OPTIONS[engine].items():
        opts[name] = getattr(CONFIG, field) if opts.get(name) is None else opts[name]
    shared.check_options(
        opts, positive=("layers", "chains", "kept", "samples", "thinning"), non_negative=("iterations", "warmup")
    )
    if engine == "nuts" and opts["layers"] > 1:
        raise ValueError(
            f"--engine nuts needs --layers 1, got --layers {opts['layers']}: deep BSGP's potential is stochastic "
            "(one random pass through the inner layers), use --engine sghmc"
        )
    if engine == "nuts" and opts["noise"] == "point":
        raise ValueError("--noise point needs --engine sghmc: NUTS samples every site (use --noise sampled)")
    if engine == "sghmc":
        validation.check_positive("--step-size", opts["step_size"])
    if opts.get("noise_per_output") and opts.get("likelihood") not in (None, "gaussian"):
        raise ValueError(f"--noise-per-output: one noise variance per output of the Gaussian likelihood; --likelihood "
                         f"{opts['likelihood']} has none to split (drop one of the two)")  # fmt: skip


def dataset_name(name: str) -> str:
    """The dataset to load: a bare BSGP UCI name means the paper's protocol, ``bsgp/<name>``."""
    return f"bsgp/{name}" if name in data.BSGP_NAMES else name


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    if args.data_npy is not None:
        return sample_streamed_bsgp(args, argv)
    opts, d = shared.start(args, _check, NOISE_VARIANCE, dataset_name(args.data))
    sghmc, out, N = opts["engine"] == "sghmc", opts["out"], int(d.X.shape[0])
    _fill_noise(opts, d)
    settings, counters = shared.checkpoints(opts, (d.X, d.y), [out / CHECKPOINT], also=[out / SETTINGS_FILE])
    resumed = {k: counters[k] for k in RESUME_COUNTERS[opts["backend"]]} if counters else None
    Z = initialise.by_name(opts["init"], d.X, opts["inducing"], bsgp_kernel(d.X.shape[1]), seed=opts["seed"])
    config = _config(opts)
    if sghmc:
        shared.check_devices(opts, opts["batch_size"] if opts["batch_size"] < N else None)
    else:
        shared.check_devices(opts, opts["chains"], "--chains")
    results.write_json(out / SETTINGS_FILE, settings)
    common = {
        "likelihood": _likelihood(opts, d), "Z": Z, "checkpoint": str(out / CHECKPOINT),
        "progress": shared.progress(opts), "fingerprint": settings,
    }  # fmt: skip
    if opts["backend"] == "pyro":
        from ppl_sparsegp.cli import pyro_backend

        fit, fit_seconds = shared.timed(pyro_backend.fit_bsgp, d.X, d.y, config, opts, **common)
    else:
        fit, fit_seconds = shared.timed(
            fit_bsgp, d.X, d.y, config, key=jax.random.PRNGKey(opts["seed"]), devices=opts["devices"], **common
        )
    return _finish(opts, d, argv, fit, fit_seconds, resumed)


def _fill_noise(opts: dict[str, Any], d: Data) -> None:
    """``--noise``'s default for regression (point with sghmc, sampled with nuts); for classification, ``--noise``
    and ``--noise-per-output`` refused (the Bernoulli likelihood has no noise)."""
    if d.ds.task == "regression":
        opts["noise"] = opts["noise"] or ("point" if opts["engine"] == "sghmc" else "sampled")
        return
    for name in ("noise", "noise_per_output"):
        if opts.get(name):
            raise ValueError(f"{flag(name)}: the Bernoulli likelihood of {d.ds.task} data ({d.ds.name}) has no noise")


def _likelihood(opts: dict[str, Any], d: Data) -> Any:
    """The recipe's ``likelihood``: the run's, or None with ``--noise-per-output``, for the recipe to make the
    Gaussian with a noise variance per output (:func:`ppl_sparsegp.recipes.bsgp.plan_bsgp`)."""
    return None if opts["noise_per_output"] else d.likelihood


def _config(opts: dict[str, Any]) -> BSGPConfig:
    """The recipe's settings from the checked options."""
    sghmc = opts["engine"] == "sghmc"
    return BSGPConfig(
        num_layers=opts["layers"], num_inducing=opts["inducing"], z_prior=opts["z_prior"],
        likelihood_term=opts["data_term"], noise=opts["noise"] or "point", engine=opts["engine"],
        noise_per_output=opts["noise_per_output"], noise_variance=opts["noise_variance"] or NOISE_VARIANCE,
        num_chains=opts["chains"], warmup_chunk_size=UPDATES_PER_ITERATION * CHECKPOINT_ITERATIONS if sghmc else None,
        **{field: opts[name] for name, (field, _) in ENGINE_OPTIONS[opts["engine"]].items()},
    )  # fmt: skip


def sample_streamed_bsgp(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """``fit bsgp --data-npy X.npy Y.npy``: BSGP (or deep BSGP) sampled by its adaptive SGHMC on minibatches of
    ``--batch-size`` rows streamed from the files (:func:`ppl_sparsegp.infer.streaming.sample_streamed`:
    memory-mapped reads, prefetched, checkpointed to OUT/mcmc.ckpt every 100 iterations and resumed from it), each
    batch standardised on the device with the files' statistics and its data term scaled by N/B; Z placed by
    ``--init`` on a random sample of the rows (:mod:`ppl_sparsegp.cli.npy_stream`), on which the draws are
    evaluated. The same schedule, sampler and outputs as the in-memory run; the minibatches are drawn by the stream
    (i.i.d. rows, as the model's own subsampling plate draws them in memory) instead of by the model."""
    opts = dict(vars(args))
    if opts["engine"] != "sghmc":
        raise ValueError("--data-npy: --engine nuts needs one fixed target, not a new minibatch every step; use "
                         "--engine sghmc (or --data with the files' contents)")  # fmt: skip
    _check(opts)
    npy_stream.check_stream_options(opts)
    batches = npy_stream.open_stream(opts, argv)
    d, stream = npy_stream.stream_data(opts, batches, NOISE_VARIANCE)
    _fill_noise(opts, d)
    out, N, B = opts["out"], batches.num_data, batches.batch_size
    # the data are named by the stream's identity, which sample_streamed records and checks (its rows hash included)
    settings, counters = shared.checkpoints(opts, (), [out / CHECKPOINT], also=[out / SETTINGS_FILE])
    resumed = {k: counters[k] for k in RESUME_COUNTERS["stream"]} if counters else None
    Z = initialise.by_name(opts["init"], d.X, opts["inducing"], bsgp_kernel(d.X.shape[1]), seed=opts["seed"])
    plan = plan_bsgp(d.X, d.y, _config(opts), {}, likelihood=_likelihood(opts, d), Z=Z, z_prior_options=None)
    plan = plan._replace(batch_size=None)  # the model takes each streamed batch whole, as its data
    model, initial = build_model(plan, bsgp_models, deep_models, jnp.asarray)
    program = npy_stream.data_term_scaled(npy_stream.standardised(model.model, d.scaler, d.X.dtype), N, B)
    kernel = sghmc_kernel(plan.config, model, program, initial, N)
    results.write_json(out / SETTINGS_FILE, settings)
    mcmc, fit_seconds = shared.timed(
        sample_streamed, kernel, batches, num_warmup=plan.num_warmup, num_samples=plan.num_samples,
        thinning=plan.thinning, key=jax.random.PRNGKey(opts["seed"]), num_chains=opts["chains"],
        checkpoint=out / CHECKPOINT, checkpoint_every=UPDATES_PER_ITERATION * CHECKPOINT_ITERATIONS,
        fingerprint={**plan.fingerprint, "bsgp.batch_size": B, **settings}, progress=shared.progress(opts),
    )  # fmt: skip
    return _finish(opts, d, argv, BSGPFit(model, kernel, mcmc), fit_seconds, resumed, stream)


def _finish(opts: dict[str, Any], d: Data, argv: Sequence[str], fit: BSGPFit, fit_seconds: float,
            resumed: dict[str, int] | None, stream: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """Evaluate the draws of ``fit`` on the evaluation data of ``d``, write posterior.nc, fit.png and results.json
    and print the summary (module docstring); ``resumed``: the checkpoint's counters (:data:`RESUME_COUNTERS`),
    ``stream``: a ``--data-npy`` run's facts (:func:`ppl_sparsegp.cli.npy_stream.stream_data`)."""
    sghmc = opts["engine"] == "sghmc"
    N = int(d.X.shape[0]) if stream is None else stream["num_data"]
    if sghmc:
        plan = schedule(opts["iterations"], opts["kept"], opts["thinning"])
        num_warmup, num_samples = plan.num_warmup, plan.num_samples
    else:
        num_warmup, num_samples = opts["warmup"], opts["samples"]
    if fit.mcmc.interrupted:
        raise KeyboardInterrupt
    key = bsgp_prediction_key(opts)
    (logp, pred), predict_seconds = shared.timed(
        lambda: (fit.log_predictive_density(d.X_eval, d.y_eval_std, key=key), fit.predict(d.X_eval, key=key))
    )
    m, mean, var = d.evaluate((pred.y_mean, pred.y_var, logp))
    m = {"mnll": m["nlpd"], **m} if d.ds.task == "regression" else m
    idata, groups = fit.inference_data(d.X, d.y, log_likelihood_of="predictive")
    diagnostics.with_constant_data(idata, store.standardizer_arrays(d.scaler))
    mcmc, means = fit.mcmc, fit.predictive_means(d.X_eval, key=key)  # [C, S, N_eval(, P)], standardised
    diagnostics.with_predictions(idata, means, d.X_eval)
    groups += ["constant_data", "predictions", "predictions_constant_data"]
    rhat = diagnostics.predictive_rhat(means) if diagnostics.rhat_defined(means) else None  # 2+ chains, 4+ draws
    speed = num_warmup / mcmc.warmup_seconds if num_warmup and mcmc.warmup_seconds > 0 else None
    record = {
        "engine": opts["engine"], "layers": opts["layers"], "z_prior": opts["z_prior"], "data_term": opts["data_term"],
        "noise": opts["noise"], "noise_per_output": opts["noise_per_output"], "likelihood": opts["likelihood"],
        "metrics": m,
        "sampler": {
            "kernel": mcmc.kernel_name, "chains": mcmc.num_chains, "draws_per_chain": mcmc.num_draws,
            "warmup_updates": num_warmup, "sample_updates": num_samples, "thinning": mcmc.thinning,
            "updates_per_iteration": UPDATES_PER_ITERATION if sghmc else None,
            "batch_size": min(opts["batch_size"], N) if sghmc else N, "step_size": opts["step_size"] if sghmc else None,
        },
        "likelihood_parameters_standardised": {
            k: np.mean(v, axis=0) for k, v in mcmc.flat_samples().items() if k.startswith("likelihood.")
        },
        "predictive_rhat": None if rhat is None else rhat.summary(),
        "divergences": mcmc.divergences, "resumed_from": resumed, "warmup_seconds": mcmc.warmup_seconds,
        "sample_seconds": mcmc.sample_seconds, "updates_per_second": speed,
        "fit_seconds": fit_seconds, "predict_seconds": predict_seconds,
        "files": {"posterior": "posterior.nc", "posterior_groups": groups, "figure": "fit.png",
                  "checkpoint": CHECKPOINT, "checkpoint_settings": SETTINGS_FILE},
    }  # fmt: skip
    if stream is not None:
        npy_stream.record_stream(record, stream)
    figure = d.plot(np.zeros(0), mean, var)
    results.plot_energy(figure.axes[0], mcmc.extra_fields.get("potential_energy"), mcmc.kernel_name != "NUTS")
    figure.tight_layout()
    layers = f"{opts['layers']} layer{'s' if opts['layers'] > 1 else ''}"
    speed = "" if speed is None else f", {speed:.0f} updates/s"
    if resumed and stream is not None:
        resumed = f", resumed after {resumed['steps']} updates"
    elif resumed and opts["backend"] == "pyro":
        resumed = f", resumed after {resumed['chains_done']} chain(s) and {resumed['steps_done']} updates of the next"
    else:
        resumed = f", resumed after {resumed['warmup_done']} warmup updates" if resumed else ""
    where = npy_stream.stream_size(opts, d, stream) if stream else f"split {opts['split']}; {shared.size(opts, d)}"
    summary = [
        f"bsgp ({opts['engine']}, {layers}, {opts['z_prior']} Z prior) on {d.ds.name} ({where})",
        f"  {num_warmup} warmup updates in {mcmc.warmup_seconds:.1f} s{speed}{resumed}; {mcmc.num_chains} chain(s) x "
        f"{mcmc.num_draws} draws in {mcmc.sample_seconds:.1f} s{shared.divergences(mcmc)}",
        f"  {shared.scores(m, d, ('mnll', 'rmse'), ('accuracy', 'nll'))}",
    ]
    if rhat is not None:
        summary.append(f"  R-hat of the {d.evaluated_on} predictive means: max {rhat.max:.3f}, "
                       f"{rhat.fraction_below:.0%} of points < {rhat.threshold}")  # fmt: skip
    files = {"posterior.nc": diagnostics.netcdf_file(idata)}
    return shared.finish(opts, d, argv, record, files, figure, summary)
