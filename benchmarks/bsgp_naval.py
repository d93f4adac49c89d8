"""Why BSGP's NAVAL score misses Table 6 (issue 24, BSGP item 2): diagnostics of one fold under chosen options.

Run (from the repository root)::

    .venv/bin/python benchmarks/bsgp_naval.py --iterations 2000 --label shared            # the recipe's defaults
    .venv/bin/python benchmarks/bsgp_naval.py --iterations 2000 --noise-per-output --label per-output
    .venv/bin/python benchmarks/bsgp_naval.py --iterations 10000 --kept 256 --noise-per-output --label full
    .venv/bin/python benchmarks/bsgp_naval.py --iterations 10000 --kept 256 --seed 1 --label shared-seed1

One BSGP run on NAVAL (``load_bsgp_uci("naval", fold)``, two outputs, X standardised on the whole data, y per column
on training statistics; M = 100 from k-means seeded by the fold; the sampler's key is ``--seed``, by default the
fold as in ``benchmarks/bsgp_uci.py``; :func:`ppl_sparsegp.recipes.bsgp.fit_bsgp` with
the released sampler, the run of ``benchmarks/bsgp_uci.py``) and, of its kept draws at the test points:

* the noise variance(s) the chain settled at (standardised and original units), beside the test mean squared error
  of the mixture's mean per output;
* the predictive variance per draw split into its latent part s_n (the conditional variance of f) and the noise
  σ², as medians over test points and draws, per output;
* the test MNLL in original units, overall and per output, the 5 worst test points' NLL and the MNLL without the
  worst 1 %, per output; the median absolute error and z-score (error over the mixture's predictive standard
  deviation) and the share of |z| > 3, per output (fields added after the run ``shared-it2000``);
* the test MNLL of the same draws with the prediction's Cholesky jitter made absolute, 1e-7 as the authors' code
  (relative jitter 1e-7 / σ_k² per draw, instead of the default relative 1e-8 × σ_k²);
* the window MNLL every ``--eval-every`` iterations (mixture over the sampler's 64 window states).

Output: one entry ``<label>`` in ``benchmarks/results/bsgp_naval.json`` (rewritten atomically).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from svgp_uci import _loadavg, environment, write_json_atomic  # noqa: E402

from ppl_sparsegp import data  # noqa: E402
from ppl_sparsegp.inducing.initialise import kmeans  # noqa: E402
from ppl_sparsegp.posterior.predict import draw_moments  # noqa: E402
from ppl_sparsegp.recipes.bsgp import UPDATES_PER_ITERATION, fit_bsgp  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "bsgp_naval.json"
PAPER_NAVAL = -8.22  # Table 6, BSGP L = 1, mean over 8 folds (± 0.04)
AUTHORS_JITTER = 1e-7  # absolute, added to K_zz in the released code (spec 001 §2.4)


def per_output(x: np.ndarray) -> list[float]:
    """Column means of x [..., P] over every leading axis, as a list of P floats."""
    return np.mean(x.reshape(-1, x.shape[-1]), axis=0).tolist()


def diagnose(fit, Xs: np.ndarray, ys: np.ndarray, scaler: data.Standardizer) -> dict:
    """The quantities of the module docstring for the kept draws of ``fit`` at the test points (Xs, ys
    standardised)."""
    samples = fit.mcmc.flat_samples()
    noise = np.asarray(samples["likelihood.variance"])  # [S] or [S, P]
    f_mean, f_var, _, y_var = (np.asarray(m) for m in draw_moments(fit.model, samples, Xs))  # [S, N, P]
    noise_part = y_var - f_var
    y_std = np.asarray(scaler.y_scale, np.float64).reshape(-1)
    mixture_mean = f_mean.mean(axis=0)  # [N, P]
    mixture_var = np.mean(y_var + f_mean**2, axis=0) - mixture_mean**2  # the mixture's predictive variance of y
    logp = fit.log_predictive_density(Xs, ys, standardizer=scaler)  # [N, P]
    nll = np.sort(-logp, axis=0)[::-1]  # [N, P], worst first
    cut = max(1, nll.shape[0] // 100)
    variance = np.asarray(samples["kernel.variance"])
    jittered = []
    for s in range(variance.shape[0]):  # an absolute jitter is a relative one of AUTHORS_JITTER / σ_k² per draw
        model = dataclasses.replace(fit.model, jitter=AUTHORS_JITTER / float(variance[s]))
        one = {k: v[s] for k, v in samples.items()}
        jittered.append(np.asarray(model.predict_log_density(one, Xs, ys))[None])
    per_draw = np.concatenate([np.asarray(j) for j in jittered])  # [S, N, P], standardised units
    mixture = np.logaddexp.reduce(per_draw, axis=0) - np.log(per_draw.shape[0])
    absolute = scaler.log_density_to_original(mixture)
    return {
        "test_mnll": float(-logp.mean()),
        "test_mnll_per_output": (-logp.mean(axis=0)).tolist(),
        "worst_5_nll_per_output": nll[:5].T.tolist(),
        "test_mnll_without_worst_1pct_per_output": nll[cut:].mean(axis=0).tolist(),
        "max_abs_error_standardised_per_output": np.max(np.abs(mixture_mean - ys), axis=0).tolist(),
        "median_abs_error_standardised_per_output": np.median(np.abs(mixture_mean - ys), axis=0).tolist(),
        "median_abs_z_per_output": np.median(np.abs(mixture_mean - ys) / np.sqrt(mixture_var), axis=0).tolist(),
        "share_abs_z_above_3_per_output": np.mean(
            np.abs(mixture_mean - ys) > 3 * np.sqrt(mixture_var), axis=0
        ).tolist(),
        "test_mnll_absolute_jitter_1e-7": float(-absolute.mean()),
        "noise_variance_standardised_last": np.atleast_1d(noise[-1]).tolist(),
        "noise_variance_standardised_median": np.atleast_1d(np.median(noise, axis=0)).tolist(),
        "noise_std_original_median": (np.sqrt(np.median(noise, axis=0)) * y_std).tolist(),
        "test_mse_standardised_per_output": np.mean((mixture_mean - ys) ** 2, axis=0).tolist(),
        "test_rmse_original_per_output": (np.sqrt(np.mean((mixture_mean - ys) ** 2, axis=0)) * y_std).tolist(),
        "latent_variance_median_per_output": np.median(f_var.reshape(-1, f_var.shape[-1]), axis=0).tolist(),
        "noise_part_median_per_output": np.median(noise_part.reshape(-1, noise_part.shape[-1]), axis=0).tolist(),
        "latent_share_of_predictive_variance_per_output": per_output(f_var / y_var),
        "between_draw_variance_of_mean_median_per_output": np.median(f_mean.var(axis=0), axis=0).tolist(),
        "kernel_variance_median": float(np.median(variance)),
        "lengthscale_median": np.median(np.asarray(samples["kernel.lengthscale"]), axis=0).tolist(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the sampler's PRNG key (default: the fold, as bsgp_uci.py); Z's k-means start stays seeded by the fold",
    )
    parser.add_argument("--iterations", type=int, default=2000, help="warmup iterations of 21 updates")
    parser.add_argument("--kept", type=int, default=64, help="draws kept, 32 updates apart")
    parser.add_argument("--eval-every", type=int, default=500)
    parser.add_argument("--noise-per-output", action="store_true", help="one noise variance per output column")
    parser.add_argument("--label", required=True, help="the entry's name in the JSON")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.iterations % args.eval_every:
        parser.error("--iterations must be a multiple of --eval-every")
    raw = data.load_bsgp_uci("naval", args.fold)
    ds, scaler = data.standardize(raw)
    X, y = np.asarray(ds.X_train, np.float64), np.asarray(ds.y_train, np.float64)
    Xs, ys = np.asarray(ds.X_test, np.float64), np.asarray(ds.y_test, np.float64)
    Z = kmeans(X, 100, seed=args.fold)
    seed = args.fold if args.seed is None else args.seed
    trace: list[dict] = []
    options = {"noise_per_output": True} if args.noise_per_output else {}
    command = " ".join(
        ["python", "benchmarks/bsgp_naval.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
    )
    settings = {
        "fold": args.fold,
        "seed": seed,
        "iterations": args.iterations,
        "updates_warmup": UPDATES_PER_ITERATION * args.iterations,
        "kept": args.kept,
        "options": options,
        "command": command,
        "paper_table6": PAPER_NAVAL,
    }

    def save(entry: dict) -> None:
        """Write ``entry`` as the run ``--label`` (during warmup too, so that a stopped run leaves its trace)."""
        results = json.loads(args.output.read_text()) if args.output.exists() else {}
        results.setdefault("benchmark", "BSGP on NAVAL against Table 6: noise, jitter and schedule diagnostics")
        results["environment"] = environment()
        results.setdefault("runs", {})[args.label] = entry
        write_json_atomic(args.output, results)

    def on_piece(partial) -> None:
        """During warmup: the window MNLL and the current noise variance(s), saved with the trace so far."""
        result = partial.mcmc
        if result.warmup_done == 0 or result.num_draws:
            return
        window = partial.window_draws(X, y)
        mnll = float(-np.mean(partial.log_predictive_density(Xs, ys, samples=window, standardizer=scaler)))
        done = result.warmup_done // UPDATES_PER_ITERATION
        noise = np.exp(np.asarray(result.last_state.z["likelihood.variance"]))  # the point estimate, log-stored
        trace.append({"iteration": done, "seconds": result.warmup_seconds, "window_mnll": mnll,
                      "noise_variance_standardised": np.atleast_1d(noise).tolist()})  # fmt: skip
        print(f"  it {done}: window MNLL {mnll:.3f} ({result.warmup_seconds:.0f}s) noise {noise}", flush=True)
        save({**settings, "status": "warmup", "window_trace": trace})

    load_before = _loadavg()
    t0 = time.perf_counter()
    fit = fit_bsgp(
        X, y, key=jax.random.PRNGKey(seed), Z=Z, num_iterations=args.iterations, num_kept=args.kept,
        batch_size=1000, warmup_chunk_size=UPDATES_PER_ITERATION * args.eval_every, callback=on_piece, **options,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    entry = {
        **settings,
        "status": "finished",
        **diagnose(fit, Xs, ys, scaler),
        "window_trace": trace,
        "fit_wall_seconds": wall,
        "loadavg_1min_before": load_before,
        "loadavg_1min_after": _loadavg(),
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    save(entry)
    print(json.dumps({k: v for k, v in entry.items() if k != "window_trace"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
