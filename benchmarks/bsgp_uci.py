"""Reproduce BSGP's Table 6 (and Table 7's prior ablation): test MNLL of (deep) BSGP on eight UCI sets.

Run (from the repository root)::

    .venv/bin/python benchmarks/bsgp_uci.py                                      # shallow, Normal prior, folds 0-2
    .venv/bin/python benchmarks/bsgp_uci.py --iterations 1000 --kept 128         # the reduced schedule
    .venv/bin/python benchmarks/bsgp_uci.py --datasets kin8nm protein --layers 3 # deep BSGP
    .venv/bin/python benchmarks/bsgp_uci.py --datasets boston --priors normal dpp strauss uniform
    .venv/bin/python benchmarks/bsgp_uci.py --quick                              # smoke test
    .venv/bin/python benchmarks/bsgp_uci.py --methods bsgp sghmc-dgp             # with the SGHMC-GP baseline
    .venv/bin/python benchmarks/bsgp_uci.py --methods z-optimised                # Z optimised, θ and u sampled
    .venv/bin/python benchmarks/bsgp_uci.py --methods z-svgp                     # Z from SVGP, held; θ, u sampled
    .venv/bin/python benchmarks/bsgp_uci.py --datasets naval --z-init svgp       # BSGP, Z sampled from SVGP's Z
    .venv/bin/python benchmarks/bsgp_uci.py --datasets naval --noise-per-output  # a noise variance per output
    .venv/bin/python benchmarks/bsgp_uci.py --likelihood-terms log_expected expected_log  # the data-term ablation
    .venv/bin/python benchmarks/bsgp_uci.py --num-inducing 25 50 100 200         # MNLL against M

Protocol (``shared/specs/001_bsgp.md`` §2.2-2.5, §3.2): :func:`ppl_sparsegp.data.load_bsgp_uci` (80/20 split
seeded by the fold, X standardised on the whole data, y on training statistics), M = 100 inducing inputs per
layer from k-means on the training X (seed = fold), :func:`ppl_sparsegp.recipes.bsgp.fit_bsgp` with the
released sampler (scale-adapted SGHMC, ε = 0.01, momentum decay 0.05, 21 updates per iteration during warmup,
minibatch min(1000, N), noise by Adam 0.01 on window states, the ``log E[p]`` data term), ``--kept`` draws 32
updates apart, float64. The paper runs 10,000 iterations (210,000 updates); ``--iterations`` can shorten that,
and the JSON records how many were run. Test MNLL in original units of the mixture over the kept draws (logsumexp
− log S), averaged over test points (and outputs). ENERGY: ``--energy-target`` (default ``heating``, the one column
``data.txt`` ships; ``both`` gives the paper's two outputs, heating and cooling load, with the cooling load read from
``uci/energy/ENB2012_data.csv``, which the shared data folder does not hold: see
:func:`ppl_sparsegp.data.load_bsgp_uci`).

Noise: one Gaussian noise variance shared by the outputs, or with ``--noise-per-output`` one per output
(``BSGPConfig.noise_per_output``, the released code's ``Gaussian(np.var(Y, 0))``; bsgp only); those cells carry
``"noise_per_output": true`` and ``+noise-per-output`` after the dataset in their keys.

Ablations (spec §3.2, §6): ``--likelihood-terms`` runs each cell with each data term, ``log_expected`` (``log E[p]``,
Table 6's) and ``expected_log`` (``E[log p]``, Eq. 6; its paper numbers are the authors' released
objective-comparison runs, spec §1.3); ``--num-inducing`` runs each cell at each M (k-means Z of that size). Cells
off the defaults carry ``+expected-log`` and ``+M<m>`` after the dataset in their keys, so the earlier cells keep
theirs.

``--methods sghmc-dgp`` runs the paper's baseline SGHMC-(D)GP (Havasi et al. 2018, spec §2.6) on the same splits, Z
and minibatch: :func:`ppl_sparsegp.recipes.sghmc_dgp.fit_sghmc_dgp` (v sampled by the same SGHMC, Z, θ and σ²
optimised by Adam 0.01 on window states) for ``--iterations`` iterations of ``--sghmc-dgp-updates`` SGHMC
updates each (default 1 as Havasi's code; 21 gives BSGP's number of gradient evaluations) and ``--kept`` draws 50
updates apart (Havasi's spacing), at each of ``--layers``; its cells' ``z_prior`` is ``"optimised"``. Its paper
numbers are Table 6's "SGHMC GP" rows.

``--methods z-optimised`` runs the paper's "inducing points optimised, hyperparameters inferred" (spec §3.5, Fig. 1):
the same recipe with ``optimised=("Z",)``, so θ and u are sampled under BSGP's priors and only Z (and σ²) takes the
Adam steps, on BSGP's schedule (21 updates per iteration, ``--kept`` draws 32 updates apart); its cells'
``z_prior`` is ``"optimised"`` and their keys start ``z-optimised-upd21/``. Paper numbers for the M ablation
(``--num-inducing``) and this method are the authors' released Fig. 1 data (NAVAL and PROTEIN, M = 10, 50, 100).

``--methods z-svgp`` is the other reading of that variant (the spec's: "matches the MCMC-SVGP of Hensman et al.
2015b"): Z optimised first by the SVGP of ``benchmarks/svgp_uci.py`` (same k-means start, Adam 0.01 for
:data:`svgp_uci.STEPS` steps, key = fold; its checkpoint in the runs folder), then held (``held=("Z",)``) while θ and u
are sampled and σ² takes the MCEM steps, on BSGP's schedule; its cells' ``z_prior`` is ``"svgp"``, their keys start
``z-svgp-upd21/``, and they are compared with the same Fig. 1 numbers.

``--z-init svgp`` starts the other methods' Z (BSGP's sampled Z, SGHMC-DGP's and z-optimised's optimised Z) at the
Z that SVGP stage ends at, instead of at its k-means start; one layer only. Those cells carry ``"z_init": "svgp"``
and ``+z-init-svgp`` after the dataset in their keys, and are compared with the paper's numbers for their method
(the paper starts Z at k-means). The SVGP stage's checkpoint is shared by every method of the same dataset, fold
and M.

Convergence: after every ``--eval-every`` iterations of warmup, the test MNLL of the mixture over the 64 states of
the sampler's window (one per iteration, the states the noise estimate is drawn from) is recorded with the
sampler's elapsed time; "seconds to within 0.05" is the first time that MNLL is within 0.05 of the final MNLL.
"Updates per second" is warmup updates over warmup seconds (compilation excluded).

Output: ``benchmarks/results/bsgp_uci.json``, rewritten atomically after every cell (dataset, layers, prior,
fold); finished cells with the same settings are skipped on a rerun, and each cell checkpoints its chain to
``benchmarks/results/bsgp_uci_runs/`` (gitignored; its name :func:`checkpoint_name`) after every ``--eval-every``
iterations, so a killed run resumes. A cell records, besides its scores and timings, the noise variance and each
sampled lengthscale site's median over the kept draws (``lengthscale_median``, read by ``bsgp_relevance.py``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import fcntl
import json
import os
import shlex
import sys
import time
import traceback
import warnings
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import svgp_uci  # noqa: E402
from svgp_uci import _loadavg, environment, write_json_atomic  # noqa: E402

from ppl_sparsegp import data, metrics  # noqa: E402
from ppl_sparsegp.inducing.initialise import kmeans  # noqa: E402
from ppl_sparsegp.models.numpyro.bsgp import LIKELIHOOD_TERMS  # noqa: E402
from ppl_sparsegp.recipes.bsgp import BSGPConfig, fit_bsgp  # noqa: E402
from ppl_sparsegp.recipes.sghmc_dgp import SGHMCDGPConfig, fit_sghmc_dgp  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "bsgp_uci.json"
RUNS = ROOT / "results" / "bsgp_uci_runs"
SVGP_RESULTS = ROOT / "results" / "svgp_uci.json"

DATASETS = ("yacht", "boston", "energy", "concrete", "kin8nm", "power", "naval", "protein")
PRIORS = ("normal", "dpp", "strauss", "uniform")
METHODS = ("bsgp", "sghmc-dgp", "z-optimised", "z-svgp")
Z_INITS = ("kmeans", "svgp")

# Table 6 (BSGP rows, L = 1..5) and Table 7 (priors, L = 1): test MNLL, mean and population std over 8 folds.
PAPER_TABLE6 = {
    1: {"boston": 2.47, "concrete": 3.12, "energy": 0.97, "kin8nm": -1.12, "naval": -8.22, "power": 2.71,
        "protein": 2.78, "yacht": -0.23},
    2: {"boston": 2.47, "concrete": 3.04, "energy": 0.95, "kin8nm": -1.40, "naval": -8.23, "power": 2.67,
        "protein": 2.63, "yacht": -0.72},
    3: {"boston": 2.47, "concrete": 2.96, "energy": 0.95, "kin8nm": -1.41, "naval": -8.02, "power": 2.66,
        "protein": 2.57, "yacht": -0.83},
    4: {"boston": 2.48, "concrete": 2.97, "energy": 0.92, "kin8nm": -1.43, "naval": -8.03, "power": 2.65,
        "protein": 2.50, "yacht": -0.76},
    5: {"boston": 2.48, "concrete": 2.91, "energy": 0.75, "kin8nm": -1.43, "naval": -8.09, "power": 2.65,
        "protein": 2.43, "yacht": -0.74},
}  # fmt: skip
PAPER_TABLE7 = {
    "dpp": {"boston": 2.59, "concrete": 3.30, "energy": 1.28, "kin8nm": -1.08, "naval": -7.93, "power": 2.73,
            "protein": 2.79, "yacht": 0.78},
    "normal": {"boston": 2.54, "concrete": 3.12, "energy": 0.95, "kin8nm": -1.13, "naval": -8.38, "power": 2.70,
               "protein": 2.77, "yacht": -0.32},
    "strauss": {"boston": 2.67, "concrete": 3.20, "energy": 1.06, "kin8nm": -1.09, "naval": -8.10, "power": 2.74,
                "protein": 2.80, "yacht": 0.11},
    "uniform": {"boston": 2.65, "concrete": 3.21, "energy": 1.04, "kin8nm": -1.09, "naval": -8.47, "power": 2.73,
                "protein": 2.79, "yacht": 0.21},
}  # fmt: skip
# Table 6, "SGHMC GP" rows (L = 1..5): the baseline's test MNLL.
PAPER_SGHMC_GP = {
    1: {"boston": 2.82, "concrete": 3.13, "energy": 1.08, "kin8nm": -1.08, "naval": -6.23, "power": 2.76,
        "protein": 2.81, "yacht": -0.11},
    2: {"boston": 2.77, "concrete": 2.99, "energy": 0.91, "kin8nm": -1.32, "naval": -6.57, "power": 2.72,
        "protein": 2.71, "yacht": -0.52},
    3: {"boston": 2.78, "concrete": 3.02, "energy": 0.91, "kin8nm": -1.37, "naval": -6.56, "power": 2.68,
        "protein": 2.66, "yacht": -0.57},
    4: {"boston": 2.75, "concrete": 2.98, "energy": 0.69, "kin8nm": -1.38, "naval": -6.42, "power": 2.67,
        "protein": 2.62, "yacht": -0.69},
    5: {"boston": 3.75, "concrete": 3.11, "energy": 1.00, "kin8nm": -1.39, "naval": -6.55, "power": 2.65,
        "protein": 2.59, "yacht": -0.53},
}  # fmt: skip
# The authors' released objective-comparison runs (spec §1.3), the E[log p] rows (L = 1..5): test MNLL, 8-fold mean.
PAPER_EXPECTED_LOG = {
    1: {"boston": 2.64, "concrete": 3.29, "energy": 1.33, "kin8nm": -1.06, "naval": -8.16, "power": 2.80,
        "protein": 2.92, "yacht": 0.78},
    2: {"boston": 2.63, "concrete": 3.16, "energy": 1.32, "kin8nm": -1.33, "naval": -8.28, "power": 2.76,
        "protein": 2.83, "yacht": 0.24},
    3: {"boston": 2.65, "concrete": 3.13, "energy": 1.32, "kin8nm": -1.37, "naval": -8.13, "power": 2.72,
        "protein": 2.79, "yacht": -0.02},
    4: {"boston": 2.64, "concrete": 3.10, "energy": 1.31, "kin8nm": -1.38, "naval": -8.29, "power": 2.70,
        "protein": 2.74, "yacht": -0.04},
    5: {"boston": 2.66, "concrete": 3.09, "energy": 1.22, "kin8nm": -1.40, "naval": -8.32, "power": 2.68,
        "protein": 2.71, "yacht": -0.19},
}  # fmt: skip
# Spec §3.5 (the authors' released Fig. 1 data, 8-fold means, L = 1, log E[p]): test MNLL against M.
PAPER_FIG1 = {
    "bsgp": {"naval": {10: -6.07, 50: -7.83, 100: -8.23}, "protein": {10: 2.97, 50: 2.84, 100: 2.78}},
    "z-optimised": {"naval": {10: -4.32, 50: -5.56, 100: -6.67}, "protein": {10: 2.98, 50: 2.91, 100: 2.81}},
    "sghmc-dgp": {"naval": {10: -3.44, 50: -5.78, 100: -6.27}, "protein": {10: 2.98, 50: 2.87, 100: 2.82}},
}  # fmt: skip
NUM_INDUCING = 100
DATA_TERM = BSGPConfig.likelihood_term  # log E[p], Table 6's
MAX_BATCH = 1000
WITHIN = 0.05


def run_cell(
    name: str, fold: int, layers: int, prior: str, args: argparse.Namespace, method: str = "bsgp",
    term: str = DATA_TERM, num_inducing: int = NUM_INDUCING, z_init: str = "kmeans",
) -> dict:  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ENERGY's one-output warning, recorded in the summary instead
        raw = data.load_bsgp_uci(name, fold, target=args.energy_target if name == "energy" else None)
    ds, scaler = data.standardize(raw)
    X, y = np.asarray(ds.X_train, np.float64), np.asarray(ds.y_train, np.float64)
    Xs, ys = np.asarray(ds.X_test, np.float64), np.asarray(ds.y_test, np.float64)
    Z = kmeans(X, num_inducing, seed=fold)
    RUNS.mkdir(parents=True, exist_ok=True)
    per_iteration = updates_per_iteration(method, args)
    checkpoint = RUNS / checkpoint_name(
        {"method": method, "dataset": name, "layers": layers, "z_prior": prior, "fold": fold,
         "iterations": args.iterations, "kept": args.kept, "noise_per_output": args.noise_per_output,
         "likelihood_term": term, "num_inducing": num_inducing, "z_init": z_init,
         "updates_per_iteration": per_iteration}
    )  # fmt: skip
    trace: list[dict] = []

    def on_piece(partial) -> None:
        """During warmup: the test MNLL of the mixture over the sampler's window, with the elapsed time."""
        result = partial.mcmc
        if result.warmup_done == 0 or result.num_draws:
            return
        window = partial.window_draws(X, y)
        mnll = float(-np.mean(partial.log_predictive_density(Xs, ys, samples=window, standardizer=scaler)))
        done = result.warmup_done // per_iteration
        trace.append({"iteration": done, "seconds": result.warmup_seconds, "window_mnll": mnll})
        print(f"    it {done}: window MNLL {mnll:.3f} ({result.warmup_seconds:.0f}s)", flush=True)

    load_before = _loadavg()
    t0 = time.perf_counter()
    svgp = None
    if z_init == "svgp":
        gp = svgp_uci.protocol_svgp(Z, ds.num_outputs, X.shape[0])
        stage = RUNS / f"{name}_fold{fold}_M{num_inducing}_svgp{svgp_uci.STEPS}.npz"
        svgp = svgp_uci.train_protocol_svgp(gp, X, y, fold, svgp_uci.STEPS, stage)
        Z = np.asarray(svgp.params["Z"])
    common = dict(
        key=jax.random.PRNGKey(fold), Z=Z, num_iterations=args.iterations, num_kept=args.kept, batch_size=MAX_BATCH,
        warmup_chunk_size=per_iteration * args.eval_every, checkpoint=str(checkpoint), callback=on_piece,
        likelihood_term=term,
    )  # fmt: skip
    if method == "bsgp":
        fit = fit_bsgp(X, y, num_layers=layers, z_prior=prior, noise_per_output=args.noise_per_output, **common)
    elif method == "sghmc-dgp":
        fit = fit_sghmc_dgp(X, y, num_layers=layers, updates_per_iteration=per_iteration, **common)
    else:
        held = ("Z",) if method == "z-svgp" else ()
        fit = fit_sghmc_dgp(
            X, y, num_layers=layers, updates_per_iteration=per_iteration, thinning=32, optimised=("Z",), held=held,
            **common,
        )  # fmt: skip
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    logp = fit.log_predictive_density(Xs, ys, standardizer=scaler, key=jax.random.PRNGKey(1))
    predict_seconds = time.perf_counter() - t1
    mnll = float(-np.mean(logp))
    pred = fit.predict(Xs, standardizer=scaler, key=jax.random.PRNGKey(1))
    y_test = np.asarray(raw.y_test, np.float64)
    within = [t["seconds"] for t in trace if t["window_mnll"] <= mnll + WITHIN]
    samples = fit.mcmc.flat_samples()
    noise = np.asarray(samples[next(k for k in samples if k.startswith("likelihood."))][-1])
    lengthscales = {
        k: np.median(np.asarray(v), axis=0).tolist() for k, v in samples.items() if k.endswith("lengthscale")
    }
    warm = fit.mcmc.warmup_seconds
    return {
        "method": method,
        "dataset": name,
        **({"target": args.energy_target} if name == "energy" else {}),
        "fold": fold,
        "layers": layers,
        "z_prior": prior,
        "noise_per_output": method == "bsgp" and args.noise_per_output,
        "likelihood_term": term,
        "num_inducing": num_inducing,
        "z_init": z_init,
        "iterations": args.iterations,
        "updates_per_iteration": per_iteration,
        "updates_warmup": per_iteration * args.iterations,
        "kept": args.kept,
        "thinning": fit.mcmc.thinning,
        "n_train": int(X.shape[0]),
        "n_test": int(Xs.shape[0]),
        "n_outputs": int(ds.num_outputs),
        "batch_size": min(MAX_BATCH, int(X.shape[0])),
        "test_mnll": mnll,
        "test_rmse": metrics.rmse(y_test, pred.y_mean),
        "warmup_seconds": warm,
        "sample_seconds": fit.mcmc.sample_seconds,
        "fit_wall_seconds": wall,
        "predict_seconds": predict_seconds,
        "updates_per_second": per_iteration * args.iterations / warm if warm > 0 else None,
        "seconds_to_within_0.05": within[0] if within else None,
        "window_trace": trace,
        "noise_variance_standardised": np.atleast_1d(noise).tolist(),
        "lengthscale_median": lengthscales,
        "loadavg_1min_before": load_before,
        "loadavg_1min_after": _loadavg(),
        "finished": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        **(
            {}
            if svgp is None
            else {
                "svgp_steps": svgp_uci.STEPS,
                "svgp_seconds": svgp.run_seconds + svgp.compile_seconds,
                "svgp_final_loss_mean_last_100": float(np.mean(svgp.losses[-100:])),
            }
        ),  # fmt: skip
    }


def checkpoint_name(cell: dict) -> str:
    """The file name, in :data:`RUNS`, of the chain checkpoint of the cell with these settings (a cell record's
    ``method``, ``dataset``, ``layers``, ``z_prior``, ``fold``, ``iterations``, ``kept``, ``noise_per_output``,
    ``likelihood_term``, ``num_inducing``, ``z_init`` and, for methods other than BSGP, ``updates_per_iteration``;
    the four before it may be absent in the records written before those options existed, which ran the defaults)."""
    method = cell.get("method", "bsgp")
    name = f"{cell['dataset']}_L{cell['layers']}_{cell['z_prior']}_fold{cell['fold']}_it{cell['iterations']}"
    name += f"_kept{cell['kept']}"
    name += "_noise-per-output" if cell.get("noise_per_output") else ""
    term = cell.get("likelihood_term", DATA_TERM)
    name += "" if term == DATA_TERM else f"_{term}"
    m = cell.get("num_inducing", NUM_INDUCING)
    name += "" if m == NUM_INDUCING else f"_M{m}"
    name += "_z-init-svgp" if cell.get("z_init", "kmeans") == "svgp" and method != "z-svgp" else ""
    if method != "bsgp":
        name = f"{method}_{name}_upd{cell['updates_per_iteration']}"
    return name + ".ckpt"


def updates_per_iteration(method: str, args: argparse.Namespace) -> int:
    """SGHMC updates per iteration: BSGP's 21 (``bsgp``, ``z-optimised``, ``z-svgp``), ``--sghmc-dgp-updates`` for
    ``sghmc-dgp``."""
    return args.sghmc_dgp_updates if method == "sghmc-dgp" else 21


def paper_number(method: str, name: str, layers: int, prior: str, term: str, m: int) -> float | None:
    """The paper's test MNLL (8-fold mean) for these settings, or None where it has none: Table 6 (BSGP with the
    Normal prior, SGHMC-GP) at M = 100, the E[log p] runs (BSGP, M = 100), Fig. 1's data (L = 1) at other M and for
    ``z-optimised`` and ``z-svgp``."""
    if method == "bsgp" and prior != "normal":
        return None
    if term != DATA_TERM:
        return PAPER_EXPECTED_LOG.get(layers, {}).get(name) if method == "bsgp" and m == NUM_INDUCING else None
    if m == NUM_INDUCING and method in ("bsgp", "sghmc-dgp"):
        return (PAPER_TABLE6 if method == "bsgp" else PAPER_SGHMC_GP).get(layers, {}).get(name)
    line = "z-optimised" if method == "z-svgp" else method  # the paper's one line, two readings (module docstring)
    return PAPER_FIG1[line].get(name, {}).get(m) if layers == 1 else None


def _svgp_mnll() -> dict:
    """Our SVGP (benchmarks/svgp_uci.py, same splits): dataset -> fold -> test MNLL."""
    if not SVGP_RESULTS.exists():
        return {}
    cells = json.loads(SVGP_RESULTS.read_text()).get("cells", {})
    return {n: {int(f): c["test_mnll"] for f, c in folds.items() if "test_mnll" in c} for n, folds in cells.items()}


def _method_prefix(cell: dict) -> str:
    """Nothing for BSGP (the keys of the cells run before other methods existed), else "<method>-upd<n>/"."""
    method = cell.get("method", "bsgp")
    return "" if method == "bsgp" else f"{method}-upd{cell['updates_per_iteration']}/"


def _dataset_label(cell: dict) -> str:
    """The dataset, with ``:<target>`` for ENERGY's targets other than the heating load (its cells before targets
    existed), ``+noise-per-output`` for the runs with one noise variance per output (the cells before
    ``--noise-per-output`` existed shared one), ``+expected-log`` for the ``E[log p]`` data term, ``+M<m>`` for
    M other than :data:`NUM_INDUCING` and ``+z-init-svgp`` for Z started at an SVGP's (``z-svgp`` always is; the
    cells before those options ran the defaults)."""
    target = cell.get("target", "heating")
    label = cell["dataset"] if target == "heating" else f"{cell['dataset']}:{target}"
    label += "+noise-per-output" if cell.get("noise_per_output") else ""
    label += "" if cell.get("likelihood_term", DATA_TERM) == DATA_TERM else "+expected-log"
    m = cell.get("num_inducing", NUM_INDUCING)
    label += "" if m == NUM_INDUCING else f"+M{m}"
    svgp_start = cell.get("z_init", "kmeans") == "svgp" and cell.get("method", "bsgp") != "z-svgp"
    return label + ("+z-init-svgp" if svgp_start else "")


def cell_key(cell: dict) -> str:
    """[<method>-upd<n>/]dataset[:target][+noise-per-output][+expected-log][+M<m>][+z-init-svgp]/L<layers>/<prior>/
    it<iterations>/kept<kept>/fold<fold>: one run's settings."""
    return (
        f"{_method_prefix(cell)}{_dataset_label(cell)}/L{cell['layers']}/{cell['z_prior']}/it{cell['iterations']}/"
        f"kept{cell['kept']}/fold{cell['fold']}"
    )


def summarise(cells: dict) -> dict:
    """Mean and population std over folds for every (dataset, layers, prior, schedule)."""
    svgp = _svgp_mnll()
    groups: dict = {}
    for cell in cells.values():
        if "test_mnll" in cell:
            settings = (
                _method_prefix(cell), _dataset_label(cell), cell["layers"], cell["z_prior"], cell["iterations"],
                cell["kept"],
            )  # fmt: skip
            groups.setdefault(settings, []).append(cell)
    out = {}
    for (prefix, label, layers, prior, iterations, kept), done in sorted(groups.items()):
        method, name = done[0].get("method", "bsgp"), done[0]["dataset"]
        done.sort(key=lambda c: c["fold"])
        mnll = np.array([c["test_mnll"] for c in done])
        folds = [c["fold"] for c in done]
        term, m = done[0].get("likelihood_term", DATA_TERM), done[0].get("num_inducing", NUM_INDUCING)
        paper = paper_number(method, name, layers, prior, term, m)
        svgp_folds = [svgp[name][f] for f in folds if f in svgp.get(name, {})]
        speeds = [c["updates_per_second"] for c in done if c["updates_per_second"]]
        times = [c["seconds_to_within_0.05"] for c in done if c["seconds_to_within_0.05"] is not None]
        out[f"{prefix}{label}/L{layers}/{prior}/it{iterations}/kept{kept}"] = {
            "method": method,
            "updates_per_iteration": done[0].get("updates_per_iteration", 21),
            "dataset": name,
            "layers": layers,
            "z_prior": prior,
            "noise_per_output": bool(done[0].get("noise_per_output")),
            "likelihood_term": term,
            "num_inducing": m,
            "iterations": iterations,
            "kept": kept,
            "folds": folds,
            "test_mnll_mean": float(mnll.mean()),
            "test_mnll_std": float(mnll.std()),
            "paper": paper,
            "paper_table7": (
                PAPER_TABLE7[prior][name]
                if layers == 1 and method == "bsgp" and (term, m) == (DATA_TERM, NUM_INDUCING)
                else None
            ),  # fmt: skip
            "difference_to_paper": None if paper is None else float(mnll.mean() - paper),
            "within_0.1_of_paper_or_better": None if paper is None else bool(mnll.mean() - paper <= 0.1),
            "our_svgp_same_folds": float(np.mean(svgp_folds)) if len(svgp_folds) == len(folds) else None,
            "better_than_our_svgp": bool(mnll.mean() < np.mean(svgp_folds)) if len(svgp_folds) == len(folds) else None,
            "updates_per_second_mean": float(np.mean(speeds)) if speeds else None,
            "seconds_to_within_0.05_mean": float(np.mean(times)) if times else None,
            "target": done[0].get("target"),
            "comparable_to_paper": name != "energy" or done[0].get("target") == "both",
        }
    return out


def markdown_table(summary: dict) -> str:
    lines = [
        "| method | dataset | L | Z prior | iterations (× updates) | kept | ours (test MNLL) | paper | ours − paper | "
        "our SVGP (same folds) | folds | updates/s | s to within 0.05 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary.values():
        paper = s["paper"] if s["paper"] is not None else s["paper_table7"]
        diff = "" if paper is None else f"{s['test_mnll_mean'] - paper:+.2f}"
        svgp = "" if s["our_svgp_same_folds"] is None else f"{s['our_svgp_same_folds']:.2f}"
        speed = "" if s["updates_per_second_mean"] is None else f"{s['updates_per_second_mean']:.0f}"
        conv = "" if s["seconds_to_within_0.05_mean"] is None else f"{s['seconds_to_within_0.05_mean']:.0f}"
        name = s["dataset"] + ("" if s["comparable_to_paper"] else " (1 output)")
        name += " (noise per output)" if s.get("noise_per_output") else ""
        name += " (E[log p])" if s["likelihood_term"] != DATA_TERM else ""
        name += f" (M = {s['num_inducing']})" if s["num_inducing"] != NUM_INDUCING else ""
        lines.append(
            f"| {s['method']} | {name} | {s['layers']} | {s['z_prior']} | {s['iterations']} × "
            f"{s['updates_per_iteration']} | {s['kept']} | "
            f"{s['test_mnll_mean']:.2f} ± {s['test_mnll_std']:.2f} | "
            f"{'' if paper is None else f'{paper:.2f}'} | {diff} | {svgp} | {len(s['folds'])} | {speed} | {conv} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--folds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--layers", nargs="+", type=int, default=[1])
    parser.add_argument("--priors", nargs="+", default=["normal"], choices=PRIORS)
    parser.add_argument("--methods", nargs="+", default=["bsgp"], choices=METHODS)
    parser.add_argument(
        "--energy-target", default="heating", choices=data.ENERGY_TARGETS,
        help="ENERGY's outputs: heating (data.txt's), both (the paper's heating and cooling load) or cooling; the "
        "last two need uci/energy/ENB2012_data.csv in the data folder",
    )  # fmt: skip
    parser.add_argument(
        "--sghmc-dgp-updates", type=int, default=SGHMCDGPConfig.updates_per_iteration,
        help="SGHMC updates per iteration of sghmc-dgp (one Adam step after each iteration)",
    )  # fmt: skip
    parser.add_argument(
        "--noise-per-output", action="store_true",
        help="bsgp: one Gaussian noise variance per output (BSGPConfig.noise_per_output; the released code's), "
        "instead of one shared by the outputs (default: shared)",
    )  # fmt: skip
    parser.add_argument(
        "--likelihood-terms", nargs="+", default=[DATA_TERM], choices=LIKELIHOOD_TERMS,
        help="data terms to run every cell with: log_expected (log E[p], Table 6's) and/or expected_log (E[log p])",
    )  # fmt: skip
    parser.add_argument(
        "--num-inducing", nargs="+", type=int, default=[NUM_INDUCING],
        help=f"inducing points M per layer to run every cell with (default {NUM_INDUCING})",
    )  # fmt: skip
    parser.add_argument(
        "--z-init", default="kmeans", choices=Z_INITS,
        help="where Z starts: kmeans (the paper's) or svgp (where the protocol SVGP from k-means ends; one layer)",
    )  # fmt: skip
    parser.add_argument("--iterations", type=int, default=10_000, help="warmup iterations of 21 updates")
    parser.add_argument("--kept", type=int, default=256, help="draws kept, 32 updates apart")
    parser.add_argument("--eval-every", type=int, default=100, help="iterations between window evaluations")
    parser.add_argument("--quick", action="store_true", help="40 iterations, 8 draws, fold 0, runs folder")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.iterations, args.kept, args.eval_every, args.folds = 40, 8, 20, args.folds[:1]
    if args.iterations % args.eval_every:
        parser.error("--iterations must be a multiple of --eval-every")
    if args.noise_per_output and set(args.methods) - {"bsgp"}:
        parser.error("--noise-per-output applies to --methods bsgp (SGHMC-DGP's recipe has one noise variance)")
    if args.sghmc_dgp_updates < 1:
        parser.error("--sghmc-dgp-updates must be a positive integer")
    if "z-svgp" in args.methods and args.layers != [1]:
        parser.error("--methods z-svgp: one layer only (--layers 1); its Z comes from a shallow SVGP")
    if args.z_init == "svgp" and args.layers != [1]:
        parser.error("--z-init svgp: one layer only (--layers 1); the Z comes from a shallow SVGP")
    if min(args.num_inducing) < 1:
        parser.error("--num-inducing: every M must be a positive integer")
    if "energy" in args.datasets:  # the cooling load's file, checked before any run
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                data.load_bsgp_uci("energy", args.folds[0], target=args.energy_target)
        except data.DatasetNotFoundError as err:
            parser.error(f"--energy-target {args.energy_target}: {err}")
    output = args.output or (RUNS / "quick.json" if args.quick else RESULTS)
    command = " ".join(["python", "benchmarks/bsgp_uci.py", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])

    def update(cell: dict | None) -> dict:
        RUNS.mkdir(parents=True, exist_ok=True)
        with open(RUNS / f"{output.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            results = json.loads(output.read_text()) if output.exists() else {}
            results.setdefault("benchmark", "BSGP Tables 6 and 7: test MNLL (original units), UCI regression")
            results["date"] = _dt.date.today().isoformat()
            results["environment"] = environment()
            commands = results.setdefault("commands", [])
            if command not in commands:
                commands.append(command)
            cells = {cell_key(c): c for c in results.get("cells", {}).values()}
            if cell is not None:
                cells[cell_key(cell)] = cell
            results["cells"] = cells
            results["summary"] = summarise(cells)
            write_json_atomic(output, results)
            return results

    runs = [("bsgp", layers, prior) for layers in args.layers for prior in args.priors if "bsgp" in args.methods]
    runs += [
        (m, layers, "optimised") for m in ("sghmc-dgp", "z-optimised") if m in args.methods for layers in args.layers
    ]
    runs += [("z-svgp", layers, "svgp") for layers in args.layers if "z-svgp" in args.methods]
    runs = [(*run, term, m) for run in runs for term in args.likelihood_terms for m in args.num_inducing]
    for method, layers, prior, term, m in runs:
        for name in args.datasets:
            for fold in args.folds:
                z_init = "svgp" if method == "z-svgp" else args.z_init
                settings = {"method": method, "dataset": name, "layers": layers, "z_prior": prior, "fold": fold,
                            "noise_per_output": args.noise_per_output, "likelihood_term": term,
                            "num_inducing": m, "z_init": z_init}  # fmt: skip
                per_iteration = updates_per_iteration(method, args)
                key = cell_key(
                    {**settings, "iterations": args.iterations, "kept": args.kept,
                     "updates_per_iteration": per_iteration}
                )  # fmt: skip
                on_disk = json.loads(output.read_text()) if output.exists() else {}
                prev = {cell_key(c): c for c in on_disk.get("cells", {}).values()}.get(key)
                if prev and "test_mnll" in prev:
                    print(f"[skip] {key}: MNLL {prev['test_mnll']:.3f}", flush=True)
                    continue
                print(f"[run ] {key} ({args.iterations} iterations) load {_loadavg()}", flush=True)
                try:
                    cell = run_cell(name, fold, layers, prior, args, method, term, m, z_init)
                except Exception as err:  # record and go on with the next cell
                    traceback.print_exc()
                    cell = {**settings, "iterations": args.iterations, "kept": args.kept,
                            "updates_per_iteration": per_iteration,
                            "error": f"{type(err).__name__}: {err}"}  # fmt: skip
                cell["command"] = command
                update(cell)
                if "test_mnll" in cell:
                    print(
                        f"[done] {key}: MNLL {cell['test_mnll']:.3f} {cell['updates_per_second']:.0f} upd/s "
                        f"{cell['fit_wall_seconds']:.0f}s noise {np.round(cell['noise_variance_standardised'], 5)}",
                        flush=True,
                    )
    print(markdown_table(update(None)["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
