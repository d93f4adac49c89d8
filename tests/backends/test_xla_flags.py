"""ppl_sparsegp.backends.xla_flags: importing the library takes reductions out of XLA:CPU's YNNPACK fusions, which
compute some float32 reductions wrongly in jaxlib 0.10.2, and leaves a user's own choice alone."""

import os
import subprocess
import sys
import textwrap

import pytest

from ppl_sparsegp.backends import xla_flags

WRONG_UNDER_YNN = textwrap.dedent(
    """
    import numpy as np
    {first}
    import jax, jax.numpy as jnp
    from ppl_sparsegp.core.likelihoods import RobustMax

    rng = np.random.default_rng(0)
    W, x = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((10, 10), (3000, 10)))
    t = jnp.asarray(np.linspace(-3.0, 3.0, 20), jnp.float32)
    f = lambda x, W, t: jnp.sum(W * x[:, None, :], -1)[..., None] + t
    mean = jnp.asarray(3 * rng.normal(size=(2000, 10)), jnp.float32)
    var = jnp.asarray(rng.uniform(0.5, 3, (2000, 10)), jnp.float32)
    probs = RobustMax(10).class_probabilities
    print(float(np.abs(np.asarray(jax.jit(f)(x, W, t)) - np.asarray(f(x, W, t))).max()))
    print(float(np.abs(np.asarray(jax.jit(probs)(mean, var)) - np.asarray(probs(mean, var))).max()))
    """
)


def compiled_minus_eager(first: str, xla_flags_value: str | None) -> list[float]:
    """The largest |jit - eager| of the pattern and of RobustMax's 10-class probabilities at 2000 points, float32,
    in a fresh process whose script starts with ``first`` and whose XLA_FLAGS is ``xla_flags_value`` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if xla_flags_value is not None:
        env["XLA_FLAGS"] = xla_flags_value
    script = WRONG_UNDER_YNN.format(first=first)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return [float(line) for line in out.stdout.split()]


def test_compiled_float32_reductions_equal_eager_ones_once_the_library_is_imported():
    for first in ("import ppl_sparsegp", "import ppl_sparsegp.core"):  # any part: the package's __init__ runs first
        pattern, robust_max = compiled_minus_eager(first, None)
        assert pattern < 1e-4
        assert robust_max < 1e-5


def test_the_flag_is_added_once_and_after_the_users_flags(monkeypatch):
    monkeypatch.setattr(xla_flags, "backend_started", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")
    assert xla_flags.apply()
    assert os.environ["XLA_FLAGS"] == f"--xla_cpu_multi_thread_eigen=false {xla_flags.FLAG}"
    assert not xla_flags.apply()
    assert os.environ["XLA_FLAGS"] == f"--xla_cpu_multi_thread_eigen=false {xla_flags.FLAG}"
    monkeypatch.delenv("XLA_FLAGS")
    assert xla_flags.apply()
    assert os.environ["XLA_FLAGS"] == xla_flags.FLAG


def test_a_users_own_setting_and_other_jaxlibs_are_left_alone(monkeypatch):
    monkeypatch.setattr(xla_flags, "backend_started", lambda: False)
    monkeypatch.setenv("XLA_FLAGS", f"--{xla_flags.NAME}=+reduce")
    assert not xla_flags.apply()
    assert os.environ["XLA_FLAGS"] == f"--{xla_flags.NAME}=+reduce"
    monkeypatch.delenv("XLA_FLAGS")
    for other in [(0, 10, 1), (0, 4, 30), (0, 12, 0), None]:
        monkeypatch.setattr(xla_flags, "jaxlib_version", lambda other=other: other)
        assert not xla_flags.apply()
        assert "XLA_FLAGS" not in os.environ


def test_a_started_backend_is_warned_about(monkeypatch):
    monkeypatch.setattr(xla_flags, "backend_started", lambda: True)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    with pytest.warns(RuntimeWarning, match="import ppl_sparsegp before computing with jax"):
        xla_flags.apply()


def test_backend_started_reads_this_process():
    import jax.numpy as jnp

    jnp.zeros(1).block_until_ready()
    assert xla_flags.backend_started()
