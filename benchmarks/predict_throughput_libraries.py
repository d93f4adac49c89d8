"""Prediction throughput side by side: ppl_sparsegp, GPyTorch, GPJax and Pyro predicting the same 10^6 inputs in
chunks from the same fitted SVGP.

Run (from the repository root, in the benchmark environment, see ``benchmarks/requirements.txt``)::

    .venv-bench/bin/python benchmarks/predict_throughput_libraries.py --quick   # 10^5 points, 1 repeat
    .venv-bench/bin/python benchmarks/predict_throughput_libraries.py           # 10^6 points, 3 repeats

One run is fitted with the command line, as in ``predict_throughput.py``: ``fit svgp`` on kin8nm split 0 (N = 7,373,
D = 8), M = 256, float64, 300 Adam steps. Its fitted parameters (Z, the whitened q(u) = N(m, R Rᵀ), the RBF-ARD
lengthscales and variance, the Gaussian noise variance) are copied into each library's own SVGP, with the jitter
on K(Z, Z) set to ours (``ops.JITTER["float64"]`` times its mean diagonal, i.e. 10⁻⁸ × the kernel variance), so that
every library does the same arithmetic:

* ``ppl_sparsegp``: ``psg.load_run(folder).predict(X, chunk_size=C)``.
* ``gpytorch``: an ``ApproximateGP`` with a whitened ``VariationalStrategy`` over a
  ``CholeskyVariationalDistribution``, ``ScaleKernel(RBFKernel(ard_num_dims=D))``, zero mean, a
  ``GaussianLikelihood``; ``model.eval()``, ``likelihood.eval()``, then per chunk, under ``torch.no_grad()``,
  ``likelihood(model(x))``'s ``mean`` and ``variance``. In eval mode the strategy caches chol K(Z, Z) across calls
  (GPyTorch's cached-prediction path); ``gpytorch.settings.fast_pred_var`` is left off: only ExactGP's prediction
  strategy reads it.
* ``gpjax``: a ``WhitenedVariationalGaussian``; ``q.condition(None)`` once (the posterior caches chol K(Z, Z)),
  then per chunk the jitted ``posterior(x, covariance="diagonal")`` plus the noise variance.
* ``pyro``: ``pyro.contrib.gp.models.VariationalSparseGP(whiten=True)``; per chunk, under ``torch.no_grad()``,
  ``vsgp(x, full_cov=False)`` plus the noise variance. Pyro factorises K(Z, Z) in every call (it has no cache).

Every library standardises each chunk and maps its predictions back to original units with numpy, as
``Run.predict`` does. torch runs on ``os.cpu_count()`` threads; every cell runs with ``OMP_WAIT_POLICY=PASSIVE``
(see ``speed_svgp.py``: spinning OpenMP threads slowed torch 3-10x on these shared 2-core machines).

Every (library, chunk size, repeat) cell runs in a fresh process on the same inputs (training rows plus noise,
written once by this process) and records what ``predict_throughput.py`` records: the seconds of the first chunk
(compiling and caching included), points/s over the other chunks ("steady") and over all of them, and the growth of
the process's peak resident memory while predicting. Repeat r runs every chunk size with the libraries in an order
rotated by r, so that no library always runs first. The summary gives each library's medians over the repeats and
the median over the repeats of its points/s divided by ours at the same chunk size in the same repeat: the machines
are noisy, the ratios less so. Agreement: every cell keeps its first chunk's predictions (at most 10^4 rows), and
they are compared with ours at the same chunk size: max |Δmean| / predictive sd and max |Δvar| / var.

Writes ``benchmarks/results/predict_throughput_libraries.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from predict_throughput import FIT, measure, test_inputs

ROOT = Path(__file__).resolve().parent
LIBRARIES = ("ppl_sparsegp", "gpytorch", "gpjax", "pyro")
OURS = "ppl_sparsegp"
CELL_TIMEOUT = 900
"""Seconds a cell may run."""
KEPT_ROWS = 10_000
"""Rows of each cell's first chunk kept for the agreement check."""
VERSIONS = ("ppl-sparsegp", "jax", "jaxlib", "numpyro", "torch", "gpytorch", "linear_operator", "gpjax", "pyro-ppl")


def shared_parameters(run) -> dict[str, np.ndarray]:
    """The fitted SVGP's parameters in standardised units, the standardisation, and the jitter that ours adds to
    K(Z, Z) (relative jitter times its mean diagonal, which for the RBF kernel is its variance)."""
    from ppl_sparsegp.core import ops

    kernel, likelihood = run.model.fitted(run.params)
    variance = np.asarray(kernel.variance, dtype=np.float64)
    M = run.params["Z"].shape[0]
    return {
        "Z": np.asarray(run.params["Z"]),
        "q_mu": np.asarray(run.params["u_loc"]).reshape(M),
        "q_sqrt": np.asarray(run.params["u_scale_tril"]).reshape(M, M),
        "lengthscale": np.asarray(kernel.lengthscale, dtype=np.float64),
        "variance": variance,
        "noise": np.asarray(likelihood.variance, dtype=np.float64),
        "jitter": ops.JITTER["float64"] * variance,
        **{name: np.asarray(value) for name, value in vars(run.scaler).items()},
    }


def original_units(p: dict[str, np.ndarray], predict_std):
    """``predict(X)`` in original units from ``predict_std(X_std) -> (mean, var)`` in standardised units."""

    def predict(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, var = predict_std((X - p["x_mean"]) / p["x_scale"])
        return mean * p["y_scale"] + p["y_mean"], var * p["y_scale"] ** 2

    return predict


def gpytorch_predictor(p: dict[str, np.ndarray]):
    """GPyTorch's SVGP holding ``p``, in eval mode: chunk -> (mean, variance) of y in standardised units."""
    import gpytorch
    import torch

    Z = torch.from_numpy(p["Z"])

    class SVGP(gpytorch.models.ApproximateGP):
        def __init__(self) -> None:
            q_u = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0], dtype=torch.float64)
            strategy = gpytorch.variational.VariationalStrategy(
                self, Z, q_u, learn_inducing_locations=False, jitter_val=float(p["jitter"])
            )
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=Z.shape[1]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model, likelihood = SVGP().double(), gpytorch.likelihoods.GaussianLikelihood().double()
    model.covar_module.base_kernel.lengthscale = torch.from_numpy(p["lengthscale"])[None]
    model.covar_module.outputscale = torch.from_numpy(p["variance"])
    likelihood.noise = torch.from_numpy(p["noise"])
    strategy = model.variational_strategy
    with torch.no_grad():
        strategy._variational_distribution.variational_mean.copy_(torch.from_numpy(p["q_mu"]))
        strategy._variational_distribution.chol_variational_covar.copy_(torch.from_numpy(p["q_sqrt"]))
    strategy.variational_params_initialized.fill_(1)  # else the first call resets q(u) to the prior
    model.eval()
    likelihood.eval()

    def predict(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            y = likelihood(model(torch.from_numpy(X)))
            return y.mean.numpy(), y.variance.numpy()

    return predict


def gpjax_predictor(p: dict[str, np.ndarray]):
    """GPJax's whitened variational family holding ``p``, conditioned once: jitted chunk -> (mean, variance)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import gpjax as gpx
    import jax.numpy as jnp

    kernel = gpx.kernels.RBF(lengthscale=jnp.asarray(p["lengthscale"]), variance=jnp.asarray(p["variance"]))
    prior = gpx.gps.Prior(mean_function=gpx.mean_functions.Zero(), kernel=kernel, jitter=float(p["jitter"]))
    likelihood = gpx.likelihoods.Gaussian(obs_stddev=jnp.sqrt(jnp.asarray(p["noise"])))
    q = gpx.variational_families.WhitenedVariationalGaussian(
        model=prior * likelihood,
        inducing_inputs=jnp.asarray(p["Z"]),
        variational_mean=jnp.asarray(p["q_mu"])[:, None],
        variational_root_covariance=jnp.asarray(p["q_sqrt"]),
    )
    posterior, noise = q.condition(None), jnp.asarray(p["noise"])

    @jax.jit
    def moments(X):
        f = posterior(X, covariance="diagonal")
        return f.mean.reshape(-1), f.variance.reshape(-1) + noise

    return lambda X: tuple(np.asarray(a) for a in moments(jnp.asarray(X)))


def pyro_predictor(p: dict[str, np.ndarray]):
    """Pyro's ``VariationalSparseGP`` holding ``p``: chunk -> (mean, variance of y)."""
    import pyro.contrib.gp as gp
    import torch
    from pyro.distributions import constraints
    from pyro.nn import PyroParam

    Z = torch.from_numpy(p["Z"])
    kernel = gp.kernels.RBF(
        input_dim=Z.shape[1], variance=torch.from_numpy(p["variance"]), lengthscale=torch.from_numpy(p["lengthscale"])
    )
    likelihood = gp.likelihoods.Gaussian(variance=torch.from_numpy(p["noise"]))
    vsgp = gp.models.VariationalSparseGP(
        Z[:1],
        torch.zeros(1, dtype=Z.dtype),
        kernel,
        Xu=Z,
        likelihood=likelihood,
        whiten=True,
        jitter=float(p["jitter"]),
    )
    vsgp.Xu.requires_grad_(False)
    vsgp.u_loc = torch.nn.Parameter(torch.from_numpy(p["q_mu"]))
    vsgp.u_scale_tril = PyroParam(torch.from_numpy(p["q_sqrt"]), constraints.lower_cholesky)

    def predict(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            mean, var = vsgp(torch.from_numpy(X), full_cov=False)
            return mean.numpy(), (var + likelihood.variance).numpy()

    return predict


PREDICTORS = {"gpytorch": gpytorch_predictor, "gpjax": gpjax_predictor, "pyro": pyro_predictor}


def child(library: str, folder: str, chunk: int, first_path: str) -> dict:
    """One cell, in this process: build ``library``'s predictor, predict the shared inputs in chunks of ``chunk``
    rows, keep the first chunk's predictions in ``first_path`` and return the figures of :func:`measure`."""
    X_new = np.load(f"{folder}/inputs.npy")
    if library == OURS:
        from ppl_sparsegp.runs import load_run

        run = load_run(f"{folder}/svgp")
        predict = lambda X: run.predict(X, chunk_size=chunk)  # noqa: E731
    else:
        import torch

        torch.set_num_threads(os.cpu_count())
        with np.load(f"{folder}/parameters.npz") as stored:
            p = dict(stored)
        predict = original_units(p, PREDICTORS[library](p))
    figures, (mean, var) = measure(predict, X_new, chunk)
    np.savez(first_path, mean=mean[:KEPT_ROWS], var=var[:KEPT_ROWS])
    return figures


def agreement(ours_path: str, theirs_path: str) -> dict[str, float] | None:
    """Largest difference of a library's first-chunk predictions (saved by :func:`child`) from ours: of the means
    in predictive standard deviations, of the variances relative to ours; None when ours are missing."""
    if not os.path.exists(ours_path):
        return None
    with np.load(ours_path) as ours, np.load(theirs_path) as theirs:
        return {
            "max_abs_mean_diff_over_sd": float(np.max(np.abs(theirs["mean"] - ours["mean"]) / np.sqrt(ours["var"]))),
            "max_rel_var_diff": float(np.max(np.abs(theirs["var"] - ours["var"]) / ours["var"])),
        }


def summarise(cells: list[dict], libraries: list[str], chunks: list[int]) -> list[dict]:
    """Per chunk size and library: medians over the repeats, and the median over the repeats of points/s divided
    by ours in the same repeat (steady points/s; over all chunks when there is one chunk)."""
    ok = [c for c in cells if "error" not in c]
    rate = {(c["library"], c["chunk_size"], c["repeat"]): c for c in ok}
    rows = []
    for chunk in chunks:
        for library in libraries:
            own = [c for c in ok if (c["library"], c["chunk_size"]) == (library, chunk)]
            failed = [c["error"] for c in cells if (c["library"], c["chunk_size"]) == (library, chunk) and "error" in c]
            row = {"library": library, "chunk_size": chunk, "repeats": len(own), "errors": failed}
            rows.append(row)
            if not own:
                continue
            key = "points_per_second" if own[0]["points_per_second"] is not None else "points_per_second_overall"
            ratios = [c[key] / rate[(OURS, chunk, c["repeat"])][key] for c in own if (OURS, chunk, c["repeat"]) in rate]
            row["rate"] = key
            for name in ("points_per_second", "points_per_second_overall", "first_chunk_seconds",
                         "peak_memory_growth_mib"):  # fmt: skip
                values = [c[name] for c in own if c[name] is not None]
                row[name] = float(np.median(values)) if values else None
            row["ratio_to_ours"] = float(np.median(ratios)) if ratios else None
            row["ratios_to_ours"] = ratios
            checked = [c["agreement"] for c in own if c["agreement"] is not None]
            for name in ("max_abs_mean_diff_over_sd", "max_rel_var_diff"):
                row[name] = max(a[name] for a in checked) if checked else None
    return rows


def markdown(rows: list[dict]) -> str:
    """The summary as a markdown table."""
    lines = [
        "| chunk C | library | steady points/s | ÷ ours | points/s in all | first chunk (s) | peak memory growth (MiB) "
        "| max Δmean / sd | max Δvar / var |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    agree = lambda value: "–" if value is None else f"{value:.1e}"  # noqa: E731
    for r in rows:
        if not r["repeats"]:
            lines.append(f"| {r['chunk_size']:,} | {r['library']} | failed: {r['errors'][0][:80]} |||||||")
            continue
        ratio = "–" if r["ratio_to_ours"] is None else f"{r['ratio_to_ours']:.2f}"
        steady = "–" if r["points_per_second"] is None else f"{r['points_per_second']:,.0f}"
        lines.append(
            f"| {r['chunk_size']:,} | {r['library']} | {steady} | {ratio} | "
            f"{r['points_per_second_overall']:,.0f} | {r['first_chunk_seconds']:.2f} | "
            f"{r['peak_memory_growth_mib']:,.0f} | {agree(r['max_abs_mean_diff_over_sd'])} | "
            f"{agree(r['max_rel_var_diff'])} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    parser.add_argument("--quick", action="store_true", help="10^5 points, chunks 10^3 and 10^4, one repeat")
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "predict_throughput_libraries.json")
    parser.add_argument("--child", nargs=4, metavar=("LIBRARY", "FOLDER", "CHUNK", "FIRST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        library, folder, chunk, first_path = args.child
        print(json.dumps(child(library, folder, int(chunk), first_path)))
        return
    points, chunks, repeats = (100_000, [1_000, 10_000], 1) if args.quick else (args.points, args.chunks, args.repeats)
    libraries = [OURS, *(lib for lib in args.libraries if lib != OURS)]
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "ppl_sparsegp.cli", "fit", "svgp", "--data", "kin8nm", *FIT["svgp"],
                   "--out", f"{tmp}/svgp", "--quiet"]  # fmt: skip
        subprocess.run(command, check=True)
        from ppl_sparsegp.runs import load_run

        run = load_run(f"{tmp}/svgp")
        np.save(f"{tmp}/inputs.npy", test_inputs(run, points))
        parameters = shared_parameters(run)
        np.savez(f"{tmp}/parameters.npz", **parameters)
        for repeat in range(repeats):
            order = libraries[repeat % len(libraries) :] + libraries[: repeat % len(libraries)]
            for chunk in chunks:
                for library in order:
                    first = f"{tmp}/{library}-{chunk}-{repeat}.npz"
                    argv = [sys.executable, __file__, "--child", library, tmp, str(chunk), first]
                    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=CELL_TIMEOUT)
                    cell = {"library": library, "chunk_size": chunk, "repeat": repeat, "points": points}
                    if done.returncode != 0:  # e.g. killed for memory: kept as an error, the run goes on
                        cell["error"] = f"exit status {done.returncode}: " + " ".join(done.stderr.splitlines()[-3:])
                        print(f"repeat {repeat} {library:13s} chunk {chunk:>9,d}: {cell['error']}", flush=True)
                        cells.append(cell)
                        continue
                    cell.update(json.loads(done.stdout.splitlines()[-1]))
                    cell["agreement"] = agreement(f"{tmp}/{OURS}-{chunk}-0.npz", first)
                    cells.append(cell)
                    steady = cell["points_per_second"] or cell["points_per_second_overall"]
                    print(f"repeat {repeat} {library:13s} chunk {chunk:>9,d}: {steady:>10,.0f} points/s, first chunk "
                          f"{cell['first_chunk_seconds']:.2f} s, peak memory +{cell['peak_memory_growth_mib']:.0f} MiB",
                          flush=True)  # fmt: skip
    summary = summarise(cells, libraries, chunks)
    from ppl_sparsegp import results

    record = {
        "benchmark": "predict_throughput_libraries", "data": "uci/kin8nm split 0", "inducing": 256,
        "dtype": "float64", "points": points, "chunks": chunks, "repeats": repeats, "libraries": libraries,
        "fit": ["fit", "svgp", "--data", "kin8nm", *FIT["svgp"]], "jitter": float(parameters["jitter"]),
        "omp_wait_policy": "PASSIVE", "torch_threads": os.cpu_count(), "summary": summary, "cells": cells,
        "argv": sys.argv[1:], "cpu_count": os.cpu_count(), "cpu_model": cpu_model(),
        "library_versions": {name: importlib.metadata.version(name) for name in VERSIONS}, **results.provenance(),
    }  # fmt: skip
    results.write_json(args.output, record)
    print(markdown(summary))
    print(f"wrote {args.output}")


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


if __name__ == "__main__":
    main()
