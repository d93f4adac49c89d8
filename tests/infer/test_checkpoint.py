"""Checkpoints are data (:mod:`ppl_sparsegp.infer.checkpoint`): no pickle is ever loaded, damage is one clear error,
and a checkpoint is resumed only by a run with the same fingerprint (settings, data, key, initial values)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from numpyro.infer import NUTS

from ppl_sparsegp.infer import checkpoint
from ppl_sparsegp.infer.mcmc import run_mcmc
from ppl_sparsegp.infer.svi import fit_svi


def _model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def _guide(y):
    loc = numpyro.param("loc", 0.0)
    scale = numpyro.param("scale", 1.0, constraint=dist.constraints.positive)
    numpyro.sample("mu", dist.Normal(loc, scale))


Y = jnp.asarray(np.random.default_rng(0).normal(2.0, 1.0, 20))
SVI = dict(optimizer=optax.adam(0.05), progress=False, steps_per_dispatch=10)


def _svi(path, y=Y, **kwargs):
    return fit_svi(_model, _guide, y, checkpoint=path, **{**SVI, "num_steps": 20, **kwargs})


def _mcmc(path, y=Y, **kwargs):
    settings = dict(num_warmup=20, num_samples=20, key=jax.random.PRNGKey(0), checkpoint=path)
    return run_mcmc(NUTS(_model), y, **{**settings, **kwargs})


@pytest.fixture
def no_compilation(monkeypatch):
    """Replace ``jax.jit`` by a trap: anything raised under this fixture was raised before compilation."""

    def trap(*args, **kwargs):
        raise AssertionError("jax.jit was reached before the checkpoint was refused")

    monkeypatch.setattr(jax, "jit", trap)


class _Payload:
    """Unpickling this creates the file ``marker``: what a crafted checkpoint could do with any code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant_pickle(path: Path, marker: Path) -> None:
    """Write a pickle at ``path`` whose loading would create ``marker`` (checked live on a control copy)."""
    control = marker.with_name(marker.name + ".control")
    pickle.loads(pickle.dumps(_Payload(control))).close()
    assert control.exists(), "the payload must be live for the test to mean anything"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps({"format": 1, "payload": _Payload(marker)}))


# --------------------------------------------------------------------------------------------------------
# No pickle


@pytest.mark.parametrize("engine", ["mcmc", "svi"])
def test_a_pickle_at_the_checkpoint_path_is_refused_and_never_run(tmp_path, engine, no_compilation):
    path, marker = tmp_path / ("run.ckpt" if engine == "mcmc" else "run.npz"), tmp_path / "marker"
    plant_pickle(path, marker)
    with pytest.raises(ValueError) as err:
        (_mcmc if engine == "mcmc" else _svi)(path)
    assert not marker.exists()
    assert str(err.value).startswith(f"checkpoint: {path} is not a checkpoint this version can read")
    assert "pickle files, which older versions wrote, are never loaded" in str(err.value)


@pytest.mark.slow
def test_the_mcmc_checkpoint_is_an_npz_whatever_its_suffix(tmp_path):
    path = tmp_path / "mcmc.ckpt"
    result = _mcmc(path, chunk_size=10)
    assert path.read_bytes()[:4] == b"PK\x03\x04"
    with np.load(path, allow_pickle=False) as stored:  # readable without pickle, member by member
        assert int(stored["draws_done"]) == 20 and int(stored["warmup_done"]) == 20
        np.testing.assert_array_equal(stored["samples_0"], result.samples["mu"])
    saved = checkpoint.read(path)
    assert saved.groups["samples"].keys() == {"mu"} and saved.counters == {"warmup_done": 20, "draws_done": 20}
    assert saved.fingerprint["run"]["num_samples"] == 20 and saved.metadata["warmup_seconds"] > 0


# --------------------------------------------------------------------------------------------------------
# The format on its own


class _State(NamedTuple):
    z: dict
    count: jnp.ndarray
    key: jnp.ndarray


def test_save_read_restore_round_trip(tmp_path):
    tree = _State({"layer0.Z": jnp.arange(6.0).reshape(3, 2)}, jnp.asarray(7, jnp.int32), jax.random.PRNGKey(3))
    draws = {"layer0.Z": np.ones((1, 4, 3, 2)), "kernel.variance": np.full((1, 4), 0.5)}
    fingerprint = checkpoint.make_fingerprint({"lr": 0.1}, (np.ones(3),), {}, {"key": [0, 3]})
    path = checkpoint.save(
        tmp_path / "a.npz",
        tree,
        counters={"step": 12},
        arrays={"losses": np.arange(12.0)},
        groups={"samples": draws},
        metadata={"seconds": 1.5},
        fingerprint=fingerprint,
    )
    saved = checkpoint.read(path, fingerprint=fingerprint)
    assert saved.counters == {"step": 12} and saved.metadata == {"seconds": 1.5}
    np.testing.assert_array_equal(saved.arrays["losses"], np.arange(12.0))
    assert list(saved.groups["samples"]) == ["layer0.Z", "kernel.variance"]
    restored = saved.restore(_State({"layer0.Z": jnp.zeros((3, 2))}, jnp.asarray(0, jnp.int32), jax.random.PRNGKey(0)))
    assert jax.tree.structure(restored) == jax.tree.structure(tree)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(tree), strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    with pytest.raises(checkpoint.CheckpointError, match="different model, guide, optimiser or kernel"):
        saved.restore(_State({"layer0.Z": jnp.zeros((4, 2))}, jnp.asarray(0), jax.random.PRNGKey(0)))


def test_data_hash_sees_values_dtypes_and_shapes_not_the_array_library():
    X = np.arange(6.0).reshape(3, 2)
    assert checkpoint.data_sha256(X) == checkpoint.data_sha256(jnp.asarray(X))
    others = [X.astype(np.float32), X.reshape(2, 3), X + 1e-12, X[::-1]]
    assert len({checkpoint.data_sha256(v) for v in [X, *others]}) == 5
    assert checkpoint.data_sha256(X, y=X) != checkpoint.data_sha256(X, X)


# --------------------------------------------------------------------------------------------------------
# Damage


def _good_checkpoint(tmp_path) -> Path:
    path = tmp_path / "run.npz"
    _svi(path)
    return path


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[: len(b) // 2], "is damaged or truncated"),
        (lambda b: b[:200] + bytes(255 - x for x in b[200:400]) + b[400:], "damaged"),
        (lambda b: b"", "is not a checkpoint"),
        (lambda b: b"\x93NUMPY" + b[6:], "is not a checkpoint"),
    ],
    ids=["truncated", "corrupted", "empty", "npy"],
)
def test_a_damaged_checkpoint_is_one_error_naming_the_file(tmp_path, damage, message):
    path = _good_checkpoint(tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(checkpoint.CheckpointError, match=message) as err:
        _svi(path)
    text = str(err.value)
    assert text.startswith(f"checkpoint: {path} ") and "\n" not in text and text.endswith(checkpoint.LIBRARY_HINT)


def _rewrite(path: Path, change) -> None:
    """Rewrite the archive at ``path`` with ``change(name, array)`` applied to every member (header untouched)."""
    with np.load(path, allow_pickle=False) as stored:
        members = {name: change(name, stored[name]) for name in stored.files}
    with open(path, "wb") as fh:
        np.savez(fh, **members)


def _nan_leaves(name, value):
    return np.full_like(value, np.nan) if name.startswith("leaf_") and value.dtype.kind == "f" else value


@pytest.mark.parametrize("engine", ["svi", "mcmc"])
def test_a_checkpoint_whose_state_is_nan_is_refused(tmp_path, engine):
    path = tmp_path / "run.ckpt"
    run = _svi if engine == "svi" else _mcmc
    run(path)
    _rewrite(path, _nan_leaves)
    with pytest.raises(ValueError, match=r"holds NaN or infinite values in leaf \d+ of the saved"):
        run(path)


def test_an_old_checkpoint_without_a_fingerprint_is_refused(tmp_path):
    path = tmp_path / "old.npz"
    np.savez(path, step=10, losses=np.zeros(10), treedef="PyTreeDef(*)", leaf_0=np.zeros(2))
    with pytest.raises(checkpoint.CheckpointError, match="older version, without a fingerprint"):
        _svi(path)


def test_a_checkpoint_with_more_steps_than_asked_is_refused(tmp_path):
    path = _good_checkpoint(tmp_path)
    with pytest.raises(checkpoint.CheckpointError, match="holds 20 steps, more than the 10 asked for"):
        _svi(path, num_steps=10)


# --------------------------------------------------------------------------------------------------------
# Fingerprints


def test_svi_resumes_only_with_the_same_fingerprint(tmp_path, monkeypatch):
    path = tmp_path / "run.npz"
    first = _svi(path, fingerprint={"lr": 0.05, "model": "normal"})
    resumed = _svi(path, num_steps=30, fingerprint={"lr": 0.05, "model": "normal"})
    assert resumed.steps_run == 10 and len(resumed.losses) == 30
    np.testing.assert_array_equal(resumed.losses[:20], first.losses)

    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled before refusing the checkpoint"))
    changes = [
        ({"fingerprint": {"lr": 0.1, "model": "normal"}}, r"\(lr 0.05 -> 0.1\)"),
        ({"fingerprint": {"lr": 0.05}}, r"\(model 'normal' -> \(not recorded\)\)"),
        ({"fingerprint": {"lr": 0.05, "model": "normal"}, "y": Y + 1.0}, r"the data \(sha256 of the model's argu"),
        ({"fingerprint": {"lr": 0.05, "model": "normal"}, "key": 1}, r"\(key 0 -> 1\)"),
        ({"fingerprint": {"lr": 0.05, "model": "normal"}, "init_params": {"loc": 1.0}}, "init_params_sha256 None"),
    ]
    for change, message in changes:
        with pytest.raises(checkpoint.CheckpointMismatchError, match=message) as err:
            _svi(path, num_steps=40, **change)
        assert str(err.value).startswith(f"checkpoint: {path} was written for a different model, data or other")
    assert checkpoint.read(path).counters["step"] == 30  # untouched


def test_mcmc_resumes_only_with_the_same_fingerprint(tmp_path, monkeypatch):
    path = tmp_path / "run.ckpt"
    _mcmc(path, fingerprint={"prior": "normal"})
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled before refusing the checkpoint"))
    changes = [
        ({"fingerprint": {"prior": "wide"}}, r"prior 'normal' -> 'wide'"),
        ({"fingerprint": {"prior": "normal"}, "y": Y[:10]}, "the data"),
        ({"fingerprint": {"prior": "normal"}, "key": jax.random.PRNGKey(1)}, r"key \[0, 0\] -> \[0, 1\]"),
        ({"fingerprint": {"prior": "normal"}, "thinning": 2}, "thinning 1 -> 2"),
    ]
    for change, message in changes:
        with pytest.raises(checkpoint.CheckpointMismatchError, match=message):
            _mcmc(path, **change)


def test_verify_compares_only_the_callers_settings_and_the_data(tmp_path):
    path = tmp_path / "run.npz"
    assert checkpoint.verify(path, {"lr": 0.05}, Y) is None
    _svi(path, fingerprint={"lr": 0.05, "model": "normal"})
    assert checkpoint.verify(path, {"lr": 0.05}, Y).counters == {"step": 20}  # the key and "model" are not compared
    with pytest.raises(checkpoint.CheckpointMismatchError, match=r"\(lr 0.05 -> 0.2\); delete it") as err:
        checkpoint.verify(path, {"lr": 0.2}, Y)
    err.value.hint = "start afresh with --restart"
    assert str(err.value).endswith("(lr 0.05 -> 0.2); start afresh with --restart")
    assert err.value.differences == [("lr", 0.05, 0.2)]
    with pytest.raises(checkpoint.CheckpointMismatchError, match="the data"):
        checkpoint.verify(path, {"lr": 0.05}, Y[:5])
