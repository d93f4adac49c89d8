"""Download a dataset from its original source into a data folder, checking every file's checksum.

The loaders of :mod:`ppl_sparsegp.data` never download; this module is the one place that does, and only when a
user asks (``ppl-sparsegp data fetch NAME``, or :func:`fetch`). ``data_sources.json`` (beside this module, written
by ``scripts/make_data_sources.py``) gives, per dataset of the data folder, the URLs of its source (a repository at a
fixed commit, or the official MNIST locations) and each file's sha256 *as the loaders parse it*, after gunzip. A
download is accepted only when that checksum matches; the file is then stored as the data folder names it (gzipped
where the name ends in ``.gz``), and the folder's ``manifest.json`` gains the stored file's size and sha256, which
the loaders verify on every first read.

Nothing is half-written: every file of a dataset is downloaded and checked before any is stored, each file and the
manifest are replaced atomically, and the manifest is written last, so an interrupted fetch leaves files that the
loaders refuse as unlisted until the fetch is run again.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ppl_sparsegp import data
from ppl_sparsegp.results import atomic_write

SOURCES_FILE = Path(__file__).with_name("data_sources.json")
TIMEOUT_SECONDS = 60.0
_GZIP_MAGIC = b"\x1f\x8b"


@lru_cache(maxsize=1)
def sources() -> dict[str, Any]:
    """The ``datasets`` table of ``data_sources.json``: data-folder key -> ``{"urls": [...], "files": {...}}``."""
    return json.loads(SOURCES_FILE.read_text(encoding="utf-8"))["datasets"]


def source_key(name: str) -> str | None:
    """The data-folder key (``"uci/kin8nm"``) holding dataset ``name`` as :func:`ppl_sparsegp.data.load_dataset`
    spells it (``"kin8nm"``, ``"bsgp/naval"``, ``"wilson/kin40k"``), or None for the embedded scikit-learn sets.

    Raises:
        ValueError: an unknown name, with the closest known names.
    """
    collection, _, short = name.rpartition("/")
    if collection in ("", "embedded") and short in data.EMBEDDED_NAMES:
        return None
    if collection == "bsgp" and short in data.BSGP_NAMES:
        return f"uci/{data.UCI_ALIASES.get(short, short)}"
    folders = {"uci": "uci", "wilson": "uci_wilson", "uci_wilson": "uci_wilson", "raetsch": "raetsch",
               "uci_classification": "uci_classification"}  # fmt: skip
    if collection in folders:
        short = data.UCI_ALIASES.get(short, short) if collection == "uci" else short
        key = f"{folders[collection]}/{short}"
        if key in sources():
            return key
    elif not collection:
        short = data.UCI_ALIASES.get(short, short)
        for folder in ("", "uci/", "raetsch/", "uci_classification/", "uci_wilson/"):
            if folder + short in sources():
                return folder + short
    known = [*data.known_datasets(), *(f"bsgp/{n}" for n in data.UCI_ALIASES)]
    raise ValueError(f"name: unknown dataset {name!r}; known: {', '.join(data.known_datasets())}"
                     f"{data.did_you_mean(name, known)}")  # fmt: skip


def mirrored(url: str, mirror: str | None) -> str:
    """``url`` read from ``mirror`` instead: ``https://HOST/PATH`` becomes ``MIRROR/HOST/PATH`` (a mirror is a folder
    or site laid out by host name, e.g. ``file:///srv/mirror``); ``mirror=None`` leaves it unchanged."""
    if mirror is None:
        return url
    parts = urlsplit(url)
    return f"{mirror.rstrip('/')}/{parts.netloc}{parts.path}"


def _download(urls: list[str]) -> tuple[bytes, str]:
    """The bytes at the first of ``urls`` that answers, and that URL; an OSError listing every failure otherwise."""
    failures = []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:
                return response.read(), url
        except OSError as err:
            failures.append(f"{url} ({err})")
    raise OSError(f"could not download from {'; '.join(failures)}")


def _checked_file(name: str, entry: dict[str, Any], urls: list[str]) -> bytes:
    """The bytes to store as ``name``: downloaded, gunzipped if the source is gzip, its first line dropped where
    the entry says so, checked against the entry's sha256, and gzipped again when ``name`` ends in ``.gz``."""
    source = entry.get("source", name)
    raw, url = _download([base + source for base in urls])
    content = gzip.decompress(raw) if raw[:2] == _GZIP_MAGIC else raw
    if entry.get("drop_first_line"):
        content = content.split(b"\n", 1)[1]
    digest = hashlib.sha256(content).hexdigest()
    if digest != entry["sha256"]:
        raise data.DataIntegrityError(
            f"{url}: the content's sha256 is {digest}, expected {entry['sha256']}; the source changed or the "
            "download is damaged, so nothing was stored"
        )
    if not name.endswith(".gz"):
        return content
    if raw[:2] == _GZIP_MAGIC and not entry.get("drop_first_line"):
        return raw
    return gzip.compress(content, mtime=0)


def _stored_manifest(root: Path) -> dict[str, Any]:
    path = root / "manifest.json"
    if not path.is_file():
        return {"format_version": 1, "root": "data folder written by ppl-sparsegp data fetch", "datasets": {}}
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(manifest.get("datasets"), dict):
        raise data.DataIntegrityError(f"{path} has no 'datasets' table; move it aside and fetch again")
    return manifest


def _present(root: Path, key: str, manifest: dict[str, Any]) -> bool:
    """Whether every file of ``key`` is in ``root`` and matches the manifest there."""
    listed = manifest["datasets"].get(key, {}).get("files", {})
    for name in sources()[key]["files"]:
        path, entry = root / key / name, listed.get(name)
        if entry is None or not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            return False
    return True


@dataclass(frozen=True)
class Fetched:
    """What :func:`fetch` did: the dataset's key, the folder, and whether it downloaded (False: already there)."""

    key: str | None
    folder: Path
    downloaded: bool


def fetch(
    name: str,
    dest: str | os.PathLike | None = None,
    *,
    mirror: str | None = None,
    report: Callable[[str], None] = print,
) -> Fetched:
    """Download dataset ``name`` (as :func:`ppl_sparsegp.data.load_dataset` names it) into the data folder ``dest``
    (default: :func:`ppl_sparsegp.data.data_dir`, where the loaders look), unless it is already there intact.

    Args:
        name: e.g. ``"kin8nm"``, ``"wilson/kin40k"``, ``"raetsch/banana"``, ``"mnist"``. The embedded scikit-learn
            sets need no download (reported, nothing written).
        dest: the data folder to write into; created if needed.
        mirror: read every URL from this mirror instead (see :func:`mirrored`), e.g. a ``file://`` folder.
        report: called with one line per file downloaded.

    Raises:
        ValueError: an unknown name.
        OSError: no source answered for a file (the URLs tried are listed).
        DataIntegrityError: a downloaded file's checksum does not match; nothing of the dataset is stored.
    """
    key = source_key(name)
    root = Path(dest).expanduser() if dest is not None else data.data_dir()
    if key is None:
        report(f"{name} ships with scikit-learn: nothing to fetch")
        return Fetched(None, root, False)
    manifest = _stored_manifest(root)
    if _present(root, key, manifest):
        report(f"{key} is already in {root}")
        return Fetched(key, root, False)
    table = sources()[key]
    urls = [mirrored(url, mirror) for url in table["urls"]]
    files = {}
    for name_, entry in table["files"].items():
        files[name_] = _checked_file(name_, entry, urls)
        report(f"{key}/{name_}: {len(files[name_]):,} bytes, sha256 checked")
    for name_, content in files.items():
        atomic_write(root / key / name_, lambda fh, content=content: fh.write(content))
    manifest["datasets"][key] = {
        "files": {n: {"sha256": hashlib.sha256(c).hexdigest(), "bytes": len(c)} for n, c in files.items()},
        "source": table["urls"][0],
    }
    atomic_write(root / "manifest.json", lambda fh: fh.write(json.dumps(manifest, indent=1).encode("utf-8")))
    return Fetched(key, root, True)
