"""The Pyro twin of :func:`ppl_sparsegp.infer.svi.fit_svi`: Pyro's ELBO and a ``torch.optim`` optimiser over
Pyro's param store, with progress, a non-finite-loss stop and checkpoints in the NumPyro engine's format.

One step is ``elbo.loss_and_grads(model, guide, *args)`` then ``optimizer.step()``: Pyro's own ``SVI.step`` with
the optimiser held here, so that its state can be checkpointed. Any Pyro ELBO works, ``TraceGraph_ELBO``'s
score-function gradients with their baselines included (the selection models). The run owns Pyro's global param
store: it is cleared first, and the model and guide create their params in one evaluation of the loss before the
first step (a fixed order, by name: the optimiser's).

Checkpoints are the ``.npz`` files of :mod:`ppl_sparsegp.infer.checkpoint` (no pickle, written atomically) with four
groups: ``params`` (each optimised param's unconstrained value), ``later`` (params the ELBO itself creates and updates
during the steps, such as ``TraceGraph_ELBO``'s decaying-average baselines), ``optimizer`` (the optimiser's per-param
state, e.g. Adam's moments, as ``"<index>/<name>"``) and ``rng`` (torch's generator states, which draw the minibatches
and the samples: :mod:`ppl_sparsegp.pyro.generators`), the counter ``step`` and the array ``losses``. A resumed run
takes the same steps as one that was never interrupted, bit for bit. The fingerprint holds the caller's settings, a hash
of the data, the seed, the loss, the optimiser's hyperparameters and a hash of the initial param values; a checkpoint
with another is refused.
"""

from __future__ import annotations

import hashlib
import math
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
from tqdm.auto import tqdm

from ppl_sparsegp.infer import checkpoint as checkpoints
from ppl_sparsegp.infer import progress as progress_bars
from ppl_sparsegp.infer.svi import NonFiniteLossError, SVIResult
from ppl_sparsegp.pyro.dtype import as_data, as_tensor, auto_threads, intra_op_threads, to_host
from ppl_sparsegp.pyro.generators import generator_state, set_generator_state
from ppl_sparsegp.pyro.positive_transform import SoftplusPositive
from ppl_sparsegp.pyro.sites import param_store_values
from ppl_sparsegp.validation import POSITIVE_TRANSFORMS, check_choice, check_count

Array = Any
OptimizerFactory = Callable[[list[torch.Tensor]], torch.optim.Optimizer]
LEARNING_RATE = 0.01
"""Adam's learning rate when no ``optimizer`` is given (:func:`ppl_sparsegp.cli.run.DEFAULTS`' ``lr``)."""


def fit_svi(
    model: Callable,
    guide: Callable,
    *args: Any,
    num_steps: int,
    optimizer: OptimizerFactory | None = None,
    seed: int = 0,
    loss: pyro.infer.ELBO | None = None,
    progress: bool | None = None,
    label: str = "SVI (Pyro)",
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int = 1000,
    fingerprint: Mapping[str, Any] | None = None,
    validate: Callable[..., None] | None = None,
    threads: int | str | None = "auto",
    init_params: Mapping[str, Array] | None = None,
    callback: Callable[[int, np.ndarray, dict[str, Array]], None] | None = None,
    callback_every: int = 1,
    positive_transform: str = "exp",
    **kwargs: Any,
) -> SVIResult:
    """Fit ``guide`` to ``model`` by stochastic variational inference in Pyro.

    Args:
        model, guide: Pyro programs called as ``model(*args, **kwargs)``.
        *args, **kwargs: data passed to both (e.g. ``X [N, D]``, ``y [N]``); floating arrays become tensors of
            torch's default dtype (:func:`ppl_sparsegp.pyro.dtype.as_tensor`), others stay as they are.
        num_steps: number of steps (or the total, counting steps already in a resumed checkpoint).
        optimizer: ``params -> torch.optim.Optimizer`` over the list of unconstrained param tensors, e.g.
            ``functools.partial(torch.optim.Adam, lr=0.03)``; None: Adam at :data:`LEARNING_RATE`. Its state must be
            tensors and numbers (Adam's, SGD's and RMSprop's are). A param that none of its groups holds stays where
            it is, and no gradient is computed for it while fitting (``requires_grad`` is off until the fit returns).
        seed: seeds torch's generator (``pyro.set_rng_seed``) for the minibatches and the samples.
        loss: the ELBO (default ``pyro.infer.TraceMeanField_ELBO()``, closed-form KLs where registered).
        progress: show a progress bar (None: in a terminal or notebook, :func:`ppl_sparsegp.infer.progress.shown`).
        label: the progress bar's label; ``"<label> (resumed from step N)"`` after resuming.
        checkpoint: path of the ``.npz`` checkpoint to resume from and write to (module docstring).
        checkpoint_every: steps between checkpoint writes (and one at the end).
        fingerprint: the caller's settings that affect the result, name -> JSON-able value.
        validate: called as ``validate(*args, **kwargs)`` before anything runs (e.g. a model's ``check_data``).
        init_params: initial constrained values of some params (e.g. a previous phase's fit), param name -> array;
            the others start where the model and guide start them. Part of the checkpoint's fingerprint (as the
            hash of every initial value).
        callback: ``callback(step, losses, params)`` after every step that is a multiple of ``callback_every`` and
            after the last, before that step's checkpoint is written: ``losses`` those of the steps since the
            previous call (or since the run started or resumed), ``params`` the constrained values, detached. With a
            callback, checkpoints are written only at those steps (``checkpoint_every`` rounded up to them), the twin
            of the NumPyro engine's ``callback`` after each chunk of ``steps_per_dispatch`` steps; a resumed run calls
            it at the same steps as an uninterrupted one.
        callback_every: steps between callbacks (>= 1).
        threads: torch's intra-op threads while fitting (:func:`ppl_sparsegp.pyro.dtype.intra_op_threads`; None:
            torch's own); ``"auto"`` (the default): one, as the NumPyro engine's BLAS threads, unless a param is large
            enough for the step to be dominated by large factorisations (:func:`ppl_sparsegp.pyro.dtype.auto_threads`:
            from M = 512 inducing points), then torch's own.
        positive_transform: how the params declared ``constraints.positive`` live on the real line: ``"exp"``
            (torch's) or ``"softplus"`` (:mod:`ppl_sparsegp.pyro.positive_transform`), as the NumPyro engine's
            ``fit_svi``. Part of the checkpoint's fingerprint.

    Returns:
        An :class:`ppl_sparsegp.infer.svi.SVIResult` with ``params`` the constrained values as detached tensors,
        ``state`` None (Pyro's state is its param store; a checkpoint continues a run) and ``compile_seconds`` 0.

    Raises:
        ValueError: a bad count or optimizer, or ``init_params`` naming params the model and guide do not have,
            before any step.
        ppl_sparsegp.infer.checkpoint.CheckpointError: the checkpoint is damaged, another run's (every difference
            named), for other params, or holds more than ``num_steps`` steps.
        ppl_sparsegp.infer.svi.NonFiniteLossError: the loss became NaN or inf; it carries the params of the last
            step whose loss was finite.
    """
    num_steps = check_count("num_steps", num_steps, minimum=1)
    checkpoint_every = check_count("checkpoint_every", checkpoint_every, minimum=1)
    callback_every = check_count("callback_every", callback_every, minimum=1)
    if callback is not None and not callable(callback):
        raise ValueError(f"callback: expected a callable (step, losses, params) -> None, got {callback!r}")
    if threads != "auto":
        threads = check_count("threads", threads, minimum=1, optional=True)
    if optimizer is None:
        optimizer = partial(torch.optim.Adam, lr=LEARNING_RATE)
    if not callable(optimizer):
        raise ValueError(f"optimizer: expected a callable params -> torch.optim.Optimizer, got {optimizer!r}")
    model, guide = (with_positive_transform(fn, positive_transform) for fn in (model, guide))  # checks the name
    if validate is not None:
        validate(*args, **kwargs)
    auto_from = torch.get_num_threads() if threads == "auto" else None
    with intra_op_threads(1 if threads == "auto" else threads):
        return _fit(model, guide, args, kwargs, num_steps, optimizer, seed, loss, progress, label, checkpoint,
                    checkpoint_every, fingerprint, dict(init_params or {}), auto_from, callback, callback_every,
                    positive_transform)  # fmt: skip


def with_positive_transform(fn: Callable, transform: str) -> Callable:
    """``fn`` with its positive params through ``transform``: ``"exp"`` (``fn`` itself) or ``"softplus"``
    (:class:`ppl_sparsegp.pyro.positive_transform.SoftplusPositive`); another name raises a ValueError."""
    if check_choice("positive_transform", transform, POSITIVE_TRANSFORMS) == "exp":
        return fn
    return SoftplusPositive()(fn)


def _fit(
    model: Callable,
    guide: Callable,
    args: tuple,
    kwargs: dict[str, Any],
    num_steps: int,
    optimizer: OptimizerFactory,
    seed: int,
    loss: pyro.infer.ELBO | None,
    progress: bool | None,
    label: str,
    checkpoint: str | os.PathLike | None,
    checkpoint_every: int,
    fingerprint: Mapping[str, Any] | None,
    init_params: dict[str, Array],
    auto_from: int | None,
    callback: Callable[[int, np.ndarray, dict[str, Array]], None] | None,
    callback_every: int,
    positive_transform: str,
) -> SVIResult:
    """:func:`fit_svi` once its arguments are checked (``model`` and ``guide`` already under ``positive_transform``,
    recorded in the fingerprint); ``auto_from``: torch's own thread count when ``threads`` is ``"auto"`` (chosen
    here, once the params exist), else None."""
    args = tuple(as_data(a) for a in args)
    kwargs = {k: as_data(v) for k, v in kwargs.items()}
    elbo = loss or pyro.infer.TraceMeanField_ELBO()

    pyro.clear_param_store()
    pyro.set_rng_seed(seed)
    with poutine.trace(param_only=True) as created:
        elbo.loss(model, guide, *args, **kwargs)  # creates every param of the model and the guide
    store = pyro.get_param_store()
    names = sorted(created.trace.nodes)
    unknown = sorted(set(init_params) - set(names))
    if unknown:
        raise ValueError(f"init_params: no params {unknown}; the params are {names}")
    for name, value in init_params.items():
        store[name] = as_tensor(value).detach().clone()  # through the param's constraint
    unconstrained = dict(store.named_parameters())
    params = [unconstrained[name] for name in names]
    if auto_from is not None:
        torch.set_num_threads(auto_threads(params, auto_from))  # fit_svi's intra_op_threads restores the count
    optim = optimizer(params)
    if not isinstance(optim, torch.optim.Optimizer):
        raise ValueError(f"optimizer: expected it to return a torch.optim.Optimizer, got {optim!r}")
    optimised = {id(p) for group in optim.param_groups for p in group["params"]}
    held = [p for p in params if id(p) not in optimised]
    pyro.set_rng_seed(seed)

    expected = saved = None
    if checkpoint is not None:
        run = {
            "seed": seed,
            "loss": type(elbo).__name__,
            "optimizer": _optimizer_settings(optim),
            "init_params_sha256": _params_sha256(names, params),
            "positive_transform": positive_transform,
        }
        expected = checkpoints.make_fingerprint(fingerprint, to_host(args), to_host(kwargs), run)
        saved = checkpoints.read(checkpoint, fingerprint=expected) if Path(checkpoint).exists() else None
    done, previous, losses = 0, np.zeros(0), []
    if saved is not None:
        done = saved.counters.get("step", 0)
        if done > num_steps:
            raise checkpoints.CheckpointError(checkpoint, f"holds {done} steps, more than the {num_steps} asked for")
        _restore(saved, names, params, optim)
        previous = saved.arrays["losses"]
    first_step = done

    def save(done: int) -> None:
        checkpoints.save(
            checkpoint,
            {},
            counters={"step": done},
            arrays={"losses": np.concatenate([previous, losses])},
            groups={
                "params": {name: p.detach().cpu().numpy() for name, p in zip(names, params, strict=True)},
                "later": {name: v.cpu().numpy() for name, v in param_store_values().items() if name not in names},
                "optimizer": _optimizer_state(optim),
                "rng": generator_state(),
            },
            fingerprint=expected,
        )

    desc = f"{label} (resumed from step {done})" if done else label
    bar = tqdm(total=num_steps, initial=done, disable=not progress_bars.shown(progress), desc=desc, leave=False)
    since_checkpoint, since_callback, run_seconds = 0, 0, 0.0
    last_finite = param_store_values()
    t0 = time.perf_counter()
    for p in held:
        p.requires_grad_(False)
    try:
        while done < num_steps:
            value = elbo.loss_and_grads(model, guide, *args, **kwargs)
            if not math.isfinite(value):
                optim.zero_grad(set_to_none=True)
                raise NonFiniteLossError(
                    f"the loss became non-finite at step {done}; the returned error carries the parameters of the "
                    "last step whose loss was finite (lower the learning rate or check the data)",
                    step=done,
                    params=last_finite,
                )
            last_finite = param_store_values()
            optim.step()
            optim.zero_grad(set_to_none=True)
            losses.append(float(value))
            done += 1
            since_checkpoint += 1
            since_callback += 1
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.4g}", refresh=False)
            at_callback = callback is None or done % callback_every == 0 or done == num_steps
            if callback is not None and at_callback:
                callback(done, np.asarray(losses[-since_callback:]), param_store_values())
                since_callback = 0
            due = since_checkpoint >= checkpoint_every or done == num_steps
            if checkpoint is not None and at_callback and due:
                run_seconds += time.perf_counter() - t0
                save(done)
                t0 = time.perf_counter()
                since_checkpoint = 0
    except KeyboardInterrupt:
        if checkpoint is not None:
            save(done)
        raise
    finally:
        bar.close()
        for p in held:
            p.requires_grad_(True)
    run_seconds += time.perf_counter() - t0
    return SVIResult(
        params=param_store_values(),
        losses=np.concatenate([previous, losses]),
        state=None,
        stopped_early=False,
        compile_seconds=0.0,
        run_seconds=run_seconds,
        steps_run=done - first_step,
        resumed_from=first_step,
    )


def _params_sha256(names: list[str], params: list[torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name, p in zip(names, params, strict=True):
        digest.update(name.encode())
        digest.update(p.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def _optimizer_settings(optim: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimiser's class and hyperparameters (learning rate, betas, ...), JSON-able."""
    group = {k: v for k, v in optim.param_groups[0].items() if k != "params"}
    return {"class": type(optim).__name__, **{k: list(v) if isinstance(v, tuple) else v for k, v in group.items()}}


def _optimizer_state(optim: torch.optim.Optimizer) -> dict[str, np.ndarray]:
    """The optimiser's per-param state as ``"<index>/<name>" -> array``.

    Raises:
        ValueError: a state entry that is neither a tensor nor a number (it could not be stored as data).
    """
    arrays = {}
    for index, entries in optim.state_dict()["state"].items():
        for name, value in entries.items():
            if not isinstance(value, torch.Tensor | int | float):
                raise ValueError(
                    f"optimizer: {type(optim).__name__} keeps {name!r} as {type(value).__name__}, which a checkpoint "
                    "cannot store as data; use Adam, SGD or RMSprop, or fit without a checkpoint"
                )
            arrays[f"{index}/{name}"] = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else value
    return arrays


def _restore(saved: checkpoints.Checkpoint, names: list[str], params: list[torch.Tensor], optim: Any) -> None:
    """Put a checkpoint's param values, optimiser state and generator state back in place.

    Raises:
        CheckpointError: its params have other names or shapes (another model or guide).
    """
    stored = saved.groups.get("params", {})
    if list(stored) != names or any(stored[n].shape != tuple(p.shape) for n, p in zip(names, params, strict=True)):
        raise checkpoints.CheckpointError(saved.path, "was written for a different model or guide (other params)")
    with torch.no_grad():
        for name, p in zip(names, params, strict=True):
            p.copy_(torch.as_tensor(stored[name], dtype=p.dtype))
    state: dict[int, dict[str, Any]] = {}
    for key, value in saved.groups.get("optimizer", {}).items():
        index, name = key.split("/", 1)
        state.setdefault(int(index), {})[name] = torch.as_tensor(value)
    optim.load_state_dict({"state": state, "param_groups": optim.state_dict()["param_groups"]})
    for name, value in saved.groups.get("later", {}).items():
        pyro.get_param_store()[name] = torch.as_tensor(value)
    set_generator_state(saved.groups["rng"])
