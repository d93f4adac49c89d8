"""A run's outputs: atomic writers for JSON, ``.npz`` arrays and matplotlib figures, and what a fit's outputs hold
(:func:`evaluate`: metrics in original units; :func:`plot_fit` and the panels beside it: the picture of a fit).

Every writer follows the same protocol, so that a reader (or a re-run after a crash) sees either the old file
or the complete new one, never a torn one:

1. write to a temporary file in the *same* folder as the target (``os.replace`` is atomic only within one
   file system), named ``.<target name>.<random>.tmp``;
2. flush and ``fsync`` it, so the bytes are on disk before the rename;
3. ``os.replace`` it onto the target, then ``fsync`` the folder so the rename itself survives a power cut.

If anything fails before step 3 (a value that cannot be serialised, a full disk, an interrupt) the temporary
file is removed and the target is left exactly as it was.

A run's outputs are committed as one set by :func:`write_output_set`: every file is first written in full to its
own temporary name, and only when all of them are written are they renamed into place (each replaced file kept as
a hard-linked backup until the last rename succeeds). Whatever fails part-way, the folder holds the old set
unchanged or the new set complete. The file writers for it are :func:`json_file`, :func:`npz_file` and
:func:`figure_file` (and :func:`ppl_sparsegp.infer.diagnostics.netcdf_file`).

:func:`read_npz` reads an ``.npz`` without pickle and turns any damage into one ``ValueError`` naming the file.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import math
import os
import platform
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from ppl_sparsegp import metrics
from ppl_sparsegp.data import Standardizer

__all__ = [
    "atomic_write",
    "evaluate",
    "figure_file",
    "json_file",
    "npz_file",
    "plot_energy",
    "plot_fit",
    "plot_inclusion",
    "plot_phases",
    "plot_selection",
    "provenance",
    "read_npz",
    "to_jsonable",
    "write_figure",
    "write_json",
    "write_npz",
    "write_output_set",
]

FileWriter = Callable[[Path], None]
"""Writes one whole file at the path it is given (a temporary name in the target's folder)."""


def _fsync_folder(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process umask (read without changing it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Create or replace ``path`` atomically with the bytes that ``write(binary_file)`` writes.

    The parent folder is created if needed. Returns the target path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; give the file the usual permissions
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)
    return path


def to_jsonable(value: Any) -> Any:
    """``value`` with numpy/jax scalars and arrays as Python numbers and lists, paths as strings.

    Non-finite floats become ``None`` (JSON has no NaN or infinity). Mappings keep their keys (as strings);
    tuples become lists. Anything else that JSON cannot hold raises ``TypeError`` naming its type.
    """
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "__array__") and not isinstance(value, str | bytes):
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"cannot write an array of dtype {arr.dtype} to JSON")
        return to_jsonable(arr.tolist()) if arr.ndim else to_jsonable(arr.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot write a value of type {type(value).__name__} to JSON: {value!r}")


def write_json(path: str | os.PathLike, obj: Mapping[str, Any]) -> Path:
    """Write ``obj`` (see :func:`to_jsonable` for what it may hold) as indented UTF-8 JSON, atomically."""
    text = json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n"
    return atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))


def _plain_arrays(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    converted = {name: np.asarray(value) for name, value in arrays.items()}
    for name, arr in converted.items():
        if arr.dtype.hasobject:
            raise ValueError(f"arrays[{name!r}] has dtype object, which cannot be saved without pickle")
    return converted


def write_npz(path: str | os.PathLike, arrays: Mapping[str, Any]) -> Path:
    """Write named arrays to an uncompressed ``.npz`` atomically; readable with ``np.load(allow_pickle=False)``.

    Raises:
        ValueError: an array holds Python objects (it would need pickle, which is never used).
    """
    converted = _plain_arrays(arrays)
    return atomic_write(path, lambda fh: np.savez(fh, **converted))


def write_figure(path: str | os.PathLike, figure: Any, dpi: int = 120) -> Path:
    """Save a matplotlib ``figure`` atomically in the format named by the suffix of ``path`` (e.g. ``.png``)."""
    fmt = Path(path).suffix.lstrip(".") or "png"
    return atomic_write(path, lambda fh: figure.savefig(fh, format=fmt, dpi=dpi, bbox_inches="tight"))


# --------------------------------------------------------------------------------------------------------
# Output sets


def json_file(obj: Mapping[str, Any]) -> FileWriter:
    """A writer of ``obj`` as indented UTF-8 JSON (see :func:`to_jsonable`), serialised now: a value JSON cannot
    hold raises ``TypeError`` here, before any file of a set is written."""
    data = (json.dumps(to_jsonable(obj), indent=2, allow_nan=False) + "\n").encode("utf-8")
    return lambda path: Path(path).write_bytes(data)


def npz_file(arrays: Mapping[str, Any]) -> FileWriter:
    """A writer of named arrays as an uncompressed ``.npz`` (checked now: an object array raises ``ValueError``)."""
    converted = _plain_arrays(arrays)

    def write(path: Path) -> None:
        with open(path, "wb") as fh:
            np.savez(fh, **converted)

    return write


def figure_file(figure: Any, fmt: str = "png", dpi: int = 120) -> FileWriter:
    """A writer of a matplotlib ``figure`` in format ``fmt`` (keep the figure open until the set is written)."""

    def write(path: Path) -> None:
        with open(path, "wb") as fh:
            figure.savefig(fh, format=fmt, dpi=dpi, bbox_inches="tight")

    return write


def close_figure(figure: Any) -> None:
    """Close a pyplot ``figure`` once it is written (pyplot imported here, so that importing a module that closes
    figures does not load matplotlib)."""
    import matplotlib.pyplot as plt

    plt.close(figure)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _backup(target: Path) -> Path:
    """A hard link (or, where links are not supported, a copy) of ``target`` beside it, for a rollback."""
    backup = target.with_name(f".{target.name}.{secrets.token_hex(4)}.bak.tmp")
    try:
        os.link(target, backup)
    except OSError:
        shutil.copy2(target, backup)
    return backup


def write_output_set(folder: str | os.PathLike, files: Mapping[str, FileWriter]) -> list[Path]:
    """Write a run's output files into ``folder`` as one set: the old set stays intact or the new one is complete.

    1. Each ``files[name](tmp)`` writes its whole file to a temporary name ``.<name>.<random>.tmp`` in ``folder``,
       which is then fsync'ed; if any writer fails (a full disk, an interrupt), every temporary file is removed and
       ``folder`` is left exactly as it was.
    2. Only when all are written, each existing target is kept as a backup (a hard link) and the temporary files
       are renamed onto their targets in the order given (put ``results.json``, the record of the run, last).
       Should a rename fail, the targets already replaced get their old bytes back from the backups; a file the
       folder did not hold before may stay, complete (the old ``results.json`` does not name it).
    3. The backups are removed and the folder is fsync'ed, so the renames survive a power cut.

    Args:
        folder: the output folder (created if needed).
        files: file name (no folder part) -> writer, e.g. ``{"params.npz": npz_file(params), "fit.png":
            figure_file(fig), "results.json": json_file(record)}``.

    Returns:
        The paths written, in the order given.

    Raises:
        OSError (or whatever a writer raised): nothing of the new set was committed, or (a failed rename) only
        files the folder did not hold before.
    """
    folder = Path(folder)
    for name in files:
        if Path(name).name != name or name in ("", ".", ".."):
            raise ValueError(f"files: expected plain file names, got {name!r}")
    folder.mkdir(parents=True, exist_ok=True)
    staged: dict[str, Path] = {}
    backups: dict[str, Path] = {}
    renamed: list[str] = []
    try:
        for name, write in files.items():
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
            os.close(fd)
            staged[name] = Path(tmp)
            os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp creates 0600; give the file the usual permissions
            write(Path(tmp))
            _fsync_file(Path(tmp))
        for name in files:
            if (folder / name).is_file():
                backups[name] = _backup(folder / name)
        for name, tmp in staged.items():
            os.replace(tmp, folder / name)
            renamed.append(name)
    except BaseException:
        for name in reversed(renamed):  # give the replaced files their old bytes back
            if name in backups:
                try:
                    os.replace(backups.pop(name), folder / name)
                except OSError:
                    pass
        for leftover in (*staged.values(), *backups.values()):
            leftover.unlink(missing_ok=True)
        raise
    for backup in backups.values():
        backup.unlink(missing_ok=True)
    _fsync_folder(folder)
    return [folder / name for name in files]


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file (e.g. ``params.npz``), read without pickle, as name -> array.

    Raises:
        ValueError: one line naming the file when it cannot be read, is not an ``.npz`` (a pickle is never loaded),
            or is truncated or corrupted.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            if not hasattr(npz, "files"):
                raise ValueError("a single .npy array, not an .npz archive")
            return {name: npz[name] for name in npz.files}
    except Exception as err:  # any failure to parse the archive means a damaged file (nothing in it is run)
        detail = " ".join(str(err).split())
        raise ValueError(f"{path} is not a readable .npz file ({type(err).__name__}: {detail})") from None


# --------------------------------------------------------------------------------------------------------
# What a fit's outputs hold: metrics in original units and the picture of the fit


def provenance() -> dict[str, Any]:
    """What a run record says of where and when it ran: the JAX backend, the versions that matter (torch and pyro's
    when this process has loaded them, as a ``--backend pyro`` run has), the date."""
    import jax
    import numpyro
    import optax

    versions = {"python": platform.python_version(), "jax": jax.__version__, "numpyro": numpyro.__version__}
    versions.update(optax=optax.__version__, numpy=np.__version__)
    versions["ppl_sparsegp"] = importlib.metadata.version("ppl-sparsegp")
    for module in ("torch", "pyro"):
        if module in sys.modules:
            versions[module] = sys.modules[module].__version__
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    return {"backend": jax.default_backend(), "versions": versions, "date": date}


def evaluate(
    predicted: tuple[Any, Any, Any], y_eval: np.ndarray, scaler: Standardizer, task: str
) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Metrics in original units from predictions at the evaluation points.

    Args:
        predicted: (mean, var, log density) of y in standardised units, each [S] or [S, P].
        y_eval: targets in original units, [S] or [S, P] (class labels [S] for binary and multi-class data).
        scaler: the training standardisation, to map predictions back.
        task: "regression", "binary" or "multiclass".

    Returns:
        (metrics, mean, variance), the moments of y in original units; for binary data the mean is p(y = 1), for
        multi-class data the class probabilities [S, J].
    """
    mean, var, log_p = (np.asarray(a) for a in predicted)
    if task == "multiclass":
        scores = {
            "accuracy": metrics.accuracy(y_eval, mean),
            "nll": metrics.multiclass_nll(y_eval, mean),
            "ece": metrics.expected_calibration_error(y_eval, mean),
        }
        return scores, mean, var
    if task == "binary":
        scores = {
            "accuracy": metrics.accuracy(y_eval, mean),
            "nll": metrics.binary_nll(y_eval, mean),
            "ece": metrics.expected_calibration_error(y_eval, mean),
            "auc": metrics.roc_auc(y_eval, mean),
        }
        return scores, mean, var
    mean, var = scaler.inverse_mean(mean), scaler.inverse_var(var)
    scores = {
        "rmse": metrics.rmse(y_eval, mean),
        "mae": metrics.mae(y_eval, mean),
        "nlpd": float(-np.mean(scaler.log_density_to_original(log_p))),
        "rmse_of_training_mean": metrics.rmse(y_eval, np.broadcast_to(scaler.y_mean, y_eval.shape)),
    }
    return scores, mean, var


def regression_curve(
    ds: Any, scaler: Standardizer, predict: Callable[[np.ndarray], tuple[Any, Any]], Z: Any = None, size: int = 400
) -> dict[str, np.ndarray] | None:
    """The ``curve`` of :func:`plot_fit` for a 1-D, one-output regression dataset ``ds`` (None for any other).

    Args:
        ds: the dataset (its training inputs span the grid: their range widened by 10 % on each side).
        scaler: its training standardisation.
        predict: standardised grid [G, 1] -> (mean, var) of y there, standardised, each [G].
        Z: inducing inputs [M, 1], standardised, or None.
        size: G, the grid's number of points.

    Returns:
        ``x`` [G], ``mean`` and ``var`` [G], training ``X`` and ``y`` [N] and (with ``Z``) ``Z`` [M], in original
        units.
    """
    if ds.X_train.shape[1] != 1 or ds.task != "regression" or ds.num_outputs != 1:
        return None
    lo, hi = float(ds.X_train.min()), float(ds.X_train.max())
    x = np.linspace(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), size)
    mean, var = predict(scaler.transform_x(x[:, None]))
    curve = {"x": x, "mean": scaler.inverse_mean(np.asarray(mean)), "var": scaler.inverse_var(np.asarray(var))}
    curve.update(X=ds.X_train[:, 0], y=ds.y_train)
    if Z is not None:
        curve["Z"] = np.asarray(Z)[:, 0] * scaler.x_scale[0] + scaler.x_mean[0]
    return curve


MAX_ERROR_BARS = 150
"""Predicted-vs-observed panels draw every point but error bars on at most this many, spread evenly over the
observed range, so that the panel stays readable for large test sets."""


def plot_fit(
    losses: np.ndarray,
    task: str,
    evaluated_on: str,
    y_eval: np.ndarray,
    mean: np.ndarray,
    var: np.ndarray,
    curve: dict[str, np.ndarray] | None = None,
) -> Any:
    """Loss trace (left) and the fit (right), as a matplotlib figure (close it when written).

    The right panel is, for 1-D regression (``curve`` given: grid ``x`` [G], ``mean`` and ``var`` [G], training
    ``X``/``y``, inducing inputs ``Z`` [M] or absent), the predictive mean +- 2 sd with data and inducing points;
    for other regression, predicted vs observed at the evaluation points (error bars 2 sd on at most
    :data:`MAX_ERROR_BARS` of them); for binary data, a
    reliability diagram (observed frequency of class 1 against predicted probability, 10 bins); for multi-class
    data (``mean`` the class probabilities [S, J]), accuracy against the largest class probability.
    """
    import matplotlib.pyplot as plt  # on first use: importing results leaves matplotlib's backend alone

    fig, (ax_loss, ax_fit) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax_loss.plot(np.arange(1, len(losses) + 1), losses, lw=0.8)
    ax_loss.set(xlabel="step", ylabel="loss (negative ELBO, standardised units)", title="training loss")
    if len(losses) and np.all(losses > 0):
        ax_loss.set_yscale("log")
    if curve is not None:
        sd = np.sqrt(curve["var"])
        ax_fit.fill_between(curve["x"], curve["mean"] - 2 * sd, curve["mean"] + 2 * sd, alpha=0.25, label="±2 sd")
        ax_fit.plot(curve["x"], curve["mean"], lw=1.5, label="predictive mean")
        ax_fit.plot(curve["X"], curve["y"], "k.", ms=3, alpha=0.6, label="training data")
        if "Z" in curve:
            ax_fit.plot(curve["Z"], np.full(len(curve["Z"]), ax_fit.get_ylim()[0]), "r|", ms=12, label="Z")
        ax_fit.set(xlabel="x", ylabel="y", title="predictive distribution")
        ax_fit.legend(loc="best", fontsize=8)
    elif task == "regression":
        observed, predicted, sd = y_eval.ravel(), mean.ravel(), np.sqrt(var.ravel())
        n = len(observed)
        ax_fit.plot(observed, predicted, ".", ms=3 if n <= MAX_ERROR_BARS else 2, alpha=0.7)
        barred = np.argsort(observed)[np.linspace(0, n - 1, min(n, MAX_ERROR_BARS)).round().astype(int)]
        ax_fit.errorbar(observed[barred], predicted[barred], yerr=2 * sd[barred], fmt="none", lw=0.5, alpha=0.5)
        lo, hi = float(min(y_eval.min(), mean.min())), float(max(y_eval.max(), mean.max()))
        ax_fit.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        bars = "" if len(barred) == n else f" (± 2 sd on {len(barred)} of {n}, spread over y)"
        ax_fit.set(xlabel="observed y", ylabel="predicted mean ± 2 sd", title=f"{evaluated_on} set{bars}")
    else:
        multiclass = mean.ndim == 2  # class probabilities [S, J]: the confidence against the accuracy
        p = mean.max(axis=1) if multiclass else mean
        hit = (mean.argmax(axis=1) == y_eval) if multiclass else y_eval
        edges = np.linspace(0.0, 1.0, 11)
        which = np.digitize(p, edges[1:-1])  # bin 0..9
        filled = [b for b in range(10) if np.any(which == b)]
        predicted = [p[which == b].mean() for b in filled]
        observed = [hit[which == b].mean() for b in filled]
        ax_fit.plot([0, 1], [0, 1], "k--", lw=0.8)
        ax_fit.plot(predicted, observed, "o-")
        axes = ("largest class probability", "accuracy") if multiclass else ("predicted p(y = 1)", "observed frequency")
        xlabel, ylabel = axes
        ax_fit.set(xlabel=xlabel, ylabel=ylabel, title=f"reliability, {evaluated_on} set")
    fig.tight_layout()
    return fig


def plot_latents_and_loss(latents: np.ndarray, labels: np.ndarray | None, losses: np.ndarray, clock: np.ndarray) -> Any:
    """A GP-LVM's latent space (left: the first two dimensions of ``latents`` [S, Q], coloured by ``labels`` [S]
    where given) and its loss against training time (right: the mean loss [T] of each chunk of steps ending at
    ``clock[:, 0]``, against the seconds ``clock[:, 1]`` since the start; the steps themselves where ``clock`` is
    empty), as a matplotlib figure (close it when written)."""
    import matplotlib.pyplot as plt

    fig, (ax_latent, ax_loss) = plt.subplots(1, 2, figsize=(11, 4.6))
    second = latents[:, 1] if latents.shape[1] > 1 else np.zeros(len(latents))
    points = ax_latent.scatter(latents[:, 0], second, c=labels, cmap="tab10", s=3, alpha=0.7)
    if labels is not None:
        fig.colorbar(points, ax=ax_latent, label="label")
    ax_latent.set(xlabel="latent 1", ylabel="latent 2", title=f"latents of {len(latents)} rows")
    if len(clock):
        ends = clock[:, 0].astype(int)
        starts = np.concatenate([[ends[0] - (ends[1] - ends[0]) if len(ends) > 1 else 0], ends[:-1]])
        means = [losses[max(a, 0) : b].mean() for a, b in zip(starts, ends, strict=True)]
        ax_loss.plot(clock[:, 1], means, "o-", ms=3)
        ax_loss.set(xlabel="training seconds (compilation included)", ylabel="mean loss of the chunk")
    else:
        ax_loss.plot(np.arange(1, len(losses) + 1), losses, lw=0.8)
        ax_loss.set(xlabel="step", ylabel="loss")
    ax_loss.set_title("loss against time")
    fig.tight_layout()
    return fig


def plot_energy(ax: Any, energy: np.ndarray | None, minibatch: bool) -> None:
    """The potential energy [C, S] of every chain's kept draws (a minibatch estimate for SG-MCMC) on ``ax``."""
    ax.clear()
    if energy is None:
        return
    for c, trace in enumerate(np.asarray(energy)):
        ax.plot(np.arange(1, len(trace) + 1), trace, lw=0.8, label=f"chain {c}")
    what = "minibatch estimate, " if minibatch else ""
    ax.set(xlabel="kept draw", ylabel=f"potential energy ({what}standardised units)", title="kept draws")
    if len(energy) > 1:
        ax.legend(loc="best", fontsize=8)


def plot_phases(ax: Any, losses: Mapping[str, np.ndarray]) -> None:
    """Loss traces of successive phases (name -> [steps]) one after another, dotted lines between them."""
    ax.clear()
    start, every = 0, []
    for phase, trace in losses.items():
        trace = np.asarray(trace)
        if len(trace):
            ax.plot(start + np.arange(1, len(trace) + 1), trace, lw=0.8, label=f"{phase} ({len(trace)} steps)")
            if start:
                ax.axvline(start + 0.5, color="k", ls=":", lw=0.8)
            every.append(trace)
        start += len(trace)
    if every and np.all(np.concatenate(every) > 0):
        ax.set_yscale("log")
    ax.set(xlabel="step", ylabel="loss (negative bound, standardised units)", title="training loss by phase")
    ax.legend(loc="best", fontsize=8)


def plot_inclusion(ax: Any, probs: np.ndarray, kept: np.ndarray, x: np.ndarray | None, title: str) -> None:
    """Inclusion probabilities [K] of the kept and pruned candidates: against their location ``x`` [K] (1-D inputs)
    or sorted."""
    if x is not None:
        ax.plot(x[kept], probs[kept], "o", ms=5, label="kept")
        ax.plot(x[~kept], probs[~kept], "o", ms=5, mfc="none", label="pruned")
        ax.set_xlabel("candidate location x")
    else:
        order = np.argsort(-probs, kind="stable")
        rank, on = np.arange(1, len(probs) + 1), kept[order]
        ax.bar(rank[on], probs[order][on], width=1.0, label="kept")
        ax.bar(rank[~on], probs[order][~on], width=1.0, alpha=0.5, label="pruned")
        ax.set_xlabel("candidate, sorted by inclusion probability")
    ax.set(ylim=(-0.02, 1.02), ylabel="inclusion probability λ", title=title)
    ax.legend(loc="best", fontsize=8)


def plot_selection(figure: Any, losses: Mapping[str, np.ndarray], probs: np.ndarray, kept: np.ndarray,
                   x: np.ndarray | None, title: str) -> None:  # fmt: skip
    """Turn :func:`plot_fit`'s ``figure`` into three panels: the phases' loss traces (:func:`plot_phases`), the
    inclusion probabilities (:func:`plot_inclusion`) and the predictive picture."""
    ax_loss, ax_fit = figure.axes
    figure.set_size_inches(16.5, 4.2)
    grid = figure.add_gridspec(1, 3)
    ax_loss.set_subplotspec(grid[0])
    ax_fit.set_subplotspec(grid[2])
    plot_phases(ax_loss, losses)
    plot_inclusion(figure.add_subplot(grid[1]), probs, kept, x, title)
    figure.tight_layout()
