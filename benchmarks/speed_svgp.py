"""SVGP training speed and quality: ppl_sparsegp (NumPyro and Pyro backends) against GPyTorch, Pyro and GPJax.

Run (from the repository root, in the benchmark environment, see ``benchmarks/requirements.txt``)::

    .venv-bench/bin/python benchmarks/speed_svgp.py --quick              # smoke test, ~6 min here
    .venv-bench/bin/python benchmarks/speed_svgp.py                      # full run
    .venv-bench/bin/python benchmarks/speed_svgp.py --libraries gpytorch pyro gpjax \\
        --output benchmarks/results/speed_svgp_competitors_trial.json
    .venv-bench/bin/python benchmarks/speed_svgp.py --libraries ppl_sparsegp_pyro \\
        ppl_sparsegp_pyro_compiled pyro gpytorch ppl_sparsegp --output benchmarks/results/speed_svgp_pyro_backend.json

Every library fits the *same* problem from the *same* starting point and is timed on its own
fastest idiomatic path:

* data: ``N`` training and ``n_test`` test points, ``D = 8``, ``X ~ N(0, I)``,
  ``f(x) = sin(a.x) + 0.5 cos(2 b.x) + 0.3 tanh(c.x)`` (``a, b, c`` fixed by the seed, with
  decreasing relevance across dimensions) plus ``N(0, 0.1^2)`` noise; ``y`` is standardised
  with the training mean and standard deviation, and every metric is on that scale.
* model: zero mean, RBF-ARD kernel, Gaussian likelihood, ``M`` inducing inputs learned jointly,
  whitened ``q(u) = N(m, L L^T)`` with full-rank ``L``, initialised at ``m = 0, L = I`` (the
  prior); GPyTorch adds its default 1e-3 noise to ``m``.
* initial hyperparameters: kernel variance 1, every lengthscale 1, noise variance 0.1.
* inducing inputs: k-means centres of the training inputs (``--z-init kmeans``, sklearn, seeded)
  or a seeded random subset (``--z-init random``); the same ``Z`` array for every library.
* optimiser: Adam, lr 0.01, on every parameter in each library's own unconstrained
  parameterisation: softplus for positive hyperparameters in GPyTorch and GPJax (GPJax learns the
  noise *standard deviation*), exp in Pyro and ppl_sparsegp (NumPyro's ``constraints.positive``).
* minibatches of 256, drawn by each library's own sampler: with replacement in GPJax's ``fit``
  and in the torch loops here, NumPyro ``plate`` subsampling for ppl_sparsegp; trajectories
  therefore differ by minibatch noise, and NLPD after a fixed number of steps by a little more.
* objective: the minibatch ELBO with the data term scaled by N/B and the KL counted once, except
  for Pyro: ``pyro.contrib.gp``'s Gaussian likelihood scores ``y`` under ``N(mu_f, var_f + s^2)``
  rather than the expected log-likelihood, so Pyro optimises a predictive-likelihood bound
  (PPGPR-like) and its NLPD is not a like-for-like check of the ELBO optimum.
* ppl_sparsegp: ``SVGP(..., batch_size=256, whiten=True)`` (no ``num_data``: with ``batch_size``
  the ``"data"`` plate scales by N/B itself, and the current ``SVGP`` refuses both together).
* ppl_sparsegp_pyro: the Pyro twin ``ppl_sparsegp.models.pyro.svgp.SVGP`` with the same arguments,
  fitted by ``ppl_sparsegp.pyro.svi.fit_svi`` (``TraceMeanField_ELBO``: the analytic data term and the
  closed-form KL, the same objective as ppl_sparsegp; minibatches by the ``"data"`` plate's
  ``torch.randint``, with replacement), Adam lr 0.01 (``functools.partial(torch.optim.Adam, lr=...)``),
  in torch's default dtype set to the cell's dtype.  Its test NLPD comes from the model's
  ``predict_y``.  Optional variants (not in the default ``--libraries``):
  ``ppl_sparsegp_pyro_compiled`` passes ``fit_svi`` a ``TraceMeanField_ELBO`` whose
  ``differentiable_loss`` (guide and model traces, KL, data term; with AOTAutograd its backward too)
  is wrapped in ``torch.compile`` (default inductor backend); the Adam step and fit_svi's per-step
  bookkeeping stay eager.  ``ppl_sparsegp_pyro_t2`` is ``ppl_sparsegp_pyro`` with ``threads=2``.

Timing: the number of optimisation steps is the same for everyone (``--steps``); steps/s is
measured after a warm-up that is timed and reported separately:

* GPyTorch, Pyro (eager torch, ``torch.set_num_threads(2)``): the first ``--warmup-steps`` steps
  are the warm-up, the remaining ``steps - warmup`` are timed.  ``loss.detach()`` is stored per
  step, never ``.item()``-ed inside the GPyTorch loop; Pyro's ``SVI.step`` returns a float.
* GPJax: ``gpx.fit`` (a ``lax.scan`` over all steps) is wrapped in ``jax.jit`` with the data as
  arguments; the warm-up is ahead-of-time ``lower().compile()``, then the compiled call of all
  ``steps`` steps is timed (``block_until_ready``).
* ppl_sparsegp: ``fit_svi`` with ``steps_per_dispatch`` (default 100) steps per compiled
  ``lax.scan`` dispatch.  A warm-up call of ``--warmup-steps`` steps (compilation included) is
  timed; the timed call continues from it for ``steps - warmup`` steps with ``init_state`` (Adam
  state carried over) or, if that fails, ``init_params`` (Adam state restarts; the error is kept
  as ``init_state_error``), or, if ``fit_svi`` has neither, a full ``steps`` call minus the
  warm-up call.  ``fit_svi`` compiles again in every call but reports ``run_seconds`` without
  compilation, which is the clock used (the call's wall time is kept as ``timed_call_wall_s``).
* ppl_sparsegp_pyro(_compiled, _t2): ``fit_svi`` (Pyro) starts afresh in every call (it clears the param
  store) but resumes from a checkpoint, bit for bit as an uninterrupted run.  A warm-up call of
  ``--warmup-steps`` steps writes a checkpoint at its end (its wall time, torch.compile included for
  the compiled variant, is ``warmup_s``); a second call with ``num_steps=steps`` reads it (params,
  Adam state, torch's RNG) in the same process and runs the remaining ``steps - warmup`` steps.  The
  clock is that call's ``run_seconds``: its step loop only (loss, backward, Adam step, fit_svi's
  per-step finiteness check, param snapshot and loss ``float``), without param creation and the
  checkpoint read and write (the call's wall time is kept as ``timed_call_wall_s``).
  Threads: ``fit_svi``'s default ``threads="auto"`` (``--torch-threads-ours``, recorded as ``torch_threads``;
  the count it chose as ``torch_threads_used``): one torch intra-op thread, or torch's own count (2 here) once a
  param has 512 x 512 entries (M >= 512), whereas GPyTorch and Pyro get ``--torch-threads`` (2); the
  ``ppl_sparsegp_pyro_t2`` cell runs ours with two.  ``OMP_WAIT_POLICY`` is the same for all.

GPU: ``--torch-device cuda`` runs the torch libraries (GPyTorch, Pyro, ppl_sparsegp_pyro*) on the GPU: torch's
default device in their workers is CUDA (data, model and each library's own tensors, the minibatch generators),
and the GPyTorch and Pyro loops synchronise before every clock reading; ours reads every step's loss as a float,
which synchronises each step. ``--torch-device cpu`` (the default) takes the same code path on the CPU.  The JAX
libraries run on whatever device jax finds (a CUDA jaxlib in the benchmark environment puts them on the GPU).

Machine noise: the developer machines have 2 cores shared with other work.  With 2 torch threads
and busy cores, OpenMP's default spin-waiting made torch 3-10x slower than one thread; the
workers therefore run with ``OMP_WAIT_POLICY=PASSIVE`` (``--omp-wait-policy``).  Each cell also
records the 1-minute load average before and after it (``loadavg_1min_*``), the torch loops
record steps/s per 100-step chunk (``chunk_steps_per_s``), and ``--repeats R`` reruns every cell
(the table shows the median).  Compare libraries by the ratios within one run, not by absolute
steps/s across runs.

Each (library, dtype, M) cell runs in its own subprocess (fresh JAX x64 flag, isolated
memory, per-cell timeout), so a failure (import, OOM, NaN, time-out) becomes an error string in
that cell.  Results go to JSON (written atomically after every cell) and a markdown table on
stdout; ratios are given because this 2-core machine is noisy.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata as _md
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUTPUT = os.path.join(HERE, "results", "speed_svgp.json")
LIBRARIES = (
    "ppl_sparsegp", "ppl_sparsegp_pyro", "gpytorch", "pyro", "gpjax", "ppl_sparsegp_lapack", "ppl_sparsegp_blocked",
    "ppl_sparsegp_ynn", "ppl_sparsegp_pyro_compiled", "ppl_sparsegp_pyro_t2",
)  # fmt: skip
OURS = "ppl_sparsegp"
OURS_PYRO = "ppl_sparsegp_pyro"
PYRO_VARIANT_THREADS = {"ppl_sparsegp_pyro_t2": 2}
"""``ppl_sparsegp_pyro_t2``: our Pyro backend with ``fit_svi(threads=2)`` instead of ``--torch-threads-ours``."""
OPTIONAL = ("ppl_sparsegp_lapack", "ppl_sparsegp_blocked", "ppl_sparsegp_ynn", "ppl_sparsegp_pyro_compiled",
            "ppl_sparsegp_pyro_t2")  # fmt: skip
VARIANT_ENV = {
    "ppl_sparsegp_lapack": {"PPL_SPARSEGP_BLOCKED_LINALG": "0"},
    "ppl_sparsegp_blocked": {"PPL_SPARSEGP_BLOCKED_LINALG": "1"},
    "ppl_sparsegp_ynn": {"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type=+reduce"},
}
"""Pseudo-libraries: ours with environment settings, for before/after ratios within one run. ``ppl_sparsegp_lapack``
factorises and solves every matrix with LAPACK, ``ppl_sparsegp_blocked`` large ones by ``backends/jax_blocked`` (on by
default on CPU from 2026-11-26 to 2026-11-27 and again since 2026-11-29, so in the results files of those dates
``ppl_sparsegp`` is the blocked path at M >= 512, and in those between them LAPACK). ``ppl_sparsegp_ynn`` keeps XLA's
YNNPACK reduction fusions on, as every run before 2026-11-29 14:00 UTC had them
(``ppl_sparsegp.backends.xla_flags``; the peers keep XLA's default, on). Not in the default ``--libraries`` (nor are
the Pyro-backend variants, see ``OPTIONAL``)."""

INIT = {"kernel_variance": 1.0, "lengthscale": 1.0, "noise_variance": 0.1}
D = 8
NOISE_STD = 0.1
LOSS_TAIL = 100  # final_loss_per_datum = mean of the last LOSS_TAIL per-datum losses


# ----------------------------------------------------------------------------- data


def make_data(n_train: int, n_test: int, seed: int):
    """Synthetic regression data, seeded.

    Returns ``X [n_train, D], y [n_train], Xs [n_test, D], ys [n_test]`` as float64, with ``y``
    standardised by the training mean and standard deviation.
    """
    rng = np.random.default_rng(seed)
    relevance = np.exp(-np.arange(D) / 4.0)  # 1.0 ... 0.17: an ARD kernel has something to learn
    a, b, c = (rng.standard_normal(D) * relevance for _ in range(3))
    X = rng.standard_normal((n_train + n_test, D))
    f = np.sin(X @ a) + 0.5 * np.cos(2.0 * X @ b) + 0.3 * np.tanh(X @ c)
    y = f + NOISE_STD * rng.standard_normal(n_train + n_test)
    mu, sd = y[:n_train].mean(), y[:n_train].std()
    y = (y - mu) / sd
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


def init_inducing(X: np.ndarray, M: int, method: str, seed: int) -> np.ndarray:
    """``Z [M, D]``: k-means centres of ``X`` or a random subset of its rows (seeded)."""
    if method == "random":
        idx = np.random.default_rng(seed).choice(X.shape[0], M, replace=False)
        return X[idx].copy()
    from sklearn.cluster import KMeans

    km = KMeans(n_clusters=M, n_init=1, max_iter=100, random_state=seed).fit(X)
    return km.cluster_centers_.astype(np.float64)


def gaussian_metrics(y: np.ndarray, mean: np.ndarray, var: np.ndarray) -> dict:
    """Test NLPD (mean negative log density of ``y`` under ``N(mean, var)``) and RMSE, in float64."""
    y, mean, var = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (y, mean, var))
    nlpd = 0.5 * np.log(2 * np.pi * var) + 0.5 * (y - mean) ** 2 / var
    return {
        "nlpd": float(np.mean(nlpd)),
        "rmse": float(np.sqrt(np.mean((y - mean) ** 2))),
        "mean_pred_var": float(np.mean(var)),
    }


def _tail_mean(losses) -> float:
    losses = np.asarray(losses, dtype=np.float64).reshape(-1)
    return float(np.mean(losses[-LOSS_TAIL:])) if losses.size else float("nan")


# ----------------------------------------------------------------------------- runners

CHUNK = 100  # eager loops also record steps/s per CHUNK steps (a diagnostic of machine noise)


def _loop(step, start, stop, wait=lambda: None) -> list:
    """Run ``step(i)`` for ``i`` in ``[start, stop)``; return steps/s of each CHUNK-step chunk. ``wait()`` (the
    device's synchronisation) runs before every clock reading and at the end, so queued GPU work is counted."""
    rates, t = [], time.perf_counter()
    for i in range(start, stop):
        step(i)
        if (i - start + 1) % CHUNK == 0:
            wait()
            now = time.perf_counter()
            rates.append(CHUNK / (now - t))
            t = now
    wait()
    return rates


def _on_torch_device(torch, cfg):
    """Make ``--torch-device`` torch's default device in this worker (the data, the model, the library's own
    tensors are created there) and return what waits for it: ``torch.cuda.synchronize`` on a GPU, nothing on the
    CPU. The torch runners' minibatch generators live on the same device."""
    torch.set_default_device(cfg["torch_device"])
    return torch.cuda.synchronize if cfg["torch_device"] == "cuda" else (lambda: None)


# Each runner gets ``cfg`` (dict: dtype, M, steps, warmup_steps, batch_size, lr, seed, N) and the
# arrays, and returns a dict with at least: warmup_s, timed_steps, timed_s, nlpd, rmse.


def run_gpytorch(cfg, X, y, Xs, ys, Z):
    import gpytorch
    import torch

    torch.set_num_threads(cfg["torch_threads"])
    wait = _on_torch_device(torch, cfg)
    torch.manual_seed(cfg["seed"])
    dt = {"float32": torch.float32, "float64": torch.float64}[cfg["dtype"]]
    N, B, steps, W = cfg["N"], cfg["batch_size"], cfg["steps"], cfg["warmup_steps"]

    Xt, yt = torch.as_tensor(X, dtype=dt), torch.as_tensor(y, dtype=dt)

    class SVGPModel(gpytorch.models.ApproximateGP):
        def __init__(self, Z):
            q_u = gpytorch.variational.CholeskyVariationalDistribution(Z.shape[0])
            strategy = gpytorch.variational.VariationalStrategy(self, Z, q_u, learn_inducing_locations=True)
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ZeroMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=Z.shape[1]))

        def forward(self, x):
            return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    model = SVGPModel(torch.as_tensor(Z, dtype=dt)).to(dt)
    likelihood = gpytorch.likelihoods.GaussianLikelihood().to(dt)
    model.covar_module.base_kernel.lengthscale = torch.full((1, X.shape[1]), INIT["lengthscale"])
    model.covar_module.outputscale = INIT["kernel_variance"]
    likelihood.noise = INIT["noise_variance"]
    model.train()
    likelihood.train()
    params = list(model.parameters()) + list(likelihood.parameters())
    opt = torch.optim.Adam(params, lr=cfg["lr"])
    mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=N)
    losses = torch.empty(steps, dtype=dt)
    gen = torch.Generator(device=cfg["torch_device"]).manual_seed(cfg["seed"])

    def step(i):
        idx = torch.randint(N, (B,), generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = -mll(model(Xt[idx]), yt[idx])  # -ELBO / N
        loss.backward()
        opt.step()
        losses[i] = loss.detach()

    t0 = time.perf_counter()
    _loop(step, 0, W, wait)
    t1 = time.perf_counter()
    chunks = _loop(step, W, steps, wait)
    t2 = time.perf_counter()

    model.eval()
    likelihood.eval()
    means, variances = [], []
    with torch.no_grad():
        for chunk in torch.split(torch.as_tensor(Xs, dtype=dt), 1000):
            pred = likelihood(model(chunk))
            means.append(pred.mean)
            variances.append(pred.variance)
    out = gaussian_metrics(ys, torch.cat(means).cpu().numpy(), torch.cat(variances).cpu().numpy())
    out.update(
        warmup_s=t1 - t0,
        timed_steps=steps - W,
        timed_s=t2 - t1,
        final_loss_per_datum=_tail_mean(losses.cpu().numpy()),
        timing_method=f"eager loop; first {W} steps = warm-up, rest timed",
        chunk_steps_per_s=chunks,
        learned={
            "noise_variance": float(likelihood.noise.item()),
            "kernel_variance": float(model.covar_module.outputscale.item()),
            "lengthscales": model.covar_module.base_kernel.lengthscale.detach().reshape(-1).tolist(),
        },
    )
    return out


def run_pyro(cfg, X, y, Xs, ys, Z):
    import pyro
    import pyro.contrib.gp as gp
    import torch
    from pyro.infer import SVI, TraceMeanField_ELBO

    torch.set_num_threads(cfg["torch_threads"])
    wait = _on_torch_device(torch, cfg)
    pyro.set_rng_seed(cfg["seed"])
    pyro.clear_param_store()
    dt = {"float32": torch.float32, "float64": torch.float64}[cfg["dtype"]]
    N, B, steps, W = cfg["N"], cfg["batch_size"], cfg["steps"], cfg["warmup_steps"]
    Xt, yt = torch.as_tensor(X, dtype=dt), torch.as_tensor(y, dtype=dt)

    kernel = gp.kernels.RBF(
        input_dim=X.shape[1],
        variance=torch.tensor(INIT["kernel_variance"], dtype=dt),
        lengthscale=torch.full((X.shape[1],), INIT["lengthscale"], dtype=dt),
    )
    likelihood = gp.likelihoods.Gaussian(variance=torch.tensor(INIT["noise_variance"], dtype=dt))
    vsgp = gp.models.VariationalSparseGP(
        Xt[:B],
        yt[:B],
        kernel,
        Xu=torch.as_tensor(Z, dtype=dt),
        likelihood=likelihood,
        num_data=N,
        whiten=True,
        jitter=1e-6,
    )
    svi = SVI(vsgp.model, vsgp.guide, pyro.optim.Adam({"lr": cfg["lr"]}), TraceMeanField_ELBO())
    losses = np.empty(steps)
    gen = torch.Generator(device=cfg["torch_device"]).manual_seed(cfg["seed"])

    def step(i):
        idx = torch.randint(N, (B,), generator=gen)
        vsgp.set_data(Xt[idx], yt[idx])
        losses[i] = svi.step()  # -ELBO estimate, data term scaled by N/B

    t0 = time.perf_counter()
    _loop(step, 0, W, wait)
    t1 = time.perf_counter()
    chunks = _loop(step, W, steps, wait)
    t2 = time.perf_counter()

    with torch.no_grad():
        means, variances = [], []
        for chunk in torch.split(torch.as_tensor(Xs, dtype=dt), 1000):
            f_loc, f_var = vsgp(chunk, full_cov=False)
            means.append(f_loc)
            variances.append(f_var + likelihood.variance)
    out = gaussian_metrics(ys, torch.cat(means).cpu().numpy(), torch.cat(variances).cpu().numpy())
    out.update(
        warmup_s=t1 - t0,
        timed_steps=steps - W,
        timed_s=t2 - t1,
        final_loss_per_datum=_tail_mean(losses / N),
        timing_method=f"SVI loop; first {W} steps = warm-up, rest timed",
        chunk_steps_per_s=chunks,
        learned={
            "noise_variance": float(likelihood.variance.item()),
            "kernel_variance": float(kernel.variance.item()),
            "lengthscales": kernel.lengthscale.detach().reshape(-1).tolist(),
        },
    )
    return out


def run_gpjax(cfg, X, y, Xs, ys, Z):
    import jax

    jax.config.update("jax_enable_x64", cfg["dtype"] == "float64")
    import equinox as eqx
    import gpjax as gpx
    import jax.numpy as jnp
    import jax.random as jr
    import optax
    from gpjax.parameters import val

    dt = {"float32": jnp.float32, "float64": jnp.float64}[cfg["dtype"]]
    N, B, steps = cfg["N"], cfg["batch_size"], cfg["steps"]
    Xj, yj = jnp.asarray(X, dt), jnp.asarray(y, dt)[:, None]

    kernel = gpx.kernels.RBF(
        lengthscale=jnp.full((X.shape[1],), INIT["lengthscale"], dt),
        variance=jnp.asarray(INIT["kernel_variance"], dt),
    )
    prior = gpx.gps.Prior(mean_function=gpx.mean_functions.Zero(), kernel=kernel)
    lik = gpx.likelihoods.Gaussian(obs_stddev=jnp.asarray(math.sqrt(INIT["noise_variance"]), dt))
    q = gpx.variational_families.WhitenedVariationalGaussian(model=prior * lik, inducing_inputs=jnp.asarray(Z, dt))
    params0, static = eqx.partition(q, eqx.is_array)
    optim = optax.adam(cfg["lr"])

    def objective(model, batch):
        return -gpx.objectives.elbo(model, batch)

    def train(params, Xj, yj, key):
        model, history = gpx.fit(
            model=eqx.combine(params, static),
            objective=objective,
            train_data=gpx.Dataset(X=Xj, y=yj),
            optim=optim,
            num_iters=steps,
            batch_size=B,
            key=key,
            verbose=False,
        )
        return eqx.partition(model, eqx.is_array)[0], history

    key = jr.key(cfg["seed"])
    t0 = time.perf_counter()
    compiled = jax.jit(train).lower(params0, Xj, yj, key).compile()
    t1 = time.perf_counter()
    params, history = compiled(params0, Xj, yj, key)
    jax.block_until_ready((params, history))
    t2 = time.perf_counter()

    qf = eqx.combine(params, static)
    post = qf.condition(None)
    means, variances = [], []
    obs_var = val(qf.model.likelihood.obs_stddev) ** 2
    for s in range(0, Xs.shape[0], 1000):
        pred = post(jnp.asarray(Xs[s : s + 1000], dt), covariance="diagonal")
        means.append(np.asarray(pred.mean))
        variances.append(np.asarray(pred.variance + obs_var))
    out = gaussian_metrics(ys, np.concatenate(means), np.concatenate(variances))
    k = qf.model.prior.kernel
    out.update(
        warmup_s=t1 - t0,
        timed_steps=steps,
        timed_s=t2 - t1,
        final_loss_per_datum=_tail_mean(np.asarray(history) / N),
        timing_method="jax.jit(gpx.fit) lower+compile = warm-up; compiled call of all steps timed",
        learned={
            "noise_variance": float(obs_var),
            "kernel_variance": float(val(k.variance)),
            "lengthscales": np.asarray(val(k.lengthscale)).reshape(-1).tolist(),
        },
    )
    return out


def run_ppl_sparsegp(cfg, X, y, Xs, ys, Z):
    import inspect

    import jax

    jax.config.update("jax_enable_x64", cfg["dtype"] == "float64")
    import optax

    from ppl_sparsegp.core import kernels, likelihoods
    from ppl_sparsegp.infer.svi import fit_svi
    from ppl_sparsegp.models.numpyro.svgp import SVGP

    npdt = {"float32": np.float32, "float64": np.float64}[cfg["dtype"]]
    N, B, steps, W = cfg["N"], cfg["batch_size"], cfg["steps"], cfg["warmup_steps"]
    spd = math.gcd(min(cfg["steps_per_dispatch"], W), steps - W) or W
    Xn, yn = X.astype(npdt), y.astype(npdt)

    gp_kwargs = dict(
        kernel=kernels.RBF(
            variance=INIT["kernel_variance"],
            lengthscale=np.full(X.shape[1], INIT["lengthscale"], dtype=npdt),
        ),
        likelihood=likelihoods.Gaussian(variance=INIT["noise_variance"]),
        Z=Z.astype(npdt),
        batch_size=B,  # the "data" plate subsamples B of the N rows and scales the data term by N/B
        whiten=True,
    )
    # (SVGP's num_data is for minibatches passed in from outside; with batch_size it is not needed
    # and the current SVGP refuses both together.)
    gp = SVGP(**gp_kwargs)
    optimizer = optax.adam(cfg["lr"])

    def fit(num_steps, **kw):
        return fit_svi(
            gp.model,
            gp.guide,
            Xn,
            yn,
            optimizer=optimizer,
            num_steps=num_steps,
            key=cfg["seed"],
            steps_per_dispatch=spd,
            blas_threads=cfg["blas_threads_ours"],
            progress=False,
            **kw,
            validate=gp.check_data,
        )

    def _block(res):
        jax.block_until_ready(res.params)
        return res

    fit_params = inspect.signature(fit_svi).parameters
    t0 = time.perf_counter()
    warm = _block(fit(W))
    t1 = time.perf_counter()
    extra = {}
    if "init_state" in fit_params or "init_params" in fit_params:
        res = None
        if "init_state" in fit_params:
            try:
                res = _block(fit(steps - W, init_state=warm.state))
                how = "init_state (parameters and Adam state carried over)"
            except Exception as e:  # noqa: BLE001  fall back to init_params, say so in the JSON
                extra["init_state_error"] = f"{type(e).__name__}: {e}"[:500]
                t1 = time.perf_counter()
        if res is None:
            res = _block(fit(steps - W, init_params=warm.params))
            how = "init_params (Adam state restarts)"
        t2 = time.perf_counter()
        losses = np.concatenate([np.asarray(warm.losses), np.asarray(res.losses)])
        if getattr(res, "run_seconds", None):
            # fit_svi compiles its chunk per call (a second compile here), and reports run time
            # without it: use that, keeping the call's wall time for reference.
            timed_s = float(res.run_seconds)
            extra["timed_call_wall_s"] = t2 - t1
            extra["timed_call_compile_s"] = float(getattr(res, "compile_seconds", float("nan")))
            clock = "fit_svi's run_seconds (compilation excluded)"
        else:
            timed_s = t2 - t1
            clock = "wall time of the call"
        method = (
            f"fit_svi warm-up call of {W} steps (compilation included) timed separately; the timed "
            f"call continues from it via {how} for {steps - W} steps; clock: {clock}"
        )
    else:
        res = _block(fit(steps))
        t2 = time.perf_counter()
        timed_s = (t2 - t1) - (t1 - t0)
        losses = np.asarray(res.losses)
        method = (
            f"no init_state/init_params: full {steps}-step call timed minus the {W}-step warm-up "
            "call (compilation assumed equal in both)"
        )
    mean_y, var_y = gp.predict_y(res.params, Xs.astype(npdt))
    out = gaussian_metrics(ys, np.asarray(mean_y), np.asarray(var_y))
    out.update(
        warmup_s=t1 - t0,
        warmup_compile_s=float(getattr(warm, "compile_seconds", float("nan"))),
        timed_steps=steps - W,
        timed_s=timed_s,
        steps_per_dispatch=spd,
        final_loss_per_datum=_tail_mean(losses / N),  # NumPyro's loss is the total -ELBO estimate
        initial_losses=[float(v) for v in losses[:5]],  # -ELBO of the first steps: the same start and minibatches
        timing_method=method,
        learned={k: _jsonable(v) for k, v in dict(res.params).items() if np.size(v) <= 16},
        **extra,
    )
    return out


def _compiled_elbo(pyro_infer, torch):
    """``TraceMeanField_ELBO`` whose ``differentiable_loss`` (the whole forward pass: the guide's and the model's
    traces, the KL and the data term; AOTAutograd also compiles its backward) runs through ``torch.compile``."""

    class CompiledTraceMeanFieldELBO(pyro_infer.TraceMeanField_ELBO):
        def __init__(self):
            super().__init__()
            self._compiled = torch.compile(super().differentiable_loss)

        def differentiable_loss(self, model, guide, *args, **kwargs):
            return self._compiled(model, guide, *args, **kwargs)

    return CompiledTraceMeanFieldELBO()


def run_ppl_sparsegp_pyro(cfg, X, y, Xs, ys, Z):
    import functools

    import pyro.infer
    import torch

    from ppl_sparsegp.core import kernels, likelihoods
    from ppl_sparsegp.models.pyro.svgp import SVGP
    from ppl_sparsegp.pyro.dtype import auto_threads
    from ppl_sparsegp.pyro.svi import fit_svi

    dt = {"float32": torch.float32, "float64": torch.float64}[cfg["dtype"]]
    torch.set_default_dtype(dt)  # the Pyro models' dtype is torch's default (ppl_sparsegp.pyro.dtype)
    _on_torch_device(torch, cfg)  # fit_svi reads every step's loss as a float: each step ends synchronised
    N, B, steps, W = cfg["N"], cfg["batch_size"], cfg["steps"], cfg["warmup_steps"]
    threads = PYRO_VARIANT_THREADS.get(cfg["library"], cfg["torch_threads_ours"])
    compiled = cfg["library"] == "ppl_sparsegp_pyro_compiled"
    gp = SVGP(
        kernels.RBF(variance=INIT["kernel_variance"], lengthscale=np.full(X.shape[1], INIT["lengthscale"])),
        likelihoods.Gaussian(variance=INIT["noise_variance"]),
        Z=Z,
        batch_size=B,  # the "data" plate subsamples B of the N rows and scales the data term by N/B
        whiten=True,
    )
    loss = _compiled_elbo(pyro.infer, torch) if compiled else pyro.infer.TraceMeanField_ELBO()

    with tempfile.TemporaryDirectory(prefix="speed_svgp_pyro_") as tmp:
        ckpt = os.path.join(tmp, "fit.npz")

        def fit(num_steps):
            return fit_svi(
                gp.model,
                gp.guide,
                X,
                y,
                num_steps=num_steps,
                optimizer=functools.partial(torch.optim.Adam, lr=cfg["lr"]),
                seed=cfg["seed"],
                loss=loss,
                progress=False,
                checkpoint=ckpt,
                checkpoint_every=steps,  # written only at the end of each call, outside run_seconds
                validate=gp.check_data,
                threads=threads,
            )

        t0 = time.perf_counter()
        warm = fit(W)
        t1 = time.perf_counter()
        res = fit(steps)  # resumes from the warm-up's checkpoint: params, Adam state and torch's RNG carried over
        t2 = time.perf_counter()
    if res.resumed_from != W or res.steps_run != steps - W:
        raise RuntimeError(f"expected to resume at step {W}, got resumed_from={res.resumed_from}, ran {res.steps_run}")
    with torch.no_grad():
        means, variances = [], []
        for s in range(0, Xs.shape[0], 1000):
            mean_y, var_y = gp.predict_y(res.params, Xs[s : s + 1000])
            means.append(mean_y.cpu().numpy())
            variances.append(var_y.cpu().numpy())
    out = gaussian_metrics(ys, np.concatenate(means), np.concatenate(variances))
    losses = np.asarray(res.losses)
    compile_note = ", torch.compile included" if compiled else ""
    out.update(
        warmup_s=t1 - t0,
        timed_steps=res.steps_run,
        timed_s=float(res.run_seconds),
        timed_call_wall_s=t2 - t1,
        warmup_run_seconds=float(warm.run_seconds),
        torch_threads=threads,
        torch_threads_used=auto_threads(res.params.values(), torch.get_num_threads()) if threads == "auto" else threads,
        final_loss_per_datum=_tail_mean(losses / N),  # Pyro's loss is the total -ELBO estimate
        initial_losses=[float(v) for v in losses[:5]],
        timing_method=(
            f"fit_svi warm-up call of {W} steps (its wall time = warm-up{compile_note}) "
            f"writes a checkpoint; a second call of num_steps={steps} resumes from it (params, Adam state, RNG) and "
            f"runs the remaining {steps - W} steps; clock: that call's run_seconds (its step loop only, without "
            "param creation, checkpoint read and write)"
        ),
        learned={k: _jsonable(v.detach().cpu()) for k, v in res.params.items() if v.numel() <= 16},
    )
    return out


RUNNERS = {
    "ppl_sparsegp_pyro": run_ppl_sparsegp_pyro,
    "ppl_sparsegp_pyro_compiled": run_ppl_sparsegp_pyro,
    "ppl_sparsegp_pyro_t2": run_ppl_sparsegp_pyro,
    "ppl_sparsegp": run_ppl_sparsegp,
    "ppl_sparsegp_lapack": run_ppl_sparsegp,
    "ppl_sparsegp_blocked": run_ppl_sparsegp,
    "ppl_sparsegp_ynn": run_ppl_sparsegp,
    "gpytorch": run_gpytorch,
    "pyro": run_pyro,
    "gpjax": run_gpjax,
}


def _jsonable(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    try:
        a = np.asarray(v)
        return a.item() if a.ndim == 0 else a.tolist()
    except Exception:  # noqa: BLE001
        return repr(v)


# ----------------------------------------------------------------------------- worker / driver


def worker(spec_path: str) -> int:
    """Run one cell (subprocess entry point); always writes a result JSON."""
    with open(spec_path) as fh:
        spec = json.load(fh)
    cfg = spec["cfg"]
    result = {"status": "error"}
    try:
        data = np.load(spec["data"])
        out = RUNNERS[spec["library"]](cfg, data["X"], data["y"], data["Xs"], data["ys"], data[f"Z{cfg['M']}"])
        result.update(out)
        # XLA_FLAGS as the library left them (ours: ppl_sparsegp.backends.xla_flags)
        result["xla_flags"] = os.environ.get("XLA_FLAGS")
        result["steps_per_s"] = out["timed_steps"] / out["timed_s"] if out["timed_s"] > 0 else None
        if not np.isfinite(out["nlpd"]):
            result["error"] = "non-finite NLPD (diverged?)"
        else:
            result["status"] = "ok"
    except BaseException as e:  # noqa: BLE001  record, never crash the run
        tb = traceback.format_exc().strip().splitlines()
        result["error"] = f"{type(e).__name__}: {e}"[:2000]
        result["traceback_tail"] = tb[-12:]
    with open(spec["out"], "w") as fh:
        json.dump(result, fh, default=_jsonable)
    return 0


def run_cell(library, cfg, data_path, tmpdir, timeout):
    tag = f"{library}_{cfg['dtype']}_M{cfg['M']}_{time.monotonic_ns()}"
    spec_path = os.path.join(tmpdir, f"{tag}.spec.json")
    out_path = os.path.join(tmpdir, f"{tag}.out.json")
    with open(spec_path, "w") as fh:
        json.dump({"library": library, "cfg": cfg, "data": data_path, "out": out_path}, fh)
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if cfg.get("omp_wait_policy") not in (None, "unset"):
        env["OMP_WAIT_POLICY"] = cfg["omp_wait_policy"].upper()
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(VARIANT_ENV.get(library, {}))
    load_before = _loadavg()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--_worker", spec_path],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        rc, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, stderr = "timeout", (e.stderr or b"")
        stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    wall = time.perf_counter() - t0
    if os.path.exists(out_path):
        with open(out_path) as fh:
            result = json.load(fh)
    elif rc == "timeout":
        result = {"status": "error", "error": f"timed out after {timeout} s"}
    else:
        why = f"worker exited with {rc}"
        if isinstance(rc, int) and rc < 0:
            why += f" (signal {-rc}{'; likely out of memory' if rc == -9 else ''})"
        result = {"status": "error", "error": why, "stderr_tail": stderr.strip().splitlines()[-12:]}
    result.update(
        library=library,
        dtype=cfg["dtype"],
        M=cfg["M"],
        cell_wall_s=wall,
        loadavg_1min_before=load_before,
        loadavg_1min_after=_loadavg(),
    )
    return result


def _loadavg():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def versions() -> dict:
    names = [
        "ppl-sparsegp", "jax", "jaxlib", "numpyro", "optax", "torch", "gpytorch",
        "linear_operator", "pyro-ppl", "gpjax", "equinox", "numpy", "scikit-learn",
    ]  # fmt: skip
    out = {"python": platform.python_version()}
    for n in names:
        try:
            out[n] = _md.version(n)
        except _md.PackageNotFoundError:
            out[n] = None
    return out


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": _cpu_model(),
    }


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def summarise(results) -> list:
    """One row per (dtype, M, library): median steps/s over repeats, quality from the first."""
    rows = []
    for key in sorted({(r["dtype"], r["M"], r["library"]) for r in results}):
        reps = [r for r in results if (r["dtype"], r["M"], r["library"]) == key]
        ok = [r for r in reps if r.get("status") == "ok" and r.get("steps_per_s")]
        row = {"dtype": key[0], "M": key[1], "library": key[2], "repeats": len(reps)}
        if not ok:
            row.update(status="error", error=reps[0].get("error"))
        else:
            first = ok[0]
            row.update(
                status="ok",
                steps_per_s=float(np.median([r["steps_per_s"] for r in ok])),
                steps_per_s_all=[r["steps_per_s"] for r in ok],
                warmup_s=float(np.median([r["warmup_s"] for r in ok])),
                whole_fit_s=float(np.median([r["warmup_s"] + r["timed_s"] for r in ok])),
                nlpd=first["nlpd"],
                rmse=first["rmse"],
                final_loss_per_datum=first["final_loss_per_datum"],
                loadavg_1min=[r.get("loadavg_1min_before") for r in ok],
            )
        rows.append(row)
    return rows


def compute_ratios(summary) -> list:
    """Per (dtype, M): fastest library, ours (jax) / each library, ours (Pyro backend) / each library, each library
    / fastest (steps/s)."""
    rows = []
    for key in sorted({(r["dtype"], r["M"]) for r in summary}):
        cell = {r["library"]: r["steps_per_s"] for r in summary if (r["dtype"], r["M"]) == key and r["status"] == "ok"}
        if not cell:
            continue
        fastest = max(cell, key=cell.get)
        ours, ours_pyro = cell.get(OURS), cell.get(OURS_PYRO)
        rows.append(
            {
                "dtype": key[0],
                "M": key[1],
                "fastest": fastest,
                "over_fastest": {lib: v / cell[fastest] for lib, v in cell.items()},
                "ours_over": {lib: ours / v for lib, v in cell.items()} if ours else None,
                "ours_pyro_over": {lib: ours_pyro / v for lib, v in cell.items()} if ours_pyro else None,
            }
        )
    return rows


def markdown_table(summary, ratios) -> str:
    rix = {(r["dtype"], r["M"]): r for r in ratios}
    lines = [
        "| dtype | M | library | steps/s | ours ÷ lib | ours-pyro ÷ lib | lib ÷ fastest | warm-up s | whole fit s | "
        "test NLPD | test RMSE | -ELBO/N (last 100) | load (1 min) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = {lib: i for i, lib in enumerate(LIBRARIES)}
    for r in sorted(summary, key=lambda r: (r["dtype"], r["M"], order.get(r["library"], 99))):
        if r["status"] != "ok":
            err = str(r.get("error", "?")).replace("|", "/").replace("\n", " ")[:90]
            lines.append(f"| {r['dtype']} | {r['M']} | {r['library']} | error: {err} ||||||||||")
            continue
        ra = rix.get((r["dtype"], r["M"]), {})
        ours = (ra.get("ours_over") or {}).get(r["library"])
        ours_pyro = (ra.get("ours_pyro_over") or {}).get(r["library"])
        fast = (ra.get("over_fastest") or {}).get(r["library"])
        load = ", ".join("?" if v is None else f"{v:.1f}" for v in r["loadavg_1min"])
        lines.append(
            f"| {r['dtype']} | {r['M']} | {r['library']} | {r['steps_per_s']:.1f} | "
            f"{'n/a' if ours is None else f'{ours:.2f}'} | {'n/a' if ours_pyro is None else f'{ours_pyro:.2f}'} | "
            f"{'n/a' if fast is None else f'{fast:.2f}'} | {r['warmup_s']:.1f} | {r['whole_fit_s']:.1f} | "
            f"{r['nlpd']:.3f} | {r['rmse']:.3f} | {r['final_loss_per_datum']:.3f} | {load} |"
        )
    return "\n".join(lines)


def write_json_atomic(path: str, payload: dict) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".speed_svgp.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=2, default=_jsonable)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke test: small N, few steps, small M")
    p.add_argument("--steps", type=int, default=None, help="optimisation steps (default 2000)")
    p.add_argument("--warmup-steps", type=int, default=None, help="warm-up steps (default 100)")
    p.add_argument("--M", type=int, nargs="+", default=None, help="inducing points (64 256 1024)")
    p.add_argument("--dtype", nargs="+", default=["float32", "float64"],
                   choices=["float32", "float64"])  # fmt: skip
    p.add_argument("--libraries", nargs="+", default=[lib for lib in LIBRARIES if lib not in OPTIONAL],
                   choices=LIBRARIES)  # fmt: skip
    p.add_argument("--N", type=int, default=None, help="training points (default 20000)")
    p.add_argument("--n-test", type=int, default=None, help="test points (default 5000)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--z-init", choices=["kmeans", "random"], default="kmeans")
    p.add_argument("--steps-per-dispatch", type=int, default=100, help="ppl_sparsegp only")
    p.add_argument("--torch-threads", type=int, default=2, help="torch.set_num_threads (2)")
    p.add_argument(
        "--torch-device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="where the torch libraries (gpytorch, pyro, ppl_sparsegp_pyro*) run: torch's default device in their "
        "workers, synchronised before every clock reading (cpu)",
    )
    p.add_argument(
        "--torch-threads-ours",
        type=lambda v: v if v == "auto" else int(v),
        default="auto",
        help="ppl_sparsegp_pyro(_compiled) only: fit_svi's threads, a count or auto (fit_svi's default: one thread "
        "unless a param has 512 x 512 entries, then torch's own)",
    )
    p.add_argument(
        "--blas-threads-ours",
        type=int,
        default=1,
        help="ppl_sparsegp only: fit_svi's blas_threads, the OpenBLAS threads behind jax's CPU Cholesky and "
        "triangular solves (1, fit_svi's default)",
    )
    p.add_argument(
        "--omp-wait-policy",
        choices=["passive", "active", "unset"],
        default="passive",
        help="OMP_WAIT_POLICY for the workers (passive: idle OpenMP threads sleep instead of "
        "spinning; with 2 torch threads on a loaded 2-core machine spinning was 3-10x slower)",
    )
    p.add_argument("--repeats", type=int, default=1, help="run every cell this many times")
    p.add_argument("--timeout", type=float, default=10800.0, help="seconds per cell (3 h)")
    p.add_argument(
        "--output",
        default=None,
        help=f"JSON path (default {DEFAULT_OUTPUT}; *_quick.json with --quick)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the cells already in --output (same settings) and run only the missing ones",
    )
    p.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    quick = a.quick
    a.steps = a.steps or (300 if quick else 2000)
    a.warmup_steps = a.warmup_steps or (50 if quick else 100)
    a.M = a.M or ([32, 64] if quick else [64, 256, 1024])
    a.N = a.N or (2000 if quick else 20000)
    a.n_test = a.n_test or (500 if quick else 5000)
    if not 0 < a.warmup_steps < a.steps:
        p.error("need 0 < --warmup-steps < --steps")
    a.output = a.output or (DEFAULT_OUTPUT.replace(".json", "_quick.json") if quick else DEFAULT_OUTPUT)
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    if a._worker:
        return worker(a._worker)

    started = _dt.datetime.now(_dt.UTC)
    X, y, Xs, ys = make_data(a.N, a.n_test, a.seed)
    payload = {
        "benchmark": "speed_svgp",
        "date": started.isoformat(timespec="seconds"),
        "command": " ".join([os.path.relpath(sys.executable, ROOT), *sys.argv]),
        "machine": machine(),
        "versions": versions(),
        "config": {
            "quick": a.quick,
            "N": a.N,
            "n_test": a.n_test,
            "D": D,
            "batch_size": a.batch_size,
            "lr": a.lr,
            "optimizer": "adam",
            "steps": a.steps,
            "warmup_steps": a.warmup_steps,
            "M": a.M,
            "dtypes": a.dtype,
            "libraries": a.libraries,
            "seed": a.seed,
            "z_init": a.z_init,
            "init": INIT,
            "noise_std_raw": NOISE_STD,
            "kernel": "RBF-ARD",
            "likelihood": "Gaussian",
            "mean": "zero",
            "whiten": True,
            "torch_threads": a.torch_threads,
            "torch_device": a.torch_device,
            "omp_wait_policy": a.omp_wait_policy,
            "repeats": a.repeats,
            "steps_per_dispatch_ours": a.steps_per_dispatch,
            "blas_threads_ours": a.blas_threads_ours,
            "torch_threads_ours": a.torch_threads_ours,
            "data": "X~N(0,I_8); f=sin(a.x)+0.5cos(2b.x)+0.3tanh(c.x); y=f+N(0,0.1^2), "
            "standardised with train mean/std; metrics on standardised scale",
        },  # fmt: skip
        "summary": [],
        "ratios": [],
        "results": [],
    }
    results = payload["results"]
    done, prior_elapsed = set(), 0.0
    if a.resume and os.path.exists(a.output):
        with open(a.output) as fh:
            old = json.load(fh)
        keys = ("N", "n_test", "batch_size", "lr", "steps", "warmup_steps", "seed", "z_init")
        keys += (
            "torch_threads",
            "torch_device",
            "omp_wait_policy",
            "steps_per_dispatch_ours",
            "blas_threads_ours",
            "torch_threads_ours",
        )
        mismatch = [k for k in keys if old.get("config", {}).get(k) != payload["config"][k]]
        if mismatch:
            print(f"--resume: settings differ ({mismatch}); starting afresh", file=sys.stderr)
        else:
            results.extend(old.get("results", []))
            done = {(r.get("repeat", 0), r["dtype"], r["M"], r["library"]) for r in results}
            payload["date"] = old.get("date", payload["date"])
            prior_elapsed = float(old.get("elapsed_s", 0.0))
            payload["resumed"] = [*old.get("resumed", []), started.isoformat(timespec="seconds")]
            print(f"--resume: keeping {len(done)} finished cell(s)", file=sys.stderr)
    cells = [(rep, dt, M, lib) for rep in range(a.repeats) for dt in a.dtype for M in a.M for lib in a.libraries]

    def save():
        payload["summary"] = summarise(results)
        payload["ratios"] = compute_ratios(payload["summary"])
        now = _dt.datetime.now(_dt.UTC)
        payload["elapsed_s"] = prior_elapsed + (now - started).total_seconds()
        have = {(r.get("repeat", 0), r["dtype"], r["M"], r["library"]) for r in results}
        payload["complete"] = all(c in have for c in cells)
        write_json_atomic(a.output, payload)

    with tempfile.TemporaryDirectory(prefix="speed_svgp_") as tmp:
        data_path = os.path.join(tmp, "data.npz")
        Zs = {f"Z{M}": init_inducing(X, M, a.z_init, a.seed) for M in a.M}
        np.savez(data_path, X=X, y=y, Xs=Xs, ys=ys, **Zs)
        for n, (rep, dt, M, lib) in enumerate(cells, 1):
            if (rep, dt, M, lib) in done:
                continue
            cfg = {
                "dtype": dt, "M": M, "steps": a.steps, "warmup_steps": a.warmup_steps,
                "batch_size": a.batch_size, "lr": a.lr, "seed": a.seed, "N": a.N,
                "steps_per_dispatch": a.steps_per_dispatch, "torch_threads": a.torch_threads,
                "omp_wait_policy": a.omp_wait_policy, "blas_threads_ours": a.blas_threads_ours,
                "torch_threads_ours": a.torch_threads_ours, "torch_device": a.torch_device, "library": lib,
            }  # fmt: skip
            print(f"[{n}/{len(cells)}] {lib} {dt} M={M} ...", file=sys.stderr, flush=True)
            r = run_cell(lib, cfg, data_path, tmp, a.timeout)
            r["repeat"] = rep
            if r.get("status") == "ok":
                msg = (
                    f"    {r['steps_per_s']:.1f} steps/s, warm-up {r['warmup_s']:.1f} s, "
                    f"NLPD {r['nlpd']:.3f}, RMSE {r['rmse']:.3f} ({r['cell_wall_s']:.0f} s)"
                )
            else:
                msg = f"    ERROR: {r.get('error')}"
            print(msg, file=sys.stderr, flush=True)
            results.append(r)
            save()
    save()
    print(markdown_table(payload["summary"], payload["ratios"]))
    print(f"\nwrote {os.path.relpath(a.output)} ({payload['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
