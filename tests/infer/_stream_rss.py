"""Run by tests/infer/test_streaming.py: ``python _stream_rss.py X.npy y.npy BATCHES`` streams BATCHES minibatches
of 4096 rows through NpyBatches and prints JSON: the peak resident set (VmHWM, bytes) once the first batch is
summed (the runtime's one-off cost of its first computation on a batch, some 25 MiB, is behind it) and after the last,
and the mean of the streamed y."""

import json
import sys
from pathlib import Path

import jax

from ppl_sparsegp.infer.streaming import NpyBatches


def peak_rss() -> int:
    """This process's peak resident set (VmHWM, bytes). Not ``getrusage``'s ru_maxrss: Linux carries that over
    ``exec`` from the forking process (here pytest, some 700 MiB), which hid everything below it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


X_path, y_path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
total, rows, before = 0.0, 0, None
for i, (Xb, yb) in enumerate(NpyBatches(X_path, y_path, 4096, seed=1, prefetch=2)):
    if i == count:
        break
    assert Xb.shape == (4096, 32) and yb.shape == (4096,)
    total, rows = total + float(jax.numpy.sum(yb)), rows + yb.shape[0]
    if i == 0:
        before = peak_rss()
print(json.dumps({"before": before, "after": peak_rss(), "mean_y": total / rows}))
