"""Write ``ppl_sparsegp/data_sources.json``, the table ``ppl-sparsegp data fetch`` downloads from.

Run from the repository root, with the offline data folder at hand::

    .venv/bin/python scripts/make_data_sources.py [--data ../shared/data]

For every dataset of the data folder's ``manifest.json`` it records where each file comes from (the source
repository, commit and path the manifest names, or the official MNIST locations) and the sha256 of the file's
content as the loaders parse it (after gunzip), so that a download is checked whatever compression the source uses.
No data is copied: only names, addresses and checksums.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "ppl_sparsegp" / "data_sources.json"
GITHUB_RAW = "https://raw.githubusercontent.com"
MNIST_URLS = ["https://yann.lecun.com/exdb/mnist/", "https://ossci-datasets.s3.amazonaws.com/mnist/"]
"""LeCun's page, then the mirror torchvision reads (the page often refuses scripted downloads)."""
HEADER_REMOVED = {"uci_classification/htru2", "uci_classification/letter"}
"""Datasets whose source file carries a header line that the data folder's copy drops."""


def _content_sha256(path: Path) -> str:
    raw = path.read_bytes()
    return hashlib.sha256(gzip.decompress(raw) if path.name.endswith(".gz") else raw).hexdigest()


def _base_url(source: dict) -> str:
    """The folder URL of a ``{"repo", "commit", "path"}`` source (a path naming a file gives its folder)."""
    folder = source["path"] if source["path"].endswith("/") else source["path"].rpartition("/")[0]
    folder = folder.split("{")[0]
    return f"{GITHUB_RAW}/{source['repo']}/{source['commit']}/{quote(folder)}".rstrip("/") + "/"


def _entry(key: str, name: str, path: Path, source: dict) -> dict:
    entry: dict = {"sha256": _content_sha256(path)}
    source_name = name
    if key.startswith("raetsch/"):
        source_name = name.removesuffix(".gz")  # gzipped by the data folder, plain text at the source
    if key.startswith("uci_classification/"):
        source_name = source["path"].rpartition("/")[2]
    if source_name != name:
        entry["source"] = quote(source_name)
    if key in HEADER_REMOVED:
        entry["drop_first_line"] = True
    return entry


def build(data: Path) -> dict:
    datasets = json.loads((data / "manifest.json").read_text())["datasets"]
    table = {}
    for key, facts in sorted(datasets.items()):
        source = facts["source"]
        urls = MNIST_URLS if key == "mnist" else [_base_url(source)]
        files = {name: _entry(key, name, data / key / name, source) for name in sorted(facts["files"])}
        table[key] = {"urls": urls, "files": files}
    return {"format_version": 1, "datasets": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    args = parser.parse_args()
    OUTPUT.write_text(json.dumps(build(args.data), indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
