"""JAX's persistent compilation cache (:mod:`ppl_sparsegp.infer.compilation_cache`): where it goes, off when asked,
JAX's own settings respected, and a second process loading what the first compiled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

from ppl_sparsegp.infer import compilation_cache

SETTINGS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


@pytest.fixture
def unset_cache(monkeypatch):
    """JAX's cache settings at their defaults for the test (tests/conftest.py sets a folder of its own), restored
    after it. Nothing compiles in these tests, so the session's cache is untouched."""
    saved = {name: getattr(jax.config, name) for name in SETTINGS}
    jax.config.update("jax_compilation_cache_dir", None)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    monkeypatch.delenv(compilation_cache.ENV_VARIABLE, raising=False)
    yield
    for name, value in saved.items():
        jax.config.update(name, value)


def test_the_variable_names_the_folder(unset_cache, monkeypatch, tmp_path):
    folder = tmp_path / "nested" / "jax-cache"
    monkeypatch.setenv(compilation_cache.ENV_VARIABLE, str(folder))
    assert compilation_cache.enable() == str(folder)
    assert jax.config.jax_compilation_cache_dir == str(folder)
    assert folder.is_dir() and (folder.stat().st_mode & 0o777) == 0o700
    assert jax.config.jax_persistent_cache_min_compile_time_secs == compilation_cache.MIN_COMPILE_SECONDS
    assert jax.config.jax_persistent_cache_min_entry_size_bytes == -1
    assert compilation_cache.enable() == str(folder)  # a second call changes nothing


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false", "none"])
def test_the_variable_switches_the_cache_off(unset_cache, monkeypatch, value):
    monkeypatch.setenv(compilation_cache.ENV_VARIABLE, value)
    assert compilation_cache.enable() is None
    assert jax.config.jax_compilation_cache_dir is None
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 1.0


def test_the_default_folder_is_the_users_cache_directory(unset_cache, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compilation_cache.default_directory() == tmp_path / "xdg" / "ppl_sparsegp" / "jax"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compilation_cache.default_directory() == tmp_path / "home" / ".cache" / "ppl_sparsegp" / "jax"
    assert compilation_cache.enable() == str(tmp_path / "home" / ".cache" / "ppl_sparsegp" / "jax")


def test_jax_settings_the_user_chose_are_kept(unset_cache, monkeypatch, tmp_path):
    monkeypatch.setenv(compilation_cache.ENV_VARIABLE, str(tmp_path / "ours"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 5.0)
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "theirs"))
    assert compilation_cache.enable() == str(tmp_path / "theirs")
    assert not (tmp_path / "ours").exists()
    jax.config.update("jax_compilation_cache_dir", None)
    assert compilation_cache.enable() == str(tmp_path / "ours")
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 5.0


def test_a_folder_that_cannot_be_made_leaves_the_cache_off_with_a_warning(unset_cache, monkeypatch, tmp_path):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(compilation_cache.ENV_VARIABLE, str(tmp_path / "a-file" / "cache"))
    with pytest.warns(RuntimeWarning, match=compilation_cache.ENV_VARIABLE):
        assert compilation_cache.enable() is None
    assert jax.config.jax_compilation_cache_dir is None


FIT = textwrap.dedent(
    """
    import json, sys
    import jax
    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **_: hits.append(event) if event == "/jax/compilation_cache/cache_hits" else None
    )
    jax.config.update("jax_enable_x64", True)
    import numpy as np, optax
    import ppl_sparsegp as psg

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=40)
    gp = psg.SVGP(kernel=psg.kernels.RBF(lengthscale=np.ones(2)), likelihood=psg.likelihoods.Gaussian(0.1), Z=X[:6])
    fit = psg.fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=3, progress=False)
    print(json.dumps({"hits": len(hits), "losses": fit.losses.tolist(), "cache": jax.config.jax_compilation_cache_dir}))
    """
)


def _fit_in_a_new_process(folder: Path) -> dict:
    # Every program written, however fast this machine compiles it (a threshold set by the user is kept).
    env = {**os.environ, compilation_cache.ENV_VARIABLE: str(folder), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", FIT], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.slow
def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    folder = tmp_path / "cache"
    first = _fit_in_a_new_process(folder)
    assert first["cache"] == str(folder)
    entries = sorted(p.name for p in folder.iterdir())
    assert any(name.startswith("jit_init") for name in entries), entries  # fit_svi's initialisation was written
    second = _fit_in_a_new_process(folder)
    assert second["hits"] > first["hits"]  # JAX reports loading from the persistent cache
    assert second["losses"] == first["losses"]  # the same numbers
