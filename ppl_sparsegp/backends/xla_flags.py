"""The XLA:CPU setting the library needs for correct float32 results, applied when ``ppl_sparsegp`` is imported.

jaxlib 0.10.2 hands float32 reductions and their neighbours to YNNPACK fusions (``__ynn_fusion`` in the optimised
HLO), on by default, and some of those fusions compute wrong values. Seen here on 2026-11-29: under ``jax.jit``,
``jnp.sum(W * x[:, None, :], -1)[..., None] + t`` (W [10, 10], x [n, 10], t [20]) is right in its first 32,768
output elements and wrong after them, by up to the size of the values themselves; the same with ``x[:, None, :] *
W`` is right, and float64 is right. :meth:`ppl_sparsegp.core.likelihoods.RobustMax.class_probabilities` has that
shape, so compiled robust-max predictions of 10 classes for more than 163 points at once were mostly wrong, while
the training loss was not. Upstream reports of the same fusion (crashes and hangs of broadcast-multiply-reduce,
fixed in XNNPACK after 0.10.2 was built): jax-ml/jax#39257 and #40412.

:func:`apply` appends :data:`FLAG` (YNN fusions without reductions) to ``XLA_FLAGS``, which XLA reads when jax
starts its CPU backend, so it takes effect where ``ppl_sparsegp`` is imported before jax first computes anything.
Every wrong or crashing case seen here and upstream has a reduction inside the YNN fusion; YNN's matrix products
stay on. The flag is added only for the jaxlib releases in :data:`AFFECTED` (upstream reports 0.10.1 free of these
fusions, and an older release may not know the flag, which XLA refuses at start-up; a newer one must be checked
again, by ``tests/backends/test_xla_flags.py``) and where ``XLA_FLAGS`` does not already name
``xla_cpu_experimental_ynn_fusion_type``: a value the user set is kept. Cost on this 2-core CPU
(``benchmarks/README.md``, "XLA's YNNPACK reduction fusions give wrong float32 results"): the float32 SVGP step is
slower by up to about 17 %, the float64 one by no more than the run's noise.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import warnings

NAME = "xla_cpu_experimental_ynn_fusion_type"
"""The XLA flag that lists the kinds of YNNPACK fusion XLA:CPU may form."""
FLAG = f"--{NAME}=-reduce"
"""The flag that takes reductions off XLA's default list of YNNPACK fusions."""
AFFECTED = ((0, 10, 2), (0, 12, 0))
"""jaxlib releases from the first (0.10.2, where YNNPACK fusions of reductions became the default and the
miscompilation above was seen) up to, not including, the second (0.11.0 is reported upstream with the same
fusions)."""


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
    if NAME in flags or version is None or not AFFECTED[0] <= version < AFFECTED[1]:
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {FLAG}".strip()
    if backend_started():
        warnings.warn(
            f"jax started before ppl_sparsegp was imported, so XLA's YNNPACK reduction fusions stay on in this "
            f"process, and some float32 results of jaxlib {'.'.join(map(str, version))} can be wrong: import "
            f"ppl_sparsegp before computing with jax, or set XLA_FLAGS={FLAG} before starting Python",
            RuntimeWarning,
            stacklevel=2,
        )
    return True
