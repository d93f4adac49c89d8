"""Where the time of one training step goes: Bayesian SAS-GP at A against the amortised Bayesian GP-LVM at M = A
(spec 004 §6 (k); issue 22), each part compiled and timed on its own.

Run (from the repository root)::

    .venv/bin/python benchmarks/sas_profile.py [--active 200] [--repeats 30] [--output PATH]

MNIST's 60,000 training images (float32), B = 1024, Q = 2, the two-network 784-512-256-2 encoder of both models,
the GP-LVM of ``benchmarks/sas_mnist.py`` (M = A inducing inputs, mean-field q(u), unwhitened). Parts, each one
``jax.jit`` program timed ``--repeats`` times after a warm-up call (median wall-clock and process CPU seconds;
BLAS/LAPACK limited to the fit loop's threads, :data:`ppl_sparsegp.core.ops.BLAS_THREADS`):

* ``batch``: the B rows' draw and gather (SAS: B distinct rows; the GP-LVM: with replacement);
* ``encoder``: the encoder's forward pass on the B rows, and forward and backward (the vector-Jacobian product of
  both outputs, the weights' gradient);
* ``objective``: the decoder's term at given latents X [B, Q] (SAS: the split and the factor of
  :meth:`SASGPLVM._estimate`; the GP-LVM: the conditional at the inducing points and the Gaussian expectation
  summed over the batch), its value, and its value and gradient in X, the kernel, the noise (and Z, q(u));
* ``adam``: optax's Adam update on a tree of the model's unconstrained parameters;
* ``step``: one compiled ``SVI.update`` (``TraceMeanField_ELBO``, the fit loop's step; the fit loop itself runs 100
  of them inside one ``lax.scan``).

Writes ``benchmarks/results/sas_profile.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.infer import SVI, TraceMeanField_ELBO

from ppl_sparsegp import data, results
from ppl_sparsegp.core import conditionals, ops
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.numpyro.sites import distinct_indices
from ppl_sparsegp.recipes.sas_gplvm import SASConfig, build_sas

ROOT = Path(__file__).resolve().parent
BATCH = 1024


def timed(fn, *args, repeats: int) -> dict[str, float]:
    """Median wall-clock and process CPU seconds (all threads) of ``repeats`` calls of the compiled ``fn(*args)``
    after one warm-up call. On a shared machine the CPU seconds move less with the others' load than the wall."""
    jax.block_until_ready(fn(*args))
    wall, cpu = [], []
    for _ in range(repeats):
        began, began_cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(*args))
        wall.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    return {"wall": float(np.median(wall)), "cpu": float(np.median(cpu))}


def gplvm_model(Y: np.ndarray, num_inducing: int):
    """The Bayesian GP-LVM of ``benchmarks/sas_mnist.py``'s ``baselines`` part at M = ``num_inducing``."""
    import sys

    sys.path.insert(0, str(ROOT))
    from sas_mnist import baseline_models

    return baseline_models(Y, num_inducing)[f"bayesian_gplvm_M{num_inducing}"]


def profile(Y: np.ndarray, A: int, repeats: int) -> dict:
    N, D = Y.shape
    Yd = jnp.asarray(Y)
    key = jax.random.PRNGKey(0)
    sas = build_sas(SASConfig(num_active=A, bayesian=True), Y)
    gplvm = gplvm_model(Y, A)
    found: dict[str, dict] = {"bayesian_sas": {}, "bayesian_gplvm": {}}

    def record(model: str, part: str, fn, *args) -> None:
        found[model][part] = timed(jax.jit(fn), *args, repeats=repeats)
        ms = {k: 1e3 * v for k, v in found[model][part].items()}
        print(f"{model:16s} {part:26s} wall {ms['wall']:8.2f} ms  cpu {ms['cpu']:8.2f} ms", flush=True)

    record("bayesian_sas", "batch", lambda k, Y: Y[distinct_indices(k, N, BATCH)], key, Yd)
    record("bayesian_gplvm", "batch", lambda k, Y: Y[jax.random.randint(k, (BATCH,), 0, N)], key, Yd)
    Yb = Yd[:BATCH]

    weights, static = eqx.partition(sas.encoder, eqx.is_array)
    cotangent = jax.random.normal(key, (2, BATCH, sas.latent_dim), Y.dtype)

    def encode(w, rows):
        return jax.vmap(eqx.combine(w, static))(rows)

    def encoder_backward(w, rows):
        out, pullback = jax.vjp(lambda w: encode(w, rows), w)
        return pullback((cotangent[0], cotangent[1]))

    for model in found:
        record(model, "encoder forward", encode, weights, Yb)
        record(model, "encoder forward+backward", encoder_backward, weights, Yb)

    X = jax.random.normal(key, (BATCH, sas.latent_dim), Y.dtype)
    hyper = {"variance": jnp.asarray(0.5, Y.dtype), "lengthscale": jnp.full(2, 0.5, Y.dtype),
             "noise": jnp.asarray(0.5, Y.dtype)}  # fmt: skip
    weight = (N - A) / (BATCH - A)

    def sas_term(h, X, rows, k):
        return sas._estimate(RBF(h["variance"], h["lengthscale"]), Gaussian(h["noise"]), X, rows, k, weight)

    record("bayesian_sas", "objective", sas_term, hyper, X, Yb, key)
    record("bayesian_sas", "objective+gradient", jax.value_and_grad(sas_term, argnums=(0, 1)), hyper, X, Yb, key)

    gp = {**hyper, "Z": jnp.asarray(gplvm.Z), "q_mu": jnp.zeros((D, A), Y.dtype), "q_sqrt": jnp.ones((D, A), Y.dtype)}

    def gplvm_term(h, X, rows):
        kernel = RBF(h["variance"], h["lengthscale"])
        Lmm = ops.cholesky(kernel(h["Z"]))
        mean, var = conditionals.conditional(kernel(h["Z"], X), Lmm, kernel.diag(X), h["q_mu"], h["q_sqrt"],
                                             whiten=False)  # fmt: skip
        return jnp.sum(Gaussian(h["noise"]).expectation_by_output(rows.T, mean, var))

    record("bayesian_gplvm", "objective", gplvm_term, gp, X, Yb)
    record("bayesian_gplvm", "objective+gradient", jax.value_and_grad(gplvm_term, argnums=(0, 1)), gp, X, Yb)

    for name, model in (("bayesian_sas", sas), ("bayesian_gplvm", gplvm)):
        svi = SVI(model.model, model.guide, optax.adam(1e-3), TraceMeanField_ELBO())
        state = jax.jit(svi.init)(key, Yd)
        tree = svi.optim.get_params(state.optim_state)
        adam = optax.adam(1e-3)

        def adam_step(tree, opt_state, grads, adam=adam):
            updates, opt_state = adam.update(grads, opt_state)
            return optax.apply_updates(tree, updates), opt_state

        record(name, "adam", adam_step, tree, adam.init(tree), tree)
        found[name]["parameters"] = int(sum(np.size(v) for v in jax.tree_util.tree_leaves(tree)))
        record(name, "step (SVI.update)", lambda s, Y, svi=svi: svi.update(s, Y), state, Yd)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--active", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--output", type=Path, default=ROOT / "results" / "sas_profile.json")
    args = parser.parse_args()
    Y = data.load_mnist().X_train.astype(np.float32)
    limits = ops.blas_threads(ops.BLAS_THREADS)
    load = [os.getloadavg()[0]]
    try:
        found = profile(Y, args.active, args.repeats)
    finally:
        limits.restore_original_limits()
    load.append(os.getloadavg()[0])
    command = f"python benchmarks/sas_profile.py --active {args.active} --repeats {args.repeats}"
    report = json.loads(args.output.read_text()) if args.output.is_file() else {}
    report[f"A{args.active}"] = {
        "command": command,
        "batch_size": BATCH,
        "load_1min_before_after": load,
        **found,
        **results.provenance(),
    }
    results.write_output_set(args.output.parent, {args.output.name: results.json_file(report)})


if __name__ == "__main__":
    main()
