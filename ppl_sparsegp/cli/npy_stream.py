"""``--data-npy X.npy Y.npy``: the pieces that every command fitting on data streamed from two ``.npy`` files shares
(``fit svgp`` by SVI, ``fit bsgp`` by adaptive SGHMC; :mod:`ppl_sparsegp.infer.streaming` runs the engines).

A streamed run reads the files three ways: one pass for the standardisation (the files' column means and standard
deviations, :meth:`~ppl_sparsegp.infer.streaming.NpyBatches.statistics`), a random sample of at most
:data:`STREAM_SAMPLE` rows held in memory (to place Z and to evaluate the fit on), and the minibatches of
``--batch-size`` rows the engine reads, one per step, each standardised on the device (:func:`standardised`) and
its data term scaled by N/B (:func:`data_term_scaled`). Every refusal is a ``ValueError`` naming the flag, raised
before anything compiles.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpyro.primitives import Messenger

from ppl_sparsegp import data, validation
from ppl_sparsegp.cli import run as shared
from ppl_sparsegp.cli.run import Data
from ppl_sparsegp.core import likelihoods
from ppl_sparsegp.infer import sharding
from ppl_sparsegp.infer.streaming import NpyBatches

STREAM_SAMPLE = 10_000
"""``--data-npy``: the rows (at most) sampled from the files, in memory, to place Z and to evaluate the fit."""
DATA_PLATE = "data"
"""The plate of the data term in every model (:func:`ppl_sparsegp.numpyro.sites.data_plate`)."""


DATA_NPY_OPTION = {
    "nargs": 2, "metavar": ("X.npy", "Y.npy"), "default": None,
    "help": "instead of --data: stream the training data from two .npy files, inputs [N, D] and targets [N] (or "
    "[N, P]), larger than memory if need be: standardised by one pass over them, {fitted} on minibatches of "
    f"--batch-size rows read per step, evaluated on a random sample of {STREAM_SAMPLE:,} rows; regression or binary "
    "data (default: off, --data)",
}  # fmt: skip
"""``--data-npy X.npy Y.npy``'s ``add_argument`` keywords, the help's ``{fitted}`` to be filled in with how the command
fits on the minibatches (constants, not a function: the in-memory runs call nothing of this module)."""


def check_stream_options(opts: Mapping[str, Any]) -> None:
    """``--data-npy``'s checks that need no data and no engine: NumPyro, a ``--batch-size``, regression or binary
    data (``ValueError`` naming the flag)."""
    if opts["backend"] == "pyro":
        raise ValueError("--data-npy: --backend pyro cannot stream minibatches from .npy files (its fit takes the "
                         "data in memory); use --backend numpyro, or --data with the files' contents")  # fmt: skip
    if opts.get("batch_size") is None:
        raise ValueError("--data-npy streams minibatches: give --batch-size B, the rows read per step")
    if opts.get("likelihood") is not None and opts["likelihood"].lower() in likelihoods.MULTICLASS:
        raise ValueError(f"--data-npy: regression or binary data; --likelihood {opts['likelihood']} needs --data")


def open_stream(opts: dict[str, Any], argv: Sequence[str]) -> NpyBatches:
    """The stream of ``--data-npy`` in minibatches of ``--batch-size`` rows (split over ``--devices``), the
    default ``--out`` set to ``runs/<method>-<stem of X.npy>``; refuses files that cannot be streamed and a batch
    of all N rows (a streamed fit draws minibatches)."""
    if not any(arg == "--out" or arg.startswith("--out=") for arg in argv):
        opts["out"] = Path("runs") / f"{opts['method']}-{Path(opts['data_npy'][0]).stem}"
    shared.check_devices(opts, opts["batch_size"])
    try:
        batches = NpyBatches(*opts["data_npy"], opts["batch_size"], seed=opts["seed"],
                             mesh=sharding.data_mesh(opts.get("devices")), dtype=np.dtype(opts["dtype"]))  # fmt: skip
    except ValueError as err:
        raise ValueError(f"--data-npy: {err}") from None
    if opts["batch_size"] >= batches.num_data:
        raise ValueError(f"--batch-size ({opts['batch_size']}) must be smaller than the N = {batches.num_data} rows "
                         "of --data-npy (a streamed fit draws minibatches)")  # fmt: skip
    return batches


def stream_data(opts: dict[str, Any], batches: NpyBatches, noise_variance: float) -> tuple[Data, dict[str, Any]]:
    """The task, likelihood and standardisation of the streamed files (one pass over them), and a random sample of
    :data:`STREAM_SAMPLE` rows in memory (standardised: Z's initialisation and the evaluation), as the
    :class:`~ppl_sparsegp.cli.run.Data` every fit finishes with; fills in ``likelihood`` and ``noise_variance``
    (default ``noise_variance``, the method's). Returns it and the run's ``stream`` record."""
    name = opts.get("likelihood") or shared.DEFAULT_LIKELIHOOD["regression"]
    task = next(task for task, names in shared.LIKELIHOODS_BY_TASK.items() if name in names)
    try:
        stats = batches.statistics()
    except ValueError as err:
        raise ValueError(f"--data-npy: {err}") from None
    N, (X_path, y_path) = batches.num_data, batches.paths
    if task == "binary" and (batches.shapes[1] or not stats["y_integral"] or stats["y_min"] < 0 or stats["y_max"] > 1):
        raise ValueError(f"--data-npy: --likelihood {name} needs labels 0 and 1 in {str(y_path)!r}, a vector [N]")
    if task == "binary" and opts.get("noise_variance") is not None:
        raise ValueError("--noise-variance: the Bernoulli likelihood of binary data has no noise")
    validation.check_inducing_count(opts["inducing"], N, name="--inducing")
    opts["likelihood"] = name
    if task == "regression" and opts.get("noise_variance") is None:
        opts["noise_variance"] = noise_variance
    dtype = np.dtype(opts["dtype"])
    scale = lambda std: np.where(std > 0, std, 1.0)  # noqa: E731 (a constant column: scale 1, as data.Standardizer)
    y_mean, y_std = (stats["y_mean"], scale(stats["y_std"])) if task == "regression" else (np.zeros(()), np.ones(()))
    scaler = data.Standardizer(stats["x_mean"], scale(stats["x_std"]), np.asarray(y_mean), np.asarray(y_std))
    X_s, y_s = (np.asarray(a, np.float64) for a in batches.sample(STREAM_SAMPLE, opts["seed"]))
    ds = data.Dataset(
        X_s, y_s, X_s, y_s, name=f"npy:{X_path.name}", task=task, meta={"files": [str(X_path), str(y_path)]}
    )
    X_std, y_std_s = scaler.transform_x(X_s).astype(dtype), scaler.transform_y(y_s).astype(dtype)
    likelihood = likelihoods.likelihood_with_noise(name, opts["noise_variance"], dtype, 2)
    d = Data(ds, scaler, X_std, y_std_s, X_std, y_s, y_std_s, "train sample", likelihood)
    record = {"num_data": N, "files": [str(X_path), str(y_path)], "batch_size": batches.batch_size,
              "sample_rows": len(X_s)}  # fmt: skip
    return d, record


def standardised(program: Callable[..., None], scaler: data.Standardizer, dtype: Any) -> Callable[..., None]:
    """``program(X_b, y_b)`` called on a batch in original units (as read from the files) standardised by
    ``scaler`` on the device: (X_b - x_mean) / x_scale, (y_b - y_mean) / y_scale, constants of ``dtype``."""
    x_mean, x_scale, y_mean, y_scale = (
        np.asarray(a, dtype) for a in (scaler.x_mean, scaler.x_scale, scaler.y_mean, scaler.y_scale)
    )

    def on_batch(X: Any, y: Any) -> None:
        return program((X - x_mean) / x_scale, (y - y_mean) / y_scale)

    return on_batch


class data_term_scaled(Messenger):  # noqa: N801 (a handler, used as a function like NumPyro's)
    """NumPyro handler: every site inside the ``"data"`` plate of ``fn`` scaled by ``num_data / batch_size``.

    For a model that takes the rows it is given as its whole data set (BSGP and deep BSGP with ``batch_size=None``,
    whose plate covers the B rows of a streamed batch with scale 1): the data term becomes the unbiased estimate
    N/B Σ_b ℓ_b of the whole data's, as the model's own subsampling plate scales a minibatch of B of N rows in
    memory (:func:`ppl_sparsegp.numpyro.sites.data_plate`); the priors are left as they are."""

    def __init__(self, fn: Callable[..., None], num_data: int, batch_size: int) -> None:
        self.factor = num_data / batch_size
        super().__init__(fn)

    def process_message(self, msg: dict[str, Any]) -> None:
        if any(frame.name == DATA_PLATE for frame in msg.get("cond_indep_stack", ())):
            msg["scale"] = self.factor if msg.get("scale") is None else self.factor * msg["scale"]


def record_stream(record: dict[str, Any], stream: Mapping[str, Any]) -> None:
    """Add the ``--data-npy`` run's facts to its results ``record``: ``n_train`` N, ``stream`` and a ``note`` that
    the metrics are on the sample."""
    record.update(n_train=stream["num_data"], stream=dict(stream))
    record["note"] = (f"trained on all {stream['num_data']} rows of the .npy files, streamed; the metrics are on "
                      f"a random sample of {stream['sample_rows']} of them")  # fmt: skip


def stream_size(opts: Mapping[str, Any], d: Data, stream: Mapping[str, Any]) -> str:
    """The summary's ``streamed from .npy files; N = 2000000, D = 8, M = 100`` (N the files' rows)."""
    return f"streamed from .npy files; N = {stream['num_data']}, " + shared.size(opts, d).split(", ", 1)[1]
