"""Tests for ppl_sparsegp.data: locating, verifying and loading datasets; splits; standardisation."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split

from ppl_sparsegp import data
from ppl_sparsegp.data import (
    DataIntegrityError,
    Dataset,
    DatasetNotFoundError,
    Standardizer,
    data_dir,
    load_bsgp_uci,
    load_dataset,
    load_embedded,
    load_mnist,
    load_oilflow,
    load_raetsch,
    load_snelson,
    load_uci,
    load_uci_classification,
    load_uci_wilson,
    standardize,
)


def need(key: str) -> Path:
    """The folder of dataset ``key``, or skip the test when it is not in the data folder."""
    root = data_dir()
    folder = root / key
    if not (root / "manifest.json").is_file() or not folder.is_dir():
        pytest.skip(f"dataset {key!r} not found under {root} (set {data.ENV_VAR} to the data folder)")
    return folder


def raw(key: str, filename: str, **kwargs) -> np.ndarray:
    return np.loadtxt(need(key) / filename, **kwargs)


# ------------------------------------------------------------------------------------------------------
# Locating the data folder


def test_data_dir_prefers_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path / "mine"))
    assert data_dir() == tmp_path / "mine"


def test_data_dir_uses_shared_beside_repo(monkeypatch, tmp_path):
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    (tmp_path / "shared" / "data").mkdir(parents=True)
    monkeypatch.setattr(data, "_REPO_ROOT", tmp_path / "checkout")
    assert data_dir() == tmp_path / "shared" / "data"


def test_data_dir_falls_back_to_cwd_then_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    monkeypatch.setattr(data, "_REPO_ROOT", tmp_path / "nowhere" / "checkout")
    work = tmp_path / "project" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data_dir() == tmp_path / "xdg" / "ppl_sparsegp" / "data"
    (tmp_path / "project" / "shared" / "data").mkdir(parents=True)
    assert data_dir() == tmp_path / "project" / "shared" / "data"


def test_missing_dataset_names_env_var_and_path(monkeypatch, tmp_path):
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path / "empty"))
    with pytest.raises(DatasetNotFoundError) as info:
        load_uci("yacht")
    assert isinstance(info.value, FileNotFoundError)
    message = str(info.value)
    assert data.ENV_VAR in message
    assert str(tmp_path / "empty" / "uci" / "yacht" / "n_splits.txt") in message


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ValueError, match="unknown dataset 'kin9nm'.*uci/kin8nm.*wilson/elevators"):
        load_dataset("kin9nm")
    with pytest.raises(ValueError, match="unknown uci dataset 'elevators'; known: bostonHousing"):
        load_uci("elevators")
    with pytest.raises(ValueError, match="unknown raetsch dataset 'diabetis'"):
        load_raetsch("diabetis")


def test_a_misspelt_name_is_answered_with_the_closest_known_ones():
    with pytest.raises(ValueError, match=r"unknown dataset 'kin9nm'; known: .*; did you mean 'uci/kin8nm'\?$"):
        load_dataset("kin9nm")
    with pytest.raises(ValueError, match=r"did you mean 'embedded/breast_cancer' or "):
        load_dataset("breast_cancr")
    with pytest.raises(ValueError, match=r"unknown uci dataset 'concret'; known: .*; did you mean 'concrete'\?$"):
        load_uci("concret")
    with pytest.raises(ValueError) as far:
        load_dataset("xyzzy")
    assert "did you mean" not in str(far.value)


def test_known_datasets_match_the_manifest():
    root = need("uci").parent
    manifest = json.loads((root / "manifest.json").read_text())["datasets"]
    ours = {
        n.replace("wilson/", "uci_wilson/") for n in data.known_datasets() if not n.startswith(("bsgp/", "embedded/"))
    }
    assert ours == set(manifest)


# ------------------------------------------------------------------------------------------------------
# Integrity checks


@pytest.fixture
def yacht_copy(monkeypatch, tmp_path) -> Path:
    """A private copy of uci/yacht plus manifest.json, with PPL_SPARSEGP_DATA_DIR pointing at it."""
    source = need("uci/yacht")
    root = tmp_path / "data"
    shutil.copytree(source, root / "uci" / "yacht")
    shutil.copy(source.parent.parent / "manifest.json", root / "manifest.json")
    monkeypatch.setenv(data.ENV_VAR, str(root))
    return root


def test_sha256_check_catches_a_tampered_copy(yacht_copy):
    clean = load_uci("yacht", split=3)
    np.testing.assert_array_equal(clean.X_train, raw("uci/yacht", "data.txt")[clean.meta["train_index"], :6])
    path = yacht_copy / "uci" / "yacht" / "data.txt"
    text = path.read_text()
    path.write_text(text.replace("0.11", "0.12", 1))  # same size, one digit changed
    with pytest.raises(DataIntegrityError, match=rf"{path}.*does not match manifest\.json"):
        load_uci("yacht", split=3)


def test_file_missing_from_manifest_is_refused(yacht_copy):
    manifest_path = yacht_copy / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["datasets"]["uci/yacht"]["files"]["index_test_0.txt"]
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(DataIntegrityError, match="index_test_0.txt is not listed in"):
        load_uci("yacht", split=0)


@pytest.mark.parametrize(
    "content",
    ['{"format_version": 1, "datasets": {"uci/yac', "\x00\xff garbage", '{"format_version": 1}', '{"datasets": [1]}'],
    ids=["truncated", "binary", "no-datasets", "wrong-type"],
)
def test_a_damaged_manifest_is_a_data_integrity_error_naming_it(yacht_copy, content):
    """Not a ValueError (the CLI would blame --data for it, and did) and not a KeyError traceback."""
    manifest = yacht_copy / "manifest.json"
    manifest.write_bytes(content.encode("latin-1"))
    with pytest.raises(
        DataIntegrityError, match=rf"^{re.escape(str(manifest.resolve()))} is not a readable data manifest .*restore"
    ):
        load_uci("yacht", split=0)


def test_verification_is_cached_per_file(yacht_copy, monkeypatch):
    calls = []
    real_sha256 = data.hashlib.sha256

    class CountingHashlib:
        @staticmethod
        def sha256(payload):
            calls.append(len(payload))
            return real_sha256(payload)

    monkeypatch.setattr(data, "hashlib", CountingHashlib)
    load_uci("yacht", split=0)
    assert len(calls) == 6  # n_splits, data, features, target, train index, test index
    load_uci("yacht", split=0)
    assert len(calls) == 6
    path = yacht_copy / "uci" / "yacht" / "data.txt"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    load_uci("yacht", split=0)
    assert len(calls) == 7  # a touched file is hashed again


# ------------------------------------------------------------------------------------------------------
# Loaders on the real files


def test_uci_yacht_every_split_partitions_the_rows():
    table = raw("uci/yacht", "data.txt")
    for split in range(20):
        ds = load_uci("yacht", split)
        train, test = ds.meta["train_index"], ds.meta["test_index"]
        assert np.intersect1d(train, test).size == 0
        np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(308))
        np.testing.assert_array_equal(ds.X_test, table[test, :6])
        np.testing.assert_array_equal(ds.y_train, table[train, 6])
    first = load_uci("yacht", 0)
    assert (first.X_train.shape, first.X_test.shape) == ((277, 6), (31, 6))
    assert first.name == "uci/yacht" and first.task == "regression" and first.meta["n_splits"] == 20


def test_uci_split_range_is_validated_per_dataset():
    need("uci/protein-tertiary-structure")
    with pytest.raises(ValueError, match=r"split must be an integer in \[0, 5\)"):
        load_uci("protein", split=5)
    with pytest.raises(ValueError, match=r"split must be an integer in \[0, 20\)"):
        load_uci("yacht", split=-1)


def test_uci_aliases_and_dispatcher():
    need("uci/bostonHousing")
    a, b = load_dataset("boston", split=2), load_uci("bostonHousing", split=2)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    assert a.X_train.shape == (455, 13) and a.X_test.shape == (51, 13)
    c = load_dataset("uci/concrete")
    assert c.name == "uci/concrete" and c.X_train.shape == (927, 8)


def test_uci_wilson_split_from_test_mask():
    need("uci_wilson/elevators")
    ds = load_dataset("wilson/elevators", split=0)
    assert ds.name == "uci_wilson/elevators"
    assert ds.X_train.shape == (14940, 18) and ds.X_test.shape == (1659, 18)
    assert np.intersect1d(ds.meta["train_index"], ds.meta["test_index"]).size == 0
    same = load_dataset("uci_wilson/elevators", split=0)
    np.testing.assert_array_equal(same.y_test, ds.y_test)
    with pytest.raises(ValueError, match=r"split must be an integer in \[0, 10\)"):
        load_uci_wilson("elevators", split=10)
    assert load_dataset("housing").name == "uci_wilson/housing"


def test_raetsch_labels_mapped_to_01():
    need("raetsch/image")
    ds = load_raetsch("image", realisation=4)
    assert ds.X_train.shape == (1300, 18) and ds.X_test.shape == (1010, 18)
    labels = raw("raetsch/image", "image_train_labels_4.asc.gz")
    np.testing.assert_array_equal(ds.y_train, (labels == 1).astype(np.int64))
    assert ds.task == "binary" and set(np.unique(ds.y_test)) == {0, 1}
    assert load_dataset("raetsch/image", split=3).meta["realisation"] == 4
    with pytest.raises(ValueError, match=r"realisation must be an integer in \[1\] for raetsch/twonorm"):
        load_raetsch("twonorm", realisation=2)
    with pytest.raises(ValueError, match=r"realisation must be an integer in \[1, 2, 3"):
        load_raetsch("banana", realisation=0)


@pytest.mark.parametrize(
    ("name", "n", "d", "positives"),
    [("magic", 19020, 10, 12332), ("htru2", 17898, 8, 1639), ("eeg", 14980, 14, 6723)],
)
def test_uci_classification_binary_counts_and_stratification(name, n, d, positives):
    need(f"uci_classification/{name}")
    ds = load_uci_classification(name, split=1)
    assert ds.X_train.shape[1] == d and ds.task == "binary"
    assert ds.X_train.shape[0] + ds.X_test.shape[0] == n
    assert ds.X_test.shape[0] == int(np.ceil(0.2 * n))
    assert ds.y_train.sum() + ds.y_test.sum() == positives
    assert abs(ds.y_test.sum() - 0.2 * positives) <= 1  # stratified
    assert np.intersect1d(ds.meta["train_index"], ds.meta["test_index"]).size == 0


def test_uci_classification_letter_and_seeds():
    need("uci_classification/letter")
    ds = load_dataset("letter", split=0)
    assert ds.task == "multiclass" and ds.X_train.shape == (16000, 16)
    counts = np.bincount(np.concatenate([ds.y_train, ds.y_test]))
    assert counts.shape == (26,) and counts.sum() == 20000
    assert counts[0] == 789  # 'A' count in the UCI description
    other = load_uci_classification("letter", split=1, test_size=0.1)
    assert other.X_test.shape == (2000, 16)
    assert not np.array_equal(other.meta["test_index"][:50], ds.meta["test_index"][:50])
    with pytest.raises(ValueError, match="test_size must be in"):
        load_uci_classification("letter", test_size=1.5)


def test_mnist():
    need("mnist")
    ds = load_mnist()
    assert ds.X_train.shape == (60000, 784) and ds.X_test.shape == (10000, 784)
    assert ds.X_train.dtype == np.float64 and ds.X_train.min() == 0.0 and ds.X_train.max() == 1.0
    assert (ds.y_train[0], ds.y_test[0]) == (5, 7)  # the well-known first labels
    assert np.bincount(ds.y_train).tolist()[:3] == [5923, 6742, 5958]
    with pytest.raises(ValueError, match="single official split"):
        load_dataset("mnist", split=1)


def test_oilflow_and_snelson():
    need("oilflow")
    oil = load_dataset("oilflow")
    assert oil.task == "unsupervised" and oil.X_train.shape == (1000, 12)
    assert np.bincount(oil.y_train).tolist() == [343, 316, 341]
    assert oil.meta["X_valid"].shape == (1000, 12) and oil.meta["y_valid"].shape == (1000,)
    np.testing.assert_array_equal(load_oilflow().X_test, raw("oilflow", "DataTst.txt"))
    need("snelson")
    sn = load_snelson()
    assert sn.X_train.shape == (200, 1) and sn.y_train.shape == (200,) and sn.y_test is None
    assert sn.X_test.shape == (301, 1)
    np.testing.assert_allclose(sn.X_test[[0, -1], 0], [-3.0, 10.0])
    assert 0.05 < sn.X_train.min() < sn.X_train.max() < 5.98


def test_embedded_datasets():
    diabetes = load_dataset("diabetes", split=0)
    assert diabetes.task == "regression" and diabetes.X_train.shape == (353, 10)
    assert diabetes.X_test.shape == (89, 10) and diabetes.y_train.dtype == np.float64
    cancer = load_embedded("breast_cancer", split=3)
    assert cancer.task == "binary" and cancer.X_train.shape == (455, 30)
    assert set(np.unique(cancer.y_train)) == {0, 1}
    assert cancer.y_train.sum() + cancer.y_test.sum() == 357  # benign cases
    digits = load_embedded("digits", split=0)
    assert digits.task == "multiclass" and digits.X_test.shape == (360, 64)
    assert np.unique(digits.y_train).tolist() == list(range(10))
    train, _ = train_test_split(np.arange(569), test_size=0.2, random_state=3)
    np.testing.assert_array_equal(cancer.meta["train_index"], train)
    with pytest.raises(ValueError, match="split must be a non-negative integer"):
        load_embedded("digits", split=-1)


# ------------------------------------------------------------------------------------------------------
# BSGP protocol


@pytest.mark.parametrize(
    ("name", "n_train", "d", "y_shape_tail"),
    [
        ("boston", 404, 13, ()),
        ("concrete", 824, 8, ()),
        ("kin8nm", 6553, 8, ()),
        ("naval", 9547, 16, (2,)),
        ("power", 7654, 4, ()),
        ("yacht", 246, 6, ()),
    ],
)
def test_bsgp_shapes(name, n_train, d, y_shape_tail):
    need("uci")
    ds = load_bsgp_uci(name, fold=0)
    assert ds.X_train.shape == (n_train, d)
    assert ds.y_train.shape == (n_train, *y_shape_tail)
    assert ds.name == f"bsgp/{name}" and ds.meta["x_standardized"]


def test_bsgp_naval_two_outputs_whole_data_standardisation():
    need("uci/naval-propulsion-plant")
    ds = load_bsgp_uci("naval", fold=5)
    table = raw("uci/naval-propulsion-plant", "data.txt")
    X_all = np.concatenate([ds.X_train, ds.X_test])
    np.testing.assert_allclose(X_all.mean(axis=0), 0.0, atol=1e-9)
    std = X_all.std(axis=0)
    np.testing.assert_allclose(std[[8, 11]], 0.0, atol=1e-12)  # the two constant columns
    np.testing.assert_allclose(np.delete(std, [8, 11]), 1.0, rtol=1e-9)
    np.testing.assert_allclose(ds.meta["x_mean"], table[:, :16].mean(axis=0))
    # y is raw (both decay coefficients), rows follow sklearn's split of the full arrays
    _, _, y_tr, y_te = train_test_split(table[:, :16], table[:, 16:18], test_size=0.2, random_state=5)
    np.testing.assert_array_equal(ds.y_train, y_tr)
    np.testing.assert_array_equal(ds.y_test, y_te)


def test_bsgp_energy_has_only_heating_load():
    need("uci/energy")
    with pytest.warns(UserWarning, match="paper models 2 outputs but uci/energy/data.txt gives 1"):
        ds = load_bsgp_uci("energy", fold=1)
    assert ds.y_train.shape == (614,) and ds.meta["n_outputs_in_paper"] == 2
    np.testing.assert_allclose(ds.y_train.mean(), 22.3, atol=1.0)  # heating load, kWh/m^2


def _energy_folder(tmp_path: Path, monkeypatch, cooling: np.ndarray | None, heating_offset: float = 0.0) -> None:
    """A data folder holding uci/energy's data.txt and index_features.txt (copied) and, unless ``cooling`` is None,
    ENB2012_data.csv (X1..X8, Y1 + ``heating_offset``, Y2 = ``cooling``), each listed in its manifest.json."""
    source = need("uci/energy")
    folder = tmp_path / "uci" / "energy"
    folder.mkdir(parents=True)
    names = ["data.txt", "index_features.txt"]
    for name in names:
        (folder / name).write_bytes((source / name).read_bytes())
    if cooling is not None:
        table = np.loadtxt(source / "data.txt")
        table[:, 8] += heating_offset
        rows = [",".join(f"X{i}" for i in range(1, 9)) + ",Y1,Y2"]
        rows += [",".join(f"{v:.6g}" for v in (*row, c)) for row, c in zip(table, cooling, strict=True)]
        (folder / data.ENERGY_BOTH_FILE).write_text("\n".join(rows) + "\n")
        names.append(data.ENERGY_BOTH_FILE)
    files = {}
    for name in names:
        content = (folder / name).read_bytes()
        files[name] = {"sha256": hashlib.sha256(content).hexdigest(), "bytes": len(content)}
    (tmp_path / "manifest.json").write_text(json.dumps({"datasets": {"uci/energy": {"files": files}}}))
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))


def test_bsgp_energy_gives_the_cooling_load_and_both_targets_from_the_uci_original(tmp_path, monkeypatch):
    heating = raw("uci/energy", "data.txt")[:, 8]
    cooling = np.round(1.1 * heating + 2.0 + np.sin(np.arange(len(heating))), 2)  # a made-up Y2, row by row
    _energy_folder(tmp_path, monkeypatch, cooling)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # two outputs as in the paper: no warning
        both = load_bsgp_uci("energy", fold=1, target="both")
    with pytest.warns(UserWarning, match="gives 1"):
        default = load_bsgp_uci("energy", fold=1)
    with pytest.warns(UserWarning, match="gives 1"):
        cool = load_bsgp_uci("energy", fold=1, target="cooling")
    assert both.y_train.shape == (614, 2) and both.y_test.shape == (154, 2) and both.meta["target"] == "both"
    np.testing.assert_array_equal(both.y_train[:, 0], default.y_train)  # heating, the data.txt target
    np.testing.assert_array_equal(both.y_train[:, 1], cool.y_train)
    np.testing.assert_array_equal(both.X_train, default.X_train)
    np.testing.assert_array_equal(both.y_train[:, 1], cooling[both.meta["train_index"]])


def test_bsgp_energy_targets_refuse_bad_values_a_missing_or_mismatched_file(tmp_path, monkeypatch):
    for name, target, match in (("energy", "cool", "target: expected one of"), ("boston", "heating", "only energy")):
        with pytest.raises(ValueError, match=match):
            load_bsgp_uci(name, fold=0, target=target)
    _energy_folder(tmp_path / "without", monkeypatch, None)
    with pytest.raises(DatasetNotFoundError, match="target='both': the cooling load .Y2. is not in uci/energy/data"):
        load_bsgp_uci("energy", fold=0, target="both")
    heating = raw("uci/energy", "data.txt")[:, 8]
    _energy_folder(tmp_path / "shifted", monkeypatch, heating, heating_offset=0.5)
    with pytest.raises(DataIntegrityError, match="matching data.txt's inputs and heating load"):
        load_bsgp_uci("energy", fold=0, target="cooling")


def test_bsgp_standardize_keeps_x_and_scales_y_with_training_statistics():
    need("uci/yacht")
    ds = load_bsgp_uci("yacht", fold=2)
    std_ds, scaler = standardize(ds)
    np.testing.assert_array_equal(std_ds.X_train, ds.X_train)
    np.testing.assert_allclose(scaler.y_mean, ds.y_train.mean())
    np.testing.assert_allclose(std_ds.y_train.mean(), 0.0, atol=1e-12)
    np.testing.assert_allclose(std_ds.y_train.std(), 1.0)
    np.testing.assert_allclose(scaler.inverse_mean(std_ds.y_test), ds.y_test)
    with pytest.raises(ValueError, match="fold must be a non-negative integer"):
        load_bsgp_uci("yacht", fold=-1)


# ------------------------------------------------------------------------------------------------------
# Standardizer


def test_standardizer_round_trip_and_constant_columns():
    rng = np.random.default_rng(0)
    X = rng.normal(3.0, 2.0, size=(50, 4))
    X[:, 2] = 0.998  # constant; its float std is round-off, not 0
    y = rng.normal(-1.0, 5.0, size=50)
    scaler = Standardizer.fit(X, y)
    Xs = scaler.transform_x(X)
    np.testing.assert_allclose(Xs.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(Xs.std(axis=0), [1.0, 1.0, 0.0, 1.0], atol=1e-12)
    assert scaler.x_scale[2] == 1.0
    ys = scaler.transform_y(y)
    np.testing.assert_allclose(scaler.inverse_mean(ys), y)
    np.testing.assert_allclose(scaler.inverse_var(np.ones(3)), np.full(3, y.std() ** 2))
    identity = Standardizer.fit(X, None, standardize_x=False)
    np.testing.assert_array_equal(identity.transform_x(X), X)
    np.testing.assert_array_equal(identity.transform_y(y), y)


def test_log_density_jacobian_matches_scipy():
    rng = np.random.default_rng(1)
    y = rng.normal(10.0, 3.0, size=40)
    scaler = Standardizer.fit(rng.normal(size=(40, 2)), y)
    mu_s, var_s = rng.normal(size=40), rng.uniform(0.2, 2.0, size=40)
    ys = scaler.transform_y(y)
    logp_std = norm.logpdf(ys, mu_s, np.sqrt(var_s))
    expected = norm.logpdf(y, scaler.inverse_mean(mu_s), np.sqrt(scaler.inverse_var(var_s)))
    np.testing.assert_allclose(scaler.log_density_to_original(logp_std), expected, rtol=1e-12)


def test_log_density_jacobian_multi_output():
    rng = np.random.default_rng(2)
    y = rng.normal([1.0, -50.0], [0.01, 40.0], size=(30, 2))
    scaler = Standardizer.fit(rng.normal(size=(30, 3)), y)
    assert scaler.y_mean.shape == (2,) and scaler.y_scale.shape == (2,)
    mu_s, var_s = rng.normal(size=(30, 2)), rng.uniform(0.5, 1.5, size=(30, 2))
    logp_std = norm.logpdf(scaler.transform_y(y), mu_s, np.sqrt(var_s))  # [N, P]
    expected = norm.logpdf(y, scaler.inverse_mean(mu_s), np.sqrt(scaler.inverse_var(var_s)))
    np.testing.assert_allclose(scaler.log_density_to_original(logp_std), expected, rtol=1e-12)
    joint = scaler.log_density_to_original(logp_std.sum(axis=1), joint_over_outputs=True)
    np.testing.assert_allclose(joint, expected.sum(axis=1), rtol=1e-12)


def test_standardizer_accepts_jax_predictions():
    import jax.numpy as jnp

    scaler = Standardizer.fit(np.arange(6.0)[:, None], np.array([1.0, 3.0, 5.0, 7.0, 9.0, 11.0]))
    out = scaler.inverse_mean(jnp.zeros(3))
    np.testing.assert_allclose(np.asarray(out), 6.0)


def test_standardize_leaves_class_labels_alone():
    ds = load_embedded("breast_cancer", split=0)
    std_ds, scaler = standardize(ds)
    np.testing.assert_array_equal(std_ds.y_test, ds.y_test)
    np.testing.assert_allclose(std_ds.X_train.mean(axis=0), 0.0, atol=1e-10)
    np.testing.assert_allclose(std_ds.X_test, (ds.X_test - scaler.x_mean) / scaler.x_scale)
    assert scaler.y_scale.shape == () and std_ds.meta["x_standardized"]


def test_dataset_validates_its_arrays():
    X, y = np.zeros((5, 2)), np.zeros(5)
    with pytest.raises(ValueError, match="task must be one of 'regression'"):
        Dataset(X, y, X, y, name="toy", task="ranking")
    with pytest.raises(ValueError, match="X_test must have the same number of columns as X_train"):
        Dataset(X, y, np.zeros((3, 4)), np.zeros(3), name="toy", task="regression")
    with pytest.raises(ValueError, match="len\\(X_train\\) = 5 but len\\(y_train\\) = 4"):
        Dataset(X, np.zeros(4), X, y, name="toy", task="regression")
    assert Dataset(X, np.zeros((5, 3)), X, np.zeros((5, 3)), "toy", "regression").num_outputs == 3


def test_no_warning_for_single_output_bsgp():
    need("uci/concrete")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_bsgp_uci("concrete", fold=7).y_test.shape == (206,)


def test_random_split_pools_the_rows_and_draws_a_reproducible_split():
    ds = data.load_dataset("diabetes", 0)
    again = data.random_split(ds, 0.2, seed=3)
    assert again.X_test.shape[0] == round(0.2 * 442) and again.X_train.shape[0] + again.X_test.shape[0] == 442
    pooled = np.concatenate([ds.X_train, ds.X_test])
    rows = {tuple(r) for r in pooled}
    assert {tuple(r) for r in np.concatenate([again.X_train, again.X_test])} == rows
    np.testing.assert_array_equal(data.random_split(ds, 0.2, seed=3).X_test, again.X_test)
    assert not np.array_equal(data.random_split(ds, 0.2, seed=4).X_test, again.X_test)
    with pytest.raises(ValueError, match="test_fraction"):
        data.random_split(ds, 1.0)


def test_a_local_large_set_is_read_checked_and_split(tmp_path):
    rng = np.random.default_rng(0)
    table = np.column_stack([rng.normal(size=(50, 8)), rng.choice([-1.0, 1.0], 50)])
    np.save(tmp_path / "airline.npy", table)
    ds = data.load_local("airline", tmp_path / "airline.npy", seed=1)
    assert ds.task == "binary" and ds.X_train.shape == (40, 8) and ds.X_test.shape == (10, 8)
    assert set(np.unique(np.concatenate([ds.y_train, ds.y_test]))) == {0, 1}
    np.savetxt(tmp_path / "song.csv", rng.normal(size=(20, 12)), delimiter=",")
    with pytest.raises(ValueError, match=r"song.csv: found shape \(20, 12\); song expects N rows of 90 inputs"):
        data.load_local("song", tmp_path / "song.csv")
    with pytest.raises(FileNotFoundError, match=r"3droad expects N rows of 3 inputs"):
        data.load_local("3droad", tmp_path / "absent.csv")
    with pytest.raises(ValueError, match="unknown local dataset 'sng'"):
        data.load_local("sng", tmp_path / "song.csv")


def test_a_csv_of_the_users_is_split_with_the_target_named(tmp_path):
    frame = load_diabetes(as_frame=True).frame
    path = tmp_path / "mine.csv"
    frame.to_csv(path, index=False)
    ds = data.load_dataset(str(path), 3, target="target")
    assert ds.task == "regression" and ds.name == str(path) and ds.meta["target"] == "target"
    assert ds.X_train.shape == (354, 10) and ds.X_test.shape == (88, 10)
    rows = np.concatenate([ds.meta["train_index"], ds.meta["test_index"]])
    np.testing.assert_array_equal(np.sort(rows), np.arange(442))
    np.testing.assert_array_equal(ds.X_train, frame.drop(columns=["target"]).to_numpy()[ds.meta["train_index"]])
    np.testing.assert_array_equal(ds.y_test, frame["target"].to_numpy()[ds.meta["test_index"]])
    again = data.load_table(path, "target", split=3)
    np.testing.assert_array_equal(again.meta["train_index"], ds.meta["train_index"])


def test_a_parquet_file_reads_as_the_same_csv(tmp_path):
    frame = load_diabetes(as_frame=True).frame
    frame.to_csv(tmp_path / "mine.csv", index=False)
    frame.to_parquet(tmp_path / "mine.parquet", index=False)
    from_csv = data.load_dataset(str(tmp_path / "mine.csv"), 2, target="target")
    from_parquet = data.load_dataset(str(tmp_path / "mine.parquet"), 2, target="target")
    for field in ("X_train", "y_train", "X_test", "y_test"):
        np.testing.assert_array_equal(getattr(from_parquet, field), getattr(from_csv, field))
    with pytest.raises(ValueError, match=r"mine.parquet has no column 'price'; columns: age, sex"):
        data.load_dataset(str(tmp_path / "mine.parquet"), target="price")


def test_a_table_whose_target_has_two_classes_is_binary(tmp_path):
    rng = np.random.default_rng(0)
    X, labels = rng.normal(size=(50, 3)), np.where(rng.random(50) < 0.5, -1.0, 1.0)
    path = tmp_path / "pm1.npz"
    np.savez(path, X=X, label=labels)
    ds = data.load_table(path, "label")
    assert ds.task == "binary" and ds.y_train.dtype == np.int64
    assert set(np.unique(np.concatenate([ds.y_train, ds.y_test]))) == {0, 1}


@pytest.mark.parametrize(
    "case, message",
    [
        ("no target", "target: {path} is a table of named columns; name its target column (--target COL)"),
        ("unknown target", "target: {path} has no column 'price'; columns: a, b"),
        ("text column", "{path}: column 'b' is not numeric"),
        ("missing value", "{path}: missing or non-finite values"),
        ("suffix", "{path}: expected a .csv or .parquet or .npz file"),
        (
            "target for a named dataset",
            "target: applies to a .csv, .parquet or .npz file of yours, not to the dataset 'diabetes'",
        ),
    ],
)
def test_a_bad_table_is_refused_naming_the_file_and_column(case, message, tmp_path):
    path = tmp_path / ("mine.txt" if case == "suffix" else "mine.csv")
    body = {"text column": "a,b\n1,x\n2,y\n", "missing value": "a,b\n1,2\n3,\n"}.get(case, "a,b\n1,2\n3,4\n")
    path.write_text(body)
    target = {"no target": None, "unknown target": "price"}.get(case, "a")
    name = "diabetes" if case == "target for a named dataset" else str(path)
    load = data.load_table if case == "suffix" else data.load_dataset  # a .txt is no table path to load_dataset
    with pytest.raises(ValueError) as err:
        load(name, target=target)
    assert str(err.value) == message.format(path=path)


def test_as_multiclass_reads_whole_number_targets_as_classes_and_refuses_the_rest():
    X = np.random.default_rng(0).normal(size=(12, 2))
    labels = np.arange(12, dtype=np.float64) % 3
    ds = data.Dataset(X[:8], labels[:8], X[8:], labels[8:], name="t", task="regression")
    classes = data.as_multiclass(ds)
    assert classes.task == "multiclass" and classes.num_classes == 3 and classes.y_train.dtype == np.int64
    np.testing.assert_array_equal(classes.y_test, labels[8:])
    assert ds.num_classes is None and data.load_dataset("digits").num_classes == 10
    for bad, message in [(labels + 0.5, "got values such as 0.5, 1.5, 2.5"), (labels - 1, "got values such as -1"),
                         (labels * 2, "every class present; got 3 distinct labels between 0 and 4")]:  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(message)):
            data.as_multiclass(data.Dataset(X[:8], bad[:8], X[8:], bad[8:], name="t", task="regression"))


def _idx(values: np.ndarray) -> bytes:
    """An IDX file: magic 2049 (labels [n]) or 2051 (images [n, 2, 2]), the dimensions, the bytes."""
    dims = values.shape if values.ndim == 1 else (values.shape[0], 2, 2)
    header = (2048 + len(dims)).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims)
    return header + values.astype(np.uint8).tobytes()


def test_fashion_mnist_reads_a_folder_of_its_standard_files_plain_or_gzipped(tmp_path):
    import gzip

    images, labels = np.arange(12).reshape(3, 4) * 20, np.array([0, 9, 4])
    for name, values in zip(data.IDX_FILES, (images, labels, images[:2], labels[:2]), strict=True):
        raw = _idx(values)
        (tmp_path / (name + ".gz" if "train" in name else name)).write_bytes(
            gzip.compress(raw) if "train" in name else raw
        )
    ds = data.load_fashion_mnist(tmp_path)
    np.testing.assert_allclose(ds.X_train, images / 255.0)
    assert ds.y_train.tolist() == [0, 9, 4] and ds.X_test.shape == (2, 4) and ds.task == "multiclass"
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="no t10k-labels-idx1-ubyte or t10k-labels-idx1-ubyte.gz"):
        data.load_fashion_mnist(tmp_path)


def test_cifar10_reads_the_binary_release_and_scales_to_plus_minus_one(tmp_path):
    rng = np.random.default_rng(0)
    records = {name: rng.integers(0, 256, (2, 3073), dtype=np.uint8) for name in data.CIFAR10_FILES}
    for name, values in records.items():
        (tmp_path / name).write_bytes(values.tobytes())
    ds = data.load_cifar10(tmp_path)
    assert ds.X_train.shape == (10, 3072) and ds.X_test.shape == (2, 3072)
    np.testing.assert_allclose(ds.X_test, records["test_batch.bin"][:, 1:] / 127.5 - 1.0)
    assert ds.y_train.tolist() == np.concatenate([records[f"data_batch_{i}.bin"][:, 0] for i in range(1, 6)]).tolist()
    (tmp_path / "data_batch_3.bin").write_bytes(b"\x00" * 100)
    with pytest.raises(data.DataIntegrityError, match="not a whole number of 3073-byte records"):
        data.load_cifar10(tmp_path)
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-bin"):
        data.load_cifar10(tmp_path / "elsewhere")
