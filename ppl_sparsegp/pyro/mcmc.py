"""The Pyro twin of :func:`ppl_sparsegp.infer.mcmc.run_mcmc`: Pyro's ``MCMC`` on any Pyro kernel (``NUTS``,
``HMC``, the SG-MCMC kernels of :mod:`ppl_sparsegp.pyro.sgmcmc`), one chain after another, returning the NumPyro
engine's :class:`~ppl_sparsegp.infer.mcmc.MCMCResult` (draws [C, S, ...], per-draw ``diverging`` where the kernel
reports divergences), so that what reads a NumPyro run (``posterior.predict``, ``posterior.diagnostics``, ArviZ)
reads this one.

Each chain runs a fresh copy of the kernel (its own adaptation) from its own seed, drawn from ``seed`` by
``numpy.random.SeedSequence``, and its own ``initial_params`` row. Checkpoints are the ``.npz`` files of
:mod:`ppl_sparsegp.infer.checkpoint` (no pickle, written atomically), one write per finished chain: the draws of the
chains done (group ``samples``), their ``diverging`` flags, the counter ``chains_done``. A killed run resumes with
the next chain, and gives the draws an uninterrupted run gives; the chain that was running starts over, since Pyro's
kernels keep their adaptation in objects, not in data a checkpoint could hold (the NumPyro engine resumes within a
chain). A Ctrl-C returns the finished chains (``interrupted``), or re-raises when none has finished.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyro
import pyro.infer
import torch
from pyro import poutine
from torch.distributions import biject_to

from ppl_sparsegp.core import ops
from ppl_sparsegp.infer import checkpoint as checkpoints
from ppl_sparsegp.infer import progress as progress_bars
from ppl_sparsegp.infer.mcmc import MCMCResult
from ppl_sparsegp.pyro.dtype import as_data, intra_op_threads, to_host
from ppl_sparsegp.validation import check_count

Array = Any


def chain_seeds(seed: int, num_chains: int) -> list[int]:
    """The seed of each chain: independent streams drawn from ``seed`` (``SeedSequence(seed).spawn``)."""
    return [int(child.generate_state(1)[0]) for child in np.random.SeedSequence(seed).spawn(num_chains)]


def init_from_svi(
    model: Callable,
    guide: Callable,
    params: Mapping[str, Array],
    *model_args: Any,
    num_chains: int = 1,
    **model_kwargs: Any,
) -> dict[str, Array]:
    """Unconstrained initial values for :func:`run_mcmc` from a fitted guide, one draw of every guide site per chain
    (the twin of :func:`ppl_sparsegp.infer.mcmc.init_from_svi`): hyperparameters at the guide's point masses, u (or
    v) at a draw of q(u), the thesis' recipe (§5.5 step 2). Draws from torch's generator.

    Args:
        model, guide: the Pyro model and the guide that was fitted; params: its fitted params (constrained).
        num_chains: C, the leading axis of every value.

    Returns:
        site name -> unconstrained value [C, ...], for the model's latent sites the guide draws.
    """
    num_chains = check_count("num_chains", num_chains, minimum=1)
    values = {name: torch.as_tensor(np.asarray(value)) for name, value in params.items()}
    model_args = tuple(as_data(a) for a in model_args)
    model_kwargs = {k: as_data(v) for k, v in model_kwargs.items()}
    starts: dict[str, list[Array]] = {}
    with torch.no_grad():
        for _ in range(num_chains):
            drawn = poutine.trace(poutine.substitute(guide, data=values)).get_trace(*model_args, **model_kwargs)
            latent = {n: site["value"] for n, site in drawn.nodes.items() if site["type"] == "sample"}
            replayed = poutine.trace(poutine.condition(poutine.substitute(model, data=values), data=latent))
            for name, site in replayed.get_trace(*model_args, **model_kwargs).nodes.items():
                if name in latent and site["type"] == "sample":
                    starts.setdefault(name, []).append(biject_to(site["fn"].support).inv(latent[name]))
    return {name: torch.stack(chains) for name, chains in starts.items()}


def run_mcmc(
    kernel: pyro.infer.mcmc.mcmc_kernel.MCMCKernel,
    *model_args: Any,
    num_warmup: int,
    num_samples: int,
    num_chains: int = 1,
    seed: int = 0,
    initial_params: Mapping[str, Array] | None = None,
    checkpoint: str | os.PathLike | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    progress: bool | None = None,
    validate: Callable[..., None] | None = None,
    threads: int | None = ops.BLAS_THREADS,
    **model_kwargs: Any,
) -> MCMCResult:
    """Run ``kernel`` for ``num_warmup`` adaptation steps and ``num_samples`` kept steps, chain after chain.

    Args:
        kernel: a Pyro MCMC kernel built on a model (``pyro.infer.NUTS(model)``, ``AdaptiveSGHMC(model, ...)``).
        model_args, model_kwargs: the model's data; floating arrays become tensors of torch's default dtype.
        num_warmup: adaptation steps (not kept); num_samples: kept steps per chain.
        num_chains: C, run one after another.
        seed: the run's seed; chain c runs from ``chain_seeds(seed, C)[c]``.
        initial_params: unconstrained initial values, site -> [C, ...] (e.g. the twin of
            :func:`ppl_sparsegp.infer.mcmc.init_from_svi`'s output); None: the kernel's ``init_strategy``.
        checkpoint: the ``.npz`` to resume from and write after every chain (module docstring).
        fingerprint: the caller's settings that affect the result, recorded with a hash of the data, the seed, the
            kernel's class, the counts and a hash of ``initial_params``; a checkpoint that differs is refused.
        progress: Pyro's progress bar per chain (None: in a terminal or notebook).
        validate: called as ``validate(*model_args, **model_kwargs)`` before anything runs.
        threads: torch's intra-op threads while sampling (:func:`ppl_sparsegp.pyro.dtype.intra_op_threads`; None:
            torch's own); one by default.

    Raises:
        ValueError: a bad count, or ``initial_params`` without a leading axis of C, before anything runs.
        ppl_sparsegp.infer.checkpoint.CheckpointError: a damaged checkpoint, or another run's (every difference
            named).
    """
    num_warmup = check_count("num_warmup", num_warmup, minimum=0)
    num_samples = check_count("num_samples", num_samples, minimum=1)
    num_chains = check_count("num_chains", num_chains, minimum=1)
    threads = check_count("threads", threads, minimum=1, optional=True)
    starts = {k: torch.as_tensor(np.asarray(v)) for k, v in (initial_params or {}).items()}
    for site, value in starts.items():
        if value.ndim == 0 or value.shape[0] != num_chains:
            raise ValueError(
                f"initial_params[{site!r}]: expected a leading axis of num_chains = {num_chains}, got shape "
                f"{tuple(value.shape)}"
            )
    if validate is not None:
        validate(*model_args, **model_kwargs)
    model_args = tuple(as_data(a) for a in model_args)
    model_kwargs = {k: as_data(v) for k, v in model_kwargs.items()}

    expected, done, samples, diverging = None, 0, {}, []
    if checkpoint is not None:
        run = {
            "seed": seed,
            "kernel": type(kernel).__name__,
            "num_warmup": num_warmup,
            "num_samples": num_samples,
            "num_chains": num_chains,
            "initial_params_sha256": checkpoints.tree_sha256({k: v.numpy() for k, v in starts.items()}),
        }
        expected = checkpoints.make_fingerprint(fingerprint, to_host(model_args), to_host(model_kwargs), run)
        if Path(checkpoint).exists():
            saved = checkpoints.read(checkpoint, fingerprint=expected)
            done = saved.counters["chains_done"]
            samples = {site: list(value) for site, value in saved.groups["samples"].items()}
            diverging = list(saved.arrays.get("diverging", []))

    warmup_seconds = sample_seconds = 0.0
    interrupted = False
    seeds = chain_seeds(seed, num_chains)
    try:
        for c in range(done, num_chains):
            with intra_op_threads(threads):
                draws, flags, (warmup_time, sample_time) = _run_chain(
                    copy.deepcopy(kernel), seeds[c], {k: v[c] for k, v in starts.items()}, num_warmup, num_samples,
                    progress, model_args, model_kwargs,
                )  # fmt: skip
            warmup_seconds, sample_seconds = warmup_seconds + warmup_time, sample_seconds + sample_time
            for site, value in draws.items():
                samples.setdefault(site, []).append(value)
            if flags is not None:
                diverging.append(flags)
            done = c + 1
            if checkpoint is not None:
                arrays = {"diverging": np.stack(diverging)} if diverging else {}
                checkpoints.save(
                    checkpoint, {}, counters={"chains_done": done}, arrays=arrays,
                    groups={"samples": {site: np.stack(values) for site, values in samples.items()}},
                    fingerprint=expected,
                )  # fmt: skip
    except KeyboardInterrupt:
        if not samples:
            raise
        interrupted = True
    return MCMCResult(
        samples={site: np.stack(values) for site, values in samples.items()},
        extra_fields={"diverging": np.stack(diverging)} if diverging else {},
        last_state=None,
        kernel_name=type(kernel).__name__,
        num_warmup=num_warmup,
        thinning=1,
        warmup_seconds=warmup_seconds,
        sample_seconds=sample_seconds,
        interrupted=interrupted,
        warmup_done=num_warmup,
    )


def _run_chain(
    kernel: Any,
    seed: int,
    start: dict[str, Array],
    num_warmup: int,
    num_samples: int,
    progress: bool | None,
    model_args: tuple,
    model_kwargs: dict[str, Any],
) -> tuple[dict[str, np.ndarray], np.ndarray | None, tuple[float, float]]:
    """One chain: its draws site -> [S, ...], its ``diverging`` flags [S] (None when the kernel reports none), and
    the seconds of its warmup and of its sampling."""
    times: dict[str, float] = {}

    def clock(kernel: Any, params: Any, stage: str, i: int) -> None:
        times.setdefault(stage, time.perf_counter())

    pyro.set_rng_seed(seed)
    mcmc = pyro.infer.MCMC(
        kernel, num_samples=num_samples, warmup_steps=num_warmup, initial_params=start or None, hook_fn=clock,
        disable_progbar=not progress_bars.shown(progress),
    )  # fmt: skip
    t0 = time.perf_counter()
    mcmc.run(*model_args, **model_kwargs)
    end = time.perf_counter()
    first_sample = times.get("Sample", end)
    draws = {site: value.detach().cpu().numpy() for site, value in mcmc.get_samples().items()}
    divergences = mcmc.diagnostics().get("divergences")
    flags = None
    if divergences is not None:
        flags = np.zeros(num_samples, dtype=bool)
        flags[list(divergences.get("chain 0", []))] = True
    return draws, flags, (first_sample - t0, end - first_sample)


def kernel_from_name(engine: str, model: Callable, **options: Any) -> pyro.infer.mcmc.mcmc_kernel.MCMCKernel:
    """A Pyro MCMC kernel for ``model`` by name, with its options (the twin of
    :func:`ppl_sparsegp.infer.mcmc.kernel_from_name`): ``"nuts"`` / ``"hmc"`` Pyro's ``NUTS`` / ``HMC``;
    ``"sghmc"`` the scale-adapted SGHMC and ``"sgld"`` SGLD of :mod:`ppl_sparsegp.pyro.sgmcmc`.

    Raises:
        ValueError: an unknown engine, or options the kernel does not take.
    """
    from ppl_sparsegp.infer.mcmc import ENGINES
    from ppl_sparsegp.pyro.sgmcmc import SGLD, AdaptiveSGHMC

    factories = {"nuts": pyro.infer.NUTS, "hmc": pyro.infer.HMC, "sghmc": AdaptiveSGHMC, "sgld": SGLD}
    if engine not in factories:
        raise ValueError(f"engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    try:
        return factories[engine](model, **options)
    except TypeError as err:
        raise ValueError(f"engine options for {engine!r}: {err}") from None
