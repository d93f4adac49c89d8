"""``ppl-sparsegp data fetch``: downloads checked by sha256, stored where the loaders read them, nothing half-written.

The sources are served from a ``file://`` mirror built from the offline data folder in the layout of the original
sites (``MIRROR/HOST/PATH``), in the form the source has: the Rätsch files plain (the data folder gzips them), the
HTRU2 file with its header line (the data folder drops it), MNIST only at the second of its URLs.
"""

import gzip
import json
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest

from ppl_sparsegp import data, data_fetch
from ppl_sparsegp.cli import main

SHARED = data.data_dir()
FETCHED = {
    "kin8nm": "uci/kin8nm",
    "raetsch/heart": "raetsch/heart",
    "uci_classification/htru2": "uci_classification/htru2",
    "wilson/challenger": "uci_wilson/challenger",
    "mnist": "mnist",
}
"""A name of each kind of source -> its data-folder key."""


def _serve(mirror: Path, key: str) -> None:
    """Lay out ``key``'s files under ``mirror`` as its source serves them (MNIST at its last URL only)."""
    table = data_fetch.sources()[key]
    base = urlsplit(table["urls"][-1])
    for name, entry in table["files"].items():
        raw = (SHARED / key / name).read_bytes()
        source = unquote(entry.get("source", name))
        content = raw if source.endswith(".gz") else (gzip.decompress(raw) if name.endswith(".gz") else raw)
        if entry.get("drop_first_line"):
            content = b"column names\n" + content
        path = mirror / base.netloc / unquote(base.path).lstrip("/") / source
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


@pytest.fixture(scope="module")
def mirror(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("mirror")
    for key in FETCHED.values():
        _serve(folder, key)
    return folder


def _arrays(dataset: data.Dataset) -> list[np.ndarray]:
    return [dataset.X_train, dataset.y_train, dataset.X_test, dataset.y_test]


@pytest.mark.parametrize("name", list(FETCHED))
def test_a_fetched_dataset_loads_as_the_data_folder_copy(name, mirror, tmp_path, monkeypatch):
    lines = []
    done = data_fetch.fetch(name, tmp_path, mirror=mirror.as_uri(), report=lines.append)
    assert done.downloaded and done.key == FETCHED[name]
    assert len(lines) == len(data_fetch.sources()[done.key]["files"])
    expected = data.load_dataset(name)
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    loaded = data.load_dataset(name)
    for a, b in zip(_arrays(loaded), _arrays(expected), strict=True):
        np.testing.assert_array_equal(a, b)
    again = data_fetch.fetch(name, tmp_path, mirror=mirror.as_uri(), report=lines.append)
    assert not again.downloaded and lines[-1] == f"{done.key} is already in {tmp_path}"


def test_a_checksum_mismatch_stores_nothing(mirror, tmp_path):
    damaged = tmp_path / "mirror"
    _serve(damaged, "uci/kin8nm")
    target = next(damaged.rglob("index_test_3.txt"))
    target.write_bytes(target.read_bytes().replace(b"1", b"2", 1))
    dest = tmp_path / "data"
    with pytest.raises(data.DataIntegrityError, match=r"index_test_3\.txt: the content's sha256 is"):
        data_fetch.fetch("kin8nm", dest, mirror=damaged.as_uri(), report=lambda line: None)
    assert not dest.exists()


def test_a_fetch_adds_to_an_existing_manifest(mirror, tmp_path):
    for name in ("kin8nm", "raetsch/heart"):
        data_fetch.fetch(name, tmp_path, mirror=mirror.as_uri(), report=lambda line: None)
    manifest = json.loads((tmp_path / "manifest.json").read_text())["datasets"]
    assert set(manifest) == {"uci/kin8nm", "raetsch/heart"}
    stored = tmp_path / "raetsch/heart/heart_train_data_1.asc.gz"
    assert manifest["raetsch/heart"]["files"][stored.name]["bytes"] == stored.stat().st_size


def test_every_dataset_name_has_a_source():
    shared = json.loads((SHARED / "manifest.json").read_text())["datasets"]
    assert set(data_fetch.sources()) == set(shared)
    for key in shared:
        assert set(data_fetch.sources()[key]["files"]) == set(shared[key]["files"]), key
    names = [n for n in data.known_datasets() if not n.startswith("embedded/")]
    assert {data_fetch.source_key(n) for n in names} == set(shared)
    assert data_fetch.source_key("naval") == data_fetch.source_key("bsgp/naval") == "uci/naval-propulsion-plant"
    assert data_fetch.source_key("diabetes") is None


def test_an_unknown_name_is_refused_with_a_suggestion(tmp_path):
    with pytest.raises(ValueError, match=r"name: unknown dataset 'kin8mn'.*did you mean 'uci/kin8nm'"):
        data_fetch.fetch("kin8mn", tmp_path)
    assert not any(tmp_path.iterdir())


def test_the_command_fetches_and_reports(mirror, tmp_path, capsys):
    assert main(["data", "fetch", "diabetes", "kin8nm", "--dest", str(tmp_path), "--mirror", mirror.as_uri()]) == 0
    out = capsys.readouterr().out
    assert "diabetes ships with scikit-learn" in out and f"fetched uci/kin8nm into {tmp_path}" in out
    unreachable = (tmp_path / "nowhere").as_uri()
    assert main(["data", "fetch", "yacht", "--dest", str(tmp_path), "--mirror", unreachable]) == 1
    assert "error: could not download from file://" in capsys.readouterr().err
    assert main(["data", "fetch", "kin8mn", "--dest", str(tmp_path)]) == 2


def test_a_missing_file_names_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    with pytest.raises(data.DatasetNotFoundError, match="ppl-sparsegp data fetch NAME"):
        data.load_dataset("kin8nm")
