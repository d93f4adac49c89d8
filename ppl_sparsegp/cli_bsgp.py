"""The BSGP side of the ``ppl-sparsegp`` command line: ``fit bsgp``.

``ppl-sparsegp fit bsgp --data boston --split 0 --layers 1 --z-prior normal|dpp|strauss|uniform ...`` samples BSGP
(Rossi et al. 2021) with :func:`models.bsgp_fit.fit_bsgp`: the inducing outputs v, the inducing inputs Z and the
kernel hyperparameters θ of every layer are sampled, by the scale-adapted SGHMC of the released code (default) or,
for the shallow model, by NUTS.

Data: the BSGP UCI names (boston, concrete, energy, kin8nm, naval, power, protein, yacht; also ``bsgp/<name>``)
load :func:`ppl_sparsegp.data.load_bsgp_uci` with ``--split`` as the fold (the paper's protocol: X standardised on
the whole data, y on training statistics); any other ``--data`` loads as for the other methods (X and y
standardised with training statistics, :func:`ppl_sparsegp.data.standardize`). Binary data (e.g. breast_cancer)
use a Bernoulli likelihood (probit unless ``--likelihood logit``).

Options (see ``ppl-sparsegp fit --help``): ``--layers`` (1), ``--z-prior`` (normal), ``--data-term``
(log_expected), ``--noise`` (point with sghmc, sampled with nuts), ``--inducing`` (100 per layer), ``--init``
(kmeans), ``--noise-variance`` (initial noise, 1.0 = var(y) in standardised units), ``--likelihood``,
``--seed``, ``--dtype``, and

* ``--engine sghmc`` (default): ``--iterations`` (10000) warmup iterations of 21 SGHMC updates, then ``--kept``
  (256) draws 32 updates apart; ``--step-size`` (0.01), ``--batch-size`` (minibatch, min(1000, N)), ``--chains`` (1);
* ``--engine nuts`` (one layer, noise sampled, full-batch gradients): ``--warmup`` (500), ``--samples`` (500),
  ``--thinning`` (1), ``--chains`` (1).

The SVI options (``--steps``, ``--lr``, ``--checkpoint-every``), the kernel options (``--kernel``,
``--kernel-variance``, ``--lengthscale``: BSGP's kernel is RBF-ARD with λ_d = √D, σ² = 0.1 and LogNormal priors)
and sgpmc's ``--prior`` and ``--chunk`` are errors with bsgp, as the bsgp options are with other methods; every
check happens before anything is loaded or compiled, and a problem is one line ``error: ...``, exit code 2.

Outputs in ``--out`` (default ``runs/bsgp-<data>-<split>``), written as one set
(:func:`ppl_sparsegp.results.write_output_set`):

* ``posterior.nc``: ArviZ InferenceData of the kept draws (standardised units): ``posterior`` (the shallow model's
  ``Z`` with dims (inducing_point, input_dim), ``u``, ``kernel.*``, ``likelihood.*``; the deep model's
  ``layer<l>.Z``, ``layer<l>.u``, ``layer<l>.kernel.*``), ``sample_stats``, ``observed_data`` and, for the shallow
  model when N x draws x outputs <= 4,000,000, ``log_likelihood`` (the per-point data term, for az.loo/az.waic);
* ``fit.png``: the potential energy of the kept draws and the predictive picture on the evaluation set;
* ``results.json`` (last): test metrics in original units of the mixture predictive over the kept draws (regression:
  MNLL = NLPD, RMSE, MAE; binary: accuracy, NLL, ECE, AUC), the settings, timings (warmup and sampling seconds,
  updates per second) and versions.

The chain is checkpointed to ``OUT/mcmc.ckpt`` (an ``.npz``, see :mod:`ppl_sparsegp.infer.checkpoint`) after every
100 warmup iterations (2100 updates) and after the sampling, with a fingerprint of every option but the output ones
and of the data; a copy of those settings, for reading, is in ``OUT/mcmc.ckpt.json``. Re-running the same command
resumes from it; a run with any other option or data is refused before any work, naming what differs (start afresh
with ``--restart``, which discards both files, or choose another ``--out``).
"""

from __future__ import annotations

import argparse
import datetime
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from ppl_sparsegp import data, results
from ppl_sparsegp.cli_checks import (
    check_counts,
    fingerprint_settings,
    flag,
    prepare_checkpoints,
    refuse_inapplicable,
    refuse_options_of,
)
from ppl_sparsegp.core import likelihoods
from ppl_sparsegp.data import Dataset
from ppl_sparsegp.inducing import initialise
from ppl_sparsegp.models.bsgp import LIKELIHOOD_TERMS, bsgp_kernel
from ppl_sparsegp.models.deep_bsgp import DeepBSGP
from ppl_sparsegp.numpyro.z_priors import Z_PRIORS
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.recipes.bsgp import BSGP_ENGINES, NOISE_MODES, BSGPFit, fit_bsgp
from ppl_sparsegp.reporting import evaluate, plot_fit, plt

BSGP_DEFAULTS = {
    "layers": 1,
    "z_prior": "normal",
    "data_term": "log_expected",
    "iterations": 10_000,
    "kept": 256,
    "inducing": 100,
    "engine": "sghmc",
    "chains": 1,
    "step_size": 0.01,
    "batch_size": 1000,
    "warmup": 500,
    "samples": 500,
    "thinning": 1,
    "noise_variance": 1.0,
}
BSGP_ONLY = ("layers", "z_prior", "data_term", "noise", "iterations", "kept")
"""Options of bsgp alone (default ``None`` in the parser, so that giving one to another method is an error)."""
NOT_FOR_BSGP = {
    "steps": "bsgp runs no SVI fit",
    "lr": "bsgp runs no SVI fit",
    "checkpoint_every": "bsgp checkpoints its chain every 100 warmup iterations",
    "kernel": "bsgp uses an RBF-ARD kernel with the paper's LogNormal priors",
    "kernel_variance": "bsgp starts the kernel variance at 0.1, under a LogNormal(log 0.05, 1) prior",
    "lengthscale": "bsgp starts every lengthscale at sqrt(D), under a LogNormal(0, 1) prior",
    "prior": "bsgp uses the paper's LogNormal hyperpriors",
    "chunk": "bsgp checkpoints its chain every 100 warmup iterations",
}
SGHMC_ONLY = ("iterations", "kept", "step_size", "batch_size")
NUTS_ONLY = ("warmup", "samples", "thinning")
UPDATES_PER_ITERATION = 21
CHECKPOINT_ITERATIONS = 100
LOG_LIKELIHOOD_MAX_ENTRIES = 4_000_000
SETTINGS_FILE = "mcmc.ckpt.json"
"""A readable copy of the settings in the checkpoint's fingerprint (the checkpoint's own copy is the one compared)."""


# --------------------------------------------------------------------------------------------------------
# Command-line syntax and checks


def add_bsgp_arguments(fit: argparse.ArgumentParser) -> None:
    """The bsgp-only options of ``fit`` (defaults ``None``, so that giving one to another method is an error)."""
    d = BSGP_DEFAULTS
    group = fit.add_argument_group(
        "BSGP (bsgp only)",
        description="bsgp samples v, Z and θ of every layer (BSGP, Rossi et al. 2021). --data boston, concrete, "
        "energy, kin8nm, naval, power, protein or yacht loads the paper's protocol (bsgp/<name>, --split = fold); "
        "other data load as for the other methods. It also takes from the MCMC group: --engine sghmc|nuts "
        f"(default: {d['engine']}), --chains (default: {d['chains']}), and with sghmc --step-size (default: "
        f"{d['step_size']}), with nuts --warmup (default: {d['warmup']}), --samples (default: {d['samples']}) and "
        f"--thinning (default: {d['thinning']}); --batch-size (sghmc; default: {d['batch_size']}, at most N), "
        f"--inducing (per layer; default: {d['inducing']}), --init, --likelihood, --noise-variance (initial noise "
        f"variance; default: {d['noise_variance']}). Not the SVI or kernel options, nor --prior or --chunk. "
        "Writes posterior.nc, fit.png, results.json; the chain checkpoints to OUT/mcmc.ckpt and a re-run resumes.",
    )
    group.add_argument(
        "--layers", type=int, default=None, metavar="L", help=f"GP layers; > 1 is deep BSGP (default: {d['layers']})"
    )
    group.add_argument(
        "--z-prior",
        choices=Z_PRIORS,
        default=None,
        help="prior over the inducing inputs of every layer: normal N(0, I), dpp (det K_zz), strauss (repulsive "
        f"point process) or uniform (improper) (default: {d['z_prior']})",
    )
    group.add_argument(
        "--data-term",
        choices=LIKELIHOOD_TERMS,
        default=None,
        help="per-point data term: log_expected log E[p(y|f)] (the released code, Table 6) or expected_log "
        f"E[log p(y|f)] (the paper's Eq. 6) (default: {d['data_term']})",
    )
    group.add_argument(
        "--noise",
        choices=NOISE_MODES,
        default=None,
        help="the noise variance (Student-t: scale): point (optimised alongside the chain; sghmc only) or sampled "
        "(LogNormal(0, 1) prior) (default: point with sghmc, sampled with nuts)",
    )
    group.add_argument(
        "--iterations",
        type=int,
        default=None,
        metavar="I",
        help=f"sghmc: warmup iterations of {UPDATES_PER_ITERATION} SGHMC updates each, with step-size scale "
        f"adaptation; none kept (default: {d['iterations']})",
    )
    group.add_argument(
        "--kept",
        type=int,
        default=None,
        metavar="S",
        help=f"sghmc: draws kept per chain after the warmup, 32 updates apart (default: {d['kept']})",
    )


def dataset_name(name: str) -> str:
    """The name to load for bsgp: a bare BSGP UCI name means the paper's protocol, ``bsgp/<name>``."""
    return f"bsgp/{name}" if name in data.BSGP_NAMES else name


def resolve_bsgp_options(opts: dict[str, Any]) -> dict[str, Any]:
    """Check the bsgp options for ``fit``; fill in bsgp's defaults (the MCMC options it shares with sgpmc included).

    For another method, only checks that no bsgp-only option was given. Options that depend on the dataset
    (``noise``, the likelihood) are settled by :func:`run_bsgp`.

    Raises:
        ValueError: an option given to the wrong method or engine, or a bad value, naming the option.
    """
    refuse_options_of("bsgp", opts, BSGP_ONLY)
    if opts["method"] != "bsgp":
        return opts
    refuse_inapplicable(opts, NOT_FOR_BSGP)
    opts = dict(opts)
    engine = opts["engine"] = opts.get("engine") or BSGP_DEFAULTS["engine"]
    if engine not in BSGP_ENGINES:
        raise ValueError(f"--engine {engine}: bsgp samples with {' or '.join(BSGP_ENGINES)}")
    other, schedule = (
        (NUTS_ONLY, "--iterations and --kept") if engine == "sghmc" else (SGHMC_ONLY, "--warmup and --samples")
    )
    for name in other:
        if opts.get(name) is not None:
            hint = f" (with {engine} use {schedule})" if name in ("iterations", "kept", "warmup", "samples") else ""
            raise ValueError(
                f"{flag(name)} applies to bsgp with --engine {'nuts' if engine == 'sghmc' else 'sghmc'}, "
                f"not {engine}{hint}"
            )
    own = SGHMC_ONLY if engine == "sghmc" else NUTS_ONLY
    for name in ("layers", "z_prior", "data_term", "chains", "inducing", *own):
        if opts.get(name) is None:
            opts[name] = BSGP_DEFAULTS[name]
    check_counts(
        opts, positive=("layers", "chains", "kept", "samples", "thinning"), non_negative=("iterations", "warmup")
    )
    if engine == "nuts":
        if opts["layers"] > 1:
            raise ValueError(
                f"--engine nuts needs --layers 1, got --layers {opts['layers']}: deep BSGP's potential is "
                "stochastic (one random pass through the inner layers), use --engine sghmc"
            )
        if opts.get("noise") == "point":
            raise ValueError("--noise point needs --engine sghmc: NUTS samples every site (use --noise sampled)")
        if opts["samples"] % opts["thinning"]:
            raise ValueError(f"--samples ({opts['samples']}) must be a multiple of --thinning ({opts['thinning']})")
    elif not (math.isfinite(opts["step_size"]) and opts["step_size"] > 0):
        raise ValueError(f"--step-size must be finite and > 0, got {opts['step_size']}")
    return opts


def check_dataset(opts: dict[str, Any], ds: Dataset) -> None:
    """bsgp's checks that need the dataset (the shared ones are in ``cli._check_dataset``)."""
    if ds.task == "binary" and opts["noise"] is not None:
        raise ValueError(f"--noise: the Bernoulli likelihood of {ds.task} data ({ds.name}) has no noise")


# --------------------------------------------------------------------------------------------------------
# The run


def _settle(opts: dict[str, Any], task: str) -> dict[str, Any]:
    """``opts`` with the dataset-dependent defaults of likelihood, noise variance and noise mode filled in."""
    name = opts["likelihood"] or ("gaussian" if task == "regression" else "probit")
    has_noise = task == "regression"
    noise_variance = opts["noise_variance"]
    noise = opts["noise"]
    if has_noise:
        noise_variance = BSGP_DEFAULTS["noise_variance"] if noise_variance is None else noise_variance
        noise = noise or ("sampled" if opts["engine"] == "nuts" else "point")
    return {**opts, "likelihood": name, "noise_variance": noise_variance, "noise": noise}


def _inducing_inputs(opts: dict[str, Any], X: np.ndarray) -> np.ndarray:
    """Initial Z [M, D] of the first layer (the deep model maps it through the inner layers' linear means)."""
    M, seed = opts["inducing"], opts["seed"]
    if opts["init"] == "kmeans":
        Z = initialise.kmeans(X, M, seed=seed)
    elif opts["init"] == "random":
        Z = initialise.random_subset(X, M, seed=seed)
    else:
        Z = initialise.greedy_variance(X, M, bsgp_kernel(X.shape[1]), seed=seed)
    return np.asarray(Z, dtype=X.dtype)


class _WarmupBar:
    """A progress bar over the warmup updates, driven by fit_bsgp's callback after every warmup piece."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled, self.bar = total, enabled and total > 0, None

    def __call__(self, partial: BSGPFit) -> None:
        if not self.enabled or partial.mcmc.num_draws:
            return
        if self.bar is None:
            self.bar = tqdm(total=self.total, desc="warmup", unit="update")
        self.bar.update(partial.mcmc.warmup_done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _deep_dims(model: DeepBSGP, samples: dict[str, np.ndarray]) -> dict[str, list[str]]:
    """Dimension names of the deep model's sites: F^0 = X is input_dim, F^l (0 < l < L) hidden<l>, F^L latent."""

    def width(layer: int) -> str:
        if layer == 0:
            return "input_dim"
        return "latent" if layer == model.num_layers else f"hidden{layer}"

    dims = {}
    for site in samples:
        layer, _, name = site.partition(".")
        if not layer.startswith("layer"):
            continue
        i = int(layer.removeprefix("layer"))
        if name == "Z":
            dims[site] = ["inducing_point", width(i)]
        elif name == "u":
            dims[site] = [width(i + 1), "inducing_point"]
        elif name == "kernel.lengthscale":
            dims[site] = [width(i)]
    return dims


def _observation_dims(y: np.ndarray) -> list[str]:
    return ["obs"] if y.ndim == 1 else ["obs", "output"]


def _inference_data(fit: BSGPFit, X: np.ndarray, y: np.ndarray) -> tuple[Any, list[str]]:
    """posterior.nc's InferenceData and the names of its groups."""
    result, model = fit.mcmc, fit.model
    if isinstance(model, DeepBSGP):
        stats = {
            ("lp" if k == "potential_energy" else k.replace(".", "_")): (-v if k == "potential_energy" else v)
            for k, v in result.extra_fields.items()
        }
        idata = diagnostics.to_inference_data(
            result.samples,
            sample_stats=stats,
            observed_data={"y": y},
            dims={**_deep_dims(model, result.samples), "y": _observation_dims(y)},
            attrs={"engine": result.kernel_name, "num_warmup": result.num_warmup, "thinning": result.thinning},
        )
        return idata, ["posterior", "sample_stats", "observed_data"]
    entries = X.shape[0] * result.num_chains * result.num_draws * (1 if y.ndim == 1 else y.shape[1])
    with_ll = entries <= LOG_LIKELIHOOD_MAX_ENTRIES
    idata = diagnostics.from_mcmc(
        result, model, X, y, log_likelihood=None if with_ll else False, posterior_predictive=False
    )
    groups = ["posterior", "sample_stats", "observed_data"] + (["log_likelihood"] if with_ll else [])
    return idata, groups


def _figure(fit: BSGPFit, task: str, evaluated_on: str, y_eval: np.ndarray, mean: np.ndarray, var: np.ndarray):
    """plot_fit's predictive picture (right) beside the potential energy of the kept draws (left)."""
    figure = plot_fit(np.zeros(0), task, evaluated_on, y_eval, mean, var)
    ax = figure.axes[0]
    ax.clear()
    energy = fit.mcmc.extra_fields.get("potential_energy")
    if energy is not None:
        for c, trace in enumerate(np.asarray(energy)):
            ax.plot(np.arange(1, len(trace) + 1), trace, lw=0.8, label=f"chain {c}")
        what = "minibatch estimate, " if fit.mcmc.kernel_name != "NUTS" else ""
        ax.set(xlabel="kept draw", ylabel=f"potential energy ({what}standardised units)", title="kept draws")
        if len(energy) > 1:
            ax.legend(loc="best", fontsize=8)
    figure.tight_layout()
    return figure


def run_bsgp(
    opts: dict[str, Any], ds: Dataset, argv: Sequence[str], *, versions: dict[str, str] | None = None
) -> dict[str, Any]:
    """Sample BSGP on ``ds`` (original units; standardised here); write posterior.nc, fit.png and results.json.

    ``opts`` come from ``cli.resolve_options`` (through :func:`resolve_bsgp_options`); the shared dataset checks
    have been made. Raises ``ValueError`` for a problem with the options, the data or the checkpoint before
    anything is compiled, and ``KeyboardInterrupt`` after a Ctrl-C once the chain's checkpoint is saved.
    """
    check_dataset(opts, ds)
    opts = _settle(opts, ds.task)
    dtype = np.dtype(opts["dtype"])
    std, scaler = data.standardize(ds)
    X, y = std.X_train.astype(dtype), std.y_train.astype(dtype)
    out = Path(opts["out"])
    settings = fingerprint_settings(opts)
    found = prepare_checkpoints(opts, [out / "mcmc.ckpt"], settings, X, y, also_discard=[out / SETTINGS_FILE])
    resumed = None
    if out / "mcmc.ckpt" in found:
        counters = found[out / "mcmc.ckpt"].counters
        resumed = {"warmup_done": counters["warmup_done"], "draws_done": counters["draws_done"]}
    likelihood = likelihoods.likelihood_with_noise(opts["likelihood"], opts["noise_variance"], dtype)
    Z = _inducing_inputs(opts, X)
    sghmc = opts["engine"] == "sghmc"
    if sghmc:
        num_warmup = UPDATES_PER_ITERATION * opts["iterations"]
        schedule = {"num_iterations": opts["iterations"], "num_kept": opts["kept"]}
        schedule.update(step_size=opts["step_size"], batch_size=opts["batch_size"])
        schedule["warmup_chunk_size"] = UPDATES_PER_ITERATION * CHECKPOINT_ITERATIONS
    else:
        num_warmup = opts["warmup"]
        schedule = {"num_warmup": num_warmup, "num_samples": opts["samples"], "thinning": opts["thinning"]}
    results.write_json(out / SETTINGS_FILE, settings)
    bar = _WarmupBar(num_warmup, not (opts["no_progress"] or opts["quiet"]))
    start = time.perf_counter()
    try:
        fit = fit_bsgp(
            X,
            y,
            key=jax.random.PRNGKey(opts["seed"]),
            likelihood=likelihood,
            num_layers=opts["layers"],
            num_inducing=opts["inducing"],
            Z=Z,
            z_prior=opts["z_prior"],
            likelihood_term=opts["data_term"],
            noise=opts["noise"] or "point",
            engine=opts["engine"],
            num_chains=opts["chains"],
            checkpoint=str(out / "mcmc.ckpt"),
            progress=not (opts["no_progress"] or opts["quiet"]),
            callback=bar,
            fingerprint=settings,
            **schedule,
        )
    finally:
        bar.close()
    if fit.mcmc.interrupted:
        raise KeyboardInterrupt
    fit_seconds = time.perf_counter() - start

    has_test = ds.y_test is not None
    evaluated_on = "test" if has_test else "train"
    X_eval = (std.X_test if has_test else std.X_train).astype(dtype)
    y_eval = ds.y_test if has_test else ds.y_train
    y_eval_std = (std.y_test if has_test else std.y_train).astype(dtype)
    key = jax.random.fold_in(jax.random.PRNGKey(opts["seed"]), 1)  # the deep model's inner-layer draws
    start = time.perf_counter()
    logp = fit.log_predictive_density(X_eval, y_eval_std, key=key)
    pred = fit.predict(X_eval, key=key)
    predict_seconds = time.perf_counter() - start
    scores, mean, var = evaluate((pred.y_mean, pred.y_var, logp), y_eval, scaler, ds.task)
    if ds.task == "regression":
        scores = {"mnll": scores["nlpd"], **scores}

    idata, groups = _inference_data(fit, X, y)
    mcmc = fit.mcmc
    stats = mcmc.extra_fields
    draws = mcmc.flat_samples()
    num_samples = 32 * opts["kept"] if sghmc else opts["samples"]
    record = {
        "method": "bsgp",
        "engine": opts["engine"],
        "layers": opts["layers"],
        "z_prior": opts["z_prior"],
        "data_term": opts["data_term"],
        "noise": opts["noise"],
        "likelihood": opts["likelihood"],
        "data": ds.name,
        "split": opts["split"],
        "task": ds.task,
        "n_train": int(X.shape[0]),
        "n_eval": int(X_eval.shape[0]),
        "input_dim": int(X.shape[1]),
        "num_outputs": ds.num_outputs,
        "evaluated_on": evaluated_on,
        "metrics": scores,
        "options": opts,
        "argv": list(argv),
        "sampler": {
            "kernel": mcmc.kernel_name,
            "chains": mcmc.num_chains,
            "draws_per_chain": mcmc.num_draws,
            "warmup_updates": num_warmup,
            "sample_updates": num_samples,
            "thinning": mcmc.thinning,
            "updates_per_iteration": UPDATES_PER_ITERATION if sghmc else None,
            "batch_size": min(opts["batch_size"], int(X.shape[0])) if sghmc else int(X.shape[0]),
            "step_size": opts["step_size"] if sghmc else None,
        },
        "likelihood_parameters_standardised": {
            k: np.mean(v, axis=0) for k, v in draws.items() if k.startswith("likelihood.")
        },
        "divergences": int(np.sum(stats["diverging"])) if "diverging" in stats else None,
        "resumed_from": resumed,
        "warmup_seconds": mcmc.warmup_seconds,
        "sample_seconds": mcmc.sample_seconds,
        "updates_per_second": num_warmup / mcmc.warmup_seconds if num_warmup and mcmc.warmup_seconds > 0 else None,
        "fit_seconds": fit_seconds,
        "predict_seconds": predict_seconds,
        "backend": jax.default_backend(),
        "versions": dict(versions or {}),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "files": {
            "posterior": "posterior.nc",
            "posterior_groups": groups,
            "figure": "fit.png",
            "checkpoint": "mcmc.ckpt",
            "checkpoint_settings": SETTINGS_FILE,
        },
    }
    if not has_test:
        record["note"] = f"{ds.name} has no test targets; the metrics are on the training data"
    figure = _figure(fit, ds.task, evaluated_on, y_eval, mean, var)
    try:
        outputs = {"posterior.nc": diagnostics.netcdf_file(idata), "fit.png": results.figure_file(figure)}
        results.write_output_set(out, {**outputs, "results.json": results.json_file(record)})
    finally:
        plt.close(figure)
    return record


def summary_line(record: dict[str, Any], out: Path) -> str:
    """What ``fit bsgp`` prints on success."""
    m, s, o = record["metrics"], record["sampler"], record["options"]
    if record["task"] == "regression":
        scores = f"MNLL {m['mnll']:.4g}  RMSE {m['rmse']:.4g} (original units)"
    else:
        scores = f"accuracy {m['accuracy']:.4f}  NLL {m['nll']:.4f}"
    layers = f"{record['layers']} layer{'s' if record['layers'] > 1 else ''}"
    speed = "" if record["updates_per_second"] is None else f", {record['updates_per_second']:.0f} updates/s"
    resumed = record["resumed_from"]
    resumed = f", resumed after {resumed['warmup_done']} warmup updates" if resumed else ""
    divergences = "" if record["divergences"] is None else f", {record['divergences']} divergences"
    return "\n".join(
        [
            f"bsgp ({record['engine']}, {layers}, {record['z_prior']} Z prior) on {record['data']} "
            f"(split {record['split']}; N = {record['n_train']}, D = {record['input_dim']}, M = {o['inducing']})",
            f"  {s['warmup_updates']} warmup updates in {record['warmup_seconds']:.1f} s{speed}{resumed}; "
            f"{s['chains']} chain(s) x {s['draws_per_chain']} draws in {record['sample_seconds']:.1f} s{divergences}",
            f"  {record['evaluated_on']} {scores}",
            f"  wrote {out / 'results.json'}, posterior.nc, fit.png",
        ]
    )
