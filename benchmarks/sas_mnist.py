"""SAS-GP on MNIST (Moreno-Muñoz, Feldager & Hauberg 2022, Tables 1-2 and Fig 5; spec 004 §3; issue 22).

Run (from the repository root)::

    .venv/bin/python benchmarks/sas_mnist.py [--parts table1 timing fidelity baselines table2 speed] [--epochs 300]

MNIST from the data folder (60,000 training and 10,000 test images, pixels in [0, 1], not centred), Q = 2, B = 1024,
the 784-512-256-2 ReLU encoder (Bayesian SAS: two of them, the variance through a softplus), RBF-ARD, the released
code's initial values (variance, lengthscales and noise 0.5), Adam 1e-3, the unbiased held-out weight
(N − A)/(B − A), seed 0. Parts:

* ``table1``: Bayesian and deterministic SAS at A = 100, 200, 400 for ``--epochs`` epochs each; test RMSE, MAE and
  NLPD per pixel of ``--test-points`` test images (the first of a fixed permutation) reconstructed through the
  encoder and the decoder conditioned on ``--conditioning`` training images, the 1-NN accuracy of the 10,000 test
  latents against the 60,000 training latents (Table 2's probe), and seconds per epoch; the paper's values beside.
* ``timing``: seconds per step, compiling excluded, at A = 200 for N = 10k, 40k, 60k (flat in N: the paper's
  claim) and at N = 60k for A = 100, 200, 400, 800 (rising with A).
* ``fidelity``: Bayesian SAS at A = 200 on the first ``--fidelity-rows`` training images, the exact log p(Y | X) at
  the encoded means (one Cholesky of the whole set, float64) beside the SAS estimate (mean over 5 random splits,
  weight 1) at the start and after every ``--fidelity-every`` epochs (Fig 5 right: the estimate tracks the exact
  value).

* ``baselines``: Table 2's other rows under the same loop and clock (Adam 1e-3, B = 1024, ``--epochs`` epochs of
  59 steps, float as ``--dtype``): the VAE with Bayesian SAS's encoder and the mirrored decoder (2-256-512-784),
  and the Bayesian GP-LVM whose q(x | y) is that encoder, with M = 200 inducing inputs drawn from N(0, I) and a
  mean-field q(u) per output (a full one is 784 x 200 x 200 numbers and B M² D flops per step); the same test
  metrics, 1-NN accuracy and seconds per epoch, to set beside Bayesian SAS at A = M = 200.

* ``speed``: the paper's speed claim (spec 004 §6 (k)): seconds per step, compiling excluded, of Bayesian SAS at A
  and of the Bayesian GP-LVM of ``baselines`` at M = A, B = 1024, for each A of ``--speed-active`` (200 and 400),
  in one process, the two fits interleaved over ``--speed-rounds`` rounds of ``--speed-epochs`` epochs each (so
  that both see the same load); the medians and their ratio.

* ``table2``: Table 2 in one run (one command, the same loop and clock): Bayesian SAS at A = ``--table2-active``,
  then the VAE and the Bayesian GP-LVM at M = A (``--table2-models``: all three by default), each for ``--epochs``
  epochs at seed ``--seed`` (the encoders' initial weights, the GP-LVM's inducing inputs, the batches and splits),
  with the metrics of ``baselines``; every fit resumes from its checkpoint in ``--scratch`` and every finished row
  is kept there, so a killed run started again with the same command carries on.

Writes ``benchmarks/results/sas_mnist.json`` and ``sas_mnist.png`` (the fidelity curves), one part at a time into
the same JSON (the parts not run keep their earlier values).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np
import optax

from ppl_sparsegp import data, metrics, results
from ppl_sparsegp.core import ops
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.metrics import nearest_neighbour_accuracy
from ppl_sparsegp.models.numpyro.gplvm import BayesianGPLVM
from ppl_sparsegp.models.numpyro.vae import VAE
from ppl_sparsegp.numpyro import nn
from ppl_sparsegp.recipes.sas_gplvm import SASConfig, build_sas, encode_rows, evaluate_sas, fit_sas

ROOT = Path(__file__).resolve().parent
OUTPUT = ROOT / "results" / "sas_mnist.json"
TABLE2_MODELS = ("bayesian_sas", "vae", "bayesian_gplvm")
ACTIVE = (100, 200, 400)
PAPER_TABLE1 = {  # ×0.1 of the printed values (spec 004 §3.3): mean over seeds
    "bayesian": {"rmse": (0.216, 0.208, 0.199), "mae": (0.111, 0.104, 0.096), "nlpd": (0.233, 0.226, 0.217)},
    "deterministic": {"rmse": (0.255, 0.247, 0.241), "mae": (0.161, 0.155, 0.151), "nlpd": (0.299, 0.292, 0.284)},
}
PAPER_TABLE2 = {"bayesian_sas": 0.63, "vae": 0.54, "bayesian_gplvm": 0.18}


def table1(Y, Y_test, labels, labels_test, args) -> dict:
    found = {}
    order = np.random.default_rng(0).permutation(len(Y_test))[: args.test_points]
    for bayesian in (True, False):
        kind = "bayesian" if bayesian else "deterministic"
        for i, A in enumerate(ACTIVE):
            fit = fit_sas(Y, SASConfig(num_active=A, bayesian=bayesian, num_epochs=args.epochs), progress=False)
            m = evaluate_sas(fit.model, fit.params, Y, Y_test[order], num_conditioning=args.conditioning)
            accuracy = nearest_neighbour_accuracy(encode_rows(fit.model, fit.params, Y), labels,
                                                  encode_rows(fit.model, fit.params, Y_test), labels_test)  # fmt: skip
            paper = {k: v[i] for k, v in PAPER_TABLE1[kind].items()}
            found[f"{kind}_A{A}"] = {
                **m, "nearest_neighbour_accuracy": accuracy, "paper": paper,
                "seconds_per_epoch": fit.seconds_per_epoch, "epochs": args.epochs,
                "final_loss_per_epoch": float(np.mean(fit.svi.losses[-fit.steps_per_epoch :]) * fit.steps_per_epoch),
            }  # fmt: skip
            print(kind, A, {k: found[f"{kind}_A{A}"][k] for k in ("rmse", "mae", "nlpd", "nearest_neighbour_accuracy",
                                                                     "seconds_per_epoch")}, flush=True)  # fmt: skip
    return found


def seconds_per_step(Y, A: int, epochs: int) -> float:
    fit = fit_sas(Y, SASConfig(num_active=A, num_epochs=epochs), progress=False)
    return fit.svi.run_seconds / fit.svi.steps_run


def timing(Y) -> dict:
    by_n = {str(n): seconds_per_step(Y[:n], 200, max(1, 120_000 // n)) for n in (10_000, 40_000, 60_000)}
    by_a = {str(a): seconds_per_step(Y, a, 2) for a in (100, 200, 400, 800)}
    print("timing", by_n, by_a, flush=True)
    return {"seconds_per_step_by_N_at_A200": by_n, "seconds_per_step_by_A_at_N60000": by_a}


def exact_on_host(model, params, rows: np.ndarray, block: int = 2000) -> float:
    """log p(Y | X) = Σ_d log N(y_d | 0, K + σ² I) at the encoded latents (:meth:`SASGPLVM.exact_log_marginal`'s
    value) on numpy arrays: the library's RBF fills one [N, N] float64 matrix ``block`` rows at a time, σ² goes onto
    its diagonal, and LAPACK factorises it (no jitter: σ² > 0 keeps it positive definite; scipy factorises a
    Fortran-ordered copy, so two [N, N] matrices at the peak, 7.5 GB resident at N = 20,000). XLA's CPU program for
    N = 20,000 crashed (a segmentation fault), and the core's dense route
    (:func:`ppl_sparsegp.core.bounds.gaussian_log_marginal`) holds about six [N, N] matrices at its peak (4.8 GB
    measured at N = 10,000, so about 19 GB at 20,000). At N = 20,000 run it with ``OPENBLAS_NUM_THREADS=1``: with
    its default threads (2 here), scipy 1.17.1's bundled OpenBLAS crashed here (a segmentation fault inside it)."""
    import scipy.linalg

    kernel, likelihood = model.fitted(params)
    host = RBF(np.asarray(kernel.variance, np.float64), np.asarray(kernel.lengthscale, np.float64))
    latents = encode_rows(model, params, rows).astype(np.float64)
    N, D = rows.shape
    K = np.empty((N, N))
    for i in range(0, N, block):
        K[i : i + block] = host(latents[i : i + block], latents)
    K[np.diag_indices(N)] += float(likelihood.variance)
    L = scipy.linalg.cholesky(K, lower=True, overwrite_a=True, check_finite=False)
    alpha = scipy.linalg.solve_triangular(L, np.asarray(rows, np.float64), lower=True, check_finite=False)
    log_det = float(ops.logdet_from_cholesky(L))
    return float(-0.5 * np.sum(alpha * alpha) - 0.5 * D * log_det - 0.5 * N * D * np.log(2.0 * np.pi))


def fidelity(Y, args) -> dict:
    rows = Y[: args.fidelity_rows].astype(np.float64)
    checkpoint = args.scratch / "fidelity.npz"
    checkpoint.unlink(missing_ok=True)
    curve = []
    with jax.enable_x64(True):
        model, params = build_sas(SASConfig(num_active=200, bayesian=True), rows), {}
        for epochs in range(0, args.epochs + 1, args.fidelity_every):
            if epochs:  # the same run, resumed from its checkpoint for the next epochs
                fit = fit_sas(rows, SASConfig(num_active=200, bayesian=True, num_epochs=epochs), progress=False,
                              checkpoint=str(checkpoint))  # fmt: skip
                model, params = fit.model, fit.params
            began = time.perf_counter()
            exact = exact_on_host(model, params, rows)
            exact_seconds = time.perf_counter() - began
            keys = jax.random.split(jax.random.PRNGKey(epochs), 5)
            estimates = [float(model.sas_estimate(params, rows, key)) for key in keys]
            curve.append({"epochs": epochs, "exact": exact, "sas_mean": float(np.mean(estimates)),
                          "sas_sd": float(np.std(estimates)), "exact_seconds": exact_seconds})  # fmt: skip
            print("fidelity", curve[-1], flush=True)
    gaps = [abs(c["sas_mean"] - c["exact"]) / abs(c["exact"]) for c in curve]
    return {"rows": int(len(rows)), "curve": curve, "max_relative_gap": float(max(gaps)),
            "within_5_percent": bool(max(gaps) <= 0.05)}  # fmt: skip


def fidelity_figure(found: dict):
    """The exact log p(Y | X) and the SAS estimate (± one sd over splits) against epochs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [c["epochs"] for c in found["curve"]]
    figure, ax = plt.subplots(figsize=(6, 4))
    ax.plot(epochs, [c["exact"] for c in found["curve"]], "k-o", ms=3, label="exact log p(Y | X)")
    mean, sd = np.array([c["sas_mean"] for c in found["curve"]]), np.array([c["sas_sd"] for c in found["curve"]])
    ax.errorbar(epochs, mean, yerr=sd, fmt="-o", ms=3, capsize=3, label="SAS estimate, A = 200")
    ax.set(xlabel="epoch", ylabel="nats", title=f"MNIST, first {found['rows']} training images")
    ax.legend()
    figure.tight_layout()
    return figure


def baseline_models(Y, num_inducing: int, seed: int = 0) -> dict:
    """Table 2's baselines for Y [N, D]: the VAE with Bayesian SAS's encoder and the mirrored decoder, and the
    amortised Bayesian GP-LVM with that encoder (initial weights from ``seed``), ``num_inducing`` inducing inputs
    from N(0, I) (drawn with ``seed``) and a mean-field q(u) per output; the RBF-ARD and noise initial values are
    SAS's (0.5)."""
    N, D = Y.shape
    encoder = nn.gaussian_encoder(D, 2, (512, 256), "relu", jax.random.PRNGKey(seed), Y.dtype)
    return {
        "vae": VAE(data_dim=D, batch_size=1024),
        f"bayesian_gplvm_M{num_inducing}": BayesianGPLVM(
            RBF(np.asarray(0.5, Y.dtype), np.full(2, 0.5, Y.dtype)), Gaussian(np.asarray(0.5, Y.dtype)),
            Z=np.random.default_rng(seed).standard_normal((num_inducing, 2)).astype(Y.dtype), num_latent=D,
            q_diag=True, batch_size=1024, X_init=np.zeros((N, 2), Y.dtype), encoder=encoder,
        ),
    }  # fmt: skip


def fit_baseline(
    name: str, model, Y, Y_test, labels, labels_test, args, checkpoint: Path | None = None, seed: int = 0
) -> dict:
    """Adam 1e-3 for ``args.epochs`` epochs of ceil(N / 1024) steps from the key ``seed`` (resumed from
    ``checkpoint`` when it holds some), then the test metrics on ``args.test_points`` test images, the 1-NN
    accuracy of the 10,000 test latents against the N training latents, and seconds per epoch (of the steps this
    process ran)."""
    N = Y.shape[0]
    steps_per_epoch = -(-N // 1024)
    order = np.random.default_rng(0).permutation(len(Y_test))[: args.test_points]
    fit = fit_svi(model.model, model.guide, Y, optimizer=optax.adam(1e-3), num_steps=args.epochs * steps_per_epoch,
                  progress=False, validate=model.check_data, checkpoint=checkpoint, key=seed,
                  checkpoint_every=steps_per_epoch * 5)  # fmt: skip
    reconstruct = jax.jit(lambda p, rows: model.reconstruct(p, rows))
    parts = [reconstruct(fit.params, Y_test[order][i : i + 500]) for i in range(0, len(order), 500)]
    mean, var = (np.concatenate([np.asarray(p[k]) for p in parts]) for k in range(2))
    encode = jax.jit(lambda p, rows: model.encode(p, rows))
    latents = np.concatenate([np.asarray(encode(fit.params, Y[i : i + 5000])) for i in range(0, N, 5000)])
    test_latents = np.asarray(encode(fit.params, Y_test))
    found = {
        "rmse": metrics.rmse(Y_test[order], mean), "mae": metrics.mae(Y_test[order], mean),
        "nlpd": metrics.nlpd_gaussian(Y_test[order], mean, var),
        "nearest_neighbour_accuracy": nearest_neighbour_accuracy(latents, labels, test_latents, labels_test),
        "seconds_per_epoch": fit.run_seconds * steps_per_epoch / max(fit.steps_run, 1), "epochs": args.epochs,
        "steps_run_this_process": fit.steps_run,
        "paper_nearest_neighbour_accuracy": PAPER_TABLE2["vae" if name == "vae" else "bayesian_gplvm"],
    }  # fmt: skip
    print(name, found, flush=True)
    return found


def gplvm_seconds_per_step(Y, num_inducing: int, epochs: int) -> float:
    """Seconds per step, compiling excluded, of Adam 1e-3 on the Bayesian GP-LVM of :func:`baseline_models`."""
    model = baseline_models(Y, num_inducing)[f"bayesian_gplvm_M{num_inducing}"]
    fit = fit_svi(model.model, model.guide, Y, optimizer=optax.adam(1e-3), num_steps=epochs * -(-len(Y) // 1024),
                  progress=False, validate=model.check_data)  # fmt: skip
    return fit.run_seconds / fit.steps_run


def speed(Y, args) -> dict:
    """Bayesian SAS at A against the Bayesian GP-LVM at M = A (B = 1024), interleaved round by round in this process;
    per A: every round's seconds per step, their medians and the GP-LVM's median over SAS's."""
    found = {}
    for A in args.speed_active:
        sas_config = SASConfig(num_active=A, bayesian=True, num_epochs=args.speed_epochs)
        rounds = {"bayesian_sas": [], "bayesian_gplvm": []}
        for _ in range(args.speed_rounds):
            fit = fit_sas(Y, sas_config, progress=False)
            rounds["bayesian_sas"].append(fit.svi.run_seconds / fit.svi.steps_run)
            rounds["bayesian_gplvm"].append(gplvm_seconds_per_step(Y, A, args.speed_epochs))
        medians = {name: float(np.median(times)) for name, times in rounds.items()}
        found[f"A{A}"] = {"seconds_per_step": rounds, "median_seconds_per_step": medians,
                          "gplvm_over_sas": medians["bayesian_gplvm"] / medians["bayesian_sas"]}  # fmt: skip
        print("speed", A, found[f"A{A}"], flush=True)
    return {"rounds": args.speed_rounds, "epochs_per_round": args.speed_epochs, "batch_size": 1024, **found}


def baselines(Y, Y_test, labels, labels_test, args) -> dict:
    return {
        name: fit_baseline(name, model, Y, Y_test, labels, labels_test, args)
        for name, model in baseline_models(Y, 200).items()
    }


def table2(Y, Y_test, labels, labels_test, args) -> dict:
    """Table 2 in one run: Bayesian SAS at A = ``args.table2_active``, the VAE and the Bayesian GP-LVM at
    M = A (those of ``args.table2_models``), one after the other under the same loop (Adam 1e-3, B = 1024,
    ``args.epochs`` epochs, seed ``args.seed``). Each fit
    resumes from its checkpoint in ``args.scratch`` (written every 300 steps, about 5 epochs), and each finished row
    is written at once to ``table2_partial.json`` there, so that a killed run restarts where it stopped. A resumed
    fit's seconds per epoch count only the steps its own process ran."""
    A = args.table2_active
    partial_path = args.scratch / "table2_partial.json"
    settings = {
        "epochs": args.epochs,
        "active": A,
        "dtype": args.dtype,
        "test_points": args.test_points,
        "seed": args.seed,
    }
    partial = json.loads(partial_path.read_text()) if partial_path.is_file() else {}
    if partial.get("settings") != settings:
        partial = {"settings": settings, "rows": {}}
    rows = partial["rows"]
    name, tag = f"bayesian_sas_A{A}", f"_seed{args.seed}" if args.seed else ""
    if "bayesian_sas" in args.table2_models and name not in rows:
        config = SASConfig(num_active=A, bayesian=True, num_epochs=args.epochs)
        fit = fit_sas(Y, config, seed=args.seed, progress=False,
                      checkpoint=str(args.scratch / f"table2_{name}{tag}.npz"),
                      checkpoint_every=5 * config.steps_per_epoch(len(Y)))  # fmt: skip
        order = np.random.default_rng(0).permutation(len(Y_test))[: args.test_points]
        m = evaluate_sas(fit.model, fit.params, Y, Y_test[order], num_conditioning=args.conditioning)
        accuracy = nearest_neighbour_accuracy(encode_rows(fit.model, fit.params, Y), labels,
                                              encode_rows(fit.model, fit.params, Y_test), labels_test)  # fmt: skip
        rows[name] = {
            **m, "nearest_neighbour_accuracy": accuracy, "seconds_per_epoch": fit.seconds_per_epoch,
            "epochs": args.epochs, "steps_run_this_process": fit.svi.steps_run,
            "paper_nearest_neighbour_accuracy": PAPER_TABLE2["bayesian_sas"],
        }  # fmt: skip
        print(name, rows[name], flush=True)
        results.write_output_set(args.scratch, {partial_path.name: results.json_file(partial)})
    for name, model in baseline_models(Y, A, args.seed).items():
        if name.split("_M")[0] in args.table2_models and name not in rows:
            checkpoint = args.scratch / f"table2_{name}_A{A}{tag}.npz"
            rows[name] = fit_baseline(name, model, Y, Y_test, labels, labels_test, args, checkpoint, args.seed)
            results.write_output_set(args.scratch, {partial_path.name: results.json_file(partial)})
    return {"active_and_inducing": A, "seed": args.seed, **rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=("table1", "timing", "fidelity", "baselines", "table2", "speed"),
        default=["table1"],
    )
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--test-points", type=int, default=1000)
    parser.add_argument("--conditioning", type=int, default=5000)
    parser.add_argument("--table2-active", type=int, default=400)
    parser.add_argument("--table2-models", nargs="+", choices=TABLE2_MODELS, default=list(TABLE2_MODELS))
    parser.add_argument("--seed", type=int, default=0, help="table2's seed")
    parser.add_argument("--fidelity-rows", type=int, default=20_000)
    parser.add_argument("--fidelity-every", type=int, default=5)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/sas_mnist"))
    parser.add_argument("--speed-rounds", type=int, default=3)
    parser.add_argument("--speed-epochs", type=int, default=1)
    parser.add_argument("--speed-active", type=int, nargs="+", default=[200, 400])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_enable_x64", args.dtype == "float64")
    ds = data.load_mnist()
    Y, Y_test = ds.X_train.astype(args.dtype), ds.X_test.astype(args.dtype)
    report = json.loads(args.output.read_text()) if args.output.is_file() else {}
    for part in args.parts:
        began = time.perf_counter()
        if part == "table1":
            found = table1(Y, Y_test, ds.y_train, ds.y_test, args)
        elif part == "timing":
            found = timing(Y)
        elif part == "baselines":
            found = baselines(Y, Y_test, ds.y_train, ds.y_test, args)
        elif part == "table2":
            found = table2(Y, Y_test, ds.y_train, ds.y_test, args)
        elif part == "speed":
            found = speed(Y, args)
        else:
            found = fidelity(Y, args)
        command = f"python benchmarks/sas_mnist.py --parts {part} --epochs {args.epochs} --dtype {args.dtype}"
        if part == "table2":
            command += f" --table2-active {args.table2_active} --table2-models {' '.join(args.table2_models)}"
            command += f" --seed {args.seed}"
        if part == "speed":
            active = " ".join(str(a) for a in args.speed_active)
            command += f" --speed-rounds {args.speed_rounds} --speed-epochs {args.speed_epochs} --speed-active {active}"
        if part == "fidelity":
            command += f" --fidelity-rows {args.fidelity_rows} --fidelity-every {args.fidelity_every}"
        report[part] = {"command": command, **found, "seconds": time.perf_counter() - began, **results.provenance()}
        report["paper_table2"] = PAPER_TABLE2
        files = {args.output.name: results.json_file(report)}
        if part == "fidelity":
            files[args.output.with_suffix(".png").name] = results.figure_file(fidelity_figure(found))
        results.write_output_set(args.output.parent, files)


if __name__ == "__main__":
    main()
