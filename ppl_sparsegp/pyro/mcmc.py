"""The Pyro twin of :func:`ppl_sparsegp.infer.mcmc.run_mcmc`: any Pyro MCMC kernel (``NUTS``, ``HMC``, the SG-MCMC
kernels of :mod:`ppl_sparsegp.pyro.sgmcmc`) driven step by step through its ``setup`` and ``sample`` (as
``pyro.infer.MCMC`` drives it, with Pyro's distribution validation off as there), one chain after another, returning
the NumPyro engine's :class:`~ppl_sparsegp.infer.mcmc.MCMCResult` (draws [C, S, ...]; per-draw ``diverging`` where
the kernel reports divergences and ``potential_energy`` where it exposes it), so that what reads a NumPyro run
(``posterior.predict``, ``posterior.diagnostics``, ArviZ) reads this one.

Each chain runs a fresh copy of the kernel (its own adaptation) from its own seed, drawn from ``seed`` by
``numpy.random.SeedSequence``, and its own ``initial_params`` row; every ``thinning``-th post-warmup step is kept.

Checkpoints are the ``.npz`` files of :mod:`ppl_sparsegp.infer.checkpoint` (no pickle, written atomically), written
after every ``warmup_chunk_size`` warmup steps, every ``chunk_size`` post-warmup steps and at the end of every chain:
the draws of the finished chains and of the running one, the running kernel's state as data
(:mod:`ppl_sparsegp.pyro.kernel_state`: step counters, cached position and gradient, step-size and mass-matrix
adaptation, momentum, point estimates and their optimiser), its position and torch's generator states
(:mod:`ppl_sparsegp.pyro.generators`). A killed run restarted with the same arguments resumes inside the chain and gives
the draws an uninterrupted run gives, as the NumPyro engine does. A Ctrl-C returns the finished chains
(``interrupted``), or re-raises when none has finished.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyro
import pyro.infer
import torch
from pyro import poutine
from torch.distributions import biject_to
from tqdm.auto import tqdm

from ppl_sparsegp.core import ops
from ppl_sparsegp.infer import checkpoint as checkpoints
from ppl_sparsegp.infer import progress as progress_bars
from ppl_sparsegp.infer.mcmc import MCMCResult
from ppl_sparsegp.pyro import kernel_state
from ppl_sparsegp.pyro.dtype import as_data, intra_op_threads, to_host
from ppl_sparsegp.pyro.generators import generator_state, set_generator_state
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
    with torch.no_grad(), pyro.validation_enabled(False):  # each program ignores the other's params, unwarned
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
    thinning: int = 1,
    chunk_size: int | None = None,
    warmup_chunk_size: int | None = None,
    initial_params: Mapping[str, Array] | None = None,
    checkpoint: str | os.PathLike | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    progress: bool | None = None,
    validate: Callable[..., None] | None = None,
    threads: int | None = ops.BLAS_THREADS,
    **model_kwargs: Any,
) -> MCMCResult:
    """Run ``kernel`` for ``num_warmup`` adaptation steps and ``num_samples`` post-warmup steps, chain after chain.

    Args:
        kernel: a Pyro MCMC kernel built on a model (``pyro.infer.NUTS(model)``, ``AdaptiveSGHMC(model, ...)``).
        model_args, model_kwargs: the model's data; floating arrays become tensors of torch's default dtype.
        num_warmup: adaptation steps (not kept).
        num_samples: post-warmup steps per chain; every ``thinning``-th is kept (S = num_samples // thinning).
        num_chains: C, run one after another.
        seed: the run's seed; chain c runs from ``chain_seeds(seed, C)[c]``.
        thinning: keep every ``thinning``-th post-warmup step; divides ``num_samples``.
        chunk_size: post-warmup steps between checkpoints, a multiple of ``thinning`` (default: the whole chain).
        warmup_chunk_size: warmup steps between checkpoints (default: the whole warmup).
        initial_params: unconstrained initial values, site -> [C, ...] (e.g. the twin of
            :func:`ppl_sparsegp.infer.mcmc.init_from_svi`'s output); None: the kernel's ``init_strategy``.
        checkpoint: the ``.npz`` to resume from and write (module docstring).
        fingerprint: the caller's settings that affect the result, recorded with a hash of the data, the seed, the
            kernel's class, the schedule (counts, thinning, chunk sizes) and a hash of ``initial_params``; a
            checkpoint that differs is refused.
        progress: a progress bar per chain (None: in a terminal or notebook).
        validate: called as ``validate(*model_args, **model_kwargs)`` before anything runs.
        threads: torch's intra-op threads while sampling (:func:`ppl_sparsegp.pyro.dtype.intra_op_threads`; None:
            torch's own); one by default.

    Raises:
        ValueError: a bad count, ``num_samples`` or ``chunk_size`` not a multiple of ``thinning``, or
            ``initial_params`` without a leading axis of C, before anything runs.
        ppl_sparsegp.infer.checkpoint.CheckpointError: a damaged checkpoint, or another run's (every difference
            named).
    """
    num_warmup = check_count("num_warmup", num_warmup, minimum=0)
    num_samples = check_count("num_samples", num_samples, minimum=1)
    num_chains = check_count("num_chains", num_chains, minimum=1)
    thinning = check_count("thinning", thinning, minimum=1)
    threads = check_count("threads", threads, minimum=1, optional=True)
    chunk = check_count("chunk_size", num_samples if chunk_size is None else chunk_size, minimum=1)
    warmup_chunk = check_count("warmup_chunk_size", warmup_chunk_size or max(num_warmup, 1), minimum=1)
    if num_samples % thinning:
        raise ValueError(f"num_samples: expected a multiple of thinning={thinning}, got {num_samples}")
    if chunk % thinning:
        raise ValueError(f"chunk_size: expected a multiple of thinning={thinning}, got {chunk}")
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

    run = _Run(num_warmup, num_samples, thinning, chunk, warmup_chunk)
    expected = None
    if checkpoint is not None:
        schedule = {
            "seed": seed,
            "kernel": type(kernel).__name__,
            "num_warmup": num_warmup,
            "num_samples": num_samples,
            "num_chains": num_chains,
            "thinning": thinning,
            "chunk_size": chunk,
            "warmup_chunk_size": warmup_chunk,
            "initial_params_sha256": checkpoints.tree_sha256({k: v.numpy() for k, v in starts.items()}),
        }
        expected = checkpoints.make_fingerprint(fingerprint, to_host(model_args), to_host(model_kwargs), schedule)
        if Path(checkpoint).exists():
            run.resume(checkpoints.read(checkpoint, fingerprint=expected))
    save = None if checkpoint is None else partial(run.save, checkpoint, expected)

    seeds = chain_seeds(seed, num_chains)
    interrupted = False
    try:
        with intra_op_threads(threads), pyro.validation_enabled(False):
            for c in range(run.chains_done, num_chains):
                chain = copy.deepcopy(kernel)
                pyro.set_rng_seed(seeds[c])
                if starts:
                    chain.initial_params = {k: v[c] for k, v in starts.items()}
                chain.setup(num_warmup, *model_args, **model_kwargs)
                run.run_chain(chain, c, progress, save)
                chain.cleanup()
    except KeyboardInterrupt:
        if not run.samples:
            raise
        interrupted = True
    return run.result(type(kernel).__name__, interrupted)


class _Run:
    """The draws and timings of a run so far, the running chain's included, and how they are checkpointed."""

    def __init__(self, num_warmup: int, num_samples: int, thinning: int, chunk: int, warmup_chunk: int) -> None:
        self.num_warmup, self.num_samples, self.thinning = num_warmup, num_samples, thinning
        self.chunk, self.warmup_chunk = chunk, warmup_chunk
        self.samples: dict[str, list[np.ndarray]] = {}  # finished chains: site -> [C_done] of [S, ...]
        self.extras: dict[str, list[np.ndarray]] = {}  # finished chains: field -> [C_done] of [S]
        self.chains_done = 0
        self.warmup_seconds = self.sample_seconds = 0.0
        self._resumed: checkpoints.Checkpoint | None = None

    # ---- the running chain -------------------------------------------------------------------------------------
    def run_chain(self, kernel: Any, c: int, progress: bool | None, save: Callable | None) -> None:
        """Chain ``c`` on ``kernel`` (set up) from its start or, if the checkpoint was taken inside it, from there."""
        total = self.num_warmup + self.num_samples
        params, step = kernel.initial_params, 0
        draws: dict[str, list[np.ndarray]] = {}
        extras: dict[str, list[np.ndarray]] = {}
        saved, self._resumed = self._resumed, None
        if saved is not None and saved.counters["steps_done"] > 0:
            step = saved.counters["steps_done"]
            kernel_state.restore(kernel, saved.metadata["kernel_state"], saved.groups["kernel"])
            params = {name: torch.as_tensor(np.array(value)) for name, value in saved.groups["params"].items()}
            set_generator_state(saved.groups["rng"])
            draws = {site: list(value) for site, value in saved.groups.get("chain_samples", {}).items()}
            extras = {name: list(value) for name, value in saved.groups.get("chain_extra_fields", {}).items()}
        bar = tqdm(total=total, initial=step, desc=f"chain {c}", disable=not progress_bars.shown(progress))
        try:
            while step < total:
                start = time.perf_counter()
                stop = self._next_stop(step)
                for i in range(step, stop):
                    params = kernel.sample(params)
                    if i >= self.num_warmup and (i - self.num_warmup + 1) % self.thinning == 0:
                        for site, value in _constrained(kernel, params).items():
                            draws.setdefault(site, []).append(value)
                        for name, value in _extra_fields(kernel, i - self.num_warmup).items():
                            extras.setdefault(name, []).append(value)
                    bar.update()
                step = stop
                seconds = time.perf_counter() - start
                if step <= self.num_warmup:
                    self.warmup_seconds += seconds
                else:
                    self.sample_seconds += seconds
                if step == total:
                    for site, values in draws.items():
                        self.samples.setdefault(site, []).append(np.stack(values))
                    for name, values in extras.items():
                        self.extras.setdefault(name, []).append(np.stack(values))
                    self.chains_done = c + 1
                if save is not None:
                    save(step % total, kernel, params, draws, extras)
        finally:
            bar.close()

    def _next_stop(self, step: int) -> int:
        """The step after which the next checkpoint falls: the end of the warmup piece or sampling chunk."""
        if step < self.num_warmup:
            return min(self.num_warmup, (step // self.warmup_chunk + 1) * self.warmup_chunk)
        done = step - self.num_warmup
        return self.num_warmup + min(self.num_samples, (done // self.chunk + 1) * self.chunk)

    # ---- checkpoints -------------------------------------------------------------------------------------------
    def save(
        self,
        path: str | os.PathLike,
        fingerprint: Mapping[str, Any],
        steps_done: int,
        kernel: Any,
        params: Mapping[str, torch.Tensor],
        draws: Mapping[str, list],
        extras: Mapping[str, list],
    ) -> None:
        """Write the finished chains and, when ``steps_done`` > 0, the running chain's draws, kernel state,
        position and torch's generator states."""
        groups = {
            "samples": {site: np.stack(values) for site, values in self.samples.items()},
            "extra_fields": {name: np.stack(values) for name, values in self.extras.items()},
        }
        arrays, metadata = {}, {"warmup_seconds": self.warmup_seconds, "sample_seconds": self.sample_seconds}
        if steps_done > 0:
            skeleton, groups["kernel"] = kernel_state.capture(kernel)
            groups["params"] = {name: value.detach().cpu().numpy() for name, value in params.items()}
            groups["chain_samples"] = {site: np.stack(values) for site, values in draws.items() if values}
            groups["chain_extra_fields"] = {name: np.stack(values) for name, values in extras.items() if values}
            groups["rng"] = generator_state()
            metadata["kernel_state"] = skeleton
        checkpoints.save(
            path, {}, counters={"chains_done": self.chains_done, "steps_done": steps_done}, arrays=arrays,
            groups=groups, metadata=metadata, fingerprint=fingerprint,
        )  # fmt: skip

    def resume(self, saved: checkpoints.Checkpoint) -> None:
        """Take the finished chains and timings from ``saved``; the running chain resumes in :meth:`run_chain`."""
        self.chains_done = saved.counters["chains_done"]
        self.samples = {site: list(value) for site, value in saved.groups.get("samples", {}).items()}
        self.extras = {name: list(value) for name, value in saved.groups.get("extra_fields", {}).items()}
        self.warmup_seconds = float(saved.metadata.get("warmup_seconds") or 0.0)
        self.sample_seconds = float(saved.metadata.get("sample_seconds") or 0.0)
        self._resumed = saved

    def result(self, kernel_name: str, interrupted: bool) -> MCMCResult:
        return MCMCResult(
            samples={site: np.stack(values) for site, values in self.samples.items()},
            extra_fields={name: np.stack(values) for name, values in self.extras.items()},
            last_state=None,
            kernel_name=kernel_name,
            num_warmup=self.num_warmup,
            thinning=self.thinning,
            warmup_seconds=self.warmup_seconds,
            sample_seconds=self.sample_seconds,
            interrupted=interrupted,
            warmup_done=self.num_warmup,
        )


def _constrained(kernel: Any, params: Mapping[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The kernel's unconstrained position as constrained values (its ``transforms`` inverted), numpy copies."""
    transforms = getattr(kernel, "transforms", None) or {}
    with torch.no_grad():
        return {
            name: (transforms[name].inv(value) if name in transforms else value).detach().cpu().numpy().copy()
            for name, value in params.items()
        }  # fmt: skip


def _extra_fields(kernel: Any, sample_step: int) -> dict[str, np.ndarray]:
    """Per kept draw: ``potential_energy`` (the SG-MCMC kernels' minibatch estimate, or HMC/NUTS's cached U) and,
    for a kernel that reports divergences, ``diverging`` (whether post-warmup step ``sample_step`` diverged)."""
    fields = {}
    energy = getattr(kernel, "potential_energy", None)
    if energy is None:
        energy = getattr(kernel, "_potential_energy_last", None)
    if energy is not None:
        fields["potential_energy"] = np.asarray(float(energy))
    divergences = kernel.diagnostics().get("divergences")
    if divergences is not None:
        fields["diverging"] = np.asarray(sample_step in divergences[-1:])
    return fields


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
