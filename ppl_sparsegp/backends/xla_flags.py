"""The XLA:CPU setting the library needs for correct float32 results, applied when ``ppl_sparsegp`` is imported.

jaxlib 0.10.2 hands float32 reductions and their neighbours to YNNPACK fusions (``__ynn_fusion`` in the optimised
HLO), on by default, and some of those fusions compute wrong values. Seen here on 2026-11-29: under ``jax.jit``,
``jnp.sum(W * x[:, None, :], -1)[..., None] + t`` (W [10, 10], x [n, 10], t [20]) is right in its first 32,768
output elements and wrong after them, by up to the size of the values themselves; the same with ``x[:, None, :] *
W`` is right, and float64 is right. :meth:`ppl_sparsegp.core.likelihoods.RobustMax.class_probabilities` has that
shape, so compiled robust-max predictions of 10 classes for more than 163 points at once were mostly wrong, while
the training loss was not. Upstream reports of the same fusion (crashes and hangs of broadcast-multiply-reduce,
fixed in XNNPACK after 0.10.2 was built): jax-ml/jax#39257 and #40412.

:func:`apply` appends :data:`FLAG` (an empty list of YNN fusion types: none) to ``XLA_FLAGS``, which XLA reads when
jax starts its CPU backend, so it takes effect where ``ppl_sparsegp`` is imported before jax first computes
anything. It is added only where jaxlib is 0.10.2 or newer (:data:`FIRST_AFFECTED`; older releases may not know
the flag, and XLA refuses unknown flags at start-up) and where ``XLA_FLAGS`` does not already name
``xla_cpu_experimental_ynn_fusion_type``: a value the user set is kept. Cost on this 2-core CPU: the float32
SVGP step is about 10-15 % slower at M = 64-1024 (``benchmarks/README.md``, "YNN fusions off").
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import warnings

NAME = "xla_cpu_experimental_ynn_fusion_type"
"""The XLA flag that lists the kinds of YNNPACK fusion XLA:CPU may form."""
FLAG = f"--{NAME}="
"""The flag with an empty list: no YNNPACK fusions."""
FIRST_AFFECTED = (0, 10, 2)
"""The first jaxlib release that forms YNNPACK fusions by default."""


def jaxlib_version() -> tuple[int, ...] | None:
    """The installed jaxlib's (major, minor, patch), read from its package metadata without importing it; None
    where jaxlib is not installed."""
    try:
        version = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return None
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def backend_started() -> bool:
    """Whether jax has already started a backend in this process (then ``XLA_FLAGS`` is no longer read)."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src.xla_bridge import backends_are_initialized  # the only place jax exposes this
    except ImportError:  # a jax without it: assume not started
        return False
    return backends_are_initialized()


def apply() -> bool:
    """Append :data:`FLAG` to ``XLA_FLAGS`` where jaxlib forms YNNPACK fusions and the user has not chosen them.

    Returns:
        Whether the flag was added. Where jax had already started its backend, the flag cannot take effect in
        this process, and a RuntimeWarning says how to set it.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    version = jaxlib_version()
    if NAME in flags or version is None or version < FIRST_AFFECTED:
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
    if backend_started():
        warnings.warn(
            f"jax started before ppl_sparsegp was imported, so XLA's YNNPACK fusions stay on in this process, and "
            f"some float32 results of jaxlib {'.'.join(map(str, version))} can be wrong: import ppl_sparsegp before "
            f"computing with jax, or set XLA_FLAGS={FLAG} before starting Python",
            RuntimeWarning,
            stacklevel=2,
        )
    return True
