"""Natural gradients for q(u) with Adam on the rest, against Adam alone: the ELBO against steps and against time.

Run (from the repository root)::

    .venv/bin/python benchmarks/natural_gradients.py

Two fits per dataset, full batch, the same initial values (k-means Z, M = 100, unit kernel hyperparameters):
Adam (learning rate 0.01) on every parameter, and :class:`ppl_sparsegp.infer.natural_gradients.NaturalGradient`
steps on q(u) alternated with the same Adam on the hyperparameters and Z. Regression: kin8nm split 0 (Gaussian
likelihood; natural step size 1, which reaches Titsias' q*(u) for the current hyperparameters at every step).
Classification: breast_cancer (Bernoulli-probit; natural step size 0.1). The loss after each step is the
negative ELBO of the full training set. Writes ``benchmarks/results/natural_gradients.json`` (losses at chosen
steps, steps per second, the steps and seconds each fit needs to come within 1 nat of the better final ELBO) and
``benchmarks/results/natural_gradients.png``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import matplotlib
import numpy as np
import optax

from ppl_sparsegp import data, results
from ppl_sparsegp.core.kernels import kernel_from_name
from ppl_sparsegp.core.likelihoods import Bernoulli, Gaussian
from ppl_sparsegp.inducing.initialise import kmeans
from ppl_sparsegp.infer.natural_gradients import NaturalGradient
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.svgp import SVGP

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after selecting the non-interactive backend)

ROOT = Path(__file__).resolve().parent
PROBLEMS = {"kin8nm": ("kin8nm", Gaussian(variance=0.1), 1.0), "breast_cancer": ("breast_cancer", Bernoulli(), 0.1)}
SHOWN_STEPS = (1, 10, 50, 100, 200, 500, 1000, 2000, 5000)


def first_within(losses: np.ndarray, target: float) -> int | None:
    """The first step (1-based) whose loss is within 1 nat of ``target``, or None."""
    hits = np.flatnonzero(losses <= target + 1.0)
    return int(hits[0]) + 1 if hits.size else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--inducing", type=int, default=100)
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "natural_gradients.json")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    report, figure = {}, plt.figure(figsize=(11, 8))
    for row, (name, (dataset, likelihood, step_size)) in enumerate(PROBLEMS.items()):
        std, _ = data.standardize(data.load_dataset(dataset, 0))
        X, y = std.X_train, std.y_train
        Z = kmeans(X, args.inducing, seed=0)
        fits = {}
        for method in ("adam", "natural+adam"):
            gp = SVGP(kernel_from_name("rbf", X.shape[1]), likelihood, Z=Z)
            natural = NaturalGradient(step_size=step_size) if method == "natural+adam" else None
            fits[method] = fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=args.steps,
                                   progress=False, natural_gradient=natural, steps_per_dispatch=50)  # fmt: skip
        best = min(float(np.min(f.losses)) for f in fits.values())
        report[name] = {"N": int(X.shape[0]), "D": int(X.shape[1]), "M": args.inducing, "natural_step_size": step_size}
        for method, fit in fits.items():
            reached = first_within(fit.losses, best)
            report[name][method] = {
                "loss_at_step": {str(s): float(fit.losses[s - 1]) for s in SHOWN_STEPS if s <= len(fit.losses)},
                "final_loss": float(fit.losses[-1]), "steps_per_second": fit.steps_per_second,
                "steps_to_within_1_nat": reached,
                "seconds_to_within_1_nat": None if reached is None else reached / fit.steps_per_second,
            }  # fmt: skip
        for col, (xlabel, scale) in enumerate((("step", None), ("seconds (compiling excluded)", "time"))):
            ax = figure.add_subplot(2, 2, 2 * row + col + 1)
            for method, fit in fits.items():
                steps = np.arange(1, len(fit.losses) + 1)
                ax.plot(steps / fit.steps_per_second if scale else steps, fit.losses - best + 1.0, label=method)
            ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel="loss - best + 1 (nats)", title=name)
            ax.legend(fontsize=8)
    figure.tight_layout()
    report["command"] = f"python benchmarks/natural_gradients.py --steps {args.steps} --inducing {args.inducing}"
    report.update(results.provenance())
    picture = args.output.with_suffix(".png").name
    results.write_output_set(args.output.parent, {picture: results.figure_file(figure),
                                                  args.output.name: results.json_file(report)})  # fmt: skip
    plt.close(figure)
    for name in PROBLEMS:
        print(name, {m: {k: report[name][m][k] for k in ("final_loss", "steps_to_within_1_nat", "steps_per_second")}
                     for m in ("adam", "natural+adam")})  # fmt: skip


if __name__ == "__main__":
    main()
