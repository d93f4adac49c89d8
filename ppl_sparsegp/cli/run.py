"""What every ``fit`` method shares: the options several methods take (declared once in :data:`OPTIONS`, added by
name), their checks, the dataset, the checkpoint fingerprint, prediction, and the run record (results.json), built
here once and written with the other outputs as one set (:func:`finish`). Checks raise a ``ValueError`` naming the
flag.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ppl_sparsegp import data, results, validation
from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.inducing import initialise
from ppl_sparsegp.infer import hot_path, sharding
from ppl_sparsegp.infer.checkpoint import prepare

LIKELIHOODS_BY_TASK = {
    "regression": ("gaussian", "studentt"),
    "binary": ("bernoulli", "probit", "logit"),
    "multiclass": likelihoods.MULTICLASS,
}
DEFAULT_LIKELIHOOD = {"regression": "gaussian", "binary": "probit", "multiclass": "robustmax"}
MULTICLASS_METHODS = ("svgp", "sgpmc")
"""The methods that fit a multi-class likelihood (J latent GPs sharing Z)."""
BACKENDS = ("numpyro", "pyro")
"""The engines of ``--backend``."""
DEVICE_OPTIONS = ("devices", "coordinator", "num_processes", "process_id")
"""The options of :func:`add_device_options`."""
NOT_IN_FINGERPRINT = ("out", "no_progress", "quiet", "restart", "checkpoint_every", *DEVICE_OPTIONS)
"""Options that do not change a run's result (where it writes, what it prints, how often it checkpoints, on how many
devices and processes it runs: the same steps, up to the order of floating-point sums)."""
RESTART_HINT = "start afresh with --restart or choose another --out"


@dataclass(frozen=True)
class Defaults:
    """Defaults of the options the command line shares and of the SVI methods, which have no recipe."""

    data: str = "diabetes"
    split: int = 0
    seed: int = 0
    dtype: str = "float64"
    kernel: str = "rbf"
    kernel_variance: float = 1.0
    lengthscale: float = 1.0
    noise_variance: float = 0.1
    inducing: int = 128
    init: str = "kmeans"
    steps: int = 2000
    lr: float = 0.01
    checkpoint_every: int = 500
    backend: str = "numpyro"


DEFAULTS = Defaults()
OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "data": ("dataset, e.g. diabetes, breast_cancer, kin8nm, snelson, bsgp/boston, or a .csv, .parquet or .npz file "
             "of yours (split at random 80/20, --split the seed)", {"metavar": "NAME"}),
    "target": ("the target column of a --data .csv or .parquet (an .npz holds X and this array)", {"metavar": "COL"}),
    "split": ("split index or fold", {"type": int}),
    "seed": ("seed of every key and of the initialisation", {"type": int}),
    "dtype": ("floating-point precision", {"choices": ("float64", "float32")}),
    "kernel": ("ARD kernel: rbf, matern12/32/52, linear, periodic, cosine, or a sum as rbf+linear", {}),
    "kernel_variance": ("initial kernel variance(s)", {"type": float, "metavar": "V"}),
    "lengthscale": ("initial lengthscales", {"type": float, "metavar": "L"}),
    "noise_variance": ("initial noise variance (Student-t: squared scale); not for binary data",
                       {"type": float, "metavar": "V"}),
    "likelihood": ("gaussian or studentt for regression, bernoulli (= probit), probit or logit for binary data; "
                   "svgp and sgpmc: robustmax or softmax for class labels 0..J-1", {"metavar": "NAME"}),
    "inducing": ("inducing points (bsgp: per layer)", {"type": int, "metavar": "M"}),
    "init": ("initial inducing inputs from the training inputs", {"choices": initialise.INITIALISERS}),
    "steps": ("SVI steps in all", {"type": int}),
    "lr": ("Adam learning rate", {"type": float}),
    "checkpoint_every": ("SVI steps between checkpoints", {"type": int, "metavar": "STEPS"}),
    "batch_size": ("minibatch size", {"type": int, "metavar": "B"}),
    "backend": ("the engine: numpyro (JAX) or pyro (PyTorch: the Pyro twin of the model, fitted by Pyro; the same "
                "outputs)", {"choices": BACKENDS}),
}  # fmt: skip
"""The options several methods take: option -> (help, argparse keywords); added by name by :func:`add_options`."""
FILLED_BY_THE_RUN = ("noise_variance", "likelihood", "batch_size")
"""Options that parse to None unless given: the run fills them in (the noise and likelihood from the data's task,
the batch from the engine); their help states the default."""
SHOWN_FOR_NONE = {"lengthscale": "sqrt(D)", "likelihood": "gaussian for regression, probit for binary, robustmax "
                  "for multi-class data",
                  "batch_size": "full batch", "target": "y for an .npz"}  # fmt: skip
"""What the help states as the default of an option whose default is None."""
KERNEL_OPTIONS = ("kernel", "kernel_variance", "lengthscale")


def flag(name: str) -> str:
    """The flag of option ``name``: ``batch_size`` -> ``--batch-size`` (``whiten`` -> ``--whiten/--no-whiten``)."""
    return "--whiten/--no-whiten" if name == "whiten" else f"--{name.replace('_', '-')}"


def add(parser: Any, name: str, default: Any = None, help: str = "", shown: Any = None, **kwargs: Any) -> None:
    """Add option ``name`` with its ``default``, stated at the end of its help (``shown`` instead, if given)."""
    shown = default if shown is None else shown
    text = help if shown is None else f"{help} (default: {shown})"
    parser.add_argument(flag(name), default=default, help=text, **kwargs)


def add_options(parser: Any, names: Iterable[str], batch_note: str = "", **defaults: Any) -> None:
    """Add the shared options ``names`` (:data:`OPTIONS`), each with its default in ``defaults`` or else in
    :data:`DEFAULTS`; ``batch_note`` ends the help of ``--batch-size``."""
    for name in names:
        help_, kwargs = OPTIONS[name]
        default = defaults.get(name, getattr(DEFAULTS, name, None))
        shown = SHOWN_FOR_NONE.get(name) if default is None else default
        help_ += batch_note if name == "batch_size" else ""
        add(parser, name, None if name in FILLED_BY_THE_RUN else default, help_, shown, **kwargs)


def add_common_arguments(parser: argparse.ArgumentParser, method: str, **defaults: Any) -> None:
    """Data, seed, precision and output: every method (``defaults``: a method's own, e.g. ``data="mnist"``)."""
    add_options(parser, ("data", "target", "split", "seed", "dtype"), **defaults)
    group = parser.add_argument_group("output")
    add(group, "out", None, "output folder", "runs/<method>-<data>-<split>", type=Path, metavar="DIR")
    group.add_argument("--restart", action="store_true", help="discard the checkpoints in --out and start afresh")
    group.add_argument(
        "--no-progress", action="store_true", help="hide the progress bars (shown by default when stderr is a terminal)"
    )
    group.add_argument("--quiet", action="store_true", help="print nothing on success, progress bar included")
    parser.set_defaults(method=method)


def add_device_options(parser: argparse.ArgumentParser) -> None:
    """``--devices`` and the multi-process flags (:mod:`ppl_sparsegp.infer.sharding`), for the methods whose engine
    splits a minibatch over devices."""
    group = parser.add_argument_group("devices and processes")
    group.add_argument(
        "--devices", metavar="N|all", default=None,
        help="split each minibatch (svgp, bsgp's sghmc) or the chains (bsgp's nuts) over N devices (or all: every "
        "device of every process); --batch-size (or --chains) must be a multiple of N; the data and parameters are "
        "replicated and the gradients summed across devices (default: one device)",
    )  # fmt: skip
    env = sharding.ENVIRONMENT
    group.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="join a multi-process run whose process 0 serves "
        f"at HOST:PORT (jax.distributed; default: ${env['coordinator']}, else one process)",
    )
    group.add_argument(
        "--num-processes", type=int, metavar="P", help=f"processes in the run (default: ${env['num_processes']})"
    )
    group.add_argument("--process-id", type=int, metavar="K", help="this process's rank in 0..P-1; processes "
                       f"other than 0 write to OUT.processK, quietly (default: ${env['process_id']})")  # fmt: skip


def join_processes(args: argparse.Namespace) -> None:
    """Join a multi-process run (``--coordinator`` etc. or the environment) before any JAX computation; a process
    other than 0 writes its copy of the run to ``OUT.process<K>`` and prints nothing."""
    if not hasattr(args, "coordinator"):
        return
    if sharding.initialize(args.coordinator, args.num_processes, args.process_id):
        if jax.process_index() > 0:
            args.out, args.quiet = Path(f"{args.out}.process{jax.process_index()}"), True


def check_devices(opts: Mapping[str, Any], batch_size: int | None, what: str = "--batch-size") -> None:
    """``--devices``: a count that exists, and a minibatch (or ``what``: ``--chains``) it splits evenly (checked
    before anything compiles)."""
    if opts.get("devices") is None:
        return
    try:
        count = sharding.count_devices(opts["devices"])
    except ValueError as err:
        raise ValueError(f"--{err}") from None
    if batch_size is None:
        raise ValueError("--devices splits a minibatch over the devices: give --batch-size, smaller than the data")
    if batch_size % count:
        raise ValueError(f"{what} ({batch_size}) must be a multiple of --devices ({count})")


def check_options(opts: dict[str, Any], positive: Iterable[str] = (), non_negative: Iterable[str] = ()) -> None:
    """The checks of every method: counts (>= 1 for ``positive``, >= 0 for ``non_negative``, where given), positive
    numbers, kernel and likelihood names, ``--out``."""
    bounds = [(n, 1) for n in ("checkpoint_every", "inducing", "batch_size", "steps", *positive)]
    for name, least in [*bounds, *((n, 0) for n in ("seed", *non_negative))]:
        if opts.get(name) is not None and opts[name] < least:
            what = "a positive" if least else "a non-negative"
            raise ValueError(f"{flag(name)} must be {what} integer, got {opts[name]}")
    if opts.get("samples") and opts.get("thinning") and opts["samples"] % opts["thinning"]:
        raise ValueError(f"--samples ({opts['samples']}) must be a multiple of --thinning ({opts['thinning']})")
    for name in ("lr", "kernel_variance", "lengthscale", "noise_variance"):
        if opts.get(name) is not None:
            validation.check_positive(flag(name), opts[name])
    names = (("kernel", lambda k: kernels.kernel_from_name(k, 1)), ("likelihood", likelihoods.likelihood_from_name))
    for name, check in names:
        try:
            if opts.get(name) is not None:
                check(opts[name])
        except ValueError as err:
            raise ValueError(f"{flag(name)}: {err}") from None
    if opts.get("likelihood") is not None:
        opts["likelihood"] = opts["likelihood"].lower()
    if opts.get("backend") == "pyro" and opts.get("devices") is not None:
        raise ValueError("--devices: --backend pyro runs on one device; drop --devices or use --backend numpyro")
    validation.check_output_folder(opts["out"])


@dataclass
class Data:
    """The dataset in original units (``ds``) and standardised (``scaler``); training ``X`` [N, D], ``y`` [N] or
    [N, P] and evaluation ``X_eval``, ``y_eval_std`` standardised (``--dtype``), ``y_eval`` in original units: the
    test set, or the training set (``evaluated_on``) when there are no test targets; the initial ``likelihood``."""

    ds: data.Dataset
    scaler: data.Standardizer
    X: np.ndarray
    y: np.ndarray
    X_eval: np.ndarray
    y_eval: np.ndarray
    y_eval_std: np.ndarray
    evaluated_on: str
    likelihood: likelihoods.Likelihood

    def evaluate(self, predicted: tuple[Any, Any, Any]) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
        """:func:`ppl_sparsegp.results.evaluate` of (mean, var, log density) at ``X_eval`` (standardised units)."""
        return results.evaluate(predicted, self.y_eval, self.scaler, self.ds.task)

    def plot(self, losses: np.ndarray, mean: np.ndarray, var: np.ndarray, curve: dict | None = None) -> Any:
        """:func:`ppl_sparsegp.results.plot_fit` of this evaluation (``mean``, ``var`` in original units)."""
        return results.plot_fit(losses, self.ds.task, self.evaluated_on, self.y_eval, mean, var, curve)


def start(args: argparse.Namespace, check: Callable[[dict], None], noise: float, name: str | None = None,
          regression_only: str | None = None) -> tuple[dict[str, Any], Data]:  # fmt: skip
    """The options of ``args`` checked by ``check`` and the dataset (``name``, default ``--data``) loaded and checked
    against them (``regression_only``: why the method needs regression), with the dataset-dependent ``likelihood``
    and ``noise_variance`` (default ``noise``) filled in."""
    opts = dict(vars(args))
    check(opts)
    name = name or opts["data"]
    try:
        ds = data.load_dataset(name, opts["split"], opts["target"])
    except ValueError as err:
        raise ValueError(f"--data {name!r} (--split {opts['split']}): {err}") from None
    if opts.get("likelihood") in likelihoods.MULTICLASS and ds.task != "multiclass":
        try:
            ds = data.as_multiclass(ds)
        except ValueError as err:
            raise ValueError(f"--likelihood {opts['likelihood']}: {err}") from None
    kind = f"--data: {ds.name} is {'an' if ds.task[0] in 'aeiou' else 'a'} {ds.task} dataset"
    if ds.task not in LIKELIHOODS_BY_TASK:
        raise ValueError(f"{kind}; fit supports regression, binary and multi-class classification")
    if regression_only and ds.task != "regression":
        raise ValueError(f"{kind}; {regression_only}")
    if ds.task == "multiclass" and opts["method"] not in MULTICLASS_METHODS:
        methods = " and ".join(MULTICLASS_METHODS)
        raise ValueError(f"{kind}; {opts['method']} fits regression and binary data ({methods} fit multi-class data)")
    if opts.get("likelihood") not in (None, *LIKELIHOODS_BY_TASK[ds.task]):
        raise ValueError(
            f"--likelihood {opts['likelihood']!r} does not fit {ds.task} data ({ds.name}); "
            f"choose one of {', '.join(LIKELIHOODS_BY_TASK[ds.task])}"
        )
    for name in ("noise_variance", "noise"):
        if opts.get(name) is not None and ds.task != "regression":
            which = "Bernoulli" if ds.task == "binary" else "multi-class"
            raise ValueError(f"{flag(name)}: the {which} likelihood of {ds.task} data ({ds.name}) has no noise")
    if opts.get("inducing") is not None:
        validation.check_inducing_count(opts["inducing"], ds.X_train.shape[0], name="--inducing")
    opts["likelihood"] = opts.get("likelihood") or DEFAULT_LIKELIHOOD[ds.task]
    if ds.task == "regression" and opts.get("noise_variance") is None:
        opts["noise_variance"] = noise
    dtype, has_test = np.dtype(opts["dtype"]), ds.y_test is not None
    likelihood = likelihoods.likelihood_with_noise(
        opts["likelihood"], opts["noise_variance"], dtype, ds.num_classes or 2
    )
    std, scaler = data.standardize(ds)
    X_eval, y_eval_std = (std.X_test, std.y_test) if has_test else (std.X_train, std.y_train)
    return opts, Data(
        ds, scaler, std.X_train.astype(dtype), std.y_train.astype(dtype), X_eval.astype(dtype),
        ds.y_test if has_test else ds.y_train, y_eval_std.astype(dtype), "test" if has_test else "train", likelihood,
    )  # fmt: skip


def initial_kernel(opts: Mapping[str, Any], input_dim: int, lengthscale: float) -> kernels.Kernel:
    """The ARD kernel ``--kernel`` with every variance ``--kernel-variance`` and ``lengthscale``, ``--dtype``."""
    variance, dtype = opts["kernel_variance"], np.dtype(opts["dtype"])
    return kernels.kernel_from_name(opts["kernel"], input_dim, variance=variance, lengthscale=lengthscale, dtype=dtype)


def batch(opts: Mapping[str, Any], N: int) -> int | None:
    """``--batch-size``, or None for the full batch."""
    return opts["batch_size"] if opts.get("batch_size") is not None and opts["batch_size"] < N else None


def progress(opts: Mapping[str, Any]) -> bool | None:
    """The engines' ``progress``: False with ``--no-progress`` or ``--quiet``, else None (shown in a terminal)."""
    return False if opts["no_progress"] or opts["quiet"] else None


def checkpoints(opts: Mapping[str, Any], data: Sequence[Any], paths: Sequence[Path], resumable: Iterable[str] = (),
                also: Sequence[Path] = ()) -> tuple[dict[str, Any], dict[str, int]]:  # fmt: skip
    """The fingerprint settings (every option but those of :data:`NOT_IN_FINGERPRINT` and ``resumable``, step
    counts a resumed run may raise; keyed by flag, the method as ``method``) and the counters of the checkpoint at
    ``paths[0]`` that the run resumes from ({} where there is none), once :func:`ppl_sparsegp.infer.checkpoint.prepare`
    has checked (with ``--restart``: deleted) the run's checkpoints ``paths`` in ``--out`` against the arrays ``data``
    the fit is given (e.g. ``(X, y)``)."""
    skip = {*NOT_IN_FINGERPRINT, *resumable}
    settings = {("method" if k == "method" else flag(k)): v for k, v in opts.items() if k not in skip}
    found = prepare(list(paths), settings, *data, restart=opts["restart"], also=list(also))
    return settings, found[paths[0]].counters if paths[0] in found else {}


def timed(work: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``work(*args, **kwargs)`` and the wall-clock seconds it took."""
    start = time.perf_counter()
    return work(*args, **kwargs), time.perf_counter() - start


def predict_gp(gp: Any, params: Mapping[str, Any], d: Data) -> tuple[dict[str, float], Any, Any, dict | None]:
    """Metrics, mean and variance (original units) of ``gp`` with ``params`` at ``X_eval``, and the grid predictions
    of the 1-D regression picture (None where it does not apply), by one compiled predictor (gpr and sgpr predict
    from the training data)."""

    def evaluate(params, X, y, X_new, y_new):
        mean, var = gp.predict_y(params, X_new, X=X, y=y)
        return mean, var, gp.predict_log_density(params, X_new, y_new, X=X, y=y)

    predict = hot_path.EscalatingJit(evaluate, "the predictions")

    m, mean, var = d.evaluate(predict(params, d.X, d.y, d.X_eval, d.y_eval_std))

    def on_grid(X_grid: np.ndarray) -> tuple[Any, Any]:
        return predict(params, d.X, d.y, X_grid.astype(d.X.dtype), np.zeros(len(X_grid), d.X.dtype))[:2]

    return m, mean, var, results.regression_curve(d.ds, d.scaler, on_grid, params.get("Z"))


def scores(m: Mapping[str, float], d: Data, regression: Sequence[str], binary: Sequence[str], sep: str = "  ",
           units: str = " (original units)") -> str:  # fmt: skip
    """``test RMSE 0.1234  NLPD 0.5678 (original units)``: what was evaluated, then the metrics ``regression`` (to 4
    significant digits, then ``units``) or ``binary`` (to 4 places, ``accuracy`` in lower case) as printed."""
    names, fmt, end = (regression, ".4g", units) if d.ds.task == "regression" else (binary, ".4f", "")
    names = [n for n in names if n in m]  # multi-class data have no AUC
    shown = sep.join(f"{n if n == 'accuracy' else n.upper()} {m[n]:{fmt}}" for n in names)
    return f"{d.evaluated_on} {shown}{end}"


def divergences(mcmc: Any) -> str:
    """``", 3 divergences"`` of an MCMC result, or nothing for kernels that do not report them."""
    return "" if mcmc.divergences is None else f", {mcmc.divergences} divergences"


def size(opts: Mapping[str, Any], d: Data) -> str:
    """``N = 442, D = 10, M = 128`` (M where the method has inducing points)."""
    return f"N = {d.X.shape[0]}, D = {d.X.shape[1]}" + (f", M = {opts['inducing']}" if opts.get("inducing") else "")


def finish(opts: Mapping[str, Any], d: Data, argv: Sequence[str], record: Mapping[str, Any],
           files: Mapping[str, Any], figure: Any, summary: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """Write ``files`` (name -> :mod:`ppl_sparsegp.results` writer), ``figure`` (fit.png) and results.json to
    ``--out`` as one set, then print ``summary`` and the files written (unless ``--quiet``); returns results.json:
    what every run records, then the method's ``record``, then the options (every shared option, None where the
    method takes none), versions and date."""
    ds = d.ds
    full = {
        "method": opts["method"], "data": ds.name, "split": opts["split"], "task": ds.task,
        "n_train": int(d.X.shape[0]), "n_eval": int(d.X_eval.shape[0]), "input_dim": int(d.X.shape[1]),
        "num_outputs": ds.num_outputs, "num_classes": ds.num_classes, "evaluated_on": d.evaluated_on, **record,
        "options": {**{f.name: None for f in fields(Defaults)}, **opts}, "argv": list(argv), **results.provenance(),
    }  # fmt: skip
    if ds.y_test is None:
        full["note"] = f"{ds.name} has no test targets; the metrics are on the training data"
    try:
        outputs = {**files, "fit.png": results.figure_file(figure), "results.json": results.json_file(full)}
        results.write_output_set(opts["out"], outputs)
    finally:
        results.close_figure(figure)
    if not opts["quiet"]:
        print("\n".join([*summary, f"  wrote {', '.join([str(opts['out'] / 'results.json'), *files, 'fit.png'])}"]))
    return full
