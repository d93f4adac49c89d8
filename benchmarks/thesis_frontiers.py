"""Matthews' thesis §4.5.2 (Figs 4.3-4.5): SVGP ("KLSp") on Banana and Image, hold-out NLP and % error against
wall-clock time for several M (the "efficient frontier"), and Banana's decision boundaries as M grows.

Run (from the repository root)::

    .venv/bin/python benchmarks/thesis_frontiers.py                       # both datasets, every M, and the full GP
    .venv/bin/python benchmarks/thesis_frontiers.py --steps 40 --datasets banana --out /tmp/frontier.json  # smoke

Protocol (``/work/shared/specs/003_matthews_thesis.md`` §4.2 and §7 item 20):

* data: :func:`ppl_sparsegp.data.load_raetsch` realisation 1: Banana 400 train / 4,900 test (D = 2) and Image
  1,300 / 1,010 (D = 18); inputs standardised with the training statistics; labels 0/1.
* model: as ``benchmarks/thesis_ch4.py``: whitened SVGP, full-covariance q(u) (m = 0, S = I initially), probit
  Bernoulli likelihood, RBF ARD kernel (variance 1, lengthscales √D initially), Z by k-means (seed 0) and optimised;
  the "full GP" reference is the same model with Z = X held fixed (M = N: the non-sparse variational GP).
* inference: full-batch L-BFGS (:class:`~ppl_sparsegp.infer.optimisers.LBFGS`) on the negative ELBO, float64, the
  kernel's hyperparameters frozen for the first ``--freeze`` iterations (the thesis' freeze; its length is not
  given), up to ``--steps`` iterations (the full GP: ``--full-steps``, its iterations cost O(N³)) or until the loss
  fell by less than ``--tol`` nats over 200 iterations.
* the curve: every ``--every`` iterations the test NLP (-mean log q(y*)) and error rate (q(y* = 1) > 0.5) at the
  current parameters, against the seconds of fitting so far (neither the one compilation, recorded apart, nor the
  scoring itself counted; ``--steps`` a multiple of ``--every`` keeps it to one compilation).
  The thesis ran each curve for up to a day on 2016 hardware; these run for minutes.
* decision boundaries (Fig 4.5): Banana with M = 4, 8, 16, 32, 64 and the full GP, the q(y = 1) = 0.5 contour, the
  training points and the fitted Z; for each M the share of the fitted Z on either side of the boundary.

Writes ``benchmarks/results/thesis_frontiers.json`` (every curve point, settings, provenance) and the figures
``thesis_frontiers.png`` and ``thesis_frontiers_boundaries.png`` beside it (the boundary grids are drawn, not kept).
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ppl_sparsegp import data, results  # noqa: E402
from ppl_sparsegp.core.kernels import RBF  # noqa: E402
from ppl_sparsegp.core.likelihoods import Bernoulli  # noqa: E402
from ppl_sparsegp.inducing.initialise import kmeans  # noqa: E402
from ppl_sparsegp.infer.optimisers import LBFGS  # noqa: E402
from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402
from ppl_sparsegp.models.numpyro.svgp import SVGP  # noqa: E402

ROOT = Path(__file__).resolve().parent
OUTPUT = ROOT / "results" / "thesis_frontiers.json"
SIZES = {"banana": (4, 8, 16, 32, 64), "image": (4, 50, 200)}
"""M per dataset: the thesis' frontier sizes (Banana 4, 16, 64; Image 4, 50, 200) and Fig 4.5's 8 and 32."""
FRONTIER = {"banana": (4, 16, 64), "image": (4, 50, 200)}
FULL = "full"
WINDOW = 200  # iterations over which the convergence test measures the loss's fall


def fit_curve(ds: data.Dataset, size: int | str, args: argparse.Namespace) -> dict:
    """Fit one SVGP (``size`` inducing points, or the full GP) and record its test NLP and error against time."""
    X, y, X_test, y_test = ds.X_train, ds.y_train, ds.X_test, ds.y_test
    D = X.shape[1]
    kernel = RBF(variance=1.0, lengthscale=np.full(D, math.sqrt(D)))
    full = size == FULL
    gp = SVGP(kernel, Bernoulli(), Z=X if full else kmeans(X, size, seed=0), learn_Z=not full)
    scored = jax.jit(lambda p: (gp.predict_log_density(p, X_test, y_test), gp.predict_y(p, X_test)[0]))
    curve = {"iteration": [], "seconds": [], "nlp": [], "error": [], "loss": []}
    clock = {"start": time.perf_counter(), "scoring": 0.0, "last_loss": math.inf, "window": []}

    def record(step: int, losses: np.ndarray, params: dict) -> bool:
        fitting = time.perf_counter() - clock["start"] - clock["scoring"]
        began = time.perf_counter()
        log_density, p_one = (np.asarray(a) for a in scored(params))
        clock["scoring"] += time.perf_counter() - began
        curve["iteration"].append(int(step))
        curve["seconds"].append(fitting)
        curve["nlp"].append(float(-np.mean(log_density)))
        curve["error"].append(float(np.mean((p_one > 0.5) != (y_test == 1))))
        curve["loss"].append(float(losses[-1]))
        clock["window"] = (clock["window"] + [float(losses[-1])])[-(WINDOW // args.every + 1) :]
        thawed = step > args.freeze + WINDOW
        return thawed and clock["window"][0] - clock["window"][-1] < args.tol

    freeze = {"kernel.variance": args.freeze, "kernel.lengthscale": args.freeze}
    steps = min(args.steps, args.full_steps) if full else args.steps
    fit = fit_svi(gp.model, gp.guide, X, y, optimizer=LBFGS(), num_steps=steps, freeze=freeze, key=0,
                  progress=False, steps_per_dispatch=args.every, validate=gp.check_data, callback=record)  # fmt: skip
    params = fit.params
    curve["seconds"] = [t - fit.compile_seconds for t in curve["seconds"]]  # compiled once, before the first chunk
    found = {"M": int(X.shape[0]) if full else size, "compile_seconds": fit.compile_seconds, "full": full,
             "iterations": len(fit.losses),
             "converged": bool(fit.stopped_early), "curve": curve, "final_nlp": curve["nlp"][-1],
             "final_error": curve["error"][-1], "seconds": curve["seconds"][-1]}  # fmt: skip
    if X.shape[1] == 2:
        Z = np.asarray(params["Z"]) if "Z" in params else np.asarray(X)
        p_at_Z = np.asarray(gp.predict_y(params, Z)[0])
        found["Z"] = Z.tolist()
        found["share_of_Z_predicted_1"] = float(np.mean(p_at_Z > 0.5))
        found["boundary"] = boundary_grid(gp, params, X)
    return found


def boundary_grid(gp: SVGP, params: dict, X: np.ndarray, cells: int = 120) -> dict:
    """q(y = 1) on a ``cells`` x ``cells`` grid over the training inputs' range (1-D lists, for the figure)."""
    lo, hi = X.min(axis=0) - 0.3, X.max(axis=0) + 0.3
    g0, g1 = np.meshgrid(np.linspace(lo[0], hi[0], cells), np.linspace(lo[1], hi[1], cells))
    p = np.asarray(gp.predict_y(params, np.column_stack([g0.ravel(), g1.ravel()]))[0]).reshape(cells, cells)
    return {"x0": g0[0].tolist(), "x1": g1[:, 0].tolist(), "p": p.tolist()}


def plot_frontiers(found: dict) -> plt.Figure:
    """Hold-out NLP and % error against seconds, one line per M, the full GP dashed; one row per dataset."""
    names = list(found)
    figure, axes = plt.subplots(len(names), 2, figsize=(11, 3.6 * len(names)), squeeze=False)
    for row, name in zip(axes, names, strict=True):
        for key, fit in found[name].items():
            if not fit["full"] and fit["M"] not in FRONTIER[name]:
                continue
            c = fit["curve"]
            style = {"color": "k", "linestyle": "--"} if fit["full"] else {}
            label = f"full GP (M = N = {fit['M']})" if fit["full"] else f"M = {key}"
            row[0].plot(c["seconds"], c["nlp"], label=label, **style)
            row[1].plot(c["seconds"], 100 * np.asarray(c["error"]), label=label, **style)
        row[0].set(xscale="log", xlabel="seconds", ylabel="hold-out NLP", title=f"{name}: NLP")
        row[1].set(xscale="log", xlabel="seconds", ylabel="% error", title=f"{name}: error")
        row[0].legend(fontsize=8)
    figure.tight_layout()
    return figure


def plot_boundaries(banana: dict, X: np.ndarray, y: np.ndarray) -> plt.Figure:
    """Fig 4.5: the q(y = 1) = 0.5 contour of each Banana fit, the training points and the fitted Z."""
    fits = [fit for fit in banana.values() if "boundary" in fit]
    figure, axes = plt.subplots(1, len(fits), figsize=(3.0 * len(fits), 3.2), sharey=True)
    for ax, fit in zip(np.atleast_1d(axes), fits, strict=True):
        b = fit["boundary"]
        ax.scatter(X[:, 0], X[:, 1], c=y, cmap="coolwarm", s=4, alpha=0.5)
        ax.contour(b["x0"], b["x1"], b["p"], levels=[0.5], colors="k")
        if not fit["full"]:
            Z = np.asarray(fit["Z"])
            ax.plot(Z[:, 0], Z[:, 1], "ko", ms=5, mfc="yellow")
        ax.set(title="full GP" if fit["full"] else f"M = {fit['M']}", xticks=[], yticks=[])
    figure.tight_layout()
    return figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--steps", type=int, default=3000, help="most L-BFGS iterations per fit")
    parser.add_argument(
        "--full-steps",
        type=int,
        default=600,
        help="most iterations of the full GP (O(N^3) each: about 1.6 s on Image here)",
    )
    parser.add_argument("--freeze", type=int, default=100, help="iterations with the kernel frozen")
    parser.add_argument("--every", type=int, default=10, help="iterations between points of the curve")
    parser.add_argument("--tol", type=float, default=1e-3, help="stop when the loss fell less over 200 iterations")
    parser.add_argument("--out", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    found, datasets = {}, {}
    for name in args.datasets:
        ds, _ = data.standardize(data.load_raetsch(name, 1))
        datasets[name] = ds
        found[name] = {}
        for size in (*SIZES[name], FULL):
            fit = fit_curve(ds, size, args)
            found[name][str(size)] = fit
            print(f"{name} M = {fit['M']}: {fit['iterations']} iterations, {fit['seconds']:.1f} s, test NLP "
                  f"{fit['final_nlp']:.4f}, error {100 * fit['final_error']:.2f} %", flush=True)  # fmt: skip
    kept = {
        name: {size: {k: v for k, v in fit.items() if k != "boundary"} for size, fit in fits.items()}
        for name, fits in found.items()
    }  # fmt: skip  (the grids are drawn, not kept: 1 MB of JSON)
    record = {"command": shlex.join([sys.executable, *sys.argv]), "settings": vars(args) | {"out": str(args.out)},
              "results": kept, **results.provenance()}  # fmt: skip
    figures = {args.out.with_suffix(".png"): plot_frontiers(found)}
    if "banana" in found:
        ds = datasets["banana"]
        figures[args.out.with_name(args.out.stem + "_boundaries.png")] = plot_boundaries(
            found["banana"], ds.X_train, ds.y_train
        )
    results.write_json(args.out, record)
    for path, figure in figures.items():
        results.write_figure(path, figure)
        plt.close(figure)
    print(f"wrote {args.out} and {', '.join(str(p) for p in figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
