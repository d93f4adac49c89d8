"""SGPMC against its Gaussian (SVGP) starting point on Rätsch `image` (thesis ch. 5, section 5.6.1, Fig 5.1).

Run (from the repository root)::

    nice -n 10 .venv/bin/python benchmarks/sgpmc_image.py --splits 0 1 2 --M 5 10 20 50
    nice -n 10 .venv/bin/python benchmarks/sgpmc_image.py --splits 3 4   # more splits (finished cells are skipped)
    .venv/bin/python benchmarks/sgpmc_image.py --quick                    # smoke test, output in the temp folder

Protocol (``../shared/specs/003_matthews_thesis.md`` sections 3.7 and 4.6):

* data: the pooled Rätsch `image` set (train + test of realisation 1 = all 2310 rows of the IDA pool), with exact
  duplicate rows removed (2086 unique rows; every duplicate carries the same label), so that no test point also
  sits in the training set. Split s: ``numpy.random.default_rng(s).permutation(2086)``; the first 1000 rows train,
  the next 1019 test (the thesis' 1000 / 1019; 67 rows unused). Labels -1/+1 -> 0./1. floats. Inputs standardised
  with the training mean and (ddof-0) std (``Standardizer.fit(X_train)``).
* model: RBF-ARD (lengthscales 1, variance 1 initially), probit Bernoulli, Gamma(1.1, 1) (shape, rate) priors on
  every lengthscale and the variance (``default_priors``, the thesis code's prior), M inducing inputs from
  k-means on the training inputs (seed = split).
* Gaussian fit (SVGP, whitened full-covariance q(u), MAP hyperparameters): Adam, ``--fixed-z-steps`` with Z held
  at k-means, then the rest of ``--svi-steps`` with Z free (thesis code: BFGS, 100 iterations Z fixed, then up
  to 10,000).
* SGPMC: Z fixed at the SVGP's; NUTS (in place of the thesis' BO-tuned HMC) jointly on (v, θ), started at the
  MAP θ and a draw of q(v) per chain; ``--chains`` chains run one after the other (see ``CHAIN_METHOD``),
  ``--warmup`` adaptation steps and ``--samples`` kept draws per chain (default 2 x (200 + 200); thesis code:
  2000 HMC draws, 300 burn-in, thinning 3), maximum tree depth 8.
* metrics on the 1019 test points: mean log predictive density (SGPMC: the mixture over all draws, averaged
  before the log), error rate (p(y=1) > 0.5), their SGPMC - SVGP differences; NUTS: ArviZ bulk ESS of each of
  the 19 hyperparameters (18 lengthscales + variance) divided by the sampling seconds (``MCMCResult
  .sample_seconds``, which includes compiling the sampling loop, measured separately here and also subtracted
  for a second figure), min and median over hyperparameters; divergent transitions; max rank-normalised R-hat
  (hyperparameters, and all sampled sites including v). Also kept per cell: ESS per 1000 leapfrog steps, tree
  sizes, step size, the MAP and posterior-mean hyperparameters, the SVI loss drift over its last 1000 steps.

Output: ``benchmarks/results/sgpmc_image.json`` is rewritten atomically after every finished (M, split) cell;
cells already finished with the same settings are skipped when the script is run again. ``--quick`` writes to
the temporary folder instead.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata as _md
import json
import os
import platform
import shlex
import sys
import tempfile
import time
import traceback
from pathlib import Path

# One thread for XLA and OpenBLAS on the shared 2-core machine (see svgp_uci.py); set them yourself to override.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import NUTS  # noqa: E402

from ppl_sparsegp.core.kernels import RBF  # noqa: E402
from ppl_sparsegp.core.likelihoods import Bernoulli  # noqa: E402
from ppl_sparsegp.data import Standardizer, load_raetsch  # noqa: E402
from ppl_sparsegp.inducing.initialise import kmeans  # noqa: E402
from ppl_sparsegp.infer.mcmc import run_mcmc  # noqa: E402
from ppl_sparsegp.posterior import diagnostics  # noqa: E402
from ppl_sparsegp.posterior.predict import log_predictive_density, posterior_predictive  # noqa: E402
from ppl_sparsegp.recipes.sgpmc import fit_sgpmc  # noqa: E402
from ppl_sparsegp.results import write_json  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "sgpmc_image.json"
N_TRAIN, N_TEST = 1000, 1019
HYPER_SITES = ["kernel.lengthscale", "kernel.variance"]
# Chains run one after the other inside one compiled program, and predictions map over draws one at a time:
# ops.cholesky (lax.cond + while_loop + debug.callback) under vmap hung jaxlib 0.10.2 on CPU (a batched LAPACK
# Cholesky waiting on a starved thread pool) in predict.py with its default batch of 64 draws; without vmap the
# cond also keeps its cheap branch (under vmap both branches run: 3 Choleskys and a host callback each).
CHAIN_METHOD = "sequential"
PREDICT_BATCH = 1
# Thesis Fig 5.1, read off the figure (no table is printed): hold-out lpd per point and SGPMC - Gaussian gain.
THESIS = {
    "lpd_range": [-0.4, -0.2],
    "gain_range": [0.0, 0.04],
    "gain_shape": "about 0 at small M, small (< 0.04) but consistently positive at larger M",
}


def _version(dist: str) -> str | None:
    try:
        return _md.version(dist)
    except _md.PackageNotFoundError:
        return None


def environment() -> dict:
    env = {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version()}
    env |= {d: _version(d) for d in ("jax", "jaxlib", "numpyro", "arviz", "numpy", "scikit-learn", "ppl-sparsegp")}
    env |= {v: os.environ.get(v) for v in ("XLA_FLAGS", "OPENBLAS_NUM_THREADS")}
    return env


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def image_split(split: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Standardised (X_train [1000, 18], y_train [1000], X_test [1019, 18], y_test [1019]) of split ``split``."""
    ds = load_raetsch("image", 1)
    X = np.vstack([ds.X_train, ds.X_test]).astype(np.float64)
    y = np.concatenate([ds.y_train, ds.y_test]).astype(np.float64)
    _, first = np.unique(X, axis=0, return_index=True)
    keep = np.sort(first)  # the first copy of each distinct row, in pool order
    X, y = X[keep], y[keep]
    perm = np.random.default_rng(split).permutation(len(X))
    train, test = perm[:N_TRAIN], perm[N_TRAIN : N_TRAIN + N_TEST]
    scaler = Standardizer.fit(X[train])
    return scaler.transform_x(X[train]), y[train], scaler.transform_x(X[test]), y[test]


def _stats(values: np.ndarray) -> dict:
    return {"min": float(np.min(values)), "median": float(np.median(values)), "max": float(np.max(values))}


def _compile_seconds(fit, X: np.ndarray, y: np.ndarray, settings: dict, key: jax.Array) -> float:
    """Time of a 1-warmup-step, ``thinning``-draw NUTS run of the same model: about the compile cost of the loops.

    The sampling loop is compiled inside ``run_mcmc``'s timed region (``sample_seconds``), so this estimate lets
    us also report ESS/s on sampling time alone. Its draws are discarded.
    """
    nuts = NUTS(fit.model.model, max_tree_depth=settings["max_tree_depth"])
    start = time.perf_counter()
    res = run_mcmc(
        nuts, X, y, num_warmup=1, num_samples=1, num_chains=settings["chains"], chain_method=CHAIN_METHOD, key=key
    )
    return res.sample_seconds if res.sample_seconds > 0 else time.perf_counter() - start


def run_cell(M: int, split: int, settings: dict) -> dict:
    """Fit SVGP and SGPMC for one (M, split) and evaluate both; returns the cell's JSON record."""
    X, y, Xs, ys = image_split(split)
    D = X.shape[1]
    Z0 = kmeans(X, M, seed=split)
    key = jax.random.fold_in(jax.random.PRNGKey(split), M)
    load_before = _loadavg()
    t0 = time.perf_counter()
    fit = fit_sgpmc(
        X,
        y,
        kernel=RBF(lengthscale=np.ones(D), variance=1.0),
        likelihood=Bernoulli(),
        Z=Z0,
        key=key,
        svi_steps=settings["svi_steps"],
        fixed_z_steps=settings["fixed_z_steps"],
        learning_rate=settings["learning_rate"],
        num_warmup=settings["warmup"],
        num_samples=settings["samples"],
        num_chains=settings["chains"],
        thinning=settings["thinning"],
        chain_method=CHAIN_METHOD,
        engine="nuts",
        engine_options={"max_tree_depth": settings["max_tree_depth"]},
    )
    fit_wall = time.perf_counter() - t0
    mcmc = fit.mcmc

    # Gaussian (SVGP) predictions.
    params = fit.svi.params
    lpd_svgp = np.asarray(fit.svgp.predict_log_density(params, Xs, ys))
    p_svgp, _ = fit.svgp.predict_y(params, Xs)
    err_svgp = float(np.mean((np.asarray(p_svgp) > 0.5) != (ys > 0.5)))
    losses = np.asarray(fit.svi.losses)
    neg_elbo = float(-fit.svgp.elbo(params, X, y))

    # SGPMC predictions: the mixture over every kept draw of every chain.
    t0 = time.perf_counter()
    draws = mcmc.flat_samples()
    lpd_mc = np.asarray(log_predictive_density(fit.model, draws, Xs, ys, batch=PREDICT_BATCH))
    p_mc = posterior_predictive(fit.model, draws, Xs, batch=PREDICT_BATCH).y_mean
    err_mc = float(np.mean((np.asarray(p_mc) > 0.5) != (ys > 0.5)))
    predict_seconds = time.perf_counter() - t0

    # NUTS diagnostics.
    idata = diagnostics.from_mcmc(mcmc, fit.model, X, y, log_likelihood=False, posterior_predictive=False)
    ess = np.concatenate([np.ravel(az.ess(idata, var_names=[s], method="bulk")[s].values) for s in HYPER_SITES])
    rhat_hyper = np.concatenate([np.ravel(az.rhat(idata, var_names=[s])[s].values) for s in HYPER_SITES])
    rhat_all = max(float(np.nanmax(v.values)) for v in az.rhat(idata).data_vars.values())
    compile_s = _compile_seconds(fit, X, y, settings, jax.random.PRNGKey(0))
    run_s = max(mcmc.sample_seconds - compile_s, 1e-9)
    extra = mcmc.extra_fields
    hyper_mean = {s: np.mean(mcmc.samples[s], axis=(0, 1)) for s in HYPER_SITES}
    hyper_map = {s: np.asarray(params[f"{s}_map"]) for s in HYPER_SITES}

    lpd_s, lpd_m = float(np.mean(lpd_svgp)), float(np.mean(lpd_mc))
    return {
        "M": M,
        "split": split,
        "settings": settings,
        "n_train": int(len(y)),
        "n_test": int(len(ys)),
        "svgp_lpd": lpd_s,
        "sgpmc_lpd": lpd_m,
        "lpd_difference": lpd_m - lpd_s,  # SGPMC - SVGP, nats per test point; > 0: MCMC better
        "svgp_error": err_svgp,
        "sgpmc_error": err_mc,
        "error_difference": err_mc - err_svgp,
        "ess_bulk_hyper": _stats(ess),
        "ess_per_second_hyper": _stats(ess / mcmc.sample_seconds),
        "ess_per_second_hyper_excl_compile": _stats(ess / run_s),
        "ess_per_1000_gradients_hyper": _stats(1000.0 * ess / max(int(np.sum(extra["num_steps"])), 1)),
        "divergences": int(np.sum(extra["diverging"])),
        "rhat_max_hyper": float(np.max(rhat_hyper)),
        "rhat_max_all": rhat_all,
        "num_draws": int(mcmc.num_chains * mcmc.num_draws),
        "mean_tree_steps": float(np.mean(extra["num_steps"])),
        "sample_gradients": int(np.sum(extra["num_steps"])),
        "step_size": float(np.mean(extra["adapt_state.step_size"])),
        "accept_prob": float(np.mean(extra["accept_prob"])),
        "svi_final_neg_elbo": neg_elbo,
        "svi_loss_last_100": float(np.mean(losses[-100:])),
        "svi_loss_change_last_1000": float(np.mean(losses[-100:]) - np.mean(losses[-1100:-1000]))
        if len(losses) >= 1100
        else None,
        "svgp_variance": float(hyper_map["kernel.variance"]),
        "sgpmc_variance_mean": float(hyper_mean["kernel.variance"]),
        "svgp_lengthscale": hyper_map["kernel.lengthscale"].tolist(),
        "sgpmc_lengthscale_mean": hyper_mean["kernel.lengthscale"].tolist(),
        "svi_seconds": fit.svi.run_seconds,
        "warmup_seconds": mcmc.warmup_seconds,
        "sample_seconds": mcmc.sample_seconds,
        "compile_seconds_estimate": compile_s,
        "predict_seconds": predict_seconds,
        "fit_wall_seconds": fit_wall,
        "loadavg_1min_before": load_before,
        "loadavg_1min_after": _loadavg(),
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }


def summarise(cells: dict, settings: dict) -> dict:
    """Mean and (ddof-0) std over the finished splits of each M."""
    keys = ["svgp_lpd", "sgpmc_lpd", "lpd_difference", "svgp_error", "sgpmc_error", "error_difference"]
    out = {}
    for M in sorted({c["M"] for c in cells.values()}):
        done = [c for c in cells.values() if c["M"] == M and "sgpmc_lpd" in c and c["settings"] == settings]
        if not done:
            continue
        row: dict = {"splits": sorted(c["split"] for c in done)}
        for k in keys:
            v = np.array([c[k] for c in done])
            row[k] = {"mean": float(v.mean()), "std": float(v.std())}
        row["lpd_difference_positive_splits"] = int(sum(c["lpd_difference"] > 0 for c in done))
        for k in (
            "ess_per_second_hyper",
            "ess_per_second_hyper_excl_compile",
            "ess_per_1000_gradients_hyper",
            "ess_bulk_hyper",
        ):
            row[k] = {s: float(np.mean([c[k][s] for c in done])) for s in ("min", "median")}
        row["divergences_total"] = int(sum(c["divergences"] for c in done))
        row["rhat_max_hyper"] = float(max(c["rhat_max_hyper"] for c in done))
        row["rhat_max_all"] = float(max(c["rhat_max_all"] for c in done))
        row["sample_seconds_mean"] = float(np.mean([c["sample_seconds"] for c in done]))
        row["fit_wall_seconds_mean"] = float(np.mean([c["fit_wall_seconds"] for c in done]))
        out[str(M)] = row
    return out


def markdown_table(summary: dict) -> str:
    def pm(s: dict, scale: float = 1.0, fmt: str = ".3f") -> str:
        return f"{s['mean'] * scale:{fmt}} ± {s['std'] * scale:{fmt.lstrip('+')}}"

    lines = [
        "| M | splits | SVGP lpd | SGPMC lpd | SGPMC − SVGP (>0 in) | SVGP error % | SGPMC error % | "
        "ESS/s hyper min / median | divergences | max R-hat hyper / all |",
        "|---:|---:|---|---|---|---|---|---|---:|---|",
    ]
    for M, r in summary.items():
        ess = r["ess_per_second_hyper"]
        lines.append(
            f"| {M} | {len(r['splits'])} | {pm(r['svgp_lpd'])} | {pm(r['sgpmc_lpd'])} | "
            f"{pm(r['lpd_difference'], fmt='+.4f')} ({r['lpd_difference_positive_splits']}/{len(r['splits'])}) | "
            f"{pm(r['svgp_error'], 100, '.1f')} | {pm(r['sgpmc_error'], 100, '.1f')} | "
            f"{ess['min']:.2f} / {ess['median']:.2f} | {r['divergences_total']} | "
            f"{r['rhat_max_hyper']:.3f} / {r['rhat_max_all']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--splits", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--M", nargs="+", type=int, default=[5, 10, 20, 50])
    parser.add_argument("--svi-steps", type=int, default=3000)
    parser.add_argument("--fixed-z-steps", type=int, default=200)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--thinning", type=int, default=1)
    parser.add_argument("--max-tree-depth", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="tiny smoke test (M=5, split 0), temp-folder output")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.splits, args.M = args.splits[:1], args.M[:1]
        args.svi_steps, args.fixed_z_steps, args.warmup, args.samples = 200, 50, 30, 40
    output = args.output or (Path(tempfile.gettempdir()) / "sgpmc_image_quick.json" if args.quick else RESULTS)
    command = " ".join(
        ["python", "benchmarks/sgpmc_image.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
    )
    settings = {
        k: getattr(args, k)
        for k in ("svi_steps", "fixed_z_steps", "learning_rate", "warmup", "samples", "chains", "thinning")
    } | {"max_tree_depth": args.max_tree_depth}
    config = {
        "settings": settings,
        "data": "raetsch/image realisation 1 train+test pooled (2310 rows), exact duplicates removed (2086), "
        f"split s = default_rng(s).permutation: {N_TRAIN} train / {N_TEST} test; X standardised on train",
        "model": "RBF-ARD + probit Bernoulli, Gamma(1.1, 1) priors on lengthscales and variance, Z0 = k-means "
        "(seed = split); SVGP: whitened full-cov q(u), MAP θ, Adam (Z fixed first); SGPMC: NUTS on (v, θ), Z fixed",
        "keys": "jax.random.fold_in(PRNGKey(split), M)",
        "thesis_fig_5_1": THESIS,
    }

    results = json.loads(output.read_text()) if output.exists() else {}
    results.setdefault("benchmark", "SGPMC vs SVGP on Rätsch image (Matthews thesis Fig 5.1)")
    results.setdefault("commands", [])
    if command not in results["commands"]:
        results["commands"].append(command)
    cells = results.setdefault("cells", {})

    def save() -> None:
        results.update(config=config, date=_dt.date.today().isoformat(), environment=environment())
        results["summary"] = summarise(cells, settings)
        write_json(output, results)

    for split in args.splits:  # every finished split covers all M
        for M in args.M:
            name = f"M{M}_split{split}"
            prev = cells.get(name)
            if prev is not None and "sgpmc_lpd" in prev and prev["settings"] == settings:
                print(f"[skip] {name}: done (diff {prev['lpd_difference']:+.4f})", flush=True)
                continue
            print(f"[run ] {name} load {_loadavg()}", flush=True)
            try:
                cell = run_cell(M, split, settings)
            except Exception as err:  # record and go on with the next cell
                traceback.print_exc()
                cell = {"M": M, "split": split, "settings": settings, "error": f"{type(err).__name__}: {err}"}
            cell["command"] = command
            cells[name] = cell
            save()
            if "sgpmc_lpd" in cell:
                print(
                    f"[done] {name}: lpd SVGP {cell['svgp_lpd']:.4f} SGPMC {cell['sgpmc_lpd']:.4f} "
                    f"diff {cell['lpd_difference']:+.4f} err {cell['svgp_error']:.3f}/{cell['sgpmc_error']:.3f} "
                    f"ESS/s min {cell['ess_per_second_hyper']['min']:.2f} div {cell['divergences']} "
                    f"rhat {cell['rhat_max_hyper']:.3f} svi {cell['svi_seconds']:.0f}s warmup "
                    f"{cell['warmup_seconds']:.0f}s sample {cell['sample_seconds']:.0f}s "
                    f"(compile ~{cell['compile_seconds_estimate']:.0f}s) tree {cell['mean_tree_steps']:.1f}",
                    flush=True,
                )
    save()
    print(markdown_table(results["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
