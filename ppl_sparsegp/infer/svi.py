"""The SVI fit loop: NumPyro's ``SVI`` with compiled multi-step dispatch, progress, early stopping, checkpoints.

The engine knows nothing about GPs: it takes any NumPyro model and guide. Steps run in chunks of
``steps_per_dispatch`` inside one compiled ``lax.scan`` (one host round trip per chunk), compiled ahead of time
so that compilation and run time are reported separately. The compiled chunk is the hot path of
:mod:`ppl_sparsegp.infer.hot_path`: the data goes to the device once, the call runs under a transfer guard, float32
products run at an explicit precision, and the trip count and jitter are static. After every chunk the losses are
checked: a chunk whose loss went non-finite is run again with the Cholesky jitter escalated (a failed factorisation
inside a compiled step shows up here; see :mod:`ppl_sparsegp.core.ops`), and one that stays non-finite raises
:class:`NonFiniteLossError` carrying the last finite parameters.

Checkpoints: with ``checkpoint=path`` the full SVI state (parameters, optimiser state, random key), the step
count and the loss trace are written atomically every ``checkpoint_every`` steps and on KeyboardInterrupt
(:mod:`ppl_sparsegp.infer.checkpoint`: an ``.npz`` with the state's leaves, counter ``step``, array ``losses`` and a
fingerprint); a run started with an existing checkpoint resumes from it, so a killed run loses at most
``checkpoint_every`` steps and a resumed run reproduces an uninterrupted one exactly. The fingerprint holds the
caller's ``fingerprint`` settings, a hash of the model's arguments, the key and a hash of ``init_params``: a
checkpoint written by a run that differs in any of them is refused before anything is compiled.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.infer import SVI, TraceMeanField_ELBO
from numpyro.infer.elbo import ELBO
from numpyro.infer.svi import SVIState
from numpyro.optim import _NumPyroOptim, optax_to_numpyro
from tqdm.auto import tqdm

from ppl_sparsegp.core import ops
from ppl_sparsegp.infer import checkpoint as checkpoints
from ppl_sparsegp.infer import compilation_cache, hot_path
from ppl_sparsegp.infer import progress as progress_bars
from ppl_sparsegp.infer.natural_gradients import NaturalGradient
from ppl_sparsegp.infer.optimisers import LBFGS, check_freeze, frozen_for, masked_gradient
from ppl_sparsegp.infer.positive_transform import SoftplusPositive
from ppl_sparsegp.infer.sharding import DataParallel
from ppl_sparsegp.validation import POSITIVE_TRANSFORMS, as_arrays, check_choice, check_count

Array = Any


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN or inf; ``params`` holds the last parameters whose loss was finite."""

    def __init__(self, message: str, step: int, params: dict[str, Array]):
        super().__init__(message)
        self.step, self.params = step, params


@dataclass
class EarlyStopping:
    """Stop when the mean loss over a chunk has not improved by ``min_delta`` (relative) for ``patience`` steps."""

    patience: int = 1000
    min_delta: float = 1e-4

    def __post_init__(self) -> None:
        check_count("patience", self.patience, minimum=1)
        if not (self.min_delta >= 0):
            raise ValueError(f"min_delta: expected a non-negative number, got {self.min_delta!r}")


@dataclass
class SVIResult:
    """What :func:`fit_svi` returns.

    Attributes:
        params: fitted parameters in constrained space, site name -> array.
        losses: loss (negative ELBO) at every step run, [num_steps_run].
        state: the final ``SVIState`` (pass it back as ``init_state`` to continue).
        stopped_early: whether early stopping or the callback ended the run.
        compile_seconds: time spent compiling the step chunk(s).
        run_seconds: time spent running steps in this call (compilation excluded).
        steps_run: steps run in this call (fewer than ``len(losses)`` after resuming from a checkpoint).
        resumed_from: the step of the checkpoint this call resumed from (0: a fresh run); the progress bar says
            ``<label> (resumed from step N)``.
    """

    params: dict[str, Array]
    losses: np.ndarray
    state: SVIState
    stopped_early: bool
    compile_seconds: float
    run_seconds: float
    steps_run: int
    resumed_from: int = 0

    @property
    def steps_per_second(self) -> float:
        return self.steps_run / self.run_seconds if self.run_seconds > 0 else math.nan


def with_positive_transform(fn: Callable, transform: str) -> Callable:
    """``fn`` with its positive params through ``transform``: ``"exp"`` (``fn`` itself) or ``"softplus"``
    (:class:`ppl_sparsegp.infer.positive_transform.SoftplusPositive`); another name raises a ValueError."""
    if check_choice("positive_transform", transform, POSITIVE_TRANSFORMS) == "exp":
        return fn
    return SoftplusPositive(fn)


def _as_numpyro_optim(optimizer: Any) -> _NumPyroOptim:
    if isinstance(optimizer, _NumPyroOptim):
        return optimizer
    if hasattr(optimizer, "init") and hasattr(optimizer, "update"):
        return optax_to_numpyro(optimizer)
    raise ValueError(
        f"optimizer: expected an optax GradientTransformation or a numpyro.optim optimiser, got {optimizer!r}"
    )


def _as_key(key: int | Array) -> Array:
    return jax.random.PRNGKey(key) if isinstance(key, int | np.integer) else key


def fit_svi(
    model: Callable,
    guide: Callable,
    *args: Any,
    optimizer: Any,
    num_steps: int,
    key: int | Array = 0,
    loss: ELBO | None = None,
    steps_per_dispatch: int = 100,
    progress: bool | None = None,
    label: str = "SVI",
    callback: Callable[[int, np.ndarray, dict[str, Array]], bool | None] | None = None,
    early_stopping: EarlyStopping | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 1000,
    init_params: dict[str, Array] | None = None,
    init_state: SVIState | None = None,
    validate: Callable[..., None] | None = None,
    blas_threads: int | None = ops.BLAS_THREADS,
    fingerprint: Mapping[str, Any] | None = None,
    natural_gradient: NaturalGradient | None = None,
    freeze: Mapping[str, int] | None = None,
    matmul_precision: str = hot_path.MATMUL_PRECISION,
    devices: int | str | None = None,
    positive_transform: str = "exp",
    **kwargs: Any,
) -> SVIResult:
    """Fit ``guide`` to ``model`` by stochastic variational inference.

    Args:
        model, guide: NumPyro programs called as ``model(*args, **kwargs)``.
        *args, **kwargs: data passed to both (e.g. ``X [N, D]``, ``y [N]``); arrays are jit arguments (pandas
            DataFrames and Series go in as their numpy arrays), other values (a plate size ``n=10``, an option) are
            constants of the compiled programs (:func:`ppl_sparsegp.infer.hot_path.split_static`).
        optimizer: an optax ``GradientTransformation`` (e.g. ``optax.adam(0.01)``), a ``numpyro.optim``, or
            :class:`~ppl_sparsegp.infer.optimisers.LBFGS` for a deterministic (full-batch) loss, refused otherwise
            before the run.
        num_steps: number of SVI steps (or the total, counting steps already in a resumed checkpoint).
        key: integer seed or JAX PRNG key.
        loss: the ELBO (default ``TraceMeanField_ELBO()``, which uses closed-form KLs where registered).
        steps_per_dispatch: steps per compiled ``lax.scan`` chunk.
        progress: show a progress bar with the loss of the latest step (the last entry of ``losses`` at the end);
            None: shown in a terminal or notebook (:func:`ppl_sparsegp.infer.progress.shown`).
        label: the progress bar's label (e.g. the phase of a recipe); ``"<label> (resumed from step N)"`` when the
            run resumes from a checkpoint.
        callback: ``callback(step, chunk_losses, params)`` after every chunk, before that chunk's checkpoint is
            written; returning True stops the run (and writes the checkpoint).
        early_stopping: stop on a loss plateau (see :class:`EarlyStopping`).
        checkpoint: path of an ``.npz`` checkpoint to resume from and write to (see the module docstring).
        checkpoint_every: steps between checkpoint writes (rounded up to whole chunks).
        fingerprint: the caller's settings that affect the result, name -> JSON-able value (e.g. the learning rate
            and the model's options), recorded in the checkpoint with a hash of ``*args, **kwargs``, ``key`` and a
            hash of ``init_params``; a checkpoint that differs in any of them is refused. ``num_steps`` is not part
            of it: a longer run resumes a shorter one.
        natural_gradient: a :class:`~ppl_sparsegp.infer.natural_gradients.NaturalGradient`: each step first moves
            the guide's Gaussian (its ``loc`` and ``scale`` params) by a natural-gradient step on the step's
            minibatch, then ``optimizer`` (an optax transformation) moves every other param.
        freeze: param name -> the number of first steps it stays at its initial value (the thesis' hyperparameter
            freeze, e.g. ``{"kernel.lengthscale": 1000, "kernel.variance": 1000}``); an optax or L-BFGS optimizer.
        init_params: initial constrained values for some parameters (passed to ``SVI.init``).
        init_state: continue from this ``SVIState`` (e.g. ``previous_result.state``).
        validate: called as ``validate(*args, init_params=init_params, **kwargs)`` before anything is compiled,
            so that bad input fails first with a clear message (e.g. ``gp.check_data`` of a
            ``ppl_sparsegp.models`` class); None: no eager checks. The engine itself knows nothing of the model.
        blas_threads: BLAS/LAPACK threads while fitting (see :func:`ppl_sparsegp.core.ops.blas_threads`; None: no
            limit).
        matmul_precision: float32 matrix products on an accelerator, one of
            :data:`~ppl_sparsegp.infer.hot_path.MATMUL_PRECISIONS` (default ``"highest"``, full float32; CPUs always
            compute them in full).
        devices: data parallelism (:mod:`ppl_sparsegp.infer.sharding`): a positive int or ``"all"``; the model's
            subsampled ``"data"`` plate is split over that many devices (each evaluates B/devices rows, the gradients
            are summed by XLA), the data and parameters replicated. The same steps as on one device, up to the order
            of floating-point sums. None: one device. A count above the devices available, or a minibatch that is
            not a multiple of it, raises a ValueError before anything compiles.
        positive_transform: how the params declared ``constraints.positive`` (kernel and likelihood
            hyperparameters, a diagonal q(u)'s scales) live on the real line while Adam moves them: ``"exp"``
            (NumPyro's) or ``"softplus"`` (GPflow's, GPyTorch's; :mod:`ppl_sparsegp.infer.positive_transform`).
            Softplus keeps a direction the objective barely sees from drifting geometrically: a long float32 fit of a
            robust-max classifier needs it (its kernel variance overflowed after 20,000 steps on MNIST through exp).
            Part of the checkpoint's fingerprint.

    Returns:
        An :class:`SVIResult`.

    Raises:
        ppl_sparsegp.infer.checkpoint.CheckpointError: (a ``ValueError``) the checkpoint is damaged or non-finite, was
            written with another fingerprint (every difference named) or for another model, guide or optimiser, or
            holds more than ``num_steps`` steps; all but the last two are found before anything is compiled.
    """
    compilation_cache.enable()
    args, kwargs = as_arrays(args, kwargs)
    parallel = DataParallel.create(devices)
    num_steps = check_count("num_steps", num_steps, minimum=1)
    steps_per_dispatch = check_count("steps_per_dispatch", steps_per_dispatch, minimum=1)
    checkpoint_every = check_count("checkpoint_every", checkpoint_every, minimum=1)
    precision = hot_path.check_precision(matmul_precision)
    if early_stopping is not None and not isinstance(early_stopping, EarlyStopping):
        raise ValueError(f"early_stopping: expected an EarlyStopping, got {early_stopping!r}")
    freeze = {} if freeze is None else check_freeze(freeze)
    lbfgs = optimizer.transformation() if isinstance(optimizer, LBFGS) else None
    if natural_gradient is not None:
        if not isinstance(natural_gradient, NaturalGradient):
            raise ValueError(f"natural_gradient: expected a NaturalGradient, got {natural_gradient!r}")
        if lbfgs is not None:
            raise ValueError("natural_gradient: give it with an optax optimizer such as optax.adam, not LBFGS")
        optimizer = natural_gradient.others_only(optimizer)
    if freeze and lbfgs is None:
        if not isinstance(optimizer, optax.GradientTransformation):
            raise ValueError(f"freeze: needs an optax optimizer or LBFGS, got {optimizer!r}")
        optimizer = frozen_for(optimizer, freeze)
    data, static = hot_path.split_static(args, kwargs)
    # they take the arrays and hold the Python values (with_positive_transform checks the name)
    model, guide = (with_positive_transform(static.bind(fn), positive_transform) for fn in (model, guide))
    svi = SVI(
        parallel.wrap(model), parallel.wrap(guide), _as_numpyro_optim(lbfgs or optimizer), loss or TraceMeanField_ELBO()
    )

    if validate is not None:  # eager checks of the data and initial values, before anything compiles
        validate(*args, init_params=init_params, **kwargs)
    # As jax arrays: NumPyro's inverse of a lower-Cholesky constraint indexes the value with traced indices, which a
    # numpy array (e.g. one read from an .npz file) cannot take.
    expected = saved = None
    if checkpoint is not None:  # read and compare an existing checkpoint before anything is compiled
        natural = None if natural_gradient is None else dataclasses.asdict(natural_gradient)
        run = {
            "key": checkpoints.key_data(key),
            "init_params_sha256": _init_hash(init_params),
            "natural_gradient": natural,
            "freeze": freeze,
            "lbfgs": None if lbfgs is None else dataclasses.asdict(optimizer),
            "positive_transform": positive_transform,
        }
        expected = checkpoints.make_fingerprint(fingerprint, args, kwargs, run)
        saved = checkpoints.read(checkpoint, fingerprint=expected) if Path(checkpoint).exists() else None
        if saved is not None and saved.counters.get("step", 0) > num_steps:
            raise checkpoints.CheckpointError(
                checkpoint, f"holds {saved.counters['step']} steps, more than the {num_steps} asked for"
            )
    init_params = None if init_params is None else {k: jnp.asarray(v) for k, v in init_params.items()}
    args, kwargs = hot_path.on_device(data)
    # Compiled: run op by op, initialisation dispatches (and compiles) hundreds of tiny programs.
    args, kwargs = parallel.put((args, kwargs))
    with hot_path.precision_scope(precision):

        def init(k: Array, start: dict | None, args: tuple, kwargs: dict) -> SVIState:
            # the initial values are arguments too: closed over, they would be constants XLA folds
            return svi.init(k, *args, init_params=start, **kwargs)

        state = jax.jit(init)(_as_key(key), init_params, args, kwargs)
    if init_state is not None:
        state = init_state
    state = parallel.put(state)
    unknown = sorted(set(freeze) - set(svi.optim.get_params(state.optim_state)))  # the names, nothing constrained
    if unknown:
        raise ValueError(f"freeze: no params {unknown}; the params are {sorted(svi.get_params(state))}")
    if lbfgs is not None:
        _check_deterministic(svi, state, args, kwargs)
    done, losses = 0, np.zeros(0)
    if saved is not None:
        state, done, losses = parallel.put(saved.restore(state)), saved.counters["step"], saved.arrays["losses"]
    first_step = done

    def save(state: SVIState, done: int) -> None:
        checkpoints.save(
            checkpoint, state, counters={"step": done}, arrays={"losses": np.concatenate(history)}, fingerprint=expected
        )

    def chunk(state: SVIState, args: tuple, kwargs: dict, length: int, step: int):
        def body(s, _):
            if lbfgs is not None:
                return _lbfgs_step(svi, lbfgs, freeze, s, args, kwargs)
            if natural_gradient is not None:
                s = _natural_step(svi, natural_gradient, s, args, kwargs)
            return svi.update(s, *args, **kwargs)

        with hot_path.precision_scope(precision, step):
            scanned = jax.lax.scan(lambda s, x: parallel.constrain(body(s, x)), state, None, length=length)
        return parallel.constrain(scanned)

    def attempt(length: int, step: int) -> tuple[SVIState, np.ndarray]:
        nonlocal compile_seconds, run_seconds
        if (length, step) not in compiled:
            t0 = time.perf_counter()
            lowered = jax.jit(chunk, static_argnums=(3, 4)).lower(state, args, kwargs, length, step)
            compiled[length, step] = lowered.compile()
            compile_seconds += time.perf_counter() - t0
        t0 = time.perf_counter()
        new_state, chunk_losses = hot_path.call_guarded(compiled[length, step], state, args, kwargs)
        chunk_losses = jax.device_get(chunk_losses)
        run_seconds += time.perf_counter() - t0
        return new_state, chunk_losses

    compiled: dict[tuple[int, int], Callable] = {}
    escalation = hot_path.Escalation()
    compile_seconds = run_seconds = 0.0
    history = [losses]
    best, since_best, stopped = math.inf, 0, False
    since_checkpoint = 0
    desc = f"{label} (resumed from step {done})" if done else label
    bar = tqdm(total=num_steps, initial=done, disable=not progress_bars.shown(progress), desc=desc, leave=False)
    limits = ops.blas_threads(blas_threads)
    try:
        while done < num_steps:
            length = min(steps_per_dispatch, num_steps - done)
            (new_state, chunk_losses), finite = escalation.run(
                partial(attempt, length), _all_finite, f"SVI steps {done}-{done + length - 1}"
            )
            if not finite:
                bad = done + int(np.argmin(np.isfinite(chunk_losses)))
                raise NonFiniteLossError(
                    f"the loss became non-finite at step {bad}{hot_path.NOT_THE_JITTER}; the returned error carries "
                    "the parameters of the last finite chunk (lower the learning rate or check the data)",
                    step=bad,
                    params=svi.get_params(state),
                )
            state, done = new_state, done + length
            history.append(chunk_losses)
            since_checkpoint += length
            mean_loss = float(np.mean(chunk_losses))
            bar.update(length)
            bar.set_postfix(loss=f"{chunk_losses[-1]:.4g}")  # the latest step's, as the caller's losses[-1]
            # The callback runs before this step's checkpoint is written, so what it stores (e.g. a trace beside the
            # checkpoint) is never behind the checkpoint that a killed run resumes from.
            stop = callback is not None and bool(callback(done, chunk_losses, svi.get_params(state)))
            if checkpoint is not None and (since_checkpoint >= checkpoint_every or done >= num_steps or stop):
                save(state, done)
                since_checkpoint = 0
            if stop:
                stopped = True
                break
            if early_stopping is not None:
                if mean_loss < best - early_stopping.min_delta * max(abs(best), 1.0):
                    best, since_best = mean_loss, 0
                else:
                    since_best += length
                    if since_best >= early_stopping.patience:
                        stopped = True
                        break
    except KeyboardInterrupt:
        if checkpoint is not None:
            save(state, done)
        raise
    finally:
        limits.restore_original_limits()
        bar.close()
    return SVIResult(
        params=jax.jit(svi.get_params)(state),  # one program, not dozens of small ones op by op
        losses=np.concatenate(history),
        state=state,
        stopped_early=stopped,
        compile_seconds=compile_seconds,
        run_seconds=run_seconds,
        steps_run=done - first_step,
        resumed_from=first_step,
    )


def _all_finite(chunk: tuple[SVIState, np.ndarray]) -> bool:
    return bool(np.all(np.isfinite(chunk[1])))


def _loss_of_raw(svi: SVI, key: Array, args: tuple, kwargs: dict) -> Callable[[dict[str, Array]], Array]:
    """The SVI loss as a function of the unconstrained params (what L-BFGS and its line search evaluate)."""

    def value(raw: dict[str, Array]) -> Array:
        return svi.loss.loss(key, svi.constrain_fn(raw), svi.model, svi.guide, *args, **kwargs)

    return value


def _check_deterministic(svi: SVI, state: SVIState, args: tuple, kwargs: dict) -> None:
    """L-BFGS's line search needs one loss: refuse one that changes with the random key (a minibatch, a sampled data
    term), evaluated at the initial params under two keys."""
    raw = svi.optim.get_params(state.optim_state)
    loss = jax.jit(lambda raw, key, args, kwargs: _loss_of_raw(svi, key, args, kwargs)(raw))  # data as arguments
    first, second = (loss(raw, jax.random.PRNGKey(k), args, kwargs) for k in (0, 1))
    if not np.isclose(float(first), float(second), rtol=1e-10, atol=0.0):
        raise ValueError(
            "optimizer: LBFGS needs a deterministic loss, and this one changes with the random key (a minibatch or "
            f"a sampled data term: {float(first):.6g} vs {float(second):.6g}); use the full batch and an analytic data "
            "term, or an optax optimizer"
        )


def _lbfgs_step(svi: SVI, lbfgs: Any, freeze: Mapping[str, int], state: SVIState, args: tuple, kwargs: dict):
    """One L-BFGS step (with its line search) on the unconstrained params inside NumPyro's optax state, the frozen
    params' gradients zeroed while their steps last; returns the new state and the loss before the step.

    When a frozen param thaws, L-BFGS starts afresh: its remembered curvature pairs saw no change in the frozen
    directions, so its first step there would be scaled by the curvature of the others (a thesis-style freeze of the
    kernel then sent the loss of a Banana fit from 192 to 3e7 at the thaw)."""
    step, (raw, optax_state) = state.optim_state
    if freeze:
        thaw = jnp.any(jnp.asarray(sorted(set(freeze.values()))) == step)
        optax_state = jax.tree_util.tree_map(lambda new, old: jnp.where(thaw, new, old), lbfgs.init(raw), optax_state)
    value_fn = _loss_of_raw(svi, state.rng_key, args, kwargs)
    value, grad = optax.value_and_grad_from_state(value_fn)(raw, state=optax_state)
    grad = masked_gradient(grad, freeze, step)
    updates, optax_state = lbfgs.update(grad, optax_state, raw, value=value, grad=grad, value_fn=value_fn)
    raw = optax.apply_updates(raw, updates)
    return state._replace(optim_state=(step + 1, (raw, optax_state))), value


def _natural_step(svi: SVI, natural: NaturalGradient, state: SVIState, args: tuple, kwargs: dict) -> SVIState:
    """``state`` with the Gaussian's two params moved by one natural-gradient step of the loss on the minibatch of
    the SVI step that follows (the same key split). The params live unconstrained inside NumPyro's optax state,
    ``(step, (params, optax_state))``, mapped by the SVI's constraining transforms."""
    params = svi.get_params(state)
    _, key = jax.random.split(state.rng_key)
    loc, scale = natural.sites

    def loss(m: Array, L: Array) -> Array:
        return svi.loss.loss(key, {**params, loc: m, scale: L}, svi.model, svi.guide, *args, **kwargs)

    moved = dict(zip(natural.sites, natural.step(loss, params[loc], params[scale]), strict=True))
    transforms = svi.constrain_fn.args[0]
    step, (raw, optax_state) = state.optim_state
    raw = {**raw, **{name: transforms[name].inv(value) for name, value in moved.items()}}
    return state._replace(optim_state=(step, (raw, optax_state)))


def _init_hash(init_params: Mapping[str, Array] | None) -> str | None:
    """sha256 of the initial values (None when there are none), for the checkpoint's fingerprint."""
    return None if not init_params else checkpoints.tree_sha256(dict(init_params))
