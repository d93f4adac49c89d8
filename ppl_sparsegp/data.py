"""Datasets, their fixed splits, and standardisation.

Where the data live
    :func:`data_dir` finds the offline data folder (``PPL_SPARSEGP_DATA_DIR``, else ``shared/data`` beside the
    checkout, else ``~/.cache/ppl_sparsegp/data``). Loading never downloads: a missing file raises
    :class:`DatasetNotFoundError` (a ``FileNotFoundError``) that names the path tried, the variable to set and the
    command that downloads the dataset with checksums (``ppl-sparsegp data fetch NAME``,
    :mod:`ppl_sparsegp.data_fetch`).

Integrity
    Every file is checked against the sha256 and byte size recorded in ``manifest.json`` of the data folder
    before it is parsed; a mismatch raises :class:`DataIntegrityError` naming the file. A verified file is
    remembered (by path, size and modification time) for the rest of the process, so repeated loads do not
    hash again.

What a loader returns
    A :class:`Dataset`: ``X_train`` [N, D] and ``X_test`` [N*, D] as float64; ``y`` as float64 [N] (or [N, P]
    for several outputs) for regression, and as int64 class labels [N] otherwise. Binary labels are always
    0/1 (the Rätsch files' -1/+1 are mapped to 0/1), multi-class labels 0..C-1.

Collections (see ``shared/data/MANIFEST.md`` for provenance)
    ``uci/`` (Gal/PBP UCI regression, fixed splits), ``uci_wilson/`` (Wilson/DKL suite, 10 splits), ``raetsch/``
    (IDA binary benchmarks), ``uci_classification/`` (magic, htru2, eeg, letter), ``mnist``, ``oilflow``,
    ``snelson``, the BSGP protocol on the UCI data (:func:`load_bsgp_uci`), and three small datasets shipped
    with scikit-learn (:func:`load_embedded`). :func:`load_dataset` dispatches on a name.

Standardisation
    :class:`Standardizer` holds training statistics and the maps back to original units, including the
    log-density Jacobian; this is the one place where the library decides how data are scaled.
"""

from __future__ import annotations

import dataclasses
import difflib
import gzip
import hashlib
import io
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ppl_sparsegp import validation

Array = Any

ENV_VAR = "PPL_SPARSEGP_DATA_DIR"
"""Environment variable naming the data folder."""

TASKS = ("regression", "binary", "multiclass", "unsupervised")

_REPO_ROOT = Path(__file__).resolve().parent.parent

UCI_NAMES = (
    "bostonHousing",
    "concrete",
    "energy",
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
    "wine-quality-red",
    "yacht",
)
UCI_ALIASES = {
    "boston": "bostonHousing",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "protein": "protein-tertiary-structure",
    "wine": "wine-quality-red",
}
WILSON_NAMES = (
    "airfoil",
    "autompg",
    "autos",
    "bike",
    "breastcancer",
    "challenger",
    "concrete",
    "concreteslump",
    "elevators",
    "energy",
    "fertility",
    "forest",
    "gas",
    "housing",
    "keggdirected",
    "keggundirected",
    "kin40k",
    "machine",
    "parkinsons",
    "pendulum",
    "pol",
    "protein",
    "pumadyn32nm",
    "servo",
    "skillcraft",
    "sml",
    "solar",
    "stock",
    "tamielectric",
    "wine",
    "yacht",
)
RAETSCH_NAMES = (
    "banana",
    "breast-cancer",
    "german",
    "heart",
    "image",
    "ringnorm",
    "titanic",
    "twonorm",
    "waveform",
)
_RAETSCH_REALISATIONS = {name: tuple(range(1, 11)) for name in RAETSCH_NAMES} | {"twonorm": (1,)}
CLASSIFICATION_NAMES = ("magic", "htru2", "eeg", "letter")
EMBEDDED_NAMES = ("diabetes", "breast_cancer", "digits")
BSGP_NAMES = ("boston", "concrete", "energy", "kin8nm", "naval", "power", "protein", "yacht")

# BSGP name -> (folder in uci/, target columns of data.txt). Inputs are the columns of index_features.txt.
# NAVAL: column 16 = GT compressor decay, 17 = GT turbine decay (the paper's two outputs). ENERGY: data.txt
# holds only the heating load (column 8); the cooling load, the paper's second output, is not in the data.
_BSGP_SOURCES = {
    "boston": ("bostonHousing", (13,)),
    "concrete": ("concrete", (8,)),
    "energy": ("energy", (8,)),
    "kin8nm": ("kin8nm", (8,)),
    "naval": ("naval-propulsion-plant", (16, 17)),
    "power": ("power-plant", (4,)),
    "protein": ("protein-tertiary-structure", (9,)),
    "yacht": ("yacht", (6,)),
}
_BSGP_OUTPUTS_IN_PAPER = {"energy": 2, "naval": 2}
ENERGY_TARGETS = ("heating", "cooling", "both")
"""``load_bsgp_uci("energy", fold, target=...)``: the heating load (Y1, in ``data.txt``), the cooling load (Y2) or
both as y [N, 2] (the paper's two outputs, spec 001 §2.5)."""
ENERGY_BOTH_FILE = "ENB2012_data.csv"
"""The UCI original of ENERGY (Tsanas & Xifara 2012) as CSV in ``uci/energy/``: a header row, then 768 rows of
X1..X8, Y1 (heating), Y2 (cooling) in ``data.txt``'s row order. ``data.txt`` lacks Y2, so the cooling load is read
from here; the data folder must list it in ``manifest.json`` (every file is verified)."""


class DatasetNotFoundError(FileNotFoundError):
    """A dataset file is not in the data folder (loading never downloads; ``ppl-sparsegp data fetch`` does)."""


class DataIntegrityError(RuntimeError):
    """A data file does not match the sha256 or size recorded in ``manifest.json``."""


# --------------------------------------------------------------------------------------------------------
# Locating and verifying files


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ppl_sparsegp" / "data"


def data_dir() -> Path:
    """The folder holding the offline datasets.

    In order: ``$PPL_SPARSEGP_DATA_DIR`` if set; ``<repo root>/../shared/data`` if it exists (repo root = the
    folder containing the ``ppl_sparsegp`` package, i.e. the checkout of an editable install);
    ``<cwd>/../shared/data`` if it exists; else ``$XDG_CACHE_HOME/ppl_sparsegp/data`` (default
    ``~/.cache/ppl_sparsegp/data``), which may not exist and is where ``ppl-sparsegp data fetch`` writes then.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    for candidate in (_REPO_ROOT.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return _cache_dir()


def _not_found(what: str, path: Path) -> DatasetNotFoundError:
    return DatasetNotFoundError(
        f"{what} not found at {path}. Loading never downloads: point the environment variable "
        f"{ENV_VAR} at the data folder (currently {os.environ.get(ENV_VAR, 'unset')!s}), "
        f"place shared/data beside the checkout, or download it with `ppl-sparsegp data fetch NAME`."
    )


@lru_cache(maxsize=8)
def _manifest_at(path: str, mtime_ns: int) -> dict[str, Any]:
    """The ``datasets`` table of the manifest at ``path``; a damaged manifest is a DataIntegrityError naming it (not a
    ValueError, which the CLI would blame on ``--data``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            datasets = json.load(fh)["datasets"]
        if not isinstance(datasets, dict) or not all(isinstance(v, dict) for v in datasets.values()):
            raise TypeError("'datasets' is not a table of datasets")
        return datasets
    except (ValueError, KeyError, TypeError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        detail = "no 'datasets' table" if isinstance(err, KeyError) else " ".join(str(err).split())
        raise DataIntegrityError(
            f"{path} is not a readable data manifest ({type(err).__name__}: {detail}); it is truncated or corrupt: "
            "restore it from shared/data"
        ) from None


def _manifest(root: Path) -> dict[str, Any]:
    path = root / "manifest.json"
    if not path.is_file():
        raise _not_found("manifest.json (needed to verify the data files)", path)
    return _manifest_at(str(path.resolve()), path.stat().st_mtime_ns)


_VERIFIED: dict[str, tuple[int, int]] = {}
"""Resolved path -> (size, mtime_ns) of files whose sha256 matched the manifest in this process."""


def _read_bytes(key: str, filename: str) -> bytes:
    """The verified content of ``<data_dir>/<key>/<filename>``, gunzipped if the name ends in ``.gz``."""
    root = data_dir()
    path = root / key / filename
    if not path.is_file():
        raise _not_found(f"dataset file {key}/{filename}", path)
    files = _manifest(root).get(key, {}).get("files", {})
    entry = files.get(filename) if isinstance(files, dict) else None
    if entry is None:
        raise DataIntegrityError(f"{path} is not listed in {root / 'manifest.json'}, so it cannot be verified")
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("bytes"), int)
        or not isinstance(entry.get("sha256"), str)
    ):
        raise DataIntegrityError(f"{root / 'manifest.json'} is damaged: its entry for {key}/{filename} is {entry!r}")
    stat = path.stat()
    raw = path.read_bytes()
    resolved = str(path.resolve())
    if _VERIFIED.get(resolved) != (stat.st_size, stat.st_mtime_ns):
        digest = hashlib.sha256(raw).hexdigest()
        if len(raw) != entry["bytes"] or digest != entry["sha256"]:
            raise DataIntegrityError(
                f"{path} does not match manifest.json: expected {entry['bytes']} bytes with sha256 "
                f"{entry['sha256']}, found {len(raw)} bytes with sha256 {digest}. The file is corrupt or "
                f"was modified; restore it from shared/data."
            )
        _VERIFIED[resolved] = (stat.st_size, stat.st_mtime_ns)
    return gzip.decompress(raw) if filename.endswith(".gz") else raw


def _load_text(key: str, filename: str, **loadtxt_kwargs: Any) -> np.ndarray:
    """``numpy.loadtxt`` on a verified file."""
    text = _read_bytes(key, filename).decode("utf-8")
    return np.loadtxt(io.StringIO(text), **loadtxt_kwargs)


# --------------------------------------------------------------------------------------------------------
# Dataset


@dataclass
class Dataset:
    """A train/test split.

    Attributes:
        X_train: [N, D] float64 inputs.
        y_train: [N] (or [N, P] for P outputs) float64 targets for regression; [N] int64 labels otherwise.
        X_test: [N*, D] float64.
        y_test: like ``y_train`` with N* rows; ``None`` when the source has no test targets (Snelson).
        name: ``"<collection>/<name>"``, e.g. ``"uci/kin8nm"``.
        task: ``"regression"``, ``"binary"`` (labels 0/1), ``"multiclass"`` (labels 0..C-1) or
            ``"unsupervised"`` (labels given only for evaluation, e.g. oil-flow classes).
        meta: loader-specific facts (split indices, source files, standardisation statistics...).
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray | None
    name: str
    task: str
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validation.check_choice("task", self.task, TASKS)
        validation.check_inputs(self.X_train, self.y_train, x_name="X_train", y_name="y_train")
        validation.check_inputs(self.X_test, self.y_test, x_name="X_test", y_name="y_test")
        validation.check_same_dim(self.X_test, self.X_train, z_name="X_test", x_name="X_train")

    @property
    def num_outputs(self) -> int:
        """P: 1 for y [N], else y.shape[1]."""
        return 1 if self.y_train.ndim == 1 else int(self.y_train.shape[1])

    @property
    def num_classes(self) -> int | None:
        """C: one more than the largest label of a classification set (training and test), else None."""
        if self.task not in ("binary", "multiclass"):
            return None
        labels = self.y_train if self.y_test is None else np.concatenate([self.y_train, self.y_test])
        return int(labels.max()) + 1


def as_multiclass(dataset: Dataset) -> Dataset:
    """``dataset`` with its targets read as class labels 0..C-1 (task ``"multiclass"``), for a multi-class
    likelihood on a table of the user's or on binary data.

    Raises:
        ValueError: y has several columns, values that are not whole numbers >= 0 (naming some of them), or a
            class between 0 and the largest label that no point has.
    """
    labels = dataset.y_train if dataset.y_test is None else np.concatenate([dataset.y_train, dataset.y_test])
    if labels.ndim != 1:
        raise ValueError(
            f"{dataset.name}: a multi-class likelihood needs one column of class labels, got {labels.shape}"
        )
    bad = np.unique(labels[(labels < 0) | (np.mod(labels, 1) != 0)])
    if bad.size:
        raise ValueError(f"{dataset.name}: a multi-class likelihood needs class labels 0, 1, 2, ... as y; got values "
                         f"such as {', '.join(f'{v:g}' for v in bad[:5])}")  # fmt: skip
    classes = np.unique(labels)
    if classes.size != int(classes[-1]) + 1:
        raise ValueError(
            f"{dataset.name}: a multi-class likelihood needs class labels 0..J-1 with every class present; got "
            f"{classes.size} distinct labels between {classes[0]:g} and {classes[-1]:g}"
        )
    y_test = None if dataset.y_test is None else dataset.y_test.astype(np.int64)
    return dataclasses.replace(dataset, y_train=dataset.y_train.astype(np.int64), y_test=y_test, task="multiclass")


def random_split(dataset: Dataset, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """``dataset``'s rows (training and test together) split at random again: a share ``test_fraction`` of them
    (rounded) for testing, the rest for training, by a permutation from ``numpy.random.default_rng(seed)`` (the
    protocol of papers that draw their own splits, e.g. IDSGP's 5 random 80/20 splits). The name and task are
    kept; ``meta`` records ``resplit_from``, ``test_fraction``, ``seed`` and the row indices into the pooled data.
    """
    if dataset.y_test is None:
        raise ValueError(f"dataset: {dataset.name} has no test targets to pool with its training rows")
    X = np.concatenate([dataset.X_train, dataset.X_test])
    y = np.concatenate([dataset.y_train, dataset.y_test])
    return _split_at_random(
        X, y, dataset.name, dataset.task, test_fraction, seed, resplit_from=dataset.meta.get("split")
    )


def _split_at_random(X: np.ndarray, y: np.ndarray, name: str, task: str, test_fraction: float, seed: int,
                     **meta: Any) -> Dataset:  # fmt: skip
    """:func:`random_split` of the rows of X [N, D] and y [N]."""
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    seed = _check_seed("seed", seed)
    order = np.random.default_rng(seed).permutation(X.shape[0])
    n_test = int(round(float(test_fraction) * X.shape[0]))
    meta.update(test_fraction=float(test_fraction), seed=seed)
    return _indexed_split(X, y, np.sort(order[n_test:]), np.sort(order[:n_test]), name, task, **meta)


def _check_index(name: str, value: Any, valid: range | tuple[int, ...], what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or int(value) not in valid:
        shown = f"[{valid.start}, {valid.stop})" if isinstance(valid, range) else str(list(valid))
        raise ValueError(f"{name} must be an integer in {shown} for {what}, got {value!r}")
    return int(value)


def _check_seed(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer (a random seed), got {value!r}")
    return int(value)


def did_you_mean(name: str, known: list[str] | tuple[str, ...]) -> str:
    """``"; did you mean 'x'?"`` naming the entries of ``known`` closest to a misspelt ``name`` (compared with and
    without their ``<collection>/`` prefix), or ``""`` when none is close."""
    by_short = {}
    for full in known:
        by_short.setdefault(full.rpartition("/")[2], full)
    short = name.rpartition("/")[2]
    close = difflib.get_close_matches(short, list(by_short), n=3, cutoff=0.75)
    if not close:
        return ""
    return f"; did you mean {' or '.join(repr(by_short[c]) for c in close)}?"


def _resolve(name: str, known: tuple[str, ...], collection: str, aliases: dict | None = None) -> str:
    canonical = (aliases or {}).get(name, name)
    if canonical not in known:
        extra = f" (aliases: {', '.join(sorted(aliases))})" if aliases else ""
        hint = did_you_mean(name, (*known, *(aliases or ())))
        raise ValueError(f"unknown {collection} dataset {name!r}; known: {', '.join(known)}{extra}{hint}")
    return canonical


def _binary_from_pm1(labels: np.ndarray, source: str) -> np.ndarray:
    if not np.all(np.isin(labels, (-1.0, 1.0))):
        raise DataIntegrityError(f"{source}: expected labels -1/+1, found {np.unique(labels)}")
    return (labels > 0).astype(np.int64)


# --------------------------------------------------------------------------------------------------------
# Loaders


def load_uci(name: str, split: int = 0) -> Dataset:
    """A Gal/PBP UCI regression set with its fixed split (Hernández-Lobato & Adams 2015).

    Rows ``index_train_<split>.txt`` / ``index_test_<split>.txt`` (0-based) of ``data.txt``; input and target
    columns from ``index_features.txt`` / ``index_target.txt``. 20 splits (protein: 5). Values are raw: use
    :func:`standardize` (training statistics) as the protocol asks.

    Args:
        name: one of :data:`UCI_NAMES` or an alias (``boston``, ``naval``, ``power``, ``protein``, ``wine``).
        split: 0 <= split < n_splits.

    Returns:
        Dataset with y [N] float64; ``meta`` has ``train_index`` [N], ``test_index`` [N*], ``n_splits``.
    """
    folder = _resolve(name, UCI_NAMES, "uci", UCI_ALIASES)
    key = f"uci/{folder}"
    n_splits = int(_load_text(key, "n_splits.txt"))
    split = _check_index("split", split, range(n_splits), key)
    data = _load_text(key, "data.txt", ndmin=2)
    features = _load_text(key, "index_features.txt", dtype=np.int64, ndmin=1)
    target = int(_load_text(key, "index_target.txt", dtype=np.int64))
    train = _load_text(key, f"index_train_{split}.txt", dtype=np.int64, ndmin=1)
    test = _load_text(key, f"index_test_{split}.txt", dtype=np.int64, ndmin=1)
    return _indexed_split(
        data[:, features], data[:, target], train, test, key, "regression", split=split, n_splits=n_splits
    )


def _indexed_split(
    X: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, name: str, task: str, **meta: Any
) -> Dataset:
    """A Dataset from full arrays X [N, D], y [N] or [N, P] and the row indices of its train and test parts, which
    ``meta`` records as ``train_index`` and ``test_index`` beside the given entries."""
    return Dataset(
        X[train],
        y[train],
        X[test],
        y[test],
        name=name,
        task=task,
        meta={**meta, "train_index": train, "test_index": test},
    )


def load_uci_wilson(name: str, split: int = 0) -> Dataset:
    """A dataset of the Wilson/DKL UCI suite (Yang et al. 2015) with its fixed split.

    ``data.csv.gz``: N x (D + 1), last column = target (values as shipped: mean-centred, not scaled);
    ``test_mask.csv.gz``: N x 10, column ``split`` marks the test rows, the rest are training rows.

    Args:
        name: one of :data:`WILSON_NAMES`.
        split: 0 <= split < 10.

    Returns:
        Dataset with y [N] float64; ``meta`` has ``train_index``, ``test_index``, ``n_splits``.
    """
    name = _resolve(name, WILSON_NAMES, "uci_wilson")
    key = f"uci_wilson/{name}"
    data = _load_text(key, "data.csv.gz", delimiter=",", ndmin=2)
    mask = _load_text(key, "test_mask.csv.gz", delimiter=",", ndmin=2).astype(bool)
    split = _check_index("split", split, range(mask.shape[1]), key)
    test = np.flatnonzero(mask[:, split])
    train = np.flatnonzero(~mask[:, split])
    return _indexed_split(
        data[:, :-1], data[:, -1], train, test, key, "regression", split=split, n_splits=mask.shape[1]
    )


def load_raetsch(name: str, realisation: int = 1) -> Dataset:
    """A Rätsch IDA binary benchmark, one of its realisations (train/test partitions of a fixed pool).

    Inputs come standardised over the whole pool by the source. Labels -1/+1 are mapped to 0/1.

    Args:
        name: one of :data:`RAETSCH_NAMES`.
        realisation: 1..10 (1-based, as in the file names); twonorm has only realisation 1.

    Returns:
        Dataset with task "binary", y int64 [N] in {0, 1}.
    """
    name = _resolve(name, RAETSCH_NAMES, "raetsch")
    key = f"raetsch/{name}"
    r = _check_index("realisation", realisation, _RAETSCH_REALISATIONS[name], key)
    parts = {}
    for part in ("train", "test"):
        X = _load_text(key, f"{name}_{part}_data_{r}.asc.gz", ndmin=2)
        labels = _load_text(key, f"{name}_{part}_labels_{r}.asc.gz", ndmin=1)
        parts[part] = (X, _binary_from_pm1(labels, f"{key} {part} labels {r}"))
    return Dataset(
        *parts["train"],
        *parts["test"],
        name=key,
        task="binary",
        meta={"realisation": r, "label_map": {-1: 0, 1: 1}},
    )


def _classification_arrays(name: str) -> tuple[np.ndarray, np.ndarray, str]:
    """Full data X [N, D] float64, labels [N] int64 and task of a ``uci_classification`` set."""
    key = f"uci_classification/{name}"
    if name == "magic":
        text = _read_bytes(key, "magic04.data").decode("utf-8")
        X = np.loadtxt(io.StringIO(text), delimiter=",", usecols=range(10), ndmin=2)
        letters = np.loadtxt(io.StringIO(text), delimiter=",", usecols=10, dtype=str, ndmin=1)
        if not np.all(np.isin(letters, ("g", "h"))):
            raise DataIntegrityError(f"{key}: expected class letters g/h, found {np.unique(letters)}")
        return X, (letters == "g").astype(np.int64), "binary"
    if name == "htru2":
        data = _load_text(key, "HTRU_2.csv", delimiter=",", ndmin=2)
        return data[:, :-1], data[:, -1].astype(np.int64), "binary"
    if name == "eeg":
        lines = _read_bytes(key, "EEG_Eye_State.arff").decode("utf-8").splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip().upper() == "@DATA") + 1
        data = np.loadtxt(lines[start:], delimiter=",", ndmin=2)
        return data[:, :-1], data[:, -1].astype(np.int64), "binary"
    text = _read_bytes(key, "letter-recognition.data").decode("utf-8")
    X = np.loadtxt(io.StringIO(text), delimiter=",", usecols=range(1, 17), ndmin=2)
    letters = np.loadtxt(io.StringIO(text), delimiter=",", usecols=0, dtype=str, ndmin=1)
    codes = np.array([ord(c) - ord("A") for c in letters], dtype=np.int64)
    return X, codes, "multiclass"


def load_uci_classification(name: str, split: int = 0, test_size: float = 0.2) -> Dataset:
    """A larger UCI classification set; no split is standard, so a seeded stratified one is made.

    Split: ``train_test_split(X, y, test_size=test_size, random_state=split, stratify=y)`` (80/20 by
    default; the manifest suggests e.g. 90/10 as an alternative). Labels:

    * ``magic``: 1 = gamma (signal, "g"), 0 = hadron ("h"); 19020 x 10.
    * ``htru2``: 1 = pulsar; 17898 x 8.
    * ``eeg``: 1 = eye closed; 14980 x 14. Note: a few rows hold extreme outliers (values up to ~7e5 where
      typical values are ~4e3), as in the UCI original; they are kept.
    * ``letter``: 26 classes, 0 = "A" ... 25 = "Z"; 20000 x 16.

    Args:
        name: one of :data:`CLASSIFICATION_NAMES`.
        split: the seed of the split (any integer >= 0).
        test_size: fraction of the rows in the test set, in (0, 1).
    """
    name = _resolve(name, CLASSIFICATION_NAMES, "uci_classification")
    split = _check_seed("split", split)
    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must be in (0, 1), got {test_size!r}")
    X, y, task = _classification_arrays(name)
    from sklearn.model_selection import train_test_split  # sklearn on first use (~1 s)

    train, test = train_test_split(np.arange(len(y)), test_size=test_size, random_state=split, stratify=y)
    return _indexed_split(
        X,
        y,
        train,
        test,
        f"uci_classification/{name}",
        task,
        split=split,
        test_size=test_size,
        protocol="stratified train_test_split, random_state=split",
    )


def _idx_array(raw: bytes, source: str) -> np.ndarray:
    """The bytes of an IDX file (MNIST's format) as a uint8 array [n] (labels) or [n, rows * cols] (images)."""
    magic = int.from_bytes(raw[:4], "big")
    if magic not in (2049, 2051):
        raise DataIntegrityError(f"{source}: unexpected IDX magic number {magic}")
    ndim = magic - 2048
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    values = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if values.size != int(np.prod(dims)):
        raise DataIntegrityError(f"{source}: {values.size} values where the header promises {dims}")
    return values.reshape(dims[0], -1) if ndim == 3 else values.reshape(dims[0])


def _read_idx(filename: str) -> np.ndarray:
    """An MNIST IDX file of the data folder (checked against the manifest), as :func:`_idx_array`."""
    return _idx_array(_read_bytes("mnist", filename), f"mnist/{filename}")


IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
"""The standard file names of MNIST and Fashion-MNIST (each also as ``<name>.gz``)."""


def _image_dataset(arrays: tuple[np.ndarray, ...], name: str, scale: str | None, shape: tuple[int, ...]) -> Dataset:
    """Images [n, pixels] and labels of a train/test split as a multi-class Dataset: pixels as float64 in 0..255,
    ``scale="unit"`` to [0, 1] or ``"symmetric"`` to [-1, 1]."""
    X_train, y_train, X_test, y_test = arrays
    images = [X_train.astype(np.float64), X_test.astype(np.float64)]
    if scale is not None:
        images = [x / 255.0 if scale == "unit" else x / 127.5 - 1.0 for x in images]
    return Dataset(images[0], y_train.astype(np.int64), images[1], y_test.astype(np.int64), name=name,
                   task="multiclass", meta={"scaled": scale, "image_shape": shape})  # fmt: skip


def load_mnist(scale: bool = True) -> Dataset:
    """MNIST, the official 60000/10000 split.

    Args:
        scale: divide pixels by 255 (values in [0, 1]); otherwise keep 0..255 (still as float64).

    Returns:
        Dataset with X [60000, 784] / [10000, 784] float64 (row-major 28 x 28 images), y int64 in 0..9,
        task "multiclass".
    """
    arrays = tuple(_read_idx(f"{name}.gz") for name in IDX_FILES)
    return _image_dataset(arrays, "mnist", "unit" if scale else None, (28, 28))


def _user_file(folder: Path, names: Sequence[str], what: str) -> bytes:
    """The bytes of the first of ``names`` that is a file in ``folder`` (``.gz`` ones decompressed).

    Raises:
        FileNotFoundError: none is there; the message names the folder, the files expected and ``what`` they are.
    """
    for name in names:
        path = folder / name
        if path.is_file():
            raw = path.read_bytes()
            return gzip.decompress(raw) if name.endswith(".gz") else raw
    raise FileNotFoundError(f"{folder}: no {' or '.join(names)} ({what}); nothing is downloaded")


def load_fashion_mnist(folder: str | os.PathLike, scale: bool = True) -> Dataset:
    """Fashion-MNIST (Xiao et al. 2017) from a folder of yours holding its four standard IDX files
    (:data:`IDX_FILES`, each plain or ``.gz``): 60000/10000 images of 28 x 28, labels 0..9.

    Raises:
        FileNotFoundError: a file is missing (the message names the folder and the file names expected).
    """
    folder = Path(folder).expanduser()
    what = "Fashion-MNIST's standard IDX files, from its authors' release"
    arrays = tuple(_idx_array(_user_file(folder, (n, f"{n}.gz"), what), f"{folder / n}") for n in IDX_FILES)
    return _image_dataset(arrays, "fashion_mnist", "unit" if scale else None, (28, 28))


CIFAR10_FILES = (*(f"data_batch_{i}.bin" for i in range(1, 6)), "test_batch.bin")
"""The files of CIFAR-10's binary release (``cifar-10-batches-bin``): 10000 records of a label byte and 3072 pixel
bytes (1024 red, 1024 green, 1024 blue) each. The Python release is pickled and is not read."""


def load_cifar10(folder: str | os.PathLike, scale: bool = True) -> Dataset:
    """CIFAR-10 (Krizhevsky 2009) from a folder of yours holding its binary release (:data:`CIFAR10_FILES`):
    50000/10000 images of 32 x 32 x 3 (channel-major, as stored), labels 0..9; ``scale``: pixels to [-1, 1] (the
    per-channel normalisation of SAS-GP's paper), else 0..255.

    Raises:
        FileNotFoundError: a file is missing; DataIntegrityError: a file is not a whole number of records.
    """
    folder = Path(folder).expanduser()
    parts = []
    for name in CIFAR10_FILES:
        raw = np.frombuffer(_user_file(folder, (name,), "CIFAR-10's binary release, cifar-10-batches-bin"), np.uint8)
        if raw.size % 3073:
            raise DataIntegrityError(f"{folder / name}: {raw.size} bytes is not a whole number of 3073-byte records")
        parts.append(raw.reshape(-1, 3073))
    train, test = np.concatenate(parts[:5]), parts[5]
    arrays = (train[:, 1:], train[:, 0], test[:, 1:], test[:, 0])
    return _image_dataset(arrays, "cifar10", "symmetric" if scale else None, (3, 32, 32))


def load_oilflow() -> Dataset:
    """The three-phase oil-flow data (Bishop & James 1993), the GP-LVM benchmark.

    Returns:
        Dataset with task "unsupervised": X_train = DataTrn [1000, 12], X_test = DataTst [1000, 12]; y = flow
        regime, argmax of the one-hot label files, int64 in {0, 1, 2} (for plots and latent-space
        nearest-neighbour error). ``meta["X_valid"]`` [1000, 12] and ``meta["y_valid"]`` [1000] hold DataVdn.
    """
    sets = {}
    for part in ("Trn", "Tst", "Vdn"):
        X = _load_text("oilflow", f"Data{part}.txt", ndmin=2)
        onehot = _load_text("oilflow", f"Data{part}Lbls.txt", ndmin=2)
        sets[part] = (X, np.argmax(onehot, axis=1).astype(np.int64))
    return Dataset(
        *sets["Trn"],
        *sets["Tst"],
        name="oilflow",
        task="unsupervised",
        meta={"X_valid": sets["Vdn"][0], "y_valid": sets["Vdn"][1]},
    )


def load_snelson() -> Dataset:
    """Snelson & Ghahramani's (2006) 1-D toy regression set.

    Returns:
        Dataset with X_train [200, 1], y_train [200], X_test [301, 1] (an even grid on [-3, 10]) and
        y_test ``None`` (the source has no test targets).
    """
    X_train = _load_text("snelson", "snelson_train_inputs.dat", ndmin=1)[:, None]
    y_train = _load_text("snelson", "snelson_train_outputs.dat", ndmin=1)
    X_test = _load_text("snelson", "snelson_test_inputs.dat", ndmin=1)[:, None]
    return Dataset(X_train, y_train, X_test, None, name="snelson", task="regression")


def load_embedded(name: str, split: int = 0) -> Dataset:
    """A small dataset bundled with scikit-learn (works offline, without the data folder).

    ``diabetes`` (regression, 442 x 10), ``breast_cancer`` (binary, 569 x 30, labels 0 = malignant,
    1 = benign), ``digits`` (multiclass, 1797 x 64 pixel values 0..16, labels 0..9). Split:
    ``train_test_split(X, y, test_size=0.2, random_state=split)`` (not stratified).

    Args:
        name: one of :data:`EMBEDDED_NAMES`.
        split: the seed of the split (integer >= 0).
    """
    from sklearn import datasets

    name = _resolve(name, EMBEDDED_NAMES, "embedded")
    split = _check_seed("split", split)
    loader, task = {
        "diabetes": (datasets.load_diabetes, "regression"),
        "breast_cancer": (datasets.load_breast_cancer, "binary"),
        "digits": (datasets.load_digits, "multiclass"),
    }[name]
    X, y = loader(return_X_y=True)
    y = y.astype(np.float64 if task == "regression" else np.int64)
    from sklearn.model_selection import train_test_split  # sklearn on first use (~1 s)

    train, test = train_test_split(np.arange(len(y)), test_size=0.2, random_state=split)
    return _indexed_split(X.astype(np.float64), y, train, test, f"embedded/{name}", task, split=split)


def _column_stats(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std (ddof 0) over axis 0 of A [N, ...]; std 1 where a column is constant.

    A column counts as constant when its std is at most 1e-10 times its largest magnitude: the std of a
    constant float column is not always exactly 0 (NAVAL's column 11, all 0.998, has a round-off std of
    2.5e-13), and dividing by it would blow the column up to +-1 noise.
    """
    mean = np.mean(A, axis=0)
    std = np.std(A, axis=0)
    constant = std <= 1e-10 * np.max(np.abs(A), axis=0)
    return mean, np.where(constant, 1.0, std)


def _energy_targets(target: str, heating: np.ndarray, inputs: np.ndarray) -> np.ndarray:
    """ENERGY's y for ``target`` (one of :data:`ENERGY_TARGETS`): [N] or [N, 2] (heating, cooling), the cooling
    load from :data:`ENERGY_BOTH_FILE`, whose X1..X8 and Y1 must equal ``inputs`` [N, 8] and ``heating`` [N]."""
    if target == "heating":
        return heating
    try:
        table = _load_text("uci/energy", ENERGY_BOTH_FILE, delimiter=",", skiprows=1, ndmin=2)
    except DatasetNotFoundError as err:
        raise DatasetNotFoundError(
            f"target={target!r}: the cooling load (Y2) is not in uci/energy/data.txt, which holds only the heating "
            f"load; it is read from uci/energy/{ENERGY_BOTH_FILE} (the UCI original as CSV: header, then X1..X8, Y1, "
            f"Y2 in data.txt's row order, listed in manifest.json), which is missing. Use target='heating'. "
            f"({err})"
        ) from None
    if table.shape != (len(heating), 10) or not (
        np.allclose(table[:, :8], inputs, rtol=0, atol=1e-9) and np.allclose(table[:, 8], heating, rtol=0, atol=1e-9)
    ):
        raise DataIntegrityError(
            f"uci/energy/{ENERGY_BOTH_FILE}: expected {len(heating)} rows of X1..X8, Y1, Y2 matching data.txt's "
            f"inputs and heating load row by row, got shape {table.shape} that does not match"
        )
    return table[:, 9] if target == "cooling" else table[:, 8:10]


def load_bsgp_uci(name: str, fold: int, target: str | None = None) -> Dataset:
    """The UCI regression protocol of BSGP (Rossi et al. 2021; specs/001_bsgp.md sections 2.4, 2.5, 3.2).

    * Data: all rows of ``uci/<folder>/data.txt``; inputs = the columns of ``index_features.txt``.
    * Inputs are standardised on the **whole** dataset (as in the authors' files; a mild leak), with
      constant columns set to 0 (std taken as 1). The statistics are in ``meta["x_mean"]`` and
      ``meta["x_std"]`` [D]; ``meta["x_standardized"]`` is True, so :func:`standardize` leaves X alone.
    * Targets are **not** standardised here; :func:`standardize` does it with training statistics.
    * Split: ``train_test_split(arange(N), test_size=0.2, random_state=fold)``; the paper uses folds 0..7.
      Training sizes: boston 404, concrete 824, energy 614, kin8nm 6553, naval 9547, power 7654,
      protein 36584, yacht 246.
    * NAVAL has two outputs, y [N, 2] = (GT compressor decay, GT turbine decay), columns 16 and 17.
    * ENERGY: the paper models two outputs (heating and cooling load); ``target`` chooses (:data:`ENERGY_TARGETS`).
      The shipped ``data.txt`` holds only the heating load (column 8), the default (y [N], with a warning that the
      paper has two outputs, so its MNLLs are not directly comparable); ``"cooling"`` and ``"both"`` (y [N, 2],
      the paper's) read the cooling load from :data:`ENERGY_BOTH_FILE`, which the data folder must hold.

    Args:
        name: one of :data:`BSGP_NAMES`.
        fold: the split seed (integer >= 0).
        target: ENERGY only: one of :data:`ENERGY_TARGETS` (None: ``"heating"``); None for the other sets.

    Raises:
        ValueError: an unknown ``name``, a bad ``fold`` or ``target``.
        DatasetNotFoundError: a file missing, :data:`ENERGY_BOTH_FILE` among them for ``target="cooling"``/``"both"``.

    Returns:
        Dataset "bsgp/<name>" with X [N, D] standardised, y [N] or [N, 2] in original units.
    """
    name = _resolve(name, BSGP_NAMES, "bsgp")
    fold = _check_seed("fold", fold)
    if name == "energy":
        target = "heating" if target is None else target
        if target not in ENERGY_TARGETS:
            raise ValueError(f"target: expected one of {ENERGY_TARGETS} for energy, got {target!r}")
    elif target is not None:
        raise ValueError(f"target: only energy has a choice of targets (one of {ENERGY_TARGETS}), got {target!r}")
    folder, targets = _BSGP_SOURCES[name]
    key = f"uci/{folder}"
    data = _load_text(key, "data.txt", ndmin=2)
    features = _load_text(key, "index_features.txt", dtype=np.int64, ndmin=1)
    X = data[:, features]
    y = data[:, targets[0]] if len(targets) == 1 else data[:, list(targets)]
    source = f"{key}/data.txt"
    if name == "energy" and target != "heating":
        y = _energy_targets(target, y, X)
        source, targets = f"{key}/{ENERGY_BOTH_FILE}", {"cooling": (9,), "both": (8, 9)}[target]
    x_mean, x_std = _column_stats(X)
    X = (X - x_mean) / x_std
    n_paper = _BSGP_OUTPUTS_IN_PAPER.get(name, 1)
    if n_paper != len(targets):
        warnings.warn(
            f"bsgp/{name}: the paper models {n_paper} outputs but {source} gives "
            f"{len(targets)}; results are not directly comparable to the paper's",
            stacklevel=2,
        )
    from sklearn.model_selection import train_test_split  # sklearn on first use (~1 s)

    train, test = train_test_split(np.arange(len(X)), test_size=0.2, random_state=fold)
    return _indexed_split(
        X,
        y,
        train,
        test,
        f"bsgp/{name}",
        "regression",
        fold=fold,
        source=source,
        target_columns=targets,
        x_mean=x_mean,
        x_std=x_std,
        x_standardized=True,
        n_outputs_in_paper=n_paper,
        **({"target": target} if name == "energy" else {}),
    )


LOCAL_DATASETS: dict[str, tuple[int, str, str]] = {
    "3droad": (3, "regression", "UCI 3D Road Network: longitude, latitude; altitude the target"),
    "song": (90, "regression", "UCI YearPredictionMSD: 90 timbre features; the year the target"),
    "buzz": (77, "regression", "UCI Buzz in social media (Twitter): 77 features; the buzz the target"),
    "houseelectric": (6, "regression", "UCI household electric power consumption as the IDSGP paper uses it"),
    "airline": (8, "binary", "US airline delays (Hensman et al. 2013 features); delayed (1) or not (0)"),
    "taxi": (9, "regression", "NYC yellow taxi trips (Salimbeni & Deisenroth 2017 features); the duration"),
}
"""The large sets of the IDSGP paper, which are not in the data folder: name -> (D, task, what the file holds)."""


def load_local(name: str, path: str | os.PathLike, test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """One of :data:`LOCAL_DATASETS` from a file of the user's: ``.npy`` (memory-mapped), ``.csv`` or ``.csv.gz``,
    N rows of D inputs and the target in the last column (labels 0/1 or -1/+1 for binary sets), split at random
    by :func:`random_split` (``test_fraction``, ``seed``).

    Raises:
        ValueError: an unknown name, a file that is not 2-D with D + 1 columns, non-finite values, or labels that
            are not two classes; each names the file and what was expected.
        FileNotFoundError: no file at ``path``.
    """
    name = _resolve(name, tuple(LOCAL_DATASETS), "local")
    D, task, what = LOCAL_DATASETS[name]
    path = Path(path).expanduser()
    expected = f"{name} expects N rows of {D} inputs and the target last ({what}), i.e. [N, {D + 1}]"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; {expected}")
    if path.suffix == ".npy":
        table = np.load(path, mmap_mode="r", allow_pickle=False)
    else:
        table = np.loadtxt(path, delimiter=",", ndmin=2)
    if table.ndim != 2 or table.shape[1] != D + 1:
        raise ValueError(f"{path}: found shape {table.shape}; {expected}")
    X, y = np.asarray(table[:, :D], dtype=np.float64), np.asarray(table[:, D], dtype=np.float64)
    if task == "binary":
        classes = np.unique(y)
        if classes.size != 2 or not (set(classes) <= {0.0, 1.0} or set(classes) <= {-1.0, 1.0}):
            raise ValueError(f"{path}: the last column holds {classes[:5]}; {expected} with labels 0/1 or -1/+1")
        y = (y > 0).astype(np.int64)
    return _split_at_random(X, y, f"local/{name}", task, test_fraction, seed, source=str(path))


TABLE_SUFFIXES = (".csv", ".parquet", ".npz")
"""The files :func:`load_table` reads (and :func:`load_dataset` takes for a path)."""


def _read_parquet(path: Path) -> Any:
    """A Parquet file as a pandas DataFrame (through pyarrow, the ``parquet`` extra)."""
    import pandas as pd

    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ValueError(f"{path}: reading Parquet needs pyarrow: pip install 'ppl-sparsegp[parquet]'") from None
    return pd.read_parquet(path)


def load_table(
    path: str | os.PathLike, target: str | None = None, split: int = 0, test_fraction: float = 0.2
) -> Dataset:
    """A dataset of the user's: a CSV with a header line or a Parquet file (the column ``target`` is y, every other
    column an input) or an ``.npz`` with arrays ``X`` [N, D] and ``target`` (default ``"y"``) [N]; split at random,
    a share ``test_fraction`` for testing, with ``split`` as the seed (as the embedded datasets). The task is binary
    when y holds two classes 0/1 or -1/+1 (mapped to 0/1), else regression.

    Raises:
        ValueError: a missing file, another suffix, no ``target`` for a CSV or Parquet file or a target that is not
            a column, a non-numeric column or a missing value; each names the file, and the column where there is one.
    """
    path = Path(path).expanduser().absolute()
    if path.suffix not in TABLE_SUFFIXES:
        raise ValueError(f"{path}: expected a {' or '.join(TABLE_SUFFIXES)} file")
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    if path.suffix == ".npz":
        from ppl_sparsegp.results import read_npz  # results imports data: read here, not at import

        arrays = read_npz(path)
        target = target or "y"
        for key in ("X", target):
            if key not in arrays:
                raise ValueError(
                    f"{path}: no array {key!r} (found {', '.join(arrays)}); expected X [N, D] and {target} [N]"
                )
        X, y = np.asarray(arrays["X"], dtype=np.float64), np.asarray(arrays[target], dtype=np.float64)
    else:
        import pandas as pd

        if target is None:
            raise ValueError(f"target: {path} is a table of named columns; name its target column (--target COL)")
        table = pd.read_csv(path) if path.suffix == ".csv" else _read_parquet(path)
        if target not in table.columns:
            raise ValueError(f"target: {path} has no column {target!r}; columns: {', '.join(map(str, table.columns))}")
        for column in table.columns:
            if not pd.api.types.is_numeric_dtype(table[column]):
                raise ValueError(f"{path}: column {column!r} is not numeric")
        y, X = table[target].to_numpy(np.float64), table.drop(columns=[target]).to_numpy(np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],):
        raise ValueError(f"{path}: expected inputs [N, D] and a target [N], got {X.shape} and {y.shape}")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y))):
        raise ValueError(f"{path}: missing or non-finite values")
    classes = np.unique(y)
    binary = classes.size == 2 and (set(classes) <= {0.0, 1.0} or set(classes) <= {-1.0, 1.0})
    y = (y > 0).astype(np.int64) if binary else y
    task = "binary" if binary else "regression"
    return _split_at_random(X, y, str(path), task, test_fraction, split, source=str(path), target=target)


def is_table_path(name: str) -> bool:
    """Whether :func:`load_dataset` reads ``name`` as a file of the user's (a path ending in .csv, .parquet or
    .npz)."""
    return Path(name).suffix in TABLE_SUFFIXES


def known_datasets() -> list[str]:
    """Every name :func:`load_dataset` accepts in ``<collection>/<name>`` form (bare names also work)."""
    return (
        [f"uci/{n}" for n in UCI_NAMES]
        + [f"wilson/{n}" for n in WILSON_NAMES]
        + [f"raetsch/{n}" for n in RAETSCH_NAMES]
        + [f"uci_classification/{n}" for n in CLASSIFICATION_NAMES]
        + [f"bsgp/{n}" for n in BSGP_NAMES]
        + [f"embedded/{n}" for n in EMBEDDED_NAMES]
        + ["mnist", "oilflow", "snelson"]
    )


def load_dataset(name: str, split: int = 0, target: str | None = None) -> Dataset:
    """Load a dataset by name, or a file of the user's by its path (:func:`load_table`, with ``target``).

    Names: ``"<collection>/<name>"`` with collection ``uci``, ``wilson`` (or ``uci_wilson``), ``raetsch``,
    ``uci_classification``, ``bsgp``, ``embedded``; or ``"mnist"``, ``"oilflow"``, ``"snelson"``. A bare name
    is looked up in this order: embedded, uci (with its aliases), raetsch, uci_classification, wilson; so
    ``"concrete"`` is ``uci/concrete`` and ``"elevators"`` is ``wilson/elevators``.

    Args:
        name: see above; :func:`known_datasets` lists them.
        split: 0-based split index for every collection: the fixed split (uci, wilson), realisation
            ``split + 1`` (raetsch), the split seed (uci_classification, embedded) or the fold (bsgp).
            Must be 0 for mnist, oilflow and snelson.
    """
    if is_table_path(name):
        return load_table(name, target, split)
    if target is not None:
        raise ValueError(f"target: applies to a .csv, .parquet or .npz file of yours, not to the dataset {name!r}")
    collection, _, short = name.partition("/") if "/" in name else ("", "", name)
    collection = {"uci_wilson": "wilson"}.get(collection, collection)
    loaders = {
        "uci": (UCI_NAMES + tuple(UCI_ALIASES), lambda n: load_uci(n, split)),
        "raetsch": (RAETSCH_NAMES, lambda n: load_raetsch(n, _raetsch_realisation(split))),
        "uci_classification": (CLASSIFICATION_NAMES, lambda n: load_uci_classification(n, split)),
        "wilson": (WILSON_NAMES, lambda n: load_uci_wilson(n, split)),
        "bsgp": (BSGP_NAMES, lambda n: load_bsgp_uci(n, split)),
        "embedded": (EMBEDDED_NAMES, lambda n: load_embedded(n, split)),
    }
    singles = {"mnist": load_mnist, "oilflow": load_oilflow, "snelson": load_snelson}
    if not collection and short in singles:
        if split != 0:
            raise ValueError(f"{short} has a single official split; split must be 0, got {split!r}")
        return singles[short]()
    search = [collection] if collection else ["embedded", "uci", "raetsch", "uci_classification", "wilson"]
    for coll in search:
        if coll in loaders and short in loaders[coll][0]:
            return loaders[coll][1](short)
    known = known_datasets()
    raise ValueError(f"unknown dataset {name!r}; known: {', '.join(known)}{did_you_mean(name, known)}")


def _raetsch_realisation(split: int) -> int:
    if isinstance(split, bool) or not isinstance(split, int | np.integer):
        raise ValueError(f"split must be an integer, got {split!r}")
    return int(split) + 1


# --------------------------------------------------------------------------------------------------------
# Standardisation


@dataclass(frozen=True)
class Standardizer:
    """Affine standardisation fitted on training data, and its inverse for predictions.

    x_std = (x - x_mean) / x_scale and y_std = (y - y_mean) / y_scale, with statistics (mean and ddof-0 std)
    of the training set; a constant column gets scale 1 (see :func:`_column_stats`).

    Attributes:
        x_mean, x_scale: [D]; zeros and ones when X is not standardised.
        y_mean, y_scale: [] for y [N], [P] for y [N, P]; 0 and 1 when y is not standardised.
    """

    x_mean: np.ndarray
    x_scale: np.ndarray
    y_mean: np.ndarray
    y_scale: np.ndarray

    @classmethod
    def fit(cls, X_train: Array, y_train: Array | None = None, standardize_x: bool = True) -> Standardizer:
        """Statistics of ``X_train`` [N, D] (unless ``standardize_x`` is False) and ``y_train`` [N] or
        [N, P] (identity if ``None``, e.g. for class labels)."""
        X = np.asarray(X_train, dtype=np.float64)
        validation.check_inputs(X, None if y_train is None else np.asarray(y_train), x_name="X_train")
        if standardize_x:
            x_mean, x_scale = _column_stats(X)
        else:
            x_mean, x_scale = np.zeros(X.shape[1]), np.ones(X.shape[1])
        if y_train is None:
            y_mean, y_scale = np.zeros(()), np.ones(())
        else:
            y_mean, y_scale = _column_stats(np.asarray(y_train, dtype=np.float64))
        return cls(x_mean, x_scale, np.asarray(y_mean), np.asarray(y_scale))

    def transform_x(self, X: Array) -> Array:
        """[N, D] original -> [N, D] standardised."""
        return (X - self.x_mean) / self.x_scale

    def transform_y(self, y: Array) -> Array:
        """[N] or [N, P] original -> same shape standardised."""
        return (y - self.y_mean) / self.y_scale

    def inverse_mean(self, mean_std: Array) -> Array:
        """Predictive means [..., N] or [..., N, P] in standardised units -> original units."""
        return mean_std * self.y_scale + self.y_mean

    def inverse_var(self, var_std: Array) -> Array:
        """Predictive variances [..., N] or [..., N, P] in standardised units -> original units."""
        return var_std * self.y_scale**2

    def log_density_to_original(self, logp_std: Array, *, joint_over_outputs: bool = False) -> Array:
        """Log densities of standardised y -> log densities of y in original units (change of variables).

        log p(y) = log p_std((y - mean) / scale) - log scale, per output.

        Args:
            logp_std: per-entry log densities, shape [..., N] for y [N] or [..., N, P] for y [N, P]; or, with
                ``joint_over_outputs=True``, the log density of each whole output vector y_n, shape [..., N].
            joint_over_outputs: subtract sum_p log scale_p (the Jacobian of all P outputs at once) instead of
                log scale_p per entry.
        """
        log_scale = np.log(self.y_scale)
        if joint_over_outputs:
            return logp_std - np.sum(log_scale)
        return logp_std - log_scale


def standardize(dataset: Dataset, standardize_x: bool | None = None) -> tuple[Dataset, Standardizer]:
    """Standardise a dataset with its training statistics.

    X is standardised unless ``standardize_x`` is False, or it is None (the default) and
    ``dataset.meta["x_standardized"]`` is True (the BSGP protocol, whose X is already standardised on the
    whole data). y is standardised only for regression; class labels are left alone.

    Returns:
        (the standardised Dataset, the fitted Standardizer to map predictions back).
    """
    if standardize_x is None:
        standardize_x = not dataset.meta.get("x_standardized", False)
    y_fit = dataset.y_train if dataset.task == "regression" else None
    scaler = Standardizer.fit(dataset.X_train, y_fit, standardize_x=standardize_x)
    transform_y = scaler.transform_y if y_fit is not None else (lambda y: y)
    result = dataclasses.replace(
        dataset,
        X_train=scaler.transform_x(dataset.X_train),
        y_train=transform_y(dataset.y_train),
        X_test=scaler.transform_x(dataset.X_test),
        y_test=None if dataset.y_test is None else transform_y(dataset.y_test),
        meta=dataset.meta | {"x_standardized": standardize_x or dataset.meta.get("x_standardized", False)},
    )
    return result, scaler
