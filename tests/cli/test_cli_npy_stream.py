"""ppl_sparsegp.cli.npy_stream: the ``--data-npy`` pieces shared by ``fit svgp`` and ``fit bsgp``."""

import jax
import numpy as np
import pytest
from numpyro import handlers
from numpyro.infer.util import log_density

from ppl_sparsegp import data
from ppl_sparsegp.cli import main, npy_stream
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.streaming import NpyBatches
from ppl_sparsegp.models.numpyro.bsgp import BSGP, bsgp_kernel
from ppl_sparsegp.models.numpyro.deep_bsgp import deep_bsgp

N, B, D = 200, 16, 2


def write(tmp_path, outputs: int = 1) -> tuple[str, str, np.ndarray, np.ndarray]:
    """X around 50 and y around 10 (far from standardised units); y [N] or [N, outputs]."""
    rng = np.random.default_rng(3)
    X = 50 + rng.uniform(-2, 2, (N, D))
    y = 10 + 3 * np.sin(X[:, :1] - 50) * rng.uniform(0.5, 2, (1, outputs)) + 0.3 * rng.standard_normal((N, outputs))
    y = y[:, 0] if outputs == 1 else y
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    return str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), X, y


def opts(**given) -> dict:
    return {"likelihood": None, "noise_variance": None, "inducing": 6, "dtype": "float64", "seed": 0, **given}


def test_stream_data_standardises_as_the_in_memory_path_and_samples_every_row_of_a_small_file(tmp_path):
    """Fewer rows than STREAM_SAMPLE: the sample is every row in file order, and the pass over the files gives the
    scaler data.standardize fits on the same rows in memory (to rounding of the chunked moments)."""
    X_path, y_path, X, y = write(tmp_path)
    given = opts()
    d, stream = npy_stream.stream_data(given, NpyBatches(X_path, y_path, B), noise_variance=0.25)
    assert stream == {"num_data": N, "files": [X_path, y_path], "batch_size": B, "sample_rows": N}
    assert (given["likelihood"], given["noise_variance"]) == ("gaussian", 0.25)
    np.testing.assert_array_equal(d.ds.X_train, X)
    _, scaler = data.standardize(data.Dataset(X, y, X, y, name="memory", task="regression"))
    for name in ("x_mean", "x_scale", "y_mean", "y_scale"):
        np.testing.assert_allclose(getattr(d.scaler, name), getattr(scaler, name), rtol=1e-12)
    np.testing.assert_allclose(d.X, scaler.transform_x(X), atol=1e-12)
    np.testing.assert_allclose(d.y, scaler.transform_y(y), atol=1e-12)


@pytest.mark.parametrize("layers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_streamed_batch_has_the_log_density_of_the_in_memory_minibatch_of_its_rows(tmp_path, layers):
    """BSGP (and deep BSGP) with ``batch_size=None`` on a batch of B rows in original units, standardised on the
    way in and its data term scaled by N/B (npy_stream.standardised, data_term_scaled), has the log joint of the
    in-memory model (``batch_size=B``) on the standardised data when its subsampling plate draws the same rows;
    the priors are not scaled (a scale on the whole model would change the log joint)."""
    X_path, y_path, X, y = write(tmp_path)
    d, _ = npy_stream.stream_data(opts(), NpyBatches(X_path, y_path, B), noise_variance=0.5)
    rows = np.random.default_rng(0).integers(0, N, B)
    Z = d.X[:6]

    def model(batch_size):
        likelihood = Gaussian(variance=0.5)
        if layers == 1:
            return BSGP(kernel=bsgp_kernel(D), likelihood=likelihood, Z=Z, batch_size=batch_size).model
        return deep_bsgp(d.X, 1, likelihood, num_layers=2, Z=Z, batch_size=batch_size).model

    with handlers.seed(rng_seed=1), handlers.trace() as sites:
        model(B)(d.X, d.y)
    rng = np.random.default_rng(2)
    values = {k: v["value"] + 0.1 * rng.standard_normal(np.shape(v["value"])) for k, v in sites.items()
              if v["type"] == "sample" and not v["is_observed"] and k != "data"}  # fmt: skip
    values = {k: np.abs(v) if "kernel" in k else v for k, v in values.items()}

    in_memory = handlers.substitute(handlers.seed(model(B), rng_seed=5), data={"data": jax.numpy.asarray(rows)})
    expected, _ = log_density(in_memory, (d.X, d.y), {}, values)
    streamed = npy_stream.data_term_scaled(npy_stream.standardised(model(None), d.scaler, d.X.dtype), N, B)
    actual, _ = log_density(handlers.seed(streamed, rng_seed=5), (X[rows], y[rows]), {}, values)
    np.testing.assert_allclose(float(actual), float(expected), rtol=1e-10)
    unscaled, _ = log_density(handlers.seed(model(None), rng_seed=5), (d.X[rows], d.y[rows]), {}, values)
    assert abs(float(unscaled) - float(expected)) > 1.0  # the scale matters: N/B = 12.5 on the data term


def test_checks_that_need_no_data_name_the_flag():
    base = {"backend": "numpyro", "batch_size": 32, "likelihood": None}
    npy_stream.check_stream_options(base)
    for change, message in [
        ({"backend": "pyro"}, "--data-npy: --backend pyro cannot stream"),
        ({"batch_size": None}, "--data-npy streams minibatches: give --batch-size B"),
        ({"likelihood": "softmax"}, "--data-npy: regression or binary data; --likelihood softmax needs --data"),
    ]:
        with pytest.raises(ValueError, match=f"^{message}"):
            npy_stream.check_stream_options({**base, **change})


@pytest.mark.parametrize("method, fitted", [("svgp", "fitted with Adam"), ("bsgp", "sampled by --engine sghmc")])
def test_the_help_names_how_the_command_fits(capsys, method, fitted):
    assert main(["fit", method, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"standardised by one pass over them, {fitted}" in text and "random sample of 10,000 rows" in text
