"""JAX's persistent compilation cache, on by default: a process that compiles the same programs as an earlier one
(the same model, shapes and dtypes, the same jax) loads them from disk instead of compiling them again.

The engines (:func:`ppl_sparsegp.infer.svi.fit_svi`, :func:`ppl_sparsegp.infer.mcmc.run_mcmc`) and the
``ppl-sparsegp`` command call :func:`enable` before they compile; importing the library changes nothing.

Where: ``$PPL_SPARSEGP_COMPILATION_CACHE`` if set to a folder, else ``$XDG_CACHE_HOME/ppl_sparsegp/jax``, else
``~/.cache/ppl_sparsegp/jax``. ``PPL_SPARSEGP_COMPILATION_CACHE=off`` (or ``0``, ``false``, ``no``, ``none``)
leaves the cache off. A folder already chosen through JAX's own ``jax_compilation_cache_dir`` (its
``JAX_COMPILATION_CACHE_DIR`` variable or ``jax.config.update``) is left as it is, as are the two thresholds below
when they no longer hold JAX's defaults. Programs that took at least :data:`MIN_COMPILE_SECONDS` to compile are
written, whatever their size. JAX keys every entry on the program, the compile options and the jax version, so a
stale entry is never loaded; delete the folder to reclaim its space. Like JAX, treat the folder as trusted: a program
written there by someone else runs as yours (the folder is created readable by its owner only).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax

ENV_VARIABLE = "PPL_SPARSEGP_COMPILATION_CACHE"
"""The environment variable that names the cache folder, or switches the cache off."""
OFF = ("off", "0", "false", "no", "none")
"""Values of :data:`ENV_VARIABLE` (any case) that leave the cache off."""
MIN_COMPILE_SECONDS = 0.1
"""Programs that compile faster than this are not written (JAX's default, 1 s, would leave out the SVI
initialisation and the predictions of a small fit, which are most of a warm start's compile time)."""
_JAX_DEFAULTS = {"jax_persistent_cache_min_compile_time_secs": 1.0, "jax_persistent_cache_min_entry_size_bytes": 0}
_SETTINGS = {"jax_persistent_cache_min_compile_time_secs": MIN_COMPILE_SECONDS,
             "jax_persistent_cache_min_entry_size_bytes": -1}  # fmt: skip


def default_directory() -> Path:
    """``$XDG_CACHE_HOME/ppl_sparsegp/jax``, or ``~/.cache/ppl_sparsegp/jax`` when that variable is unset or
    empty."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ppl_sparsegp" / "jax"


def chosen_directory() -> Path | None:
    """The folder that :data:`ENV_VARIABLE` chooses (:func:`default_directory` when it is unset or empty), or None
    when it switches the cache off."""
    value = os.environ.get(ENV_VARIABLE, "").strip()
    if value.lower() in OFF:
        return None
    return Path(value).expanduser() if value else default_directory()


def enable() -> str | None:
    """Turn JAX's persistent compilation cache on in :func:`chosen_directory`, unless JAX's own
    ``jax_compilation_cache_dir`` is already set; cheap to call again. Returns the folder in use (None: off).

    A folder that cannot be created leaves the cache off, with a warning naming :data:`ENV_VARIABLE`.
    """
    current = jax.config.jax_compilation_cache_dir
    if current:  # chosen by the user, or by an earlier call
        return current
    folder = chosen_directory()
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        warnings.warn(
            f"JAX's compilation cache stays off: cannot create {folder} ({err.strerror}); set {ENV_VARIABLE} to a "
            "writable folder, or to off",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    for name, value in _SETTINGS.items():
        if getattr(jax.config, name) == _JAX_DEFAULTS[name]:
            jax.config.update(name, value)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    return str(folder)
