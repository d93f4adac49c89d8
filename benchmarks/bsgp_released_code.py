"""The authors' released BSGP code on one UCI fold, traced, for a side-by-side check of ``benchmarks/bsgp_uci.py``.

Issue 24 asks why our BSGP scores −7.79 on NAVAL where Table 6 has −8.22. This script runs the released code
itself (``srossi93/Sparse-Gaussian-Processes-Revisited``, commit 01a484b, TensorFlow 1 graph code; not part of
this project and not copied into it) on this machine, so that the two implementations can be compared on the same
split, schedule and hardware. It does not run in our ``.venv``: it needs TensorFlow and the authors' checkout.

Set-up (once; TensorFlow 2 runs the TF1 graph code through ``tf.compat.v1``)::

    python3.11 -m venv /tmp/tfenv
    /tmp/tfenv/bin/pip install tensorflow-cpu scikit-learn scipy tqdm torch==2.13.0 -e .
    git clone https://github.com/srossi93/Sparse-Gaussian-Processes-Revisited /tmp/bsgp-released

Run (from the repository root)::

    /tmp/tfenv/bin/python benchmarks/bsgp_released_code.py --repo /tmp/bsgp-released --dataset naval --fold 0 \\
        --iterations 10000 --kept 256 --label naval-fold0-seed0

What it runs is the released ``run_regression.py``'s ``main`` with the paper's settings (M = 100, minibatch
min(1000, N), one layer, Normal Z prior, ε = 0.01, ``--kept`` draws 32 updates apart), the authors' data files
(``data/<dataset>.pth``) and split (``train_test_split(test_size=0.2, random_state=fold)``), with the training loop
of ``Model._fit`` written out so that it can be traced: each iteration is the released ``sghmc_step`` (21 SGHMC
updates) and ``train_hypers`` (one Adam step on the noise). Every ``--eval-every`` iterations the window MNLL is
recorded (the mixture over the 64 window states in original units, the formula ``_fit`` prints) and the window's
newest state is checked for NaN/inf; the run stops at the first non-finite state, since the released code has no
guard and every later state is NaN too. At the end, the test MNLL of the ``--kept`` draws (``calculate_density``).
``updates_per_second`` counts 21 SGHMC updates per iteration over the time spent in ``sghmc_step`` and
``train_hypers`` only, the unit of ``benchmarks/bsgp_speed.py``.

Changes to the run, none to the algorithm: ``collections.Iterable`` is aliased for Python ≥ 3.10; TF1 behaviour is
switched on (``disable_v2_behavior``); sessions get one intra-op and one inter-op thread and oneDNN is off, for a
steady rate on a shared machine (runs are still not bit-identical: two 2-iteration runs differed in the 4th
digit). ``--seed`` replaces the released driver's fixed seed 0 where it is set first
(k-means start of Z and TensorFlow's op seeds); the released ``DGP.__init__`` reseeds numpy with 0 after building
the graph, so the minibatch order is the same for every seed.

Output: one entry ``<label>`` in ``benchmarks/results/bsgp_released_code.json`` (rewritten atomically).
"""

from __future__ import annotations

import argparse
import collections
import collections.abc
import datetime as _dt
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from svgp_uci import _loadavg, _version, locked_json  # noqa: E402

from ppl_sparsegp import metrics  # noqa: E402

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "bsgp_released_code.json"
RELEASED_COMMIT = "01a484b"
SPACING = 32  # the released driver forces posterior_sample_spacing = 32
UPDATES_PER_ITERATION = 21  # one released sghmc_step: 1 + 10 x 2 SGHMC updates


def window_mnll(dgp, X_test: np.ndarray, Y_test: np.ndarray, y_std: np.ndarray) -> float:
    """Test MNLL in original units of the mixture over the window states, as the released ``Model._fit`` prints it:
    −mean over points and outputs of logsumexp_s log N(y·std; m_s·std, √v_s·std) − log S."""
    ms, vs = dgp.predict_y(X_test, len(dgp.window), posterior=False)
    return mixture_mnll(ms, vs, Y_test, y_std)


def mixture_mnll(ms: np.ndarray, vs: np.ndarray, Y: np.ndarray, y_std: np.ndarray) -> float:
    """−mean of logsumexp_s log N(Y·std; m_s·std, v_s·std²) − log S over points and outputs; ms, vs [S, N, P]
    (:func:`ppl_sparsegp.metrics.nlpd_mixture` in original units)."""
    return metrics.nlpd_mixture(Y * y_std, ms * y_std, vs * y_std**2)


def first_nonfinite(state: dict) -> list[str]:
    """Names of the variables of one window state (TF variable -> value) holding NaN or inf."""
    return sorted(var.name for var, value in state.items() if not np.all(np.isfinite(value)))


def import_released(repo: Path):
    """The released ``run_regression`` module and ``RegressionModel``, in TF1 mode, one thread per session."""
    collections.Iterable = collections.abc.Iterable  # the released quadrature.py imports it from collections
    import tensorflow as tf

    tf.compat.v1.disable_v2_behavior()
    config_proto = tf.compat.v1.ConfigProto

    def one_thread_config(*args, **kwargs):
        kwargs.setdefault("intra_op_parallelism_threads", 1)
        kwargs.setdefault("inter_op_parallelism_threads", 1)
        return config_proto(*args, **kwargs)

    tf.compat.v1.ConfigProto = one_thread_config
    sys.path.insert(0, str(repo))
    import run_regression
    from bsgp.models import RegressionModel

    return run_regression, RegressionModel, tf.__version__


def run(args: argparse.Namespace, save) -> dict:
    run_regression, RegressionModel, tf_version = import_released(args.repo)
    os.chdir(args.repo)  # create_dataset reads ./data/<dataset>.pth
    run_regression.set_seed(args.seed)
    X_train, Y_train, X_test, Y_test, y_mean, y_std = run_regression.create_dataset(args.dataset, args.fold)
    model = RegressionModel("normal")
    model.ARGS.num_inducing = args.num_inducing
    model.ARGS.minibatch_size = min(1000, len(X_train))
    model.ARGS.n_layers = 1
    model.ARGS.prior_type = "normal"
    model.ARGS.full_cov = False
    model.ARGS.posterior_sample_spacing = SPACING
    model.ARGS.iterations = 0  # _fit builds the model; the loop is run below
    model.ARGS.num_posterior_samples = 0
    model.fit(X_train, Y_train, epsilon=0.01)
    dgp = model.model
    entry = {
        "dataset": args.dataset,
        "fold": args.fold,
        "seed": args.seed,
        "iterations": args.iterations,
        "kept": args.kept,
        "num_inducing": args.num_inducing,
        "released_commit": RELEASED_COMMIT,
        "tensorflow": tf_version,
        "n_train": int(len(X_train)),
        "window_trace": [],
        "first_nonfinite_iteration": None,
        "finished": False,
        "command": "python " + shlex.join(sys.argv),
        "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "loadavg_1min_before": _loadavg(),
    }
    start = time.perf_counter()
    update_seconds = 0.0
    for it in range(1, args.iterations + 1):
        tick = time.perf_counter()
        dgp.sghmc_step()
        dgp.train_hypers()
        update_seconds += time.perf_counter() - tick
        if it % args.eval_every == 0 or it == args.iterations:
            entry["updates_per_second"] = round(UPDATES_PER_ITERATION * it / update_seconds, 1)
            bad = first_nonfinite(dgp.window[-1])
            point = {"iteration": it, "seconds": round(time.perf_counter() - start, 1)}
            if bad:
                entry["first_nonfinite_iteration"] = it
                entry["nonfinite_variables"] = bad
                entry["window_trace"].append(point)
                print(f"  it {it}: non-finite state in {bad}; stopping", flush=True)
                save(entry)
                return entry
            point["window_mnll"] = window_mnll(dgp, X_test, Y_test, y_std)
            entry["window_trace"].append(point)
            print(f"  it {it}: window MNLL {point['window_mnll']:.3f} ({point['seconds']}s)", flush=True)
            save(entry)
    dgp.collect_samples(args.kept, SPACING)
    model.ARGS.num_posterior_samples = args.kept
    ms, vs = model._predict(X_test, args.kept)
    entry["test_mnll"] = mixture_mnll(ms, vs, Y_test, y_std)
    entry["test_mnll_per_output"] = [
        mixture_mnll(ms[..., p : p + 1], vs[..., p : p + 1], Y_test[:, p : p + 1], y_std[p])
        for p in range(Y_test.shape[1])
    ]
    entry["test_rmse_standardised"] = float(np.sqrt(np.mean((ms.mean(0) - Y_test) ** 2)))
    session, layer = dgp.session, dgp.layers[0]
    noise, variance, lengthscales = session.run(
        [dgp.likelihood.variance, layer.kernel.variance, layer.kernel.lengthscales]
    )
    entry["noise_variance_standardised"] = np.atleast_1d(noise).tolist()
    entry["kernel_variance"] = float(variance)
    entry["lengthscales"] = np.asarray(lengthscales).tolist()
    entry["fit_wall_seconds"] = round(time.perf_counter() - start, 1)
    entry["loadavg_1min_after"] = _loadavg()
    entry["finished"] = True
    print(f"test MNLL {entry['test_mnll']:.4f} per output {entry['test_mnll_per_output']}", flush=True)
    save(entry)
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, required=True, help="checkout of the authors' released code")
    parser.add_argument("--dataset", default="naval", help="a data/<name>.pth of the checkout")
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0, help="the released driver's seed is 0")
    parser.add_argument("--iterations", type=int, default=10_000, help="iterations of 21 SGHMC updates")
    parser.add_argument("--kept", type=int, default=256, help="draws kept, 32 updates apart")
    parser.add_argument("--num-inducing", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--label", required=True, help="the entry's name in the JSON")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.repo = args.repo.resolve()
    args.output = args.output.resolve()
    if not (args.repo / "run_regression.py").is_file() or not (args.repo / "bsgp" / "models.py").is_file():
        parser.error(
            f"--repo: expected a checkout of the released BSGP code (run_regression.py, bsgp/), got {args.repo}"
        )
    if not (args.repo / "data" / f"{args.dataset}.pth").is_file():
        parser.error(f"--dataset: expected one of the checkout's data/*.pth files, got {args.dataset!r}")
    for name in ("iterations", "kept", "num_inducing", "eval_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive integer, got {getattr(args, name)}")

    def save(entry: dict) -> None:
        with locked_json(args.output) as document:  # runs in parallel add their entries to one file
            document["environment"] = {
                "python": sys.version.split()[0],
                "numpy": _version("numpy"),
                "tensorflow": _version("tensorflow-cpu") or _version("tensorflow"),
                "cpu_count": os.cpu_count(),
            }
            document.setdefault("runs", {})[args.label] = entry

    run(args, save)
    return 0


if __name__ == "__main__":
    sys.exit(main())
