"""The thesis' synthetic three-class problem (Matthews 2016, §5.6.2, Fig 5.2): the factorised Gaussian (SVGP) against
SGPMC's samples, robust-max likelihood.

Run (from the repository root; about 55 minutes on the shared 2-core machine, 40 of them MCMC)::

    .venv/bin/python benchmarks/multiclass_synthetic.py

Data as the thesis code draws them (seed 1): 750 training and 750 test points, each point's class uniform over
three, from the class-conditional Gaussians R: mean (0, 0.5), covariance diag(5, 0.1); G: mean (-1.5, 0),
diag(0.05, 3); B: mean (1.5, 0), R^T diag(3, 0.1) R with R = [[1, 1], [-1, 1]] / sqrt 2. Model: M = 50 k-means
inducing inputs, isotropic RBF + White(1e-3), robust-max (epsilon 1e-3, Gauss-Hermite order 20); priors variance
Gamma(3, 3), lengthscale Gamma(3, 2); float64.

The two stages are those of :func:`ppl_sparsegp.recipes.sgpmc.fit_sgpmc` (Adam 0.01 for ``--svi-steps``, the first
tenth with Z at k-means, then Z free; Z then fixed, θ started at its MAP and v at a draw of q(v) per chain), written
out with the same library pieces because ``fit_sgpmc`` learns every site without a prior in its Gaussian stage: the
white variance fell from 1e-3 to 6e-8 there (and the MAP moved to variance 0.68, lengthscale 1.19 from 3.94, 0.84
with the white held), so the model was no longer the thesis' RBF + White(1e-3). Here the white variance is held at
1e-3 in both stages.

Sampler (the defaults): HMC with the thesis' 30 leapfrog steps per draw, its step size adapted by dual averaging
and a **dense** mass matrix over all 152 unknowns (v and log θ) during 500 warm-up steps; 4 chains stepped together
(vectorized), up to 3000 draws each after warm-up, every 15th kept, the sampling ended after the first chunk of 90
steps that finishes more than ``--max-mcmc-minutes`` (40) after the warm-up began (the thesis: one chain of 10,000
draws at eps = 0.008, up to 30 steps, every 500th kept). Why dense: the earlier default, the same HMC with a
diagonal mass matrix (2 chains, 4500 draws each), did not mix (R-hat 1.16 on the variance, 1.94 on the worst
whitened output, ESS 28 on the variance). Single-chain pilots from the same start (500 warm-up steps, then 600
HMC or 300 NUTS draws; load 8-15 on the 2 cores), effective draws per 1000 gradient evaluations after warm-up:

==========================  ============  ================  ===============  ===============
sampler                     log variance  log lengthscale   v, worst of 150  v, 10th centile
==========================  ============  ================  ===============  ===============
HMC L=30, diagonal (old)    about 1       about 0.8         0.005            n/a
HMC L=30, dense             16            2.4               0.25             0.48
NUTS depth 6, dense         3.8           0.54              0.37             0.55
==========================  ============  ================  ===============  ===============

(the old row from the last full run, 2 x 4500 draws; NUTS hit its maximum depth, 63 steps, on every draw, at
eps 0.066 against HMC's 0.069). The long direction is the ridge between the kernel variance and the length of v
(f scales with sqrt(variance) * v and robust-max hardly sees the scale of f), which a diagonal mass matrix cannot
follow. These are within-chain numbers: the full run with these defaults (2026-11-27, 4 chains x 2160 draws,
benchmarks/README.md) still did not mix between chains (ArviZ R-hat 1.09 on the variance and 1.26 on the
lengthscale, bulk ESS 33 and 12, 93 % of v above R-hat 1.1), so the chains settle in different places faster than
they move between them. The earlier measurements, on the diagonal-mass samplers (machine load 4-9):

* One evaluation of the SGPMC potential and its gradient (750 points, 152 unknowns) takes 2.5-5 ms; two thirds of
  it is ``log_ndtr`` in robust-max's quadrature (750 x 20 x 3 values). Gauss-Hermite order 10 does not make the
  gradient cheaper (likelihood term 3.0 against 3.1 ms at 20) and moves it by 0.018 (of |grad| up to 650); order
  5 halves the time but moves the potential by 0.019 and the gradient by 2.5. Kept at 20.
* NUTS, the previous sampler, hit its maximum tree depth of 8 (255 leapfrog steps, 1.1-1.2 s per draw) on every
  draw, with an identity mass matrix (150 warm-up steps: eps 0.0078) and with an adapted diagonal one (500 warm-up
  steps: eps 0.0056): 500 + 200 draws of one chain took 860 s, so the old 2 x (500 + 500) default needs about 40
  minutes. The potential is stiff and rough, not just badly scaled: at the start the curvature along log
  lengthscale is 1.2e4-6.6e4 (a local sd of 0.004-0.009 against a posterior sd of 0.05), and with conditional
  variances of about 5e-3 every data point's term is a smoothed step in f. Capping the depth at 5 or 6 (eps 0.017,
  0.016) gave 0.3-0.6 and 1.4-1.9 effective draws of lengthscale and variance per 1000 gradient evaluations
  (single chains of 300-500 draws, so rough), about what the HMC below gives.
* The thesis' own setting, a fixed eps = 0.008 with an identity mass matrix, accepts 10 % of 700 proposals here: our
  positive hyperparameters are log-transformed (GPflow's were softplus), which doubles the curvature along them.
  Adapting eps (0.008-0.016, acceptance about 0.95) gave about 0.8 and 1.0 effective draws of lengthscale and
  variance per 1000 gradient evaluations, against 0.35 and 0.56 for depth-8 NUTS.
* NumPyro's ``HMC(num_steps=L)`` keeps its default ``trajectory_length=2 pi`` and then uses a step size of
  2 pi / L whatever ``step_size`` says (0.21 for L = 30: every proposal diverged); ``trajectory_length=None`` is
  passed here.
* float32 is 1.5x faster per gradient (2.1 against 3.2 ms), but its potential differs from float64's by up to
  0.47 nats and its gradient by up to 38 (of 545) at posterior draws, and jaxlib 0.10.2's CPU compiler, with its
  default YNN library fusions, returns wrong robust-max class probabilities (P = 0 for every class, then NaN) on
  batches of 6000 rows in float32 that are right 750 rows at a time. Hence float64 only.
* Prediction: the grid is predicted 5000 points at a time; the sparse conditional at all 40,000 points at once took
  1.3 s per draw against 15 ms in pieces of up to 10,000 (the whitening projection's cost per point jumps 100x
  between 10,000 and 40,000 columns). Predicting the 200 x 200 grid still costs about 0.5 s per draw (the
  robust-max quadrature).

Reported for both methods: test error, mean log predictive probability, the mean largest class probability on
the test points, and the share of a 200 x 200 grid on [-6, 6]^2 predicted above 0.95 and 0.99 (the thesis says
SGPMC's probabilities are more conservative). For the sampler: split R-hat, ESS, mean and sd of both
hyperparameters; the worst R-hat and ESS over v; divergences, acceptance, step sizes. Because v has not mixed
between chains in any run so far, the same summary is also reported for each chain's draws alone, with each chain's
verdict, and the R-hat of every draw's class probabilities at the test points (``chains_agree``): what the figure
compares can agree across chains where v does not. Every draw's probabilities on the grid are kept in memory
([draws, 40,000, 3] float64: 0.5 GB for 500 draws). Writes
``benchmarks/results/multiclass_synthetic.json`` and the two contour plots (p = 0.3, 0.95, 0.99 of each class,
inducing inputs black) to ``benchmarks/results/multiclass_synthetic.png``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

# Single-threaded Eigen in XLA and one OpenBLAS thread on the shared 2-core machine; set them yourself to override.
# (The other benchmarks' "intra_op_parallelism_threads=1" is not an XLA flag: XLA ignores it and every flag after it.)
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
import optax  # noqa: E402
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin  # noqa: E402

from ppl_sparsegp import results  # noqa: E402
from ppl_sparsegp.core.kernels import RBF  # noqa: E402
from ppl_sparsegp.core.kernels.static import White  # noqa: E402
from ppl_sparsegp.core.likelihoods import RobustMax  # noqa: E402
from ppl_sparsegp.inducing.initialise import kmeans  # noqa: E402
from ppl_sparsegp.infer.mcmc import init_from_svi, kernel_from_name, run_mcmc  # noqa: E402
from ppl_sparsegp.infer.svi import fit_svi  # noqa: E402
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC  # noqa: E402
from ppl_sparsegp.models.numpyro.svgp import SVGP  # noqa: E402
from ppl_sparsegp.posterior.predict import draw_moments  # noqa: E402

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
PRIORS = {"kernel.k0.variance": (3.0, 3.0), "kernel.k0.lengthscale": (3.0, 2.0)}  # Gamma(shape, rate)
WHITE = "kernel.k1.variance"  # held at 1e-3 throughout
GRID_CHUNK = 5000  # grid points predicted at once (see the docstring: 40,000 at once is 30x slower)
PREDICT_BATCH = 8  # draws predicted at once: the grid's robust-max quadrature holds 40,000 x 3 x Q x 3 values per draw


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


def in_chunks(predict, points: np.ndarray, size: int = GRID_CHUNK, axis: int = 0) -> np.ndarray:
    """``predict`` over ``points`` [S, D] in pieces of ``size`` rows, concatenated along ``axis`` (the axis of the
    points in ``predict``'s output)."""
    pieces = [np.asarray(predict(points[i : i + size])) for i in range(0, len(points), size)]
    return np.concatenate(pieces, axis=axis)


def draw_probabilities(model, samples: dict, points: np.ndarray) -> np.ndarray:
    """Each draw's class probabilities at ``points`` [P, 2]: [draws, P, 3] (the per-draw predictive mean of
    :func:`ppl_sparsegp.posterior.predict.draw_moments`), predicted :data:`GRID_CHUNK` points at a time."""
    return in_chunks(lambda P: draw_moments(model, samples, P, batch=PREDICT_BATCH)[2], points, axis=1)


def mixture_summary(test_draws: np.ndarray, grid_draws: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """:func:`summary` of the mixture over draws: class probabilities [draws, N, 3] at the test points and [draws,
    G, 3] on the grid are averaged over the draws; the log predictive of test point n is log of the average
    probability of its class y_n."""
    probs = test_draws.mean(axis=0)
    return summary(probs, np.log(probs[np.arange(len(y)), y]), y, grid_draws.mean(axis=0))


def more_conservative(sampled: dict, gaussian: dict) -> bool:
    """The thesis' claim in the three numbers compared: the mean test confidence and both grid shares lower."""
    return all(sampled[k] < gaussian[k] for k in ("mean_confidence", "grid_share_above_0.95", "grid_share_above_0.99"))


def chain_agreement(test_draws: np.ndarray, grid_draws: np.ndarray, y: np.ndarray, chains: int, gaussian: dict) -> dict:
    """Whether the chains agree on what Fig 5.2 compares, whatever the whitened outputs' R-hat says.

    Args:
        test_draws, grid_draws: class probabilities [chains * S, N, 3] and [chains * S, G, 3], chain-major.
        y: test labels [N]; chains: the number of chains; gaussian: the factorised Gaussian's :func:`summary`.

    Returns:
        ``per_chain``: each chain's :func:`mixture_summary` and its :func:`more_conservative` verdict;
        ``test_probabilities``: ArviZ's rank-normalised split R-hat of every draw's probability of each class at each
        test point (N x 3 quantities, the predictions' counterpart of the R-hat over v): median, worst, and the
        fractions above 1.1 and 1.05 over those that vary, and how many do not (``without_r_hat``: the same in
        every draw, so no R-hat); absent with one chain.
    """
    import arviz as az

    per_chain = []
    for test, grid in zip(np.split(test_draws, chains), np.split(grid_draws, chains), strict=True):
        one = mixture_summary(test, grid, y)
        per_chain.append({**one, "more_conservative": more_conservative(one, gaussian)})
    out: dict = {"per_chain": per_chain}
    if chains > 1:
        draws = test_draws.reshape(chains, -1, *test_draws.shape[1:])
        with np.errstate(invalid="ignore", divide="ignore"):  # the constant ones: NaN, counted below
            r_hat = np.asarray(az.rhat(az.convert_to_dataset({"p": draws}))["p"])
        defined = r_hat[np.isfinite(r_hat)]  # a probability that no draw changes (e.g. saturated) has none
        out["test_probabilities"] = {"r_hat_median": float(np.median(defined)), "r_hat_max": float(defined.max()),
                                     "fraction_r_hat_above_1.1": float(np.mean(defined > 1.1)),
                                     "fraction_r_hat_above_1.05": float(np.mean(defined > 1.05)),
                                     "without_r_hat": int(r_hat.size - defined.size)}  # fmt: skip
    return out


def time_limit(minutes: float | None, began: float):
    """A ``run_mcmc`` callback that ends the sampling after the first chunk of draws that finishes more than
    ``minutes`` after ``began`` (a ``time.perf_counter()`` reading, taken before the warmup), so at least one chunk
    is kept: run_mcmc returns the draws made so far, with ``interrupted`` set, when its callback raises
    KeyboardInterrupt. None: no limit."""
    if minutes is None:
        return None

    def check(result) -> None:
        if result.num_draws > 0 and time.perf_counter() - began > 60.0 * minutes:
            raise KeyboardInterrupt

    return check


def fit(X: np.ndarray, y: np.ndarray, Z: np.ndarray, args: argparse.Namespace, key: jax.Array) -> dict:
    """The thesis' two stages with White held at 1e-3: the Gaussian fit (SVGP, MAP θ, Adam 0.01, the first tenth
    of the steps with Z at k-means), then MCMC on (v, θ) with Z fixed, started at the MAP θ and a draw of q(v)."""
    kernel = RBF(variance=1.0, lengthscale=1.0) + White(variance=1e-3)
    likelihood = RobustMax(3, epsilon=1e-3, quadrature_order=args.quadrature_order)
    priors = {site: dist.Gamma(*ab) for site, ab in PRIORS.items()}
    common = dict(kernel=kernel, likelihood=likelihood, priors=priors, fixed=[WHITE], num_latent=3)
    svi_key, init_key, mcmc_key = jax.random.split(key, 3)
    params: dict = {}
    began = time.perf_counter()
    fixed_z = args.svi_steps // 10
    for phase, (learn_Z, steps) in enumerate(((False, fixed_z), (True, args.svi_steps - fixed_z))):
        svgp = SVGP(Z=params.get("Z", Z), learn_Z=learn_Z, **common)
        svi = fit_svi(svgp.model, svgp.guide, X, y, optimizer=optax.adam(0.01), num_steps=steps,
                      key=jax.random.fold_in(svi_key, phase), progress=False, validate=svgp.check_data,
                      init_params={k: v for k, v in params.items() if k != "Z"} or None)  # fmt: skip
        params.update(svi.params)
    svi_seconds = time.perf_counter() - began
    losses = np.asarray(svi.losses)
    fitted_kernel, fitted_likelihood = svgp.fitted(params)
    model = SGPMC(kernel=fitted_kernel, likelihood=fitted_likelihood, priors=priors, fixed=[WHITE],
                  Z=params["Z"], num_latent=3)  # fmt: skip
    init = init_from_svi(model.model, svgp.guide, params, X, y, key=init_key, num_chains=args.chains)
    if args.engine == "hmc":
        fixed_step = args.step_size is not None
        options = dict(step_size=args.step_size or 0.008, num_steps=args.leapfrog_steps, trajectory_length=None,
                       adapt_step_size=not fixed_step, adapt_mass_matrix=not fixed_step)  # fmt: skip
    else:
        options = dict(max_tree_depth=args.max_tree_depth)
    dense = {"none": False, "theta": [tuple(PRIORS)], "all": True}[args.dense_mass]
    options.update(dense_mass=dense, target_accept_prob=args.target_accept)
    sampler = kernel_from_name(args.engine, model.model, **options)
    began = time.perf_counter()
    mcmc = run_mcmc(sampler, X, y, num_warmup=args.warmup, num_samples=args.samples, num_chains=args.chains,
                    thinning=args.thinning, chain_method=args.chain_method, key=mcmc_key, init_params=init,
                    chunk_size=args.chunk_size, progress=False, validate=model.check_data,
                    callback=time_limit(args.max_mcmc_minutes, began))  # fmt: skip
    return {"svgp": svgp, "params": params, "model": model, "mcmc": mcmc, "svi_seconds": svi_seconds, "losses": losses,
            "mcmc_seconds": time.perf_counter() - began}  # fmt: skip


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("hmc", "nuts"), default="hmc")
    parser.add_argument("--step-size", type=float, default=None)
    parser.add_argument("--leapfrog-steps", type=int, default=30)
    parser.add_argument("--max-tree-depth", type=int, default=8)
    parser.add_argument("--dense-mass", choices=("none", "theta", "all"), default="all",
                        help="the mass matrix is dense over: nothing (diagonal), θ, or all 152 unknowns")  # fmt: skip
    parser.add_argument("--target-accept", type=float, default=0.8)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--thinning", type=int, default=15)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--chain-method", choices=("sequential", "vectorized"), default="vectorized")
    parser.add_argument("--chunk-size", type=int, default=90, help="post-warmup steps per chunk")
    parser.add_argument(
        "--max-mcmc-minutes",
        type=float,
        default=40.0,
        help="end the sampling after the first chunk that ends this long after the warmup began (draws kept)",
    )
    parser.add_argument("--svi-steps", type=int, default=3000)
    parser.add_argument("--quadrature-order", type=int, default=20)
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "multiclass_synthetic.json")
    return parser.parse_args(argv)


def diagnostics(mcmc) -> dict:
    """R-hat and ESS of the hyperparameters and of the 150 whitened outputs v, sampler statistics.

    Two estimators: ArviZ's rank-normalised split R-hat and bulk ESS (Vehtari et al. 2021; what the targets R-hat
    <= 1.05 and ESS >= 100 on θ, R-hat <= 1.1 on v, refer to) and NumPyro's split R-hat and ESS on the raw draws
    (those of the earlier runs). For v: worst, median, and the fraction with R-hat above 1.1 and 1.05."""
    import arviz as az

    out = {}
    chains = mcmc.num_chains > 1
    for site in PRIORS:
        draws = np.asarray(mcmc.samples[site])  # [C, S]
        out[site] = {"mean": float(draws.mean()), "sd": float(draws.std()),
                     "r_hat": float(az.rhat(draws)) if chains else None,
                     "ess_bulk": float(az.ess(draws, method="bulk")),
                     "ess_tail": float(az.ess(draws, method="tail")),
                     "r_hat_numpyro": float(split_gelman_rubin(draws)) if chains else None,
                     "ess_numpyro": float(effective_sample_size(draws))}  # fmt: skip
    u = np.asarray(mcmc.samples["u"])  # [C, S, 3, 50]
    dataset = az.convert_to_dataset({"u": u})
    bulk = np.asarray(az.ess(dataset, method="bulk")["u"])
    out["u"] = {"ess_bulk_min": float(bulk.min()), "ess_bulk_median": float(np.median(bulk)),
                "ess_numpyro_min": float(np.min(effective_sample_size(u))),
                "r_hat_numpyro_max": float(np.max(split_gelman_rubin(u))) if chains else None}  # fmt: skip
    if chains:
        r_hat = np.asarray(az.rhat(dataset)["u"])
        out["u"].update({"r_hat_max": float(r_hat.max()), "r_hat_median": float(np.median(r_hat)),
                         "fraction_r_hat_above_1.1": float(np.mean(r_hat > 1.1)),
                         "fraction_r_hat_above_1.05": float(np.mean(r_hat > 1.05))})  # fmt: skip
    extra = mcmc.extra_fields
    out["divergences"] = mcmc.divergences
    out["accept_prob_mean"] = float(np.mean(extra["accept_prob"]))
    out["step_size"] = [float(s) for s in np.asarray(extra["adapt_state.step_size"])[:, -1]]
    out["leapfrog_steps_mean"] = float(np.mean(extra["num_steps"]))
    out["kept_draws_per_chain"] = mcmc.num_draws
    out["stopped_by_time_limit"] = mcmc.interrupted
    return out


def mixing_targets(mixing: dict) -> dict:
    """The targets set for this run: ArviZ R-hat <= 1.05 and bulk ESS >= 100 on both hyperparameters, R-hat
    <= 1.1 on most of the 150 whitened outputs (the fraction above 1.1 is reported, not thresholded)."""
    theta = [mixing[site] for site in PRIORS]
    return {"theta_r_hat_at_most_1.05": all(t["r_hat"] is not None and t["r_hat"] <= 1.05 for t in theta),
            "theta_ess_bulk_at_least_100": all(t["ess_bulk"] >= 100 for t in theta),
            "u_fraction_r_hat_above_1.1": mixing["u"].get("fraction_r_hat_above_1.1")}  # fmt: skip


def main() -> None:
    args = parse()
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(1)
    X, y = three_gaussians(750, rng)
    X_test, y_test = three_gaussians(750, rng)
    axis = np.linspace(-6, 6, 200)
    grid = np.stack(np.meshgrid(axis, axis), axis=-1).reshape(-1, 2)
    Z = kmeans(X, 50, seed=0)
    began = time.perf_counter()
    out = fit(X, y, Z, args, jax.random.PRNGKey(0))
    svgp, params, model, mcmc = out["svgp"], out["params"], out["model"], out["mcmc"]
    fit_seconds = time.perf_counter() - began
    began = time.perf_counter()
    grid_probs = {"factorised Gaussian (SVGP)": in_chunks(lambda P: np.asarray(svgp.predict_y(params, P)[0]), grid)}
    gaussian = summary(np.asarray(svgp.predict_y(params, X_test)[0]),
                       np.asarray(svgp.predict_log_density(params, X_test, y_test)), y_test,
                       grid_probs["factorised Gaussian (SVGP)"])  # fmt: skip
    samples = mcmc.flat_samples()
    test_draws, grid_draws = (draw_probabilities(model, samples, P) for P in (X_test, grid))
    grid_probs["SGPMC"] = grid_draws.mean(axis=0)
    sampled = mixture_summary(test_draws, grid_draws, y_test)
    predict_seconds = time.perf_counter() - began
    figure, axes = plt.subplots(1, 2, figsize=(11, 5.2), sharey=True)
    for ax, (title, probs) in zip(axes, grid_probs.items(), strict=True):
        for k, colour in enumerate(("tab:red", "tab:green", "tab:blue")):
            ax.plot(*X[y == k].T, ".", color=colour, ms=2, alpha=0.4)
            ax.contour(axis, axis, probs[:, k].reshape(200, 200), levels=LEVELS, colors=colour, linewidths=1)
        ax.plot(*np.asarray(model.Z).T, "k.", ms=5)
        ax.set(title=title, xlim=(-6, 6), ylim=(-6, 6), xlabel="x1")
    axes[0].set_ylabel("x2")
    figure.tight_layout()
    losses = np.asarray(out["losses"])
    report = {
        "command": "python benchmarks/multiclass_synthetic.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "output" and v is not None),
        "factorised_gaussian": gaussian, "sgpmc": sampled,
        "sgpmc_more_conservative": more_conservative(sampled, gaussian),
        "chains_agree": chain_agreement(test_draws, grid_draws, y_test, mcmc.num_chains, gaussian),
        "mcmc": (mixing := diagnostics(mcmc)),
        "mixing_targets": mixing_targets(mixing),
        "map_hyperparameters": {site: float(params[f"{site}_map"]) for site in PRIORS},
        "svi_final_loss": float(np.mean(losses[-100:])), "svi_loss_drop_last_1000_steps": float(
            np.mean(losses[-1100:-1000]) - np.mean(losses[-100:])),
        "seconds": {"svi": out["svi_seconds"], "mcmc_warmup": mcmc.warmup_seconds,
                    "mcmc_sampling": mcmc.sample_seconds, "fit_total": fit_seconds, "predict": predict_seconds},
        "thesis": "SGPMC gives more conservative predictive probabilities than the factorised Gaussian (Fig 5.2)",
        **results.provenance(),
    }  # fmt: skip
    picture = args.output.with_suffix(".png").name
    files = {picture: results.figure_file(figure), args.output.name: results.json_file(report)}
    results.write_output_set(args.output.parent, files)
    plt.close(figure)
    print(
        {
            k: report[k]
            for k in ("factorised_gaussian", "sgpmc", "sgpmc_more_conservative", "chains_agree", "mcmc", "seconds")
        }
    )


if __name__ == "__main__":
    main()
