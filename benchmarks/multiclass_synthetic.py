"""The thesis' synthetic three-class problem (Matthews 2016, §5.6.2, Fig 5.2): the factorised Gaussian (SVGP) against
SGPMC's samples, robust-max likelihood.

Run (from the repository root)::

    .venv/bin/python benchmarks/multiclass_synthetic.py

Data as the thesis code draws them (seed 1): 750 training and 750 test points, each point's class uniform over
three, from the class-conditional Gaussians R: mean (0, 0.5), covariance diag(5, 0.1); G: mean (-1.5, 0),
diag(0.05, 3); B: mean (1.5, 0), R^T diag(3, 0.1) R with R = [[1, 1], [-1, 1]] / sqrt 2. Model: M = 50 k-means
inducing inputs, isotropic RBF + White(1e-3), robust-max (epsilon 1e-3); priors variance Gamma(3, 3), lengthscale
Gamma(3, 2) (the white variance is fixed at its fitted value). :func:`ppl_sparsegp.recipes.sgpmc.fit_sgpmc` fits
the factorised Gaussian by Adam, then samples v and the hyperparameters by NUTS (in place of the thesis' HMC with
10,000 samples thinned by 500). Reported for both: test error, mean log predictive probability, the mean largest
class probability on the test points and the share of a 200 x 200 grid on [-6, 6]^2 predicted above 0.95 and 0.99
(the thesis: SGPMC's probabilities are more conservative). Writes ``benchmarks/results/multiclass_synthetic.json``
and the two contour plots (p = 0.3, 0.95, 0.99 of each class, inducing inputs black) to
``benchmarks/results/multiclass_synthetic.png``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import matplotlib
import numpy as np
import numpyro.distributions as dist

from ppl_sparsegp import results
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.kernels.static import White
from ppl_sparsegp.core.likelihoods import RobustMax
from ppl_sparsegp.inducing.initialise import kmeans
from ppl_sparsegp.posterior.predict import log_predictive_density, posterior_predictive
from ppl_sparsegp.recipes.sgpmc import fit_sgpmc

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after selecting the non-interactive backend)

ROOT = Path(__file__).resolve().parent
ROTATION = np.array([[1.0, 1.0], [-1.0, 1.0]]) / np.sqrt(2.0)
CLASSES = [
    (np.array([0.0, 0.5]), np.diag([5.0, 0.1])),
    (np.array([-1.5, 0.0]), np.diag([0.05, 3.0])),
    (np.array([1.5, 0.0]), ROTATION.T @ np.diag([3.0, 0.1]) @ ROTATION),
]
LEVELS = (0.3, 0.95, 0.99)


def three_gaussians(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n points, each of a class drawn uniformly from three, from that class's Gaussian."""
    y = rng.integers(0, 3, n)
    X = np.stack([rng.multivariate_normal(*CLASSES[k]) for k in y])
    return X, y


def summary(probs: np.ndarray, logp: np.ndarray, y: np.ndarray, grid_probs: np.ndarray) -> dict[str, float]:
    """Test error, mean log predictive, mean confidence, and the share of the grid above 0.95 and 0.99."""
    top = grid_probs.max(axis=1)
    return {
        "test_error_percent": 100.0 * float(np.mean(probs.argmax(axis=1) != y)),
        "mean_log_predictive": float(np.mean(logp)),
        "mean_confidence": float(np.mean(probs.max(axis=1))),
        "grid_share_above_0.95": float(np.mean(top > 0.95)),
        "grid_share_above_0.99": float(np.mean(top > 0.99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--chains", type=int, default=2)
    parser.add_argument("--svi-steps", type=int, default=3000)
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "multiclass_synthetic.json")
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(1)
    X, y = three_gaussians(750, rng)
    X_test, y_test = three_gaussians(750, rng)
    axis = np.linspace(-6, 6, 200)
    grid = np.stack(np.meshgrid(axis, axis), axis=-1).reshape(-1, 2)
    Z = kmeans(X, 50, seed=0)
    kernel = RBF(variance=1.0, lengthscale=1.0) + White(variance=1e-3)
    priors = {"kernel.k0.variance": dist.Gamma(3.0, 3.0), "kernel.k0.lengthscale": dist.Gamma(3.0, 2.0)}
    began = time.perf_counter()
    fit = fit_sgpmc(X, y, kernel=kernel, likelihood=RobustMax(3), Z=Z, num_latent=3, priors=priors,
                    key=jax.random.PRNGKey(0), svi_steps=args.svi_steps, fixed_z_steps=args.svi_steps // 10,
                    num_warmup=args.warmup,
                    num_samples=args.samples, num_chains=args.chains, progress=False)  # fmt: skip
    seconds = time.perf_counter() - began
    params = fit.svi.params
    gaussian = summary(np.asarray(fit.svgp.predict_y(params, X_test)[0]),
                       np.asarray(fit.svgp.predict_log_density(params, X_test, y_test)), y_test,
                       np.asarray(fit.svgp.predict_y(params, grid)[0]))  # fmt: skip
    samples = fit.mcmc.flat_samples()
    sampled = summary(posterior_predictive(fit.model, samples, X_test).y_mean,
                      log_predictive_density(fit.model, samples, X_test, y_test), y_test,
                      posterior_predictive(fit.model, samples, grid).y_mean)  # fmt: skip
    grid_probs = {"factorised Gaussian (SVGP)": np.asarray(fit.svgp.predict_y(params, grid)[0]),
                  "SGPMC": posterior_predictive(fit.model, samples, grid).y_mean}  # fmt: skip
    figure, axes = plt.subplots(1, 2, figsize=(11, 5.2), sharey=True)
    for ax, (title, probs) in zip(axes, grid_probs.items(), strict=True):
        for k, colour in enumerate(("tab:red", "tab:green", "tab:blue")):
            ax.plot(*X[y == k].T, ".", color=colour, ms=2, alpha=0.4)
            ax.contour(axis, axis, probs[:, k].reshape(200, 200), levels=LEVELS, colors=colour, linewidths=1)
        ax.plot(*np.asarray(fit.model.Z).T, "k.", ms=5)
        ax.set(title=title, xlim=(-6, 6), ylim=(-6, 6), xlabel="x1")
    axes[0].set_ylabel("x2")
    figure.tight_layout()
    diverging = int(np.sum(fit.mcmc.extra_fields["diverging"])) if "diverging" in fit.mcmc.extra_fields else None
    report = {
        "command": "python benchmarks/multiclass_synthetic.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "output"),
        "factorised_gaussian": gaussian, "sgpmc": sampled, "divergences": diverging, "fit_seconds": seconds,
        "thesis": "SGPMC gives more conservative predictive probabilities than the factorised Gaussian (Fig 5.2)",
        **results.provenance(),
    }  # fmt: skip
    picture = args.output.with_suffix(".png").name
    files = {picture: results.figure_file(figure), args.output.name: results.json_file(report)}
    results.write_output_set(args.output.parent, files)
    plt.close(figure)
    print({k: report[k] for k in ("factorised_gaussian", "sgpmc", "divergences", "fit_seconds")})


if __name__ == "__main__":
    main()
