"""MNIST with the thesis' robust-max SVGP (Matthews 2016, §4.5.5): test error against training time.

Run (from the repository root)::

    .venv/bin/python benchmarks/mnist_multiclass.py --minutes 50 --checkpoint /tmp/mnist.npz

The thesis setting: inputs x / 255 * 2 - 1, J = 10 latent GPs sharing M = 500 inducing inputs (k-means of 10,000
training images), an isotropic RBF + White kernel, robust-max (epsilon 1e-3), minibatches of 1000. The thesis used
AdaDelta with an unstated annealing over 200,000 iterations (1.96 % test error); here Adam at ``--lr`` halved every
``--halve-every`` steps. Every ``--eval-every`` steps the whole test set is scored (error and mean log predictive
probability) and the point joins the curve, with the training seconds so far (scoring excluded) and the kernel's
hyperparameters. The run stops after ``--minutes`` of training or ``--steps`` steps; the SVI state is checkpointed
to ``--checkpoint``, and the same command resumes from it. The report is rewritten (atomically) after every 1/10
of ``--eval-every`` steps, so a killed run leaves its curve and training clock up to that point; a resumed run reads
both back from ``--output`` at the checkpoint's step (:func:`resume_point`).
``--natural STEP`` takes natural-gradient steps of that size on q(u) with Adam on the rest (write it to another
``--output`` and ``--checkpoint``). The positive hyperparameters live on the real line through
``--positive-transform`` (default softplus, GPflow's, as the thesis' runs: through NumPyro's exp the kernel variance
drifted to float32's overflow near step 20,000; benchmarks/README.md, "The MNIST collapse explained").

Also reports the steps per second at float32 and float64 (``--speed-steps`` steps each, after compiling) and the
memory count of the thesis' Table 5.1. Writes ``benchmarks/results/mnist_multiclass.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np
import optax

from ppl_sparsegp import data, results
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.kernels.static import White
from ppl_sparsegp.core.likelihoods import RobustMax
from ppl_sparsegp.inducing.initialise import kmeans
from ppl_sparsegp.infer import checkpoint as checkpoints
from ppl_sparsegp.infer.natural_gradients import NaturalGradient
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.validation import POSITIVE_TRANSFORMS

ROOT = Path(__file__).resolve().parent
J = 10
THESIS = {
    "test_error_percent": 1.96, "iterations": 200_000, "mean_log_predictive": -0.068,
    "table_5_1_millions": {"factorised_gaussian": 1.3, "full_gaussian": 13, "sampling": 1.5, "Z": 0.39},
}  # fmt: skip


def mnist(dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Training and test images scaled to [-1, 1] (the thesis code's x / 255 * 2 - 1) and their labels."""
    ds = data.load_mnist(scale=True)
    return (ds.X_train * 2 - 1).astype(dtype), ds.y_train, (ds.X_test * 2 - 1).astype(dtype), ds.y_test


def model(X: np.ndarray, M: int, batch: int) -> SVGP:
    """The thesis' SVGP: robust-max, isotropic RBF + White, M shared k-means inducing inputs."""
    dtype = X.dtype
    Z = kmeans(X, M, seed=0, max_points=10_000).astype(dtype)
    kernel = RBF(variance=np.asarray(10.0, dtype), lengthscale=np.asarray(10.0, dtype)) + White(
        variance=np.asarray(0.01, dtype)
    )
    return SVGP(kernel, RobustMax(J), Z=Z, num_latent=J, batch_size=batch)


def score(gp: SVGP, params: dict, X: np.ndarray, y: np.ndarray, chunk: int = 2000) -> tuple[float, float]:
    """Test error (%) and mean log predictive probability, the test set in chunks."""
    predict = jax.jit(lambda p, Xc, yc: (gp.predict_y(p, Xc)[0], gp.predict_log_density(p, Xc, yc)))
    probs, logp = zip(*(predict(params, X[i : i + chunk], y[i : i + chunk]) for i in range(0, len(X), chunk)),
                      strict=True)  # fmt: skip
    error = 100.0 * float(np.mean(np.argmax(np.concatenate(probs), axis=1) != y))
    return error, float(np.mean(np.concatenate(logp)))


def hyperparameters(params: dict) -> dict[str, float]:
    """The kernel's hyperparameters at a curve point (site -> value): a drift of the kernel variance shows here (under
    exp it reached float32's range near step 20,000; benchmarks/README.md, "The MNIST collapse explained")."""
    return {site: float(value) for site, value in params.items() if site.startswith("kernel.")}


def steps_per_second(dtype: str, M: int, batch: int, steps: int, positive_transform: str) -> float:
    """SVI steps per second (after compiling) of the MNIST model at ``dtype``."""
    with jax.enable_x64(dtype == "float64"):
        X, y, _, _ = mnist(dtype)
        gp = model(X, M, batch)
        fit = fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=steps, progress=False,
                      steps_per_dispatch=10, positive_transform=positive_transform)  # fmt: skip
    return float(fit.steps_per_second)


def memory_counts(M: int, D: int, samples: int = 300) -> dict[str, float]:
    """Table 5.1's counts in millions of reals: q(u) factorised over the J outputs (means and triangular roots), a
    full Gaussian over all J M outputs, ``samples`` draws of u, and Z."""
    return {"factorised_gaussian": J * (M + M * (M + 1) // 2) / 1e6,
            "full_gaussian": (J * M + J * M * (J * M + 1) // 2) / 1e6, "sampling": samples * J * M / 1e6,
            "Z": M * D / 1e6}  # fmt: skip


def resume_point(earlier: dict, settings: dict, resumed_step: int) -> tuple[list[dict], float]:
    """The curve and training seconds with which a run resuming from a checkpoint at ``resumed_step`` goes on.

    Args:
        earlier: the report that ``--output`` holds (empty: none); settings: this run's; resumed_step: the
            checkpoint's step count (0: a fresh run, which starts an empty curve at 0 s).

    Returns:
        The earlier curve's points up to ``resumed_step`` (later ones were scored by a run killed before its next
        checkpoint, and are scored again), and the training seconds at that step: from the report's ``progress``
        (written after every chunk) or from the curve's point at that step.

    Raises:
        ValueError: the report was written with other settings, or knows no training time at ``resumed_step``
            (a checkpoint without the report of the run that wrote it).
    """
    if resumed_step == 0:
        return [], 0.0
    where = f"--checkpoint resumes at step {resumed_step} but --output"
    if earlier.get("settings") != settings:
        raise ValueError(f"{where} holds a run with other settings ({earlier.get('settings')}): remove the checkpoint "
                         "to start again, or name the report the checkpoint's run wrote")  # fmt: skip
    curve = earlier.get("curve", [])
    seconds = {row["step"]: row["train_seconds"] for row in curve}
    if "progress" in earlier:
        seconds[earlier["progress"]["step"]] = earlier["progress"]["train_seconds"]
    if resumed_step not in seconds:
        raise ValueError(f"{where} knows no training time at that step (it reaches step {max(seconds, default=0)})")
    return [row for row in curve if row["step"] <= resumed_step], seconds[resumed_step]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=50.0, help="training time budget of this run")
    parser.add_argument("--steps", type=int, default=200_000, help="steps in all (the thesis: 200,000)")
    parser.add_argument("--inducing", type=int, default=500)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--halve-every", type=int, default=10_000)
    parser.add_argument("--eval-every", type=int, default=1000)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--natural", type=float, default=None, metavar="STEP",
                        help="natural-gradient steps of this size on q(u), Adam on the rest")  # fmt: skip
    parser.add_argument("--positive-transform", choices=POSITIVE_TRANSFORMS, default="softplus")
    parser.add_argument("--speed-steps", type=int, default=30)
    parser.add_argument("--checkpoint", type=Path, default=Path("/tmp/mnist_multiclass.npz"))
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "mnist_multiclass.json")
    args = parser.parse_args(argv)
    names = ("inducing", "batch", "lr", "halve_every", "dtype", "natural", "positive_transform")
    settings = {k: getattr(args, k) for k in names}
    earlier = json.loads(args.output.read_text()) if args.output.exists() else {}
    resumed_step = checkpoints.read(args.checkpoint).counters["step"] if args.checkpoint.exists() else 0
    curve, seconds_before = resume_point(earlier, settings, resumed_step)
    speed = {
        dt: steps_per_second(dt, args.inducing, args.batch, args.speed_steps, args.positive_transform)
        for dt in ("float32", "float64")
    }
    options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if v is not None)

    def write_report(step: int, train_seconds: float, D: int) -> dict:
        best = min(curve, key=lambda row: row["test_error_percent"]) if curve else None
        report = {
            "command": "python benchmarks/mnist_multiclass.py " + options,
            "settings": settings, "steps_done": step, "progress": {"step": step, "train_seconds": train_seconds},
            "curve": curve, "best": best, "final": curve[-1] if curve else None, "steps_per_second": speed,
            "memory_millions": memory_counts(args.inducing, D), "thesis": THESIS, **results.provenance(),
        }  # fmt: skip
        results.write_json(args.output, report)
        return report

    with jax.enable_x64(args.dtype == "float64"):
        X, y, X_test, y_test = mnist(args.dtype)
        gp = model(X, args.inducing, args.batch)
        schedule = optax.exponential_decay(args.lr, args.halve_every, 0.5, staircase=True)
        natural = None if args.natural is None else NaturalGradient(step_size=args.natural)
        clock = {"start": time.perf_counter(), "scoring": 0.0}
        latest: dict = {}  # the report last written

        def callback(step: int, losses: np.ndarray, params: dict) -> bool:
            trained = seconds_before + time.perf_counter() - clock["start"] - clock["scoring"]
            if step % args.eval_every == 0:
                began = time.perf_counter()
                error, logp = score(gp, params, X_test, y_test)
                clock["scoring"] += time.perf_counter() - began
                curve.append({"step": step, "train_seconds": trained, "test_error_percent": error,
                              "mean_log_predictive": logp, "loss": float(np.mean(losses)),
                              "hyperparameters": hyperparameters(params)})  # fmt: skip
                print(f"step {step}: {trained / 60:.1f} min, test error {error:.2f} %, log predictive {logp:.4f}",
                      flush=True)  # fmt: skip
            latest.update(write_report(step, trained, X.shape[1]))
            return trained - seconds_before > 60 * args.minutes

        fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(schedule), num_steps=args.steps, progress=False,
                callback=callback, checkpoint=args.checkpoint, checkpoint_every=args.eval_every,
                steps_per_dispatch=args.eval_every // 10, fingerprint=settings, natural_gradient=natural,
                positive_transform=args.positive_transform)  # fmt: skip
    report = latest or write_report(resumed_step, seconds_before, X.shape[1])
    print(json.dumps({k: report[k] for k in ("steps_done", "best", "final", "steps_per_second")}, indent=1))


if __name__ == "__main__":
    main()
