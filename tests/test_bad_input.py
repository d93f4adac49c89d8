"""Bad input is refused early and clearly, and a failed run never corrupts earlier results.

* Python API (models + ``fit_svi``, initialisers, constructors, loaders): a ``ValueError`` naming the argument,
  raised before anything is compiled -- ``jax.jit`` is replaced by a trap that fails the test if reached.
* Command line: exit code 2 with a one-line ``error: ...`` naming the option (argparse's own message for
  syntax errors), again before any compilation, and without creating the output folder.
* Atomic writes: a write that fails part-way leaves the previous file intact and no temporary file behind.
* Output sets: a set of files that fails part-way (a write or a rename) leaves the previous set byte-identical;
  a damaged ``.npz`` output is one error naming the file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import warnings

import jax
import numpy as np
import optax
import pytest

from ppl_sparsegp import cli, data, results
from ppl_sparsegp.cli import gpr as cli_gpr
from ppl_sparsegp.core import kernels, likelihoods, ops
from ppl_sparsegp.inducing import initialise
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.bsgp import BSGP
from ppl_sparsegp.models.numpyro.deep_bsgp import DeepBSGP
from ppl_sparsegp.models.numpyro.deep_svgp import DeepSVGP
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.selective import SelectiveSVGP
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP


@pytest.fixture
def no_compilation(monkeypatch):
    """Replace ``jax.jit`` by a trap: anything raised under this fixture was raised before compilation."""

    def trap(*args, **kwargs):
        raise AssertionError("jax.jit was reached before the bad input was rejected")

    monkeypatch.setattr(jax, "jit", trap)


def _xy(rng, N=30, D=2):
    X = rng.uniform(-2.0, 2.0, (N, D))
    return X, np.sin(X[:, 0]) + 0.1 * rng.standard_normal(N)


def _model(method: str, X: np.ndarray):
    kernel, lik = kernels.RBF(1.0, np.ones(X.shape[1])), likelihoods.Gaussian(0.1)
    if method == "gpr":
        return GPR(kernel=kernel, likelihood=lik)
    cls = SVGP if method == "svgp" else SGPR
    return cls(kernel=kernel, likelihood=lik, Z=X[:5].copy())


def _fit(gp, X, y, **kwargs):
    return fit_svi(
        gp.model,
        gp.guide,
        X,
        y,
        optimizer=optax.adam(0.01),
        num_steps=5,
        progress=False,
        **kwargs,
        validate=gp.check_data,
    )


# --------------------------------------------------------------------------------------------------------
# Python API


def _nan_at(A, index):
    A = A.copy()
    A[index] = np.nan
    return A


BAD_DATA = {
    "nan in X": (lambda X, y: (_nan_at(X, (3, 1)), y), "X must be finite"),
    "inf in X": (lambda X, y: (np.where(X > 1.5, np.inf, X), y), "X must be finite"),
    "nan in y": (lambda X, y: (X, _nan_at(y, 7)), "y must be finite"),
    "-inf in y": (lambda X, y: (X, np.where(y > 0.5, -np.inf, y)), "y must be finite"),
    "y shorter than X": (lambda X, y: (X, y[:-1]), r"len\(X\) = 30 but len\(y\) = 29"),
    "X longer than y": (lambda X, y: (np.vstack([X, X[:2]]), y), r"len\(X\) = 32 but len\(y\) = 30"),
    "X 1-D": (lambda X, y: (X[:, 0], y), r"X must be 2-D \[N, D\], got a 1-D array"),
    "X 3-D": (lambda X, y: (X[:, :, None], y), r"X must be 2-D \[N, D\], got shape \(30, 2, 1\)"),
    "y 3-D": (lambda X, y: (X, y[:, None, None]), r"y must be 1-D \[N\] or 2-D \[N, P\], got shape \(30, 1, 1\)"),
    "integer X": (lambda X, y: (X.astype(np.int64), y), "X must hold floating-point numbers"),
}


@pytest.mark.parametrize("method", ["svgp", "sgpr", "gpr"])
@pytest.mark.parametrize("case", sorted(BAD_DATA))
def test_bad_data_is_rejected_before_compilation(rng, method, case, no_compilation):
    X, y = _xy(rng)
    gp = _model(method, X)
    corrupt, message = BAD_DATA[case]
    with pytest.raises(ValueError, match=message):
        _fit(gp, *corrupt(X, y))


def test_the_compilation_trap_fires_on_good_data(rng, no_compilation):
    """The trap is not vacuous: with valid data, fit_svi does reach jax.jit."""
    X, y = _xy(rng)
    with pytest.raises(AssertionError, match="jax.jit was reached"):
        _fit(_model("gpr", X), X, y)


@pytest.mark.parametrize(
    "site, value, message",
    [
        ("kernel.lengthscale", np.array([1.0, -1.0]), "RBF.lengthscale must be positive"),
        ("kernel.variance", np.array(0.0), "RBF.variance must be positive"),
        ("likelihood.variance", np.array(-0.1), "variance must be positive and finite"),
    ],
)
def test_non_positive_initial_values_are_rejected_before_compilation(rng, site, value, message, no_compilation):
    X, y = _xy(rng)
    with pytest.raises(ValueError, match=message):
        _fit(_model("sgpr", X), X, y, init_params={site: value})


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: kernels.RBF(variance=0.0), "RBF.variance must be positive"),
        (lambda: kernels.RBF(lengthscale=[1.0, -2.0]), "RBF.lengthscale must be positive"),
        (lambda: kernels.Matern52(lengthscale=np.nan), "Matern52.lengthscale must be positive"),
        (lambda: kernels.Linear(variance=-1.0), "Linear.variance must be positive"),
        (lambda: likelihoods.Gaussian(variance=0.0), "variance must be positive and finite"),
        (lambda: likelihoods.Gaussian(variance=np.inf), "variance must be positive and finite"),
        (lambda: likelihoods.StudentT(scale=-0.3), "scale must be positive and finite"),
    ],
)
def test_non_positive_hyperparameters_are_rejected_by_constructors(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize("M", [0, 31, 100])
@pytest.mark.parametrize("init", ["random", "kmeans", "greedy"])
def test_more_inducing_points_than_data_is_an_error(rng, init, M):
    X, _ = _xy(rng)
    make = {
        "random": lambda: initialise.random_subset(X, M),
        "kmeans": lambda: initialise.kmeans(X, M),
        "greedy": lambda: initialise.greedy_variance(X, M, kernels.RBF(1.0, np.ones(2))),
    }[init]
    with pytest.raises(ValueError, match=rf"1 <= num_inducing <= N = 30 .*got {M}"):
        make()


@pytest.mark.parametrize("name", ["no-such-data", "uci/no-such-data", "embedded/kin8nm"])
def test_unknown_dataset_names(name):
    with pytest.raises(ValueError, match=f"unknown dataset '{name}'; known: .*embedded/diabetes"):
        data.load_dataset(name)


@pytest.mark.parametrize("name, bad", [("rbff", "rbff"), ("rbf+spectral", "spectral")])
def test_unknown_kernel_names(name, bad):
    with pytest.raises(ValueError, match=re.escape(f"unknown kernel '{bad}' in '{name}'; valid names are [")):
        kernels.kernel_from_name(name, 3)


def test_unknown_likelihood_name():
    with pytest.raises(ValueError, match="unknown likelihood 'gauss'; valid names: gaussian, bernoulli"):
        likelihoods.likelihood_from_name("gauss")


# --------------------------------------------------------------------------------------------------------
# Command line


def _cli(tmp_path, capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["fit", *args, "--out", str(tmp_path / "out"), "--no-progress", "--quiet"])
    captured = capsys.readouterr()
    assert captured.out == ""
    return code, captured.err


CLI_ERRORS = [
    (("svgp", "--inducing", "1000"), "error: --inducing must satisfy 1 <= --inducing <= N = 353"),
    (("sgpr", "--inducing", "0"), "error: --inducing must be a positive integer, got 0"),
    (("svgp", "--lengthscale", "-1"), "error: --lengthscale must be finite and > 0, got -1.0"),
    (("svgp", "--lengthscale", "nan"), "error: --lengthscale must be finite and > 0, got nan"),
    (("gpr", "--kernel-variance", "0"), "error: --kernel-variance must be finite and > 0, got 0.0"),
    (("sgpr", "--noise-variance", "-0.5"), "error: --noise-variance must be finite and > 0, got -0.5"),
    (("svgp", "--lr", "inf"), "error: --lr must be finite and > 0, got inf"),
    (("svgp", "--steps", "0"), "error: --steps must be a positive integer, got 0"),
    (("svgp", "--batch-size", "-8"), "error: --batch-size must be a positive integer, got -8"),
    (("svgp", "--checkpoint-every", "0"), "error: --checkpoint-every must be a positive integer, got 0"),
    (("svgp", "--seed", "-3"), "error: --seed must be a non-negative integer, got -3"),
    (("svgp", "--data", "no-such-data"), "error: --data 'no-such-data' (--split 0): unknown dataset 'no-such-data'"),
    (("svgp", "--split", "-1"), "error: --data 'diabetes' (--split -1): split must be a non-negative integer"),
    (("svgp", "--kernel", "rbff"), "error: --kernel: unknown kernel 'rbff' in 'rbff'"),
    (("svgp", "--likelihood", "gauss"), "error: --likelihood: unknown likelihood 'gauss'"),
    (
        ("svgp", "--likelihood", "bernoulli"),
        "error: --likelihood 'bernoulli' does not fit regression data (embedded/diabetes); "
        "choose one of gaussian, studentt",
    ),
    (("svgp", "--likelihood", "poisson"), "error: --likelihood 'poisson' does not fit regression data"),
    (
        ("svgp", "--data", "breast_cancer", "--noise-variance", "0.2"),
        "error: --noise-variance: the Bernoulli likelihood of binary data (embedded/breast_cancer) has no noise",
    ),
    (
        ("sgpr", "--data", "breast_cancer"),
        "error: --data: embedded/breast_cancer is a binary dataset; sgpr needs regression data (use svgp)",
    ),
    (
        ("svgp", "--data", "oilflow"),
        "error: --data: oilflow is an unsupervised dataset; fit supports regression, "
        "binary and multi-class classification",
    ),
    (
        ("idsgp", "--data", "digits"),
        "error: --data: embedded/digits is a multiclass dataset; idsgp fits regression "
        "and binary data (svgp and sgpmc fit multi-class data)",
    ),
    (("sgpmc", "--engine", "sgld"), "error: --step-size is required with --engine sgld"),
    (("sgpmc", "--samples", "100", "--thinning", "3"), "error: --samples (100) must be a multiple of --thinning (3)"),
    (("sgpmc", "--step-size", "0.1"), "error: --step-size applies to the sghmc and sgld engines, not nuts"),
    (("sgpmc", "--batch-size", "64"), "error: --batch-size applies to the SVI fit and the sghmc/sgld engines"),
]


@pytest.mark.parametrize("args, message", CLI_ERRORS, ids=[" ".join(a) for a, _ in CLI_ERRORS])
def test_cli_rejects_bad_options_in_one_line(tmp_path, capsys, args, message, no_compilation):
    code, err = _cli(tmp_path, capsys, *args)
    assert code == 2
    assert err.startswith(message) and err.endswith("\n") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_cli_refuses_gpr_on_large_data(tmp_path, capsys, monkeypatch, no_compilation):
    monkeypatch.setattr(cli_gpr, "MAX_N", 300)
    code, err = _cli(tmp_path, capsys, "gpr")
    assert code == 2
    assert err == (
        "error: --data: gpr is exact, O(N^3) time and O(N^2) memory, and embedded/diabetes has N = 353 > 300 "
        "training points; use sgpr or svgp\n"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (("svgp", "--init", "spectral"), "argument --init: invalid choice: 'spectral'"),
        (("svgp", "--steps", "ten"), "argument --steps: invalid int value: 'ten'"),
        (("svgp", "--lengthscale", "wide"), "argument --lengthscale: invalid float value: 'wide'"),
        (("svgp", "--dtype", "float16"), "argument --dtype: invalid choice: 'float16'"),
        (("lasso",), "argument method: invalid choice: 'lasso'"),
        (("svgp", "--bogus"), "unrecognized arguments: --bogus"),
        (("sgpr", "--batch-size", "32"), "unrecognized arguments: --batch-size"),
        (("gpr", "--likelihood", "studentt"), "unrecognized arguments: --likelihood"),
        (("gpr", "--no-whiten"), "unrecognized arguments: --no-whiten"),
        (("sgpr", "--q-diag"), "unrecognized arguments: --q-diag"),
        (("gpr", "--inducing", "10"), "unrecognized arguments: --inducing"),
        (("gpr", "--init", "greedy"), "unrecognized arguments: --init"),
        (("svgp", "--engine", "nuts"), "unrecognized arguments: --engine"),
        (("sgpmc", "--q-diag"), "unrecognized arguments: --q-diag"),
    ],
)
def test_cli_syntax_errors_come_from_argparse(tmp_path, capsys, args, message, no_compilation):
    code, err = _cli(tmp_path, capsys, *args)
    assert code == 2
    assert message in err and "usage: ppl-sparsegp" in err and "Traceback" not in err


# --------------------------------------------------------------------------------------------------------
# Atomic writes


def _leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_write_failing_part_way_leaves_the_old_file(tmp_path):
    path = results.write_json(tmp_path / "results.json", {"metrics": {"rmse": 54.2}})

    def torn(fh):
        fh.write(b'{"metrics": {"rms')
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        results.atomic_write(path, torn)
    assert json.loads(path.read_text()) == {"metrics": {"rmse": 54.2}}
    assert _leftovers(tmp_path) == []


def test_unwritable_values_leave_the_old_files(tmp_path):
    json_path = results.write_json(tmp_path / "results.json", {"rmse": 1.5, "nlpd": float("nan")})
    npz_path = results.write_npz(tmp_path / "params.npz", {"Z": np.ones((2, 3))})
    with pytest.raises(TypeError, match="cannot write a value of type object"):
        results.write_json(json_path, {"rmse": 2.0, "model": object()})
    with pytest.raises(ValueError, match=r"arrays\['names'\] has dtype object"):
        results.write_npz(npz_path, {"Z": np.zeros((2, 3)), "names": np.array([{"a": 1}], dtype=object)})
    assert json.loads(json_path.read_text()) == {"rmse": 1.5, "nlpd": None}
    with np.load(npz_path, allow_pickle=False) as params:
        np.testing.assert_array_equal(params["Z"], np.ones((2, 3)))
    assert _leftovers(tmp_path) == []


def test_written_files_get_the_usual_permissions_not_those_of_a_temp_file(tmp_path):
    mask = os.umask(0o022)
    try:
        path = results.write_json(tmp_path / "results.json", {"rmse": 1.5})
    finally:
        os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o644


@pytest.mark.slow
def test_a_run_failing_at_its_last_write_keeps_the_previous_results(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    previous = {"method": "sgpr", "metrics": {"rmse": 57.0}}
    results.write_json(out / "results.json", previous)
    real_replace = os.replace

    def full_disk(src, dst):
        if str(dst).endswith("results.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full_disk)
    code = cli.main(["fit", "sgpr", "--inducing", "16", "--steps", "5", "--out", str(out), "--quiet"])
    assert code == 1
    assert capsys.readouterr().err == "error: [Errno 28] No space left on device\n"
    assert json.loads((out / "results.json").read_text()) == previous
    assert (out / "params.npz").exists() and (out / "fit.png").exists()
    assert _leftovers(out) == []


# --------------------------------------------------------------------------------------------------------
# Output sets and damaged output files


def _old_set(folder) -> dict[str, bytes]:
    results.write_output_set(
        folder,
        {
            "params.npz": results.npz_file({"Z": np.ones((2, 3))}),
            "fit.png": lambda path: path.write_bytes(b"old picture"),
            "results.json": results.json_file({"rmse": 57.0}),
        },
    )
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _new_set(fail_at: str | None = None) -> dict:
    def picture(path):
        if fail_at == "fit.png":
            path.write_bytes(b"half a pic")
            raise OSError(errno.ENOSPC, "No space left on device")
        path.write_bytes(b"new picture")

    return {
        "params.npz": results.npz_file({"Z": np.zeros((2, 3))}),
        "fit.png": picture,
        "results.json": results.json_file({"rmse": 54.0}),
    }


def test_an_output_set_is_written_whole(tmp_path):
    old = _old_set(tmp_path)
    assert set(old) == {"params.npz", "fit.png", "results.json"}
    paths = results.write_output_set(tmp_path, _new_set())
    assert [p.name for p in paths] == ["params.npz", "fit.png", "results.json"]
    assert (tmp_path / "fit.png").read_bytes() == b"new picture"
    assert json.loads((tmp_path / "results.json").read_text()) == {"rmse": 54.0}
    np.testing.assert_array_equal(results.read_npz(tmp_path / "params.npz")["Z"], np.zeros((2, 3)))
    assert _leftovers(tmp_path) == [] and len(list(tmp_path.iterdir())) == 3


def test_a_write_failing_midway_leaves_the_old_set_byte_identical(tmp_path):
    old = _old_set(tmp_path)
    with pytest.raises(OSError, match="No space left"):
        results.write_output_set(tmp_path, _new_set(fail_at="fit.png"))  # params.npz was written before it
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == old


def test_a_rename_failing_midway_puts_the_replaced_files_back(tmp_path, monkeypatch):
    old = _old_set(tmp_path)
    real_replace = os.replace

    def full_disk(src, dst):
        if str(dst).endswith("results.json") and str(src).endswith(".tmp") and ".bak." not in str(src):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        results.write_output_set(tmp_path, _new_set())  # params.npz and fit.png were renamed already
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == old


def test_unwritable_values_are_refused_before_any_file_of_a_set_is_written(tmp_path):
    old = _old_set(tmp_path)
    with pytest.raises(TypeError, match="cannot write a value of type object"):
        results.write_output_set(tmp_path, {**_new_set(), "results.json": results.json_file({"model": object()})})
    with pytest.raises(ValueError, match="dtype object"):
        results.write_output_set(tmp_path, {"params.npz": results.npz_file({"a": np.array([{}], dtype=object)})})
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == old


@pytest.mark.parametrize(
    "damage",
    [lambda b: b[: len(b) // 2], lambda b: b[:100] + bytes(255 - x for x in b[100:300]) + b[300:], lambda b: b"x"],
    ids=["truncated", "corrupted", "not-npz"],
)
def test_a_damaged_params_file_is_one_error_naming_it(tmp_path, damage):
    path = results.write_npz(tmp_path / "params.npz", {"Z": np.ones((20, 3)), "u_loc": np.zeros((1, 20))})
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} is not a readable \.npz file \(") as err:
        results.read_npz(path)
    assert "\n" not in str(err.value)


# Predictions, parameter dicts, hyperparameter values and step counts


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: kernels.RBF(lengthscale=jax.numpy.asarray(0.0)), "RBF.lengthscale must be positive and finite"),
        (lambda: kernels.RBF(lengthscale=jax.numpy.asarray([1.0, np.nan])), "RBF.lengthscale must be positive"),
        (lambda: kernels.Matern32(variance=jax.numpy.asarray(-1.0)), "Matern32.variance must be positive"),
        (lambda: kernels.RBF(lengthscale=jax.numpy.ones((2, 2))), "RBF.lengthscale must be a scalar or a vector"),
        (lambda: likelihoods.Gaussian(variance=jax.numpy.asarray(0.0)), "variance must be positive and finite"),
        (
            lambda: GPR(kernel=kernels.RBF(), likelihood=likelihoods.Gaussian(jax.numpy.asarray(0.0))),
            "variance must be positive and finite",
        ),
    ],
)
def test_hyperparameters_given_as_jax_arrays_are_validated_like_numpy_ones(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_traced_hyperparameters_are_not_checked():
    X = np.zeros((3, 1))
    K = jax.jit(lambda ell, s2: kernels.RBF(lengthscale=ell)(X) + likelihoods.Gaussian(s2).variance)(1.0, 0.1)
    np.testing.assert_allclose(K, 1.1)


@pytest.mark.parametrize("method", ["svgp", "sgpr", "gpr"])
def test_an_ard_lengthscale_of_the_wrong_length_is_named(rng, method, no_compilation):
    X, y = _xy(rng)
    with pytest.raises(ValueError, match="lengthscale has 3 entries but X has 2 columns"):
        kernels.RBF(lengthscale=np.ones(3))(X)
    gp = _model(method, X)
    with pytest.raises(ValueError, match="RBF.lengthscale has 3 entries but X has 2 columns"):
        _fit(gp, X, y, init_params={"kernel.lengthscale": np.ones(3)})


# Predictions and parameter dicts


def _prediction_cases(X, y):
    """(model, params, extra keyword arguments) for every model class's predictions at fitted-looking values."""
    kernel, lik, Z = kernels.RBF(1.0, np.ones(2)), likelihoods.Gaussian(0.1), X[:5].copy()
    q = {"u_loc": np.zeros((1, 5)), "u_scale_tril": 0.3 * np.eye(5)[None]}
    deep_svgp = DeepSVGP(Z=[Z], widths=[1], likelihood=lik)
    deep_bsgp = DeepBSGP(Z=[Z], widths=[1], likelihood=lik, batch_size=None)
    bsgp = BSGP(kernel=kernel, likelihood=lik, Z=Z)
    key = {"key": jax.random.PRNGKey(0)}
    return {
        "gpr": (GPR(kernel=kernel, likelihood=lik), {}, {"X": X, "y": y}),
        "sgpr": (SGPR(kernel=kernel, likelihood=lik, Z=Z), {}, {"X": X, "y": y}),
        "svgp": (SVGP(kernel=kernel, likelihood=lik, Z=Z), q, {}),
        "sgpmc": (SGPMC(kernel=kernel, likelihood=lik, Z=Z, priors=default_priors(kernel, lik)), {"u": q["u_loc"]}, {}),
        "bsgp": (bsgp, bsgp.initial_values(), {}),
        "deep_svgp": (deep_svgp, {"layer0.u_loc": q["u_loc"], "layer0.u_scale_tril": q["u_scale_tril"]}, key),
        "deep_bsgp": (deep_bsgp, deep_bsgp.initial_values(), key),
    }


PREDICTION_MODELS = [
    "gpr",
    "sgpr",
    "svgp",
    "sgpmc",
    "bsgp",
    "deep_svgp",
    "deep_bsgp",
]  # selective models predict once pruned


@pytest.mark.parametrize("method", ["predict_f", "predict_y", "predict_log_density"])
@pytest.mark.parametrize("name", PREDICTION_MODELS)
def test_non_finite_prediction_inputs_are_refused_naming_them(rng, name, method):
    X, y = _xy(rng)
    gp, params, extra = _prediction_cases(X, y)[name]
    if not hasattr(gp, method):
        pytest.skip(f"{name} has no {method}")
    predict = getattr(gp, method)
    X_new, y_new = X[:4].copy(), y[:4].copy()
    args = (X_new, y_new) if method == "predict_log_density" else (X_new,)
    assert np.all(np.isfinite(np.asarray(jax.tree.leaves(predict(params, *args, **extra))[0])))
    with pytest.raises(ValueError, match="X_new must be finite"):
        predict(params, _nan_at(X_new, (1, 0)), *args[1:], **extra)
    with pytest.raises(ValueError, match="X_new must be finite"):
        predict(params, np.where(X_new > 0, np.inf, X_new), *args[1:], **extra)
    if method == "predict_log_density":
        with pytest.raises(ValueError, match="y_new must be finite"):
            predict(params, X_new, _nan_at(y_new, 2), **extra)
    # inside jit the values are unknown: no check, no error
    jax.jit(lambda x: jax.tree.leaves(predict(params, x, *args[1:], **extra))[0])(X_new)


@pytest.mark.parametrize("name", ["gpr", "sgpr", "svgp", "deep_svgp", "deep_bsgp"])
def test_misspelt_parameter_keys_are_refused_naming_them_and_the_valid_ones(rng, name):
    X, y = _xy(rng)
    gp, params, extra = _prediction_cases(X, y)[name]
    typo = "layer0.kernel.lenghtscale" if name.startswith("deep") else "kernel.lenghtscale"
    bad = {**params, typo: np.ones(2)}
    valid = "kernel.lengthscale"
    with pytest.raises(ValueError, match=rf"params: unknown key\(s\) \['{re.escape(typo)}'\]; valid keys .*{valid}"):
        gp.predict_f(bad, X[:3], **extra)
    with pytest.raises(ValueError, match=re.escape(typo)):
        gp.fitted(bad)
    bounds = {
        "gpr": lambda p: gp.log_marginal_likelihood(p, X, y),
        "deep_svgp": lambda p: gp.elbo(p, X, y, jax.random.PRNGKey(0)),
        "deep_bsgp": None,  # sampled: it has no bound
    }
    bound = bounds.get(name, lambda p: gp.elbo(p, X, y))
    if bound is not None:
        with pytest.raises(ValueError, match=re.escape(typo)):
            bound(bad)


@pytest.mark.parametrize("method", ["svgp", "sgpr", "gpr"])
def test_misspelt_init_params_are_refused_before_compilation(rng, method, no_compilation):
    X, y = _xy(rng)
    with pytest.raises(ValueError, match=r"init_params: unknown key\(s\) \['likelihood.varience'\]; valid keys"):
        _fit(_model(method, X), X, y, init_params={"likelihood.varience": np.asarray(0.5)})


def test_predict_f_refuses_unknown_keyword_arguments(rng):
    X, y = _xy(rng)
    for name in ("svgp", "deep_bsgp", "gpr"):
        gp, params, extra = _prediction_cases(X, y)[name]
        with pytest.raises(TypeError, match="full_covv"):
            gp.predict_f(params, X[:3], full_covv=True, **extra)
    # the training data that GPR and SGPR need are accepted (and not used) by the other models
    gp, params, _ = _prediction_cases(X, y)["svgp"]
    np.testing.assert_array_equal(gp.predict_f(params, X[:3], X=X, y=y)[1], gp.predict_f(params, X[:3])[1])


@pytest.mark.parametrize("model_class", [GPR, SGPR])
def test_models_predicting_from_the_training_data_name_missing_X_and_y(rng, model_class):
    X, y = _xy(rng)
    extra = {} if model_class is GPR else {"Z": X[:4]}
    gp = model_class(kernel=kernels.RBF(1.0, np.ones(2)), likelihood=likelihoods.Gaussian(0.1), **extra)
    with pytest.raises(ValueError, match=rf"X and y: {model_class.__name__} predicts from the training data"):
        gp.predict_f({}, X[:3], y=y)
    assert gp.predict_f({}, X[:3], X=X, y=y)[0].shape == (3,)


def test_single_output_q_parameters_may_leave_out_the_output_axis(rng):
    X, y = _xy(rng)
    gp, params, _ = _prediction_cases(X, y)["svgp"]
    rng_q = np.random.default_rng(1)
    loc, tril = rng_q.normal(size=(1, 5)), np.tril(rng_q.normal(size=(1, 5, 5)), -1) + np.eye(5)
    full = {"u_loc": loc, "u_scale_tril": tril}
    flat = {"u_loc": loc[0], "u_scale_tril": tril[0]}
    for a, b in zip(gp.predict_f(full, X[:4]), gp.predict_f(flat, X[:4]), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(gp.elbo(full, X, y), gp.elbo(flat, X, y))
    with pytest.raises(ValueError, match=r"params\['u_loc'\]: expected shape \[P, M\] = \[1, 5\] \(or \[5\] for one"):
        gp.predict_f({**full, "u_loc": loc[0, :4]}, X[:4])
    with pytest.raises(ValueError, match=r"params\['u_scale_tril'\]: expected shape \[P, M, M\] = \[1, 5, 5\]"):
        gp.elbo({**full, "u_scale_tril": tril[:, :4, :4]}, X, y)


def test_the_elbo_reads_only_the_lower_triangle_of_u_scale_tril(rng):
    X, y = _xy(rng)
    for whiten in (True, False):
        gp = SVGP(kernel=kernels.RBF(1.0, np.ones(2)), likelihood=likelihoods.Gaussian(0.1), Z=X[:5], whiten=whiten)
        lower = np.tril(rng.normal(size=(1, 5, 5)), -1) + np.diag(rng.uniform(0.5, 1.0, 5))[None]
        junk = lower + np.triu(rng.normal(size=(1, 5, 5)), 1)
        params = {"u_loc": rng.normal(size=(1, 5))}
        np.testing.assert_array_equal(
            gp.elbo({**params, "u_scale_tril": junk}, X, y), gp.elbo({**params, "u_scale_tril": lower}, X, y)
        )
        for a, b in zip(
            gp.predict_f({**params, "u_scale_tril": junk}, X[:3]),
            gp.predict_f({**params, "u_scale_tril": lower}, X[:3]),
            strict=True,
        ):
            np.testing.assert_array_equal(a, b)


def test_pruning_reads_only_the_lower_triangle_of_u_scale_tril(rng):
    X, _ = _xy(rng)
    selection = SelectiveSVGP(
        SVGP(kernel=kernels.RBF(1.0, np.ones(2)), likelihood=likelihoods.Gaussian(0.1), Z=X[:5], whiten=False)
    )
    lower = np.tril(rng.normal(size=(1, 5, 5)), -1) + np.diag(rng.uniform(0.5, 1.0, 5))[None]
    junk = lower + np.triu(rng.normal(size=(1, 5, 5)), 1)
    params, mask = {"u_loc": rng.normal(size=(1, 5))}, np.array([True, False, True, True, False])
    kept = [
        selection.selection.restrict({**params, "u_scale_tril": q}, mask, X[:5], "u_scale_tril") for q in (junk, lower)
    ]
    for name in ("Z", "u_loc", "u_scale_tril"):
        np.testing.assert_array_equal(kept[0][name], kept[1][name])


def test_unwhitened_predictions_with_near_duplicate_inducing_inputs_warn(rng):
    X, y = _xy(rng)
    Z = np.array([[0.0, 0.0], [1e-6, 0.0], [1.0, 1.0]])
    params = {"u_loc": np.array([[1.0, -1.0, 0.5]]), "u_scale_tril": np.eye(3)[None]}
    common = {"kernel": kernels.RBF(1.0, np.ones(2)), "likelihood": likelihoods.Gaussian(0.1)}
    with pytest.warns(ops.ConditioningWarning, match=r"Kmm = k\(Z, Z\) is poorly conditioned.*whiten=True"):
        _, var = SVGP(**common, Z=Z, whiten=False).predict_f(params, X[:3])
    assert np.max(var) > 10.0  # what the warning is about: q(u) magnified by Kmm⁻¹ (the prior variance is 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ops.ConditioningWarning)
        SVGP(**common, Z=np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]), whiten=False).predict_f(params, X[:3])
        SVGP(**common, Z=Z, whiten=True).predict_f(params, X[:3])  # whitened: q(v) does not go through Kmm⁻¹
        jax.jit(lambda x: SVGP(**common, Z=Z, whiten=False).predict_f(params, x))(X[:3])  # traced: not checked


def test_float32_near_duplicate_inducing_inputs_warn_too(rng):
    X, _ = _xy(rng)
    Z = np.array([[0.0, 0.0], [1e-4, 0.0], [1.0, 1.0]], dtype=np.float32)
    L = ops.cholesky(kernels.RBF(1.0, np.ones(2))(jax.numpy.asarray(Z)))
    with pytest.warns(ops.ConditioningWarning, match="float32"):
        ops.warn_if_ill_conditioned(L, "Kmm")
