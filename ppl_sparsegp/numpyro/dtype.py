"""THE floating dtype of the NumPyro models (ARCHITECTURE: "one place for each decision").

The parameters and latent sites of a model are created in JAX's default floating dtype: float64 when
``jax_enable_x64`` is on, float32 when it is off, whatever the dtype of the arrays the model was built from. The
models cast the arrays their sites take their dtype from (the inducing inputs Z, per layer for the deep models) with
:func:`as_float` when they are built; the data keep their dtype and are promoted where they meet the parameters.

Why not follow the data's dtype: NumPyro builds some constrained parameters from arrays of the default dtype (the
lower-Cholesky transform of ``u_scale_tril`` scatters into ``jnp.zeros``), so with x64 on a float32 parameter
fails to compile (``lax.scatter requires arguments to have the same dtypes``); and with x64 off JAX turns float64
into float32 anyway. Computing in the default dtype is the one rule that holds for every mix of data dtype and flag.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Array = Any


def float_dtype() -> np.dtype:
    """JAX's default floating dtype now: float64 with ``jax_enable_x64``, else float32."""
    return np.dtype(jnp.result_type(float))


def as_float(x: Array) -> Array:
    """A floating array (numpy or jax, any shape) in :func:`float_dtype`, of the same kind (numpy stays numpy).

    Integer and boolean arrays (labels, masks) and anything that is not an array are returned as they are.
    """
    if isinstance(x, np.ndarray | np.generic) and np.issubdtype(x.dtype, np.floating):
        return x if x.dtype == float_dtype() else np.asarray(x, dtype=float_dtype())
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating):
        return x if x.dtype == float_dtype() else x.astype(float_dtype())
    return x
