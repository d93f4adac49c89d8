"""``fit bsgp --data-npy X.npy Y.npy``: BSGP's adaptive SGHMC on minibatches streamed from .npy files
(ppl_sparsegp.infer.streaming.sample_streamed).

What equals the in-memory run: the standardisation, Z (placed on the sample, every row of a file under 10,000
rows) and the log density of each minibatch (tests/cli/test_cli_npy_stream.py), the sampler, its settings and
schedule (checked here), and the kernel stepped through given batches (tests/infer/test_streaming.py). The draws
do not: the in-memory model draws its minibatch indices from the chain's key, the stream from its own seeded
generator, so the two chains see different (equally distributed) minibatches.
"""

import json
import re

import jax
import numpy as np
import pytest

from ppl_sparsegp.cli import bsgp as cli_bsgp
from ppl_sparsegp.cli import main
from ppl_sparsegp.infer.sghmc import AdaptiveSGHMC

N = 2000
FAST = ("--batch-size", "100", "--iterations", "20", "--kept", "4", "--inducing", "8", "--no-progress", "--quiet")


def write(tmp_path, outputs: int = 1) -> tuple[str, str, np.ndarray]:
    """y = 10 + 3 sin(2 x0) x1 + noise, X around 50: far from standardised units; y [N] or [N, outputs], the
    extra outputs rescaled copies with their own noise."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (N, 2))
    f = 3 * np.sin(2 * X[:, 0]) * X[:, 1]
    y = np.stack([10 + f * (1 + k) + (0.3 + k) * rng.standard_normal(N) for k in range(outputs)], axis=1)
    y = y[:, 0] if outputs == 1 else y
    np.save(tmp_path / "X.npy", X + 50.0)
    np.save(tmp_path / "y.npy", y)
    return str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), y


@pytest.mark.slow
def test_streamed_bsgp_samples_and_writes_results(tmp_path, capsys):
    """20 iterations (420 updates) and 4 draws on 2,000 rows, B = 100: the train-sample RMSE beats the training
    mean's, the record names the stream and the sampler is the in-memory run's; the same command again resumes
    from the finished checkpoint (the same draws), and other settings in the same folder are refused."""
    X_path, y_path, y = write(tmp_path)
    out = tmp_path / "out"
    args = ["fit", "bsgp", "--data-npy", X_path, y_path, *FAST, "--out", str(out)]
    assert main(args) == 0
    record = json.loads((out / "results.json").read_text())
    assert record["n_train"] == N and record["evaluated_on"] == "train sample" and record["data"] == "npy:X.npy"
    assert record["stream"] == {"num_data": N, "files": [X_path, y_path], "batch_size": 100, "sample_rows": N}
    assert record["sampler"] == {
        "kernel": "AdaptiveSGHMC", "chains": 1, "draws_per_chain": 4, "warmup_updates": 420, "sample_updates": 128,
        "thinning": 32, "updates_per_iteration": 21, "batch_size": 100, "step_size": 0.01,
    }  # fmt: skip
    assert record["metrics"]["rmse"] < record["metrics"]["rmse_of_training_mean"]
    assert np.isfinite(record["metrics"]["mnll"]) and record["noise"] == "point"
    assert {"posterior.nc", "fit.png", "mcmc.ckpt", "mcmc.ckpt.json"} <= {p.name for p in out.iterdir()}
    assert record["resumed_from"] is None
    assert main(args) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["resumed_from"] == {"steps": 420 + 128} and again["metrics"] == record["metrics"]
    capsys.readouterr()
    assert main([*args, "--kept", "5"]) == 2
    assert "was written for a different model, data or other settings (--kept 4 -> 5)" in capsys.readouterr().err


@pytest.mark.slow
def test_streamed_bsgp_estimates_a_noise_per_output(tmp_path):
    """Two outputs with noise sd 0.3 and 1.3 (of sd about 3 and 5 in all): --noise-per-output gives two noise
    variances, the second output's the larger."""
    X_path, y_path, _ = write(tmp_path, outputs=2)
    out = tmp_path / "out"
    assert main(["fit", "bsgp", "--data-npy", X_path, y_path, *FAST, "--noise-per-output", "--out", str(out)]) == 0
    record = json.loads((out / "results.json").read_text())
    noise = record["likelihood_parameters_standardised"]["likelihood.variance"]
    assert record["noise_per_output"] is True and len(noise) == 2 and 0 < noise[0] < noise[1]


class Reached(Exception):
    """Raised by the recorder in place of the engine."""


def test_the_streamed_sampler_is_the_in_memory_runs(tmp_path, monkeypatch):
    """The engine's arguments, captured before it compiles: BSGP's adaptive SGHMC with N = the files' rows (its
    initial moments), the released schedule of --iterations and --kept, the checkpoint every 100 iterations, and
    a fingerprint holding every option and the streamed batch size."""
    X_path, y_path, _ = write(tmp_path)
    calls = []

    def record(kernel, batches, **kwargs):
        calls.append({"kernel": kernel, "batches": batches, **kwargs})
        raise Reached

    monkeypatch.setattr(cli_bsgp, "sample_streamed", record)
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled"))
    with pytest.raises(Reached):
        main(["fit", "bsgp", "--data-npy", X_path, y_path, *FAST, "--chains", "2", "--out", str(tmp_path / "out")])
    (call,) = calls
    kernel = call["kernel"]
    assert isinstance(kernel, AdaptiveSGHMC) and kernel.num_data == N and kernel.step_size == 0.01
    assert kernel.point_estimates is not None  # the noise, as in memory
    assert call["batches"].num_data == N and call["batches"].batch_size == 100
    assert (call["num_warmup"], call["num_samples"], call["thinning"], call["num_chains"]) == (420, 128, 32, 2)
    assert call["checkpoint_every"] == 2100 and call["checkpoint"] == tmp_path / "out" / "mcmc.ckpt"
    fingerprint = call["fingerprint"]
    assert fingerprint["bsgp.batch_size"] == 100 and fingerprint["--data-npy"] == [X_path, y_path]
    assert fingerprint["--noise-per-output"] is False and fingerprint["--chains"] == 2


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--backend", "pyro"), "--data-npy: --backend pyro cannot stream minibatches"),
        (("--engine", "nuts", "--noise", "sampled"), "--data-npy: --engine nuts needs one fixed target"),
        (("--batch-size", str(N)), rf"--batch-size \({N}\) must be smaller than the N = {N} rows"),
        (("--likelihood", "softmax"), "--data-npy: regression or binary data; --likelihood softmax needs --data"),
        (("--likelihood", "probit"), "--data-npy: --likelihood probit needs labels 0 and 1"),
        (("--inducing", str(N + 1)), "--inducing must satisfy"),
    ],
)
def test_streamed_bsgp_refuses_what_it_cannot_stream(tmp_path, capsys, monkeypatch, extra, message):
    X_path, y_path, _ = write(tmp_path)
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled before refusing"))
    args = ["fit", "bsgp", "--data-npy", X_path, y_path, *FAST, *extra, "--out", str(tmp_path / "out")]
    assert main(args) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "flag, likelihood, message",
    [
        (("--noise", "point"), (), "--noise: the Bernoulli likelihood of binary data (npy:X.npy) has no noise"),
        (("--noise-per-output",), ("--likelihood", "bernoulli"),
         "--noise-per-output: one noise variance per output of the Gaussian likelihood; --likelihood bernoulli"),
    ],
)  # fmt: skip
def test_streamed_labels_have_no_noise(tmp_path, capsys, monkeypatch, flag, likelihood, message):
    """Labels 0 and 1, binary by --likelihood (the default, gaussian, would take them as regression)."""
    X_path, _, _ = write(tmp_path)
    np.save(tmp_path / "labels.npy", (np.load(X_path)[:, 0] > 50).astype(float))
    monkeypatch.setattr(jax, "jit", lambda *a, **k: pytest.fail("compiled before refusing"))
    args = ["fit", "bsgp", "--data-npy", X_path, str(tmp_path / "labels.npy"), *FAST,
            *(likelihood or ("--likelihood", "probit")), *flag, "--out", str(tmp_path / "out")]  # fmt: skip
    assert main(args) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")
