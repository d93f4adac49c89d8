"""Probabilistic selection of inducing points for the Bayesian GP-LVM on oil flow (Uhrenholt et al. 2021, §5.3).

Run (from the repository root)::

    .venv/bin/python benchmarks/selective_gplvm.py                  # seeds 0 1 2 (resumes: finished seeds skipped)
    .venv/bin/python benchmarks/selective_gplvm.py --seeds 0        # one seed
    .venv/bin/python benchmarks/selective_gplvm.py --quick          # 60 epochs, written to results/..._runs/
    .venv/bin/python benchmarks/selective_gplvm.py --seeds 0 --pre-steps 300 \
        --output benchmarks/results/selective_gplvm_pretrained.json   # the released demo's pre-fit first
    .venv/bin/python benchmarks/selective_gplvm.py --seeds 0 --noise-variance learned \
        --output benchmarks/results/selective_gplvm_learned_noise.json  # the paper's learned noise, starting at 1
    .venv/bin/python benchmarks/selective_gplvm.py --bound collapsed \
        --output benchmarks/results/selective_gplvm_collapsed.json      # q(u) collapsed (CollapsedGPLVM)
    .venv/bin/python benchmarks/selective_gplvm.py --bound collapsed --epochs 1500 --seeds 0 \
        --output benchmarks/results/selective_gplvm_collapsed_1500.json # the same, trained 5x longer
    .venv/bin/python benchmarks/selective_gplvm.py --seeds 0 --backend pyro \
        --output benchmarks/results/selective_gplvm_pyro.json           # the Pyro twins and engine

The paper's experiment (qPCR, Fig. 7) is qualitative; this one applies its protocol to the oil-flow data (the
1000-point training set, 12 outputs, 3 flow regimes used only for evaluation) and checks spec 000 §7.2 B7:

* setup (paper §5.3, App. C.5; released code for what the paper leaves out): Q = 2 latent dimensions initialised
  by PCA (unit variance), candidates **fixed** on a 15 × 15 grid over the PCA latents' range (padded 10 %), α = 3,
  λ₀ = 0.5, S = 4, Adam 0.01 (latents, kernel, q(u)) and 0.2 (λ), everything **joint**, 300 epochs of full-batch
  steps (one step = one epoch), Y standardised, Gaussian noise fixed at 0.01 (released demo; ``--noise-variance
  learned`` learns it from 1, as the paper's App. C.1 starts every hyperparameter), q(x_n) initial sd 0.1, q(u)
  initialised at the prior (S = Kmm; the identity start of the unwhitened q(u) makes the bound ~1e7 nats worse on
  this ill-conditioned grid and does not recover in 300 epochs: results/selective_gplvm_runs/identity_init_seed0.json);
  ``--bound collapsed`` replaces the learned q(u) by the collapsed one (:class:`SelectiveCollapsedGPLVM`: Titsias'
  bound of the selected points at each latent draw), everything else the same;
* baseline: the same GP-LVM (same bound) with all 225 grid points as inducing inputs, trained the same way (300
  full-batch Adam steps at 0.01 from the same initialisation);
* reported: E|S|, Var|S| and one sampled |S| (vs 225); the fraction of active grid points (λ > 0.5) whose nearest
  latent mean lies within one grid spacing; the Jaccard overlap of the active sets at epoch 50 and at the end; the
  final ELBO E_q[L(s)] − KL[q_λ ‖ p_α] and the bound of the pruned model (one sampled subset, not retrained)
  against the baseline's bound (ratio and difference; 32 draws each); and the leave-one-out 1-NN error of the
  3 classes on the latent means (also for the PCA initialisation).

``--backend pyro`` runs all of it on the Pyro side (:class:`Backend`): the Pyro twin of the recipe
(:func:`ppl_sparsegp.recipes.selective_pyro.fit_selective_gplvm`, the same grid and initialisation), the all-grid
baseline's Pyro twin (:func:`ppl_sparsegp.recipes.selective_pyro.gplvm_on_grid`) trained by the Pyro engine
(:func:`ppl_sparsegp.pyro.svi.fit_svi`, torch's Adam), and the bounds drawn from torch's generator seeded by
10000 + seed before each one (where the NumPyro side takes that key), in float64 on one torch thread. The backend is
a setting of the results file (a file holds the runs of one backend) and a field of every record.

Output: ``benchmarks/results/selective_gplvm.json`` (rewritten atomically after every seed; ``--output`` names another,
with ``--quick`` too) and a figure
``benchmarks/results/selective_gplvm.png`` (latent means by class, grid points sized by λ, first seed run). Each
seed checkpoints to ``results/selective_gplvm_runs/checkpoints/<output name>_seed<seed>/`` (``<output
name>_pyro_seed<seed>/`` with ``--backend pyro``), so the same command resumes a killed seed; delete that folder after
changing a setting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import optax  # noqa: E402
import pyro  # noqa: E402
import torch  # noqa: E402
from svgp_uci import _loadavg, _version, add_cell, has_cell  # noqa: E402

from ppl_sparsegp.data import load_oilflow  # noqa: E402
from ppl_sparsegp.infer import svi as numpyro_svi  # noqa: E402
from ppl_sparsegp.infer.svi import SVIResult  # noqa: E402
from ppl_sparsegp.models.numpyro.gplvm import pca_latents  # noqa: E402
from ppl_sparsegp.pyro import svi as pyro_svi  # noqa: E402
from ppl_sparsegp.pyro.dtype import default_dtype, intra_op_threads  # noqa: E402
from ppl_sparsegp.recipes import selective, selective_pyro  # noqa: E402
from ppl_sparsegp.recipes.selective import BOUNDS, SelectiveGPLVMFit  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "selective_gplvm.json"
QUICK_RESULTS = ROOT / "results" / "selective_gplvm_runs" / "quick.json"
CHECKPOINTS = ROOT / "results" / "selective_gplvm_runs" / "checkpoints"

SETTINGS = {
    "latent_dim": 2,
    "grid_size": 15,
    "alpha": 3.0,
    "initial_inclusion": 0.5,
    "noise_variance": 0.01,
    "latent_scale": 0.1,
    "num_particles": 4,
    "learning_rate": 0.01,
    "selection_learning_rate": 0.2,
    "bound": "uncollapsed",
}
EPOCHS, EARLY_EPOCH, RECORD_EVERY, ELBO_DRAWS, ACTIVE = 300, 50, 10, 32, 0.5


@dataclass(frozen=True)
class Backend:
    """What :func:`run_seed` does on one engine: ``fit(Y, seed, **settings)`` the selective GP-LVM recipe,
    ``on_grid(Y, grid, **settings)`` the all-grid GP-LVM, ``train(model, Y, learning_rate, num_steps, seed,
    checkpoint)`` its full-batch Adam fit from ``model.initial_params()``, ``elbo(model, params, Y, seed)`` a model's
    bound from :data:`ELBO_DRAWS` draws seeded by 10000 + seed (the same draws for every model of a seed), all within
    ``scope()``; ``packages``: whose versions a record names; ``checkpoint_suffix``: added to the checkpoint folder's
    name, so that the two backends never resume each other's runs."""

    name: str
    fit: Callable[..., SelectiveGPLVMFit]
    on_grid: Callable[..., Any]
    train: Callable[[Any, np.ndarray, float, int, int, Path], SVIResult]
    elbo: Callable[[Any, dict, np.ndarray, int], float]
    scope: Callable[[], contextlib.AbstractContextManager]
    packages: tuple[str, ...]
    checkpoint_suffix: str


def _numpyro_train(
    model: Any, Y: np.ndarray, learning_rate: float, num_steps: int, seed: int, checkpoint: Path
) -> SVIResult:
    return numpyro_svi.fit_svi(
        model.model, model.guide, Y, optimizer=optax.adam(learning_rate), num_steps=num_steps, key=seed,
        init_params=model.initial_params(), progress=False, checkpoint=checkpoint,
    )  # fmt: skip


def _pyro_train(
    model: Any, Y: np.ndarray, learning_rate: float, num_steps: int, seed: int, checkpoint: Path
) -> SVIResult:
    return pyro_svi.fit_svi(
        model.model, model.guide, Y, optimizer=partial(torch.optim.Adam, lr=learning_rate),
        num_steps=num_steps, seed=seed, init_params=model.initial_params(), progress=False, checkpoint=checkpoint,
    )  # fmt: skip


def _pyro_elbo(model: Any, params: dict, Y: np.ndarray, seed: int) -> float:
    pyro.set_rng_seed(10_000 + seed)
    with torch.no_grad():
        return float(model.elbo(params, Y, ELBO_DRAWS))


@contextlib.contextmanager
def _float64_one_thread() -> Iterator[None]:
    """torch in float64 (as JAX here) on one intra-op thread (as the NumPyro side's BLAS) within the block."""
    with default_dtype("float64"), intra_op_threads(1):
        yield


BACKENDS = {
    "numpyro": Backend(
        "numpyro",
        fit=lambda Y, seed, **settings: selective.fit_selective_gplvm(Y, key=seed, **settings),
        on_grid=selective.gplvm_on_grid,
        train=_numpyro_train,
        elbo=lambda model, params, Y, seed: float(model.elbo(params, Y, jax.random.PRNGKey(10_000 + seed), ELBO_DRAWS)),
        scope=contextlib.nullcontext,
        packages=("jax", "numpyro", "optax"),
        checkpoint_suffix="",
    ),
    "pyro": Backend(
        "pyro",
        fit=lambda Y, seed, **settings: selective_pyro.fit_selective_gplvm(Y, seed=seed, **settings),
        on_grid=selective_pyro.gplvm_on_grid,
        train=_pyro_train,
        elbo=_pyro_elbo,
        scope=_float64_one_thread,
        packages=("torch", "pyro-ppl"),
        checkpoint_suffix="_pyro",
    ),
}


def standardised_oilflow() -> tuple[np.ndarray, np.ndarray]:
    """(Y [1000, 12] standardised per column, flow-regime labels [1000])."""
    data = load_oilflow()
    Y = np.asarray(data.X_train, dtype=np.float64)
    return (Y - Y.mean(axis=0)) / Y.std(axis=0), np.asarray(data.y_train)


def nearest_neighbour_error(latents: np.ndarray, labels: np.ndarray) -> float:
    """Leave-one-out 1-NN classification error of ``labels`` [N] from ``latents`` [N, Q]."""
    d2 = np.sum((latents[:, None, :] - latents[None, :, :]) ** 2, axis=-1)
    np.fill_diagonal(d2, np.inf)
    return float(np.mean(labels[np.argmin(d2, axis=1)] != labels))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|a ∩ b| / |a ∪ b| of two boolean masks (1 when both are empty)."""
    union = np.sum(a | b)
    return float(np.sum(a & b) / union) if union else 1.0


def grid_spacing(grid: np.ndarray) -> float:
    """The largest per-dimension spacing of a regular grid [K, Q]."""
    return float(max(np.min(np.diff(np.unique(column))) for column in grid.T))


def placement(fit: SelectiveGPLVMFit) -> dict:
    """Where the active grid points (λ > 0.5) lie relative to the final latent means."""
    active = fit.inclusion_probs > ACTIVE
    latents = fit.model.ordinary.latents.means(fit.params)
    spacing = grid_spacing(fit.grid)
    d = np.sqrt(np.min(np.sum((fit.grid[active, None, :] - latents[None]) ** 2, axis=-1), axis=1))
    early = fit.inclusion_trace[list(fit.trace_steps).index(EARLY_EPOCH)] > ACTIVE
    ever = np.any(fit.inclusion_trace[1:] > ACTIVE, axis=0)
    return {
        "active_count": int(active.sum()),
        "grid_spacing": spacing,
        "active_near_latents_fraction": float(np.mean(d <= spacing)) if active.any() else None,
        "active_nearest_latent_distance_median": float(np.median(d)) if active.any() else None,
        "active_count_at_epoch_50": int(early.sum()),
        "jaccard_epoch_50_vs_end": jaccard(early, active),
        "ever_active_count": int(ever.sum()),
    }


def run_seed(
    seed: int,
    Y: np.ndarray,
    labels: np.ndarray,
    settings: dict,
    epochs: int,
    pre_steps: int,
    figure: Path | None,
    checkpoints: Path,
    backend: Backend = BACKENDS["numpyro"],
) -> dict:
    """Fit the selective GP-LVM and the all-grid baseline (pre_steps + epochs steps) from the same initialisation,
    both with ``settings`` (:data:`SETTINGS` with the noise variance of the command line) on ``backend``'s engine;
    both checkpoint to the folder ``checkpoints``, so a killed seed resumes."""
    with backend.scope():
        fit = backend.fit(
            Y, seed, **settings, steps=epochs, pre_steps=pre_steps, record_every=RECORD_EVERY, prune=True,
            checkpoint_dir=checkpoints,
        )  # fmt: skip
        selective_elbo = backend.elbo(fit.model, fit.params, Y, seed)
        pruned_elbo = backend.elbo(fit.pruned, fit.pruned_params, Y, seed)

        shared = ("latent_dim", "noise_variance", "latent_scale", "bound")
        baseline = backend.on_grid(Y, fit.grid, **{k: settings[k] for k in shared})
        t0 = time.perf_counter()
        base = backend.train(
            baseline, Y, settings["learning_rate"], pre_steps + epochs, seed, checkpoints / "all_grid.npz"
        )
        base_seconds = time.perf_counter() - t0
        baseline_elbo = backend.elbo(baseline, base.params, Y, seed)
        selective_means = fit.model.ordinary.latents.means(fit.params)
        baseline_means = baseline.latents.means(base.params)
    X_init = pca_latents(Y, settings["latent_dim"])
    record = {
        "seed": seed,
        "backend": backend.name,
        "pre_steps": pre_steps,
        "expected_count": fit.expected_count,
        "count_sd": float(np.sqrt(fit.count_variance)),
        "sampled_count": int(fit.mask.sum()),
        "num_candidates": int(fit.grid.shape[0]),
        **placement(fit),
        "elbo_selective": selective_elbo,
        "elbo_pruned_sample": pruned_elbo,
        "elbo_all_grid": baseline_elbo,
        "elbo_ratio_selective_over_all_grid": selective_elbo / baseline_elbo,
        "elbo_difference_selective_minus_all_grid": selective_elbo - baseline_elbo,
        "elbo_difference_pruned_minus_all_grid": pruned_elbo - baseline_elbo,
        "nn_error_selective": nearest_neighbour_error(selective_means, labels),
        "nn_error_all_grid": nearest_neighbour_error(baseline_means, labels),
        "nn_error_pca_init": nearest_neighbour_error(X_init, labels),
        "lengthscale_selective": np.asarray(fit.params["kernel.lengthscale"]).tolist(),
        "lengthscale_all_grid": np.asarray(base.params["kernel.lengthscale"]).tolist(),
        "noise_variance_selective": _noise_variance(fit.params, settings),
        "noise_variance_all_grid": _noise_variance(base.params, settings),
        "expected_count_trace": {
            int(s): float(p.sum()) for s, p in zip(fit.trace_steps, fit.inclusion_trace, strict=True)
        },
        "final_loss_selective": float(np.mean(fit.losses[-10:])),
        "final_loss_all_grid": float(np.mean(base.losses[-10:])),
        "seconds": {"selective": fit.seconds, "all_grid": base_seconds},
        "loadavg": _loadavg(),
        "versions": {package: _version(package) for package in backend.packages},
    }
    if figure is not None:
        save_figure(fit, labels, figure)
    return record


def _noise_variance(params: dict, settings: dict) -> float:
    """The fitted Gaussian noise variance (the fixed one when it was not learned)."""
    fixed = settings["noise_variance"]
    return float(params["likelihood.variance"]) if fixed is None else fixed


def noise_variance_option(text: str) -> float | None:
    """``--noise-variance``: a positive number (held fixed) or ``learned`` (None: starts at 1 and is learned)."""
    if text == "learned":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number or 'learned', got {text!r}")
    return value


def save_figure(fit: SelectiveGPLVMFit, labels: np.ndarray, path: Path) -> None:
    """Latent means coloured by flow regime, grid points sized by λ (initial PCA latents and final fit)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), sharex=True, sharey=True)
    panels = ((0, "PCA initialisation, λ₀"), (-1, f"epoch {int(fit.trace_steps[-1])}, E|S| = {fit.expected_count:.1f}"))
    for ax, (i, title) in zip(axes, panels, strict=True):
        latents, lam = fit.latent_trace[i], fit.inclusion_trace[i]
        for c in np.unique(labels):
            ax.scatter(*latents[labels == c].T, s=6, alpha=0.6, label=f"class {c}")
        ax.scatter(*fit.grid.T, s=120 * lam, facecolors="none", edgecolors="k", linewidths=0.8, label="grid, size ∝ λ")
        ax.set_title(title)
    axes[0].legend(loc="lower left", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarise(runs: dict) -> dict:
    keys = [
        "expected_count", "sampled_count", "active_count", "active_near_latents_fraction",
        "jaccard_epoch_50_vs_end", "elbo_ratio_selective_over_all_grid", "elbo_difference_selective_minus_all_grid",
        "elbo_difference_pruned_minus_all_grid", "nn_error_selective", "nn_error_all_grid", "nn_error_pca_init",
    ]  # fmt: skip
    rows = list(runs.values())
    return {
        k: {"mean": float(np.mean([r[k] for r in rows])), "per_seed": [r[k] for r in rows]}
        for k in keys
        if all(r[k] is not None for r in rows)
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--pre-steps", type=int, default=0, help="all-grid pre-training steps (released demo)")
    parser.add_argument("--output", type=Path, help=f"results file (default {RESULTS.relative_to(ROOT.parent)})")
    parser.add_argument(
        "--noise-variance", type=noise_variance_option, default=SETTINGS["noise_variance"],
        help="Gaussian noise variance on standardised Y, held fixed (default 0.01, the released demo), or 'learned' "
        "(starts at 1, the paper's App. C.1 initial value)",
    )  # fmt: skip
    parser.add_argument(
        "--bound", choices=BOUNDS, default=SETTINGS["bound"],
        help="the GP-LVM bound: q(u) learned (uncollapsed, the paper's) or collapsed (optimal per subset and draw)",
    )  # fmt: skip
    parser.add_argument("--epochs", type=int, default=EPOCHS, help=f"joint epochs (default {EPOCHS}, the paper's)")
    parser.add_argument(
        "--backend", choices=tuple(BACKENDS), default="numpyro",
        help="the engine of every fit and bound: the NumPyro recipe and models (default) or their Pyro twins",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="60 epochs, written to the runs folder (or --output)")
    args = parser.parse_args(argv)
    if args.pre_steps < 0:
        parser.error(f"--pre-steps: expected a number of steps >= 0, got {args.pre_steps}")
    if args.epochs < EARLY_EPOCH:
        parser.error(
            f"--epochs: expected at least {EARLY_EPOCH} (the early epoch of the Jaccard check), got {args.epochs}"
        )
    path = args.output or (QUICK_RESULTS if args.quick else RESULTS)
    epochs = 60 if args.quick else args.epochs
    Y, labels = standardised_oilflow()
    model_settings = {**SETTINGS, "noise_variance": args.noise_variance, "bound": args.bound}
    settings = {
        **model_settings,
        "epochs": epochs,
        "pre_steps": args.pre_steps,
        "batch_size": None,
        "N": int(Y.shape[0]),
        "backend": args.backend,
    }
    stored = json.loads(path.read_text()) if path.exists() else {}
    earlier = {"pre_steps": 0, "bound": "uncollapsed", "backend": "numpyro"}  # runs from before these options existed
    stored_settings = {**earlier, **stored.get("settings", settings)}
    if stored_settings["backend"] != args.backend:
        parser.error(
            f"{path} holds runs of the {stored_settings['backend']} backend, not {args.backend}; give another --output"
        )
    if stored_settings != settings:
        parser.error(f"{path} holds runs with other settings ({stored['settings']}); give another --output")
    for seed in args.seeds:
        if has_cell(path, str(seed), section="runs"):
            continue
        figure = path.with_suffix(".png") if seed == args.seeds[0] and not args.quick else None
        backend = BACKENDS[args.backend]
        checkpoints = CHECKPOINTS / f"{path.stem}{backend.checkpoint_suffix}_seed{seed}"
        record = run_seed(seed, Y, labels, model_settings, epochs, args.pre_steps, figure, checkpoints, backend)
        print(seed, {k: record[k] for k in ("expected_count", "sampled_count", "jaccard_epoch_50_vs_end")})
        add_cell(path, str(seed), record, settings, section="runs", summarise=summarise)
    if path.exists():
        print(json.dumps(json.loads(path.read_text()).get("summary", {}), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
