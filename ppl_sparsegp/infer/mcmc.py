"""The MCMC run loop: any NumPyro ``MCMCKernel`` (NUTS, HMC, the SG-MCMC kernels of :mod:`.sghmc`) on any model,
with several chains, thinning, initialisation from an SVI fit, chunked checkpoints and a divergence stop.

``run_mcmc`` drives a NumPyro kernel's ``init`` and ``sample``: the warmup runs in pieces of
``warmup_chunk_size`` steps (default: one piece), then the post-warmup draws run in chunks of ``chunk_size``
steps, each continuing from the last state. After every warmup piece and every chunk:

* with ``checkpoint=path`` the kernel state, every draw so far and the run's fingerprint are written atomically
  (:mod:`ppl_sparsegp.infer.checkpoint`; an ``.npz`` whatever the file's suffix, e.g. the CLI's ``mcmc.ckpt``), so
  a killed run restarted with the same arguments resumes after its last complete chunk (it loses at most one chunk)
  and, because the state carries the random keys, gives the same draws as an uninterrupted run. A checkpoint
  written by a run with other settings, data, key, initial values or schedule is refused before anything compiles;
* KeyboardInterrupt returns what was drawn so far (``MCMCResult.interrupted``);
* if a kernel reports a non-finite state (the ``nonfinite`` field of the SG-MCMC kernels), the piece is run again
  from its starting state with the Cholesky jitter escalated (:mod:`.hot_path`), and if that does not help the run
  stops with :class:`DivergingChainError`, which carries every draw made before the first non-finite one.

The pieces run on the hot path of :mod:`.hot_path`: static trip counts (a piece shorter than its program masks
the steps it does not take), the data passed to the program once placed on the device, a transfer guard around
each call, explicit float32 matmul precision. At most two programs are compiled (one for warmup pieces, one for
sampling chunks; one when their sizes agree and ``thinning`` is 1), whatever the number of chunks.

Draws are grouped by chain: ``samples[site]`` has shape [C, S, ...] for C chains and S kept draws.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial, wraps
from operator import attrgetter
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer import HMC, NUTS, Predictive
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import unconstrain_fn
from tqdm.auto import tqdm

from ppl_sparsegp.core import ops
from ppl_sparsegp.infer import checkpoint as checkpoints
from ppl_sparsegp.infer import compilation_cache, hot_path
from ppl_sparsegp.infer import progress as progress_bars
from ppl_sparsegp.infer.sharding import ChainParallel
from ppl_sparsegp.validation import as_arrays, check_count

Array = Any

HMC_FIELDS = ("diverging", "accept_prob", "adapt_state.step_size", "num_steps", "potential_energy")


class DivergingChainError(FloatingPointError):
    """A chain reached a non-finite state; ``result`` holds every draw made before it."""

    def __init__(self, message: str, result: MCMCResult):
        super().__init__(message)
        self.result = result


@dataclass
class MCMCResult:
    """What :func:`run_mcmc` returns.

    Attributes:
        samples: constrained draws, site name -> [C, S, ...] (C chains, S kept draws per chain).
        extra_fields: per-draw kernel statistics (e.g. ``"diverging"``, ``"accept_prob"``) -> [C, S].
        last_state: the kernel state after the last draw (pass to ``MCMC.post_warmup_state`` to go on).
        kernel_name: the kernel's class name (``"NUTS"``, ``"HMC"``, ``"SGHMC"``, ...).
        num_warmup, thinning: the run's settings.
        warmup_seconds, sample_seconds: wall-clock time of the warmup phase and of the sampling chunks run in
            this call (compilation included; a resumed run counts only what it ran).
        interrupted: the run was stopped by KeyboardInterrupt before drawing everything it was asked for.
        warmup_done: warmup steps taken so far (``num_warmup`` once sampling has begun).
    """

    samples: dict[str, np.ndarray]
    extra_fields: dict[str, np.ndarray]
    last_state: Any
    kernel_name: str
    num_warmup: int
    thinning: int
    warmup_seconds: float = 0.0
    sample_seconds: float = 0.0
    interrupted: bool = False
    warmup_done: int = 0

    @property
    def num_chains(self) -> int:
        return _leading_shape(self.samples)[0]

    @property
    def num_draws(self) -> int:
        """Kept draws per chain."""
        return _leading_shape(self.samples)[1]

    @property
    def divergences(self) -> int | None:
        """Divergent transitions among the kept draws, all chains; None for kernels that do not report them."""
        diverging = self.extra_fields.get("diverging")
        return None if diverging is None else int(np.sum(diverging))

    def flat_samples(self) -> dict[str, np.ndarray]:
        """Draws with the chains concatenated: site -> [C * S, ...]."""
        return {k: v.reshape((-1, *v.shape[2:])) for k, v in self.samples.items()}


def _leading_shape(arrays: Mapping[str, np.ndarray]) -> tuple[int, int]:
    for v in arrays.values():
        return v.shape[0], v.shape[1]
    return 0, 0


ENGINES = ("nuts", "hmc", "sghmc", "sgld")


def kernel_from_name(engine: str, model: Callable, **options: Any) -> MCMCKernel:
    """An MCMC kernel for ``model`` by name, with its options.

    ``"nuts"`` / ``"hmc"``: NumPyro's ``NUTS`` / ``HMC`` (e.g. ``target_accept_prob``, ``max_tree_depth``,
    ``num_steps``); ``"sghmc"``: the scale-adapted SGHMC of BSGP (:class:`.sghmc.AdaptiveSGHMC`: ``step_size``
    0.01, ``mdecay`` 0.05, ``num_data``); ``"sgld"``: :class:`.sghmc.SGLD` (``step_size`` required).
    The SG-MCMC kernels use minibatch gradients when the model subsamples its ``"data"`` plate.
    """
    from ppl_sparsegp.infer.sghmc import SGLD, AdaptiveSGHMC

    factories = {"nuts": NUTS, "hmc": HMC, "sghmc": AdaptiveSGHMC, "sgld": SGLD}
    if engine not in factories:
        raise ValueError(f"engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    try:
        return factories[engine](model, **options)
    except TypeError as err:
        raise ValueError(f"engine options for {engine!r}: {err}") from None


def default_extra_fields(kernel: MCMCKernel) -> tuple[str, ...]:
    """The per-draw statistics worth keeping for a kernel: HMC/NUTS acceptance, divergences and step size;
    for other kernels their ``default_fields`` beyond the draws, plus their ``diagnostic_fields`` if declared."""
    if isinstance(kernel, HMC):
        return HMC_FIELDS
    fields = [f for f in kernel.default_fields if f != kernel.sample_field]
    fields += [f for f in getattr(kernel, "diagnostic_fields", ()) if f not in fields]
    return tuple(fields)


def init_from_svi(
    model: Callable,
    guide: Callable,
    params: Mapping[str, Array],
    *model_args: Array,
    key: Array,
    num_chains: int = 1,
    **model_kwargs: Array,
) -> dict[str, Array]:
    """Unconstrained initial values for an MCMC run from a fitted guide: one draw of every guide site per chain.

    For the GP models this puts hyperparameters at their SVI point estimates (the guide's point masses) and
    u (or v) at a draw of q(u), the recipe of thesis §5.5 step 2. Pass the result as ``init_params`` to
    :func:`run_mcmc`.

    Args:
        model, guide: the NumPyro model and the guide that was fitted.
        params: the fitted guide parameters (``SVIResult.params``).
        key: JAX PRNG key for the draws of q.
        num_chains: C; with C > 1 every value gets a leading chain axis [C, ...] (one draw per chain).

    Returns:
        site name -> unconstrained value, for the model's latent sites the guide covers.
    """
    check_count("num_chains", num_chains, minimum=1)

    arrays, static = hot_path.split_static(model_args, model_kwargs)

    def draw_unconstrained(k: Array, fitted: dict, arrays: tuple[tuple, dict]) -> dict[str, Array]:
        args, kwargs = static.full(arrays)
        predictive = Predictive(guide, params=fitted, num_samples=num_chains)
        fixed_model = handlers.substitute(model, data=fitted)
        unconstrain = lambda values: unconstrain_fn(fixed_model, args, kwargs, values)  # noqa: E731
        return jax.vmap(unconstrain)(predictive(k, *args, **kwargs))

    # compiled (run eagerly, tracing the guide and model op by op costs a compilation per operation), with the
    # params and the data as arguments, not constants XLA would fold
    unconstrained = jax.jit(draw_unconstrained)(key, dict(params), arrays)
    if num_chains == 1:
        return {k: v[0] for k, v in unconstrained.items()}
    return unconstrained


def _config(
    kernel: MCMCKernel, num_warmup: int, num_samples: int, num_chains: int, thinning: int, chunk: int, warmup_chunk: int
):
    return {
        "warmup_chunk_size": warmup_chunk,
        "kernel": type(kernel).__name__,
        "num_warmup": num_warmup,
        "num_samples": num_samples,
        "num_chains": num_chains,
        "thinning": thinning,
        "chunk_size": chunk,
    }


def _save(
    path: Path,
    fingerprint: dict,
    state: Any,
    draws: dict,
    extras: dict,
    done: int,
    warmup_s: float,
    warmup_done: int,
) -> None:
    """Write the run so far: the kernel state's leaves, the counters ``warmup_done`` and ``draws_done``, the groups
    ``samples`` (site -> [C, S, ...]) and ``extra_fields`` (field -> [C, S]), and the warmup seconds."""
    checkpoints.save(
        path,
        state,
        counters={"warmup_done": warmup_done, "draws_done": done},
        groups={"samples": draws, "extra_fields": extras},
        metadata={"warmup_seconds": warmup_s},
        fingerprint=fingerprint,
    )


def _first_nonfinite(extras: Mapping[str, np.ndarray]) -> int | None:
    """Index (along draws) of the first draw any chain flagged as non-finite, or None."""
    flags = extras.get("nonfinite")
    if flags is None or not np.any(flags):
        return None
    return int(np.argmax(np.any(flags, axis=0)))


def _first_draws(collected: Any, *, kept: int, chains: bool) -> Any:
    """The first ``kept`` recorded draws of a chunk (a pytree): [C, length, ...] or [length, ...] -> [C, kept, ...]
    or [kept, ...]."""
    return jax.tree.map(lambda x: x[:, :kept] if chains else x[:kept], collected)


def _append(store: dict[str, list], new: Mapping[str, Array]) -> None:
    for k, v in new.items():
        store.setdefault(k, []).append(np.asarray(v))


def _concat(store: Mapping[str, list]) -> dict[str, np.ndarray]:
    return {k: np.concatenate(v, axis=1) for k, v in store.items()}


def _chain_map(fn: Callable, num_chains: int, chain_method: str, in_axes: tuple) -> Callable:
    """Apply a one-chain function to per-chain states stacked on a leading axis ("sequential", "parallel").

    With one chain, or "vectorized" chains (the kernel was initialised with a batch of keys and steps all
    chains at once, as NumPyro's kernels do), ``fn`` already takes the whole state. ``in_axes`` marks the
    arguments with a chain axis (0) and the shared ones (None).
    """
    if num_chains == 1 or chain_method == "vectorized":
        return fn
    if chain_method == "parallel":
        return jax.pmap(fn, in_axes=in_axes)
    return lambda state, *shared: jax.lax.map(lambda chain_state: fn(chain_state, *shared), state)


def _init_state(
    kernel: MCMCKernel,
    key: Array,
    num_warmup: int,
    init_params: Mapping[str, Array] | None,
    data: tuple[tuple, dict],
    static: hot_path.StaticValues,
    num_chains: int,
    chain_method: str,
) -> Any:
    """The kernel's initial state (compiled, as eager initialisation is several times slower): one call with a
    batch of keys for vectorized chains, else one per chain, stacked. ``data`` is the array part of
    ``(model_args, model_kwargs)``, ``static`` the rest (:func:`~ppl_sparsegp.infer.hot_path.split_static`)."""
    init = jax.jit(lambda k, p, data: kernel.init(k, num_warmup, p, *static.full(data)))
    if num_chains == 1:
        return init(key, init_params, data)
    keys = jax.random.split(key, num_chains)
    if chain_method == "vectorized":
        return init(keys, init_params, data)
    per_chain = [None if init_params is None else {k: v[c] for k, v in init_params.items()} for c in range(num_chains)]
    states = [init(keys[c], per_chain[c], data) for c in range(num_chains)]
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *states)


def _compiled_chunk(
    kernel: MCMCKernel,
    fields: Sequence[str],
    *,
    length: int,
    thinning: int,
    num_chains: int,
    chain_method: str,
    state: Any,
    data: tuple[tuple, dict],
    static: hot_path.StaticValues,
    precision: str,
    step: int,
    parallel: ChainParallel | None = None,
) -> Callable:
    """Compile ``chunk(state, data, active) -> (state, collected)`` for warmup pieces and sampling chunks.

    A scan of ``length`` iterations of ``thinning`` kernel steps each, both static; the steps are numbered from 0,
    and those numbered ``active`` or more are computed but discarded by a select (no branch, no loop whose trip
    count the program reads at run time), so one program serves every piece of up to ``length * thinning`` steps.
    After each iteration it records ``kernel.sample_field`` and ``fields``: [length, ...] per chain. ``data``, the
    array part of ``(model_args, model_kwargs)``, is an argument of the program (placed on the device once), not a
    constant in it; ``static`` holds the rest, which the program does hold as constants.
    Factorisations run at jitter escalation ``step`` and float32 products at ``precision`` (see :mod:`.hot_path`).
    """
    getters = {name: attrgetter(name) for name in (kernel.sample_field, *fields)}

    def one_chain(chain_state: Any, data: tuple[tuple, dict], active: Array) -> tuple[Any, dict]:
        model_args, model_kwargs = static.full(data)

        def kernel_step(number: Array, carry: Any) -> Any:
            moved = kernel.sample(carry, model_args, model_kwargs)
            return jax.tree.map(partial(jnp.where, number < active), moved, carry)

        def iteration(carry: Any, j: Array) -> tuple[Any, dict]:
            carry = jax.lax.fori_loop(0, thinning, lambda t, s: kernel_step(j * thinning + t, s), carry)
            return carry, {name: get(carry) for name, get in getters.items()}

        last, collected = jax.lax.scan(iteration, chain_state, jnp.arange(length))
        if num_chains > 1 and chain_method == "vectorized":  # the kernel steps all chains: [S, C] -> [C, S]
            collected = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), collected)
        return last, collected

    mapped = _chain_map(one_chain, num_chains, chain_method, in_axes=(0, None, None))
    mapped = mapped if parallel is None else parallel.step(mapped, 2)
    active = _count(0) if parallel is None else parallel.put(_count(0))
    with hot_path.precision_scope(precision, step):
        return jax.jit(mapped).lower(state, data, active).compile()


def _count(n: int) -> Array:
    """``n`` as an int32 scalar on the device (an explicit transfer, allowed under the hot path's guard)."""
    return jax.device_put(np.int32(n))


def _constrain(
    kernel: MCMCKernel, data: tuple[tuple, dict], static: hot_path.StaticValues, num_chains: int
) -> Callable:
    """[C, S] (or [S]) unconstrained draws -> constrained draws and deterministic sites, [C, S, ...]."""

    def postprocess(z: Any, data: tuple[tuple, dict]) -> dict[str, Array]:
        one = jax.vmap(kernel.postprocess_fn(*static.full(data)))
        return jax.vmap(one)(z) if num_chains > 1 else one(z)

    over_draws = jax.jit(postprocess)  # the data are arguments, not constants XLA would fold

    def constrain(z: Any) -> dict[str, np.ndarray]:
        out = jax.device_get(over_draws(z, data))
        return {k: v if num_chains > 1 else v[None] for k, v in out.items()}

    return constrain


def _with_blas_thread_limit(run: Callable) -> Callable:
    """Run with BLAS/LAPACK limited to ``ops.BLAS_THREADS`` threads, as the SVI fit loop does: jaxlib's CPU Cholesky
    and triangular solves go through OpenBLAS, whose spinning pool made BSGP's SGHMC updates ~35x slower on 2 cores
    (Snelson, M = 10: 35.2 s instead of 1.0 s of warmup)."""

    @wraps(run)
    def limited(*args: Any, **kwargs: Any) -> Any:
        with ops.blas_threads():
            return run(*args, **kwargs)

    return limited


@_with_blas_thread_limit
def run_mcmc(
    kernel: MCMCKernel,
    *model_args: Array,
    num_warmup: int,
    num_samples: int,
    key: Array,
    num_chains: int = 1,
    thinning: int = 1,
    chain_method: str = "vectorized",
    init_params: Mapping[str, Array] | None = None,
    extra_fields: Sequence[str] | None = None,
    chunk_size: int | None = None,
    warmup_chunk_size: int | None = None,
    checkpoint: str | Path | None = None,
    progress: bool | None = None,
    callback: Callable[[MCMCResult], None] | None = None,
    fingerprint: Mapping[str, Any] | None = None,
    validate: Callable[..., None] | None = None,
    matmul_precision: str = hot_path.MATMUL_PRECISION,
    devices: int | str | None = None,
    **model_kwargs: Array,
) -> MCMCResult:
    """Run ``kernel`` for ``num_warmup`` adaptation steps and ``num_samples`` post-warmup steps per chain.

    The kernel's own ``init`` and ``sample`` are driven directly (as ``numpyro.infer.MCMC`` does), in compiled
    ``lax.scan`` chunks whose programs are compiled once, so chunking for checkpoints costs no recompilation.

    Args:
        kernel: any NumPyro MCMC kernel built on a model (``NUTS(model)``, ``HMC(model)``, ``SGHMC(model)``...).
        model_args, model_kwargs: the model's data (pandas DataFrames and Series go in as their numpy arrays); arrays
            are arguments of the compiled programs, other values (a plate size ``n=10``, an option) their constants
            (:func:`ppl_sparsegp.infer.hot_path.split_static`).
        num_warmup: adaptation steps (not kept).
        num_samples: post-warmup steps per chain; every ``thinning``-th is kept (S = num_samples // thinning).
        key: JAX PRNG key.
        num_chains: C; ``chain_method`` as NumPyro's: "vectorized" (vmap on one device), "parallel" (pmap, one
            device per chain) or "sequential".
        init_params: unconstrained initial values (e.g. from :func:`init_from_svi`), with a leading chain axis
            when C > 1.
        extra_fields: per-draw state fields to keep (default: :func:`default_extra_fields`).
        chunk_size: post-warmup steps per chunk, a multiple of ``thinning`` (default: all in one chunk).
        warmup_chunk_size: warmup steps per piece (default: the whole warmup in one piece); long warmups are
            checkpointed and resumed piece by piece.
        checkpoint: path of the checkpoint file (written after every warmup piece and every chunk; an ``.npz``
            whatever its suffix, see :mod:`ppl_sparsegp.infer.checkpoint`).
        fingerprint: the caller's settings that affect the draws, name -> JSON-able value, recorded in the
            checkpoint with a hash of the model's data, the key, a hash of ``init_params`` and the schedule above
            (warmup, samples, chains, thinning, chunk sizes, chain method, extra fields); a checkpoint that differs
            in any of them is refused.
        progress: show progress bars, one over the warmup and then one over the post-warmup steps, each moving
            about :data:`ppl_sparsegp.infer.progress.UPDATES` times (the work is dispatched in that many pieces;
            the draws are the same); None: shown in a terminal or notebook (:func:`ppl_sparsegp.infer.progress.shown`).
        validate: called as ``validate(*model_args, **model_kwargs)`` before anything is compiled (e.g.
            ``gp.check_data`` of the ``ppl_sparsegp.models`` object whose ``model`` the kernel samples); None: no
            eager checks. The engine itself knows nothing of the model.
        callback: called with the result so far after every warmup piece and every chunk (``warmup_done`` says
            where the run is; ``last_state`` is the kernel state).
        matmul_precision: float32 matrix products on an accelerator (see :func:`ppl_sparsegp.infer.svi.fit_svi`).
        devices: a positive int or ``"all"`` (:mod:`ppl_sparsegp.infer.sharding`): NUTS and HMC split their
            vectorized chains over that many devices (``num_chains`` a multiple of it; each device steps its own
            chains under ``shard_map``); the SG-MCMC kernels split the minibatch of the model's subsampled
            ``"data"`` plate over them (the data and the state replicated), taking the same steps as on one device
            up to the order of floating-point sums. None: one device. With several processes
            (:func:`ppl_sparsegp.infer.sharding.initialize`) every process runs the same call and gets the whole
            result: all chains' draws (gathered from the processes that stepped them) and extra fields; only
            ``last_state`` stays a global array split over the processes when the chains are.

    Raises:
        DivergingChainError: a chain reached a non-finite state; the error carries the earlier draws.
        ValueError: bad arguments; or (:class:`ppl_sparsegp.infer.checkpoint.CheckpointError`) a checkpoint that is
            damaged, non-finite, not an ``.npz`` (a pickle is never loaded), or written by a run with another
            fingerprint (every difference named) or for another kernel; all found before anything is compiled,
            except the last.
    """
    compilation_cache.enable()
    model_args, model_kwargs = as_arrays(model_args, model_kwargs)
    num_warmup = check_count("num_warmup", num_warmup)
    num_samples = check_count("num_samples", num_samples, minimum=1)
    num_chains = check_count("num_chains", num_chains, minimum=1)
    thinning = check_count("thinning", thinning, minimum=1)
    if not isinstance(kernel, MCMCKernel):
        raise ValueError(f"kernel: expected a numpyro MCMCKernel (e.g. NUTS(model)), got {type(kernel).__name__}")
    if chain_method not in ("vectorized", "parallel", "sequential"):
        raise ValueError(f"chain_method: expected 'vectorized', 'parallel' or 'sequential', got {chain_method!r}")
    if chain_method == "parallel" and num_chains > jax.local_device_count():
        raise ValueError(
            f"chain_method: 'parallel' needs one device per chain, but num_chains={num_chains} > "
            f"{jax.local_device_count()} devices; use 'vectorized'"
        )
    if num_samples % thinning:
        raise ValueError(f"num_samples: expected a multiple of thinning={thinning}, got {num_samples}")
    chunk = num_samples if chunk_size is None else check_count("chunk_size", chunk_size, minimum=1)
    if chunk % thinning:
        raise ValueError(f"chunk_size: expected a multiple of thinning={thinning}, got {chunk}")
    warmup_chunk = max(num_warmup, 1) if warmup_chunk_size is None else warmup_chunk_size
    warmup_chunk = check_count("warmup_chunk_size", warmup_chunk, minimum=1)
    fields = tuple(default_extra_fields(kernel) if extra_fields is None else extra_fields)
    precision = hot_path.check_precision(matmul_precision)
    parallel = ChainParallel.create(
        devices, over_chains=isinstance(kernel, HMC), num_chains=num_chains, chain_method=chain_method
    )
    path = None if checkpoint is None else Path(checkpoint)
    if validate is not None:  # eager checks of the data, before anything compiles
        validate(*model_args, **model_kwargs)
    expected = saved = None
    if path is not None:  # read and compare an existing checkpoint before anything is compiled
        run = _config(kernel, num_warmup, num_samples, num_chains, thinning, chunk, warmup_chunk)
        run.update(chain_method=chain_method, extra_fields=list(fields), key=checkpoints.key_data(key))
        run["init_params_sha256"] = None if init_params is None else checkpoints.tree_sha256(dict(init_params))
        expected = checkpoints.make_fingerprint(fingerprint, model_args, model_kwargs, run)
        saved = checkpoints.read(path, fingerprint=expected) if path.exists() else None

    arrays, static = hot_path.split_static(model_args, model_kwargs)
    data = parallel.put(hot_path.on_device(arrays))
    name = type(kernel).__name__
    escalation = hot_path.Escalation()

    def initial(step: int) -> Any:
        with hot_path.precision_scope(precision, step), parallel.tracing():
            return parallel.put_state(
                _init_state(kernel, key, num_warmup, init_params, data, static, num_chains, chain_method)
            )

    init_state = escalation.run(initial, lambda state: not _any_nonfinite(state), f"{name} initialisation")[0]
    draws: dict[str, list] = {}
    extras: dict[str, list] = {}
    done, warmup_s, sample_s, warmup_done = 0, 0.0, 0.0, 0
    state = init_state
    if saved is not None:
        state = parallel.put_state(saved.restore(parallel.fetch(init_state)))  # a template on the host
        _append(draws, saved.groups["samples"])
        _append(extras, saved.groups["extra_fields"])
        done, warmup_done = saved.counters["draws_done"], saved.counters["warmup_done"]
        warmup_s = float(saved.metadata.get("warmup_seconds") or 0.0)
    progress = progress_bars.shown(progress)
    warmup_tick = progress_bars.piece_size(num_warmup) if progress else warmup_chunk
    sample_tick = min(chunk, progress_bars.piece_size(num_samples, thinning)) if progress else chunk
    programs: dict[tuple[int, int, int], Callable] = {}

    def steps(state: Any, size: int, thin: int, active: int, where: str) -> tuple[Any, dict]:
        """``active`` kernel steps from ``state`` by the program for pieces of ``size`` steps recorded every
        ``thin``; a piece whose chain went non-finite is run again with the jitter escalated (see :mod:`.hot_path`)."""

        def attempt(step: int) -> tuple[Any, dict]:
            if (size, thin, step) not in programs:
                with parallel.tracing():
                    programs[size, thin, step] = _compiled_chunk(
                        kernel,
                        fields,
                        length=size // thin,
                        thinning=thin,
                        num_chains=num_chains,
                        chain_method=chain_method,
                        state=state,
                        data=data,
                        static=static,
                        precision=precision,
                        step=step,
                        parallel=parallel,
                    )
            return hot_path.call_guarded(programs[size, thin, step], state, data, parallel.put(_count(active)))

        return escalation.run(attempt, lambda piece: not _any_nonfinite(piece[0]), where)[0]

    def result(interrupted: bool, last_state: Any) -> MCMCResult:
        return MCMCResult(
            samples=_concat(draws),
            extra_fields=_concat(extras),
            last_state=last_state,
            kernel_name=name,
            num_warmup=num_warmup,
            thinning=thinning,
            warmup_seconds=warmup_s,
            sample_seconds=sample_s,
            interrupted=interrupted,
            warmup_done=warmup_done,
        )

    constrain = _constrain(kernel, arrays, static, num_chains)
    shown = {"mininterval": 0, "disable": not progress}  # moved about UPDATES times: show every move
    warmup_bar = tqdm(total=num_warmup, initial=warmup_done, desc=f"{name} warmup", **shown)
    bar = None
    try:
        first_piece = saved is None  # a fresh run saves its (possibly empty) warmup even when num_warmup = 0
        while first_piece or warmup_done < num_warmup:
            first_piece = False
            start = time.perf_counter()
            n = min(warmup_chunk, num_warmup - warmup_done)
            for m in progress_bars.pieces(n, warmup_tick):
                state, _ = steps(state, warmup_tick, 1, m, f"{name} warmup steps {warmup_done}-{warmup_done + n - 1}")
                jax.block_until_ready(state)
                warmup_bar.update(m)
            warmup_s += time.perf_counter() - start
            warmup_done += n
            _check_warmup_state(state, result)
            if path is not None:
                _save(path, expected, parallel.fetch(state), {}, {}, 0, warmup_s, warmup_done)
            if callback is not None:
                callback(result(False, state))
        warmup_bar.close()
        bar = tqdm(total=num_samples, initial=done, desc=name, **shown)
        while done < num_samples:
            n = min(chunk, num_samples - done)
            start = time.perf_counter()
            parts = []
            for m in progress_bars.pieces(n, sample_tick):
                state, collected = steps(state, sample_tick, thinning, m, f"{name} steps {done}-{done + n - 1}")
                parts.append(parallel.fetch(_first_draws(collected, kept=m // thinning, chains=num_chains > 1)))
                bar.update(m)
            collected = jax.tree.map(lambda *xs: np.concatenate(xs, axis=int(num_chains > 1)), *parts)
            new_draws = constrain(collected.pop(kernel.sample_field))
            new_extras = {k: np.asarray(v) if num_chains > 1 else np.asarray(v)[None] for k, v in collected.items()}
            sample_s += time.perf_counter() - start
            bad = _first_nonfinite(new_extras)
            if bad is not None:
                _append(draws, {k: v[:, :bad] for k, v in new_draws.items()})
                _append(extras, {k: v[:, :bad] for k, v in new_extras.items()})
                drawn = done // thinning + bad
                raise DivergingChainError(
                    f"a chain reached a non-finite state after {drawn} kept draws (post-warmup step "
                    f"{done + bad * thinning}); the error's `result` holds the {drawn} draws made before it. "
                    "Lower the step size or check the model for values where its density is not finite.",
                    result(False, state),
                )
            _append(draws, new_draws)
            _append(extras, new_extras)
            done += n
            if path is not None:
                _save(
                    path, expected, parallel.fetch(state), _concat(draws), _concat(extras), done, warmup_s, warmup_done
                )
            if callback is not None:
                callback(result(False, state))
    except KeyboardInterrupt:
        return result(True, state)
    finally:
        warmup_bar.close()
        if bar is not None:
            bar.close()
    return result(False, state)


def _any_nonfinite(state: Any) -> bool:
    """Whether a kernel state reports a non-finite chain (the SG-MCMC kernels' ``nonfinite``; False for kernels
    without the field, such as HMC and NUTS, which reject non-finite proposals themselves)."""
    flags = getattr(state, "nonfinite", None)
    return flags is not None and bool(np.any(jax.device_get(flags)))


def _check_warmup_state(state: Any, result: Callable[[bool, Any], MCMCResult]) -> None:
    if _any_nonfinite(state):
        raise DivergingChainError(
            "a chain reached a non-finite state during warmup, before any draw was kept; lower the step size "
            "or check the model for values where its density is not finite",
            result(False, state),
        )
