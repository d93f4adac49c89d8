"""Cost of a step of probabilistic selection against |S|, and the selected count and accuracy against α
(Uhrenholt et al. 2021; spec 000 §3.3, §6.11 and behavioural test B8; §2.6 and §6.1 for α).

Run (from the repository root)::

    .venv/bin/python benchmarks/selective_cost.py cost  --counts 25 50 100 200 400 --candidates 400
    .venv/bin/python benchmarks/selective_cost.py run   --candidates 400 --alpha 1.0 --selection-steps 300
    .venv/bin/python benchmarks/selective_cost.py alpha --factors 0 1e-4 1e-3 1e-2 0.1 1
    .venv/bin/python benchmarks/selective_cost.py cost --quick      # smoke test (a few steps, tiny data)

Claims (the paper gives no wall-clock numbers):

* B8 / §6.11: one score-function step costs S bound evaluations of O(N|S|² + |S|³) each, so the cost per step is
  proportional to (a power of) the selected count and falls as λ falls during selection.
* §6.1 / Table 1: α must be re-tuned per data set because the bound L(S) grows with N.

Parts (each writes its own section of ``benchmarks/results/selective_cost.json``, atomically: the part's name,
or ``--section``, e.g. for a second sweep of ``cost`` in another order):

* ``cost``: kin8nm (BSGP split 1, N = 6553 training rows, D = 8), K candidates drawn at random from the training
  inputs. For each count m, the wall time of one **selection step** (the recipe's selection phase: the collapsed
  :class:`SelectiveSGPR` over all K candidates, :class:`ScoreFunctionELBO` with S = 4 and frozen GP, the recipe's
  optimiser) with λ set to 1 − 1e-9 on m candidates and 1e-9 on the rest (so every draw selects those m; the λ
  learning rate is 1e-9 so they stay there), and of one **post-training step** (Adam on the ordinary SGPR with those
  m points, what the pruned model trains). Each is timed by :func:`fit_svi` in chunks of ``--chunk`` compiled steps;
  the first chunk (compilation) is dropped and the median per-step time over ``--repeats`` chunks is reported.
* ``run``: one real selection run on the same data: pre-train the SGPR on all K candidates, then the selection
  phase with α = ``--alpha``, recording E|S| = Σλ and the per-step wall time of every chunk as λ falls.
* ``alpha``: kin8nm split 1, K = 100 (as ``selective_uci.py``), a shorter documented schedule. The SGPR on all K is
  pre-trained once (frozen selection does not depend on α), then for each α = factor × N/K: the selection phase,
  one sampled subset, pruning, post-training, and test RMSE / NLPD in original units. N/K is the scale §2.6 gives:
  a candidate is kept when its gain in L (which sums over N points) exceeds about 2α E|S| nats.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import optax  # noqa: E402
from svgp_uci import _loadavg, locked_json  # noqa: E402

from ppl_sparsegp import data, metrics  # noqa: E402
from ppl_sparsegp.core import kernels, likelihoods  # noqa: E402
from ppl_sparsegp.inducing.initialise import random_subset  # noqa: E402
from ppl_sparsegp.infer.score_function import ScoreFunctionELBO  # noqa: E402
from ppl_sparsegp.models.numpyro.selective import INCLUSION_PARAM, SelectiveSGPR  # noqa: E402
from ppl_sparsegp.models.numpyro.sgpr import SGPR  # noqa: E402
from ppl_sparsegp.recipes.phases import fit_phase, post_train, sample_subset, selection_optimizer  # noqa: E402
from ppl_sparsegp.recipes.selective import SelectiveConfig  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "selective_cost.json"
QUICK_RESULTS = ROOT / "results" / "selective_cost_runs" / "quick.json"
EXTREME = 1e-9
"""λ of the selected (1 − EXTREME) and unselected (EXTREME) candidates in the ``cost`` part."""
DEFAULTS = SelectiveConfig()


def training_data(name: str, split: int, quick: bool) -> data.Dataset:
    """BSGP's split of ``name`` (X standardised on the whole data), y standardised with training statistics."""
    dataset, _ = data.standardize(data.load_bsgp_uci(name, split))
    if quick:
        return dataclasses.replace(dataset, X_train=dataset.X_train[:300], y_train=dataset.y_train[:300])
    return dataset


def _sgpr(Z: np.ndarray) -> SGPR:
    D = Z.shape[1]
    return SGPR(kernel=kernels.RBF(variance=1.0, lengthscale=np.ones(D)), likelihood=likelihoods.Gaussian(1.0), Z=Z)


def _selection_loss() -> ScoreFunctionELBO:
    return ScoreFunctionELBO(DEFAULTS.num_particles, pathwise=False)


def per_step_seconds(model, X, y, optimizer, chunk: int, repeats: int, **options) -> dict:
    """Median (and all) per-step wall times over ``repeats`` chunks of ``chunk`` steps, the first (compiling) chunk
    excluded; ``options`` go to :func:`fit_svi` (loss, init_params)."""
    stamps: list[float] = []

    def stamp(step, losses, params) -> None:
        stamps.append(time.perf_counter())

    start = time.perf_counter()
    fit_phase(model, X, y, optimizer, chunk * (repeats + 1), 0, steps_per_dispatch=chunk, callback=stamp,
              progress=False, **options)  # fmt: skip
    per_step = np.diff(stamps) / chunk
    return {
        "median_s": float(np.median(per_step)),
        "per_step_s": per_step.tolist(),
        "first_chunk_s": stamps[0] - start,
    }


def cost_part(args: argparse.Namespace) -> dict:
    """Selection-step and post-training-step time against the selected count m."""
    d = training_data(args.dataset, args.split, args.quick)
    X, y = np.asarray(d.X_train), np.asarray(d.y_train)
    Z = random_subset(X, args.candidates, seed=args.split)
    K = Z.shape[0]
    selective = SelectiveSGPR(_sgpr(Z), alpha=DEFAULTS.alpha)
    optimizer = selection_optimizer(optax.set_to_zero(), EXTREME)
    rows = []
    for m in args.counts:
        if not 1 <= m <= K:
            raise ValueError(f"--counts: each count must be in 1..{K}, got {m}")
        probs = np.full(K, EXTREME)
        probs[:m] = 1.0 - EXTREME
        select = per_step_seconds(selective, X, y, optimizer, args.chunk, args.repeats, loss=_selection_loss(),
                                  init_params={INCLUSION_PARAM: probs})  # fmt: skip
        post = per_step_seconds(_sgpr(Z[:m]), X, y, optax.adam(DEFAULTS.learning_rate), args.chunk, args.repeats)
        rows.append({"selected": m, "selection_step": select, "post_step": post})
        print(
            f"|S| = {m:4d}: selection step {select['median_s'] * 1e3:8.1f} ms, post-training step "
            f"{post['median_s'] * 1e3:8.1f} ms (load {_loadavg()})",
            flush=True,
        )
    return {"candidates": K, "N": int(X.shape[0]), "num_particles": DEFAULTS.num_particles, "rows": rows}


def run_part(args: argparse.Namespace) -> dict:
    """One real selection phase, recording E|S| and the per-step time of every chunk."""
    d = training_data(args.dataset, args.split, args.quick)
    X, y = np.asarray(d.X_train), np.asarray(d.y_train)
    Z = random_subset(X, args.candidates, seed=args.split)
    base = _sgpr(Z)
    t0 = time.perf_counter()
    pre = fit_phase(base, X, y, optax.adam(DEFAULTS.learning_rate), args.pre_steps, 1, progress=False)
    pre_seconds = time.perf_counter() - t0
    selective = SelectiveSGPR(base, alpha=args.alpha, initial_inclusion=DEFAULTS.initial_inclusion)
    records: list[dict] = []
    last = [time.perf_counter()]

    def record(step, losses, params) -> None:
        now = time.perf_counter()
        probs = np.asarray(params[INCLUSION_PARAM])
        records.append(
            {"step": int(step), "expected_count": float(probs.sum()), "per_step_s": (now - last[0]) / len(losses)}
        )
        last[0] = now

    optimizer = selection_optimizer(optax.set_to_zero(), DEFAULTS.selection_learning_rate)
    fit_phase(selective, X, y, optimizer, args.selection_steps, 2, loss=_selection_loss(), init_params=pre.params,
              steps_per_dispatch=args.chunk, callback=record, progress=False)  # fmt: skip
    for r in records[1:]:
        print(f"step {r['step']:5d}: E|S| = {r['expected_count']:7.1f}, {r['per_step_s'] * 1e3:8.1f} ms/step")
    return {
        "candidates": int(Z.shape[0]), "N": int(X.shape[0]), "alpha": args.alpha, "pre_steps": args.pre_steps,
        "pre_seconds": pre_seconds, "chunk": args.chunk, "records": records,
    }  # fmt: skip


def alpha_part(args: argparse.Namespace) -> dict:
    """E|S|, sampled |S|, ELBO and test RMSE / NLPD against α = factor × N / K, from one shared pre-training."""
    raw = data.load_bsgp_uci(args.dataset, args.split)
    dataset, scaler = data.standardize(raw)
    X, y = np.asarray(dataset.X_train), np.asarray(dataset.y_train)
    Xs, ys = np.asarray(dataset.X_test), np.asarray(raw.y_test)
    if args.quick:
        X, y = X[:300], y[:300]
    N, K = X.shape[0], args.candidates
    Z = random_subset(X, K, seed=args.split)
    base = _sgpr(Z)
    t0 = time.perf_counter()
    pre = fit_phase(base, X, y, optax.adam(DEFAULTS.learning_rate), args.pre_steps, 1, progress=False)
    pre_seconds = time.perf_counter() - t0

    def test_metrics(model, params) -> dict:
        mean, var = (np.asarray(a) for a in model.predict_y(params, Xs, X=X, y=y))
        mean_o, var_o = scaler.inverse_mean(mean), scaler.inverse_var(var)
        return {"rmse": metrics.rmse(ys, mean_o), "nlpd": metrics.nlpd_gaussian(ys, mean_o, var_o)}

    reference = {"elbo": float(base.elbo(pre.params, X, y)), **test_metrics(base, pre.params)}
    print(f"all {K} (pre-trained, {args.pre_steps} steps): {reference}", flush=True)
    rows = []
    for factor in args.factors:
        alpha = factor * N / K
        selective = SelectiveSGPR(base, alpha=alpha, initial_inclusion=DEFAULTS.initial_inclusion)
        t0 = time.perf_counter()
        optimizer = selection_optimizer(optax.set_to_zero(), DEFAULTS.selection_learning_rate)
        chosen = fit_phase(selective, X, y, optimizer, args.selection_steps, 2, loss=_selection_loss(),
                           init_params=pre.params, progress=False)  # fmt: skip
        probs = np.asarray(chosen.params[INCLUSION_PARAM])
        row = {"factor": factor, "alpha": alpha, "expected_count": float(probs.sum()),
               "count_sd": float(np.sqrt(np.sum(probs * (1 - probs))))}  # fmt: skip
        try:
            mask = sample_subset(probs, jax.random.PRNGKey(3))
        except ValueError as err:  # every draw empty: no pruned model to post-train
            row.update(sampled=0, note=str(err))
        else:
            pruned, params = selective.prune(chosen.params, mask)
            params, _ = post_train(pruned, params, X, y, steps=args.post_steps, key=jax.random.PRNGKey(4),
                                   learning_rate=DEFAULTS.learning_rate, progress=False)  # fmt: skip
            row.update(sampled=int(mask.sum()), elbo=float(pruned.elbo(params, X, y)), **test_metrics(pruned, params))
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        print({k: v for k, v in row.items() if k != "note"}, flush=True)
    return {
        "N": N, "candidates": K, "alpha_scale_N_over_K": N / K, "paper_alpha": 0.1, "pre_steps": args.pre_steps,
        "selection_steps": args.selection_steps, "post_steps": args.post_steps, "pre_seconds": pre_seconds,
        "all_candidates": reference, "rows": rows,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=("cost", "run", "alpha"))
    parser.add_argument("--dataset", default="kin8nm")
    parser.add_argument("--split", type=int, default=1)
    parser.add_argument("--candidates", type=int, default=None, help="K (cost, run: 400; alpha: 100)")
    parser.add_argument("--counts", type=int, nargs="+", default=[25, 50, 100, 200, 400])
    parser.add_argument("--chunk", type=int, default=5, help="steps per compiled chunk")
    parser.add_argument("--repeats", type=int, default=5, help="timed chunks after the compiling one")
    parser.add_argument("--alpha", type=float, default=1.0, help="α of the 'run' part")
    parser.add_argument("--factors", type=float, nargs="+", default=[0.0, 1e-4, 1e-3, 1e-2, 0.1, 1.0])
    parser.add_argument("--pre-steps", type=int, default=None, help="run: 300; alpha: 1000")
    parser.add_argument("--selection-steps", type=int, default=None, help="run: 300; alpha: 500")
    parser.add_argument("--post-steps", type=int, default=500)
    parser.add_argument("--section", default=None, help="key of the result in the JSON (default: the part's name)")
    parser.add_argument("--quick", action="store_true", help="300 rows, few steps; writes to selective_cost_runs/")
    args = parser.parse_args()
    big = args.part in ("cost", "run")
    args.candidates = args.candidates or (400 if big else 100)
    args.pre_steps = args.pre_steps if args.pre_steps is not None else (300 if big else 1000)
    args.selection_steps = args.selection_steps or (300 if big else 500)
    if args.quick:
        args.candidates, args.counts, args.chunk, args.repeats = 40, [5, 40], 2, 2
        args.pre_steps, args.selection_steps, args.post_steps, args.factors = 10, 10, 10, [0.0, 1e-2]
    load_before = _loadavg()
    t0 = time.perf_counter()
    result = {"cost": cost_part, "run": run_part, "alpha": alpha_part}[args.part](args)
    result.update(
        command="python benchmarks/selective_cost.py " + " ".join(os.sys.argv[1:]),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), seconds=time.perf_counter() - t0,
        load_before=load_before, load_after=_loadavg(), machine=f"{platform.machine()}, {os.cpu_count()} CPUs",
        python=platform.python_version(), jax=jax.__version__, dataset=args.dataset, split=args.split,
    )  # fmt: skip
    with locked_json(QUICK_RESULTS if args.quick else RESULTS) as doc:
        doc[args.section or args.part] = result


if __name__ == "__main__":
    main()
