"""The README's Python examples run as written, top to bottom, in a fresh interpreter on every core (issue 27).

The examples form one session: each continues from the ones before it. ``make test`` runs them with the sizes of
:data:`REDUCED` (each replacement must match exactly once, so a changed example cannot slip past it);
``make test-slow`` runs them exactly as the README prints them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ppl_sparsegp.data import ENV_VAR, data_dir

README = Path(__file__).resolve().parents[1] / "README.md"
REDUCED = {
    "num_steps=2000": "num_steps=60",
    "num_steps=3000": "num_steps=60",
    "num_steps=2500": "num_steps=60",
    "num_warmup=300, num_samples=300": "num_warmup=20, num_samples=20",
    "fit_selective(X, y, candidates=100, alpha=0.1)": (
        "fit_selective(X, y, candidates=100, alpha=0.1, pre_steps=20, selection_steps=20, post_steps=20)"
    ),
    "batch_size=1000)": "batch_size=1000, pre_steps=10, selection_steps=20, post_steps=10)",
    "steps=300, prune=True": "steps=5, prune=True",
    "num_epochs=20, num_inducing=20": "num_epochs=1, num_inducing=20",
    "num_steps=500": "num_steps=50",
    "num_warmup=200, num_samples=200": "num_warmup=20, num_samples=20",
    "num_epochs=600)": "num_epochs=20)",
}
"""Sizes of the README's examples -> those ``make test`` runs them with."""
TIME_LIMIT = {"reduced": 600, "as written": 3000}


def readme_code() -> str:
    """Every ```python block of the README, in order, as one script."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.S | re.M)
    assert blocks, "no python code blocks in README.md"
    return "\n".join(blocks)


def reduced(code: str) -> str:
    for written, smaller in REDUCED.items():
        assert code.count(written) == 1, f"README example changed: expected {written!r} once"
        code = code.replace(written, smaller)
    return code


@pytest.mark.starts_first
@pytest.mark.parametrize(
    "sizes", ["reduced", pytest.param("as written", marks=pytest.mark.slow)], ids=["reduced", "as_written"]
)
def test_the_readme_examples_run_top_to_bottom(sizes, tmp_path):
    if not (Path(data_dir()) / "oilflow").is_dir():
        pytest.skip(f"the GP-LVM example reads oil flow, not found under {data_dir()} (set {ENV_VAR})")
    code = readme_code()
    script = tmp_path / "readme.py"
    script.write_text(reduced(code) if sizes == "reduced" else code)
    pinning = ("PJRT_NPROC", "NPROC", "OPENBLAS_NUM_THREADS")  # the test session's; users set none of them
    env = {k: v for k, v in os.environ.items() if k not in pinning}
    env[ENV_VAR] = str(data_dir())
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=TIME_LIMIT[sizes],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "elpd_loo" in done.stdout  # the SGPMC example's az.loo, printed halfway through
