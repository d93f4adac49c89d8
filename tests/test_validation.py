"""Tests for ppl_sparsegp.validation: every error message, on numpy, jax and torch inputs."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from ppl_sparsegp.validation import (
    check_choice,
    check_inducing_count,
    check_inputs,
    check_positive,
    check_same_dim,
)

X = np.arange(12.0).reshape(6, 2)
Y = np.linspace(0.0, 1.0, 6)


@pytest.mark.parametrize("make", [np.asarray, jnp.asarray, torch.as_tensor], ids=["numpy", "jax", "torch"])
def test_check_inputs_returns_the_same_objects(make):
    Xb, yb = make(X), make(Y)
    out_X, out_y = check_inputs(Xb, yb)
    assert out_X is Xb and out_y is yb
    Y2 = make(np.stack([Y, 2 * Y], axis=1))
    assert check_inputs(Xb, Y2)[1] is Y2
    assert check_inputs(Xb)[1] is None
    labels = make(np.array([0, 1, 1, 0, 2, 1]))
    assert check_inputs(Xb, labels, y_ndim=(1,))[1] is labels


@pytest.mark.parametrize("make", [np.asarray, jnp.asarray, torch.as_tensor], ids=["numpy", "jax", "torch"])
def test_check_inputs_rejects_non_finite_on_every_backend(make):
    bad = X.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="X must be finite, but it contains NaN or infinite"):
        check_inputs(make(bad), make(Y))
    bad_y = Y.copy()
    bad_y[0] = np.inf
    with pytest.raises(ValueError, match="targets must be finite"):
        check_inputs(make(X), make(bad_y), y_name="targets")


def test_check_inputs_error_messages():
    with pytest.raises(ValueError, match=r"X must be 2-D \[N, D\], got a 1-D array .*use X\[:, None\]"):
        check_inputs(Y, Y)
    with pytest.raises(ValueError, match=r"X_new must be 2-D \[N, D\], got shape \(2, 3, 2\)"):
        check_inputs(np.zeros((2, 3, 2)), x_name="X_new")
    with pytest.raises(ValueError, match=r"N >= 1 rows and D >= 1 columns, got shape \(0, 2\)"):
        check_inputs(np.zeros((0, 2)))
    with pytest.raises(ValueError, match="X must hold floating-point numbers, got dtype int64"):
        check_inputs(np.arange(6).reshape(3, 2))
    with pytest.raises(ValueError, match=r"len\(X\) = 6 but len\(y\) = 5"):
        check_inputs(X, Y[:5])
    with pytest.raises(ValueError, match=r"y must be 1-D \[N\] or 2-D \[N, P\], got shape \(6, 1, 1\)"):
        check_inputs(X, Y[:, None, None])
    with pytest.raises(ValueError, match=r"labels must be 1-D \[N\], got shape \(6, 2\)"):
        check_inputs(X, np.zeros((6, 2)), y_name="labels", y_ndim=(1,))
    with pytest.raises(ValueError, match="X must be an array .* got list"):
        check_inputs([[1.0, 2.0]])
    with pytest.raises(ValueError, match="y must hold real numbers, got dtype complex128"):
        check_inputs(X, Y.astype(complex))


def test_check_inputs_under_jit_checks_shapes_only():
    @jax.jit
    def f(X, y):
        check_inputs(X, y)
        return X.sum() + y.sum()

    bad = X.copy()
    bad[0, 0] = np.nan
    assert np.isnan(float(f(bad, Y)))  # values cannot be inspected while tracing
    with pytest.raises(ValueError, match=r"len\(X\) = 6 but len\(y\) = 4"):
        f(X, Y[:4])


def test_check_positive():
    assert check_positive("lengthscale", 0.5) == 0.5
    value = jnp.array([1.0, 2.0])
    assert check_positive("variance", value) is value
    assert check_positive("noise", torch.tensor([0.1])) is not None
    with pytest.raises(ValueError, match=r"lengthscale must be finite and > 0, got -1\.0"):
        check_positive("lengthscale", -1.0)
    with pytest.raises(ValueError, match="variance must be finite and > 0"):
        check_positive("variance", np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match="variance must be finite and > 0"):
        check_positive("variance", np.array([1.0, np.inf]))
    with pytest.raises(ValueError, match="noise must be finite and > 0"):
        check_positive("noise", float("nan"))
    with pytest.raises(ValueError, match="step_size must be a positive number or array, got '0.1'"):
        check_positive("step_size", "0.1")
    with pytest.raises(ValueError, match="step_size must be a positive number or array, got True"):
        check_positive("step_size", True)


def test_check_inducing_count():
    assert check_inducing_count(10, 100) == 10
    assert check_inducing_count(np.int64(100), 100) == 100
    with pytest.raises(ValueError, match=r"num_inducing must satisfy 1 <= num_inducing <= N = 50"):
        check_inducing_count(51, 50)
    with pytest.raises(ValueError, match=r"M must satisfy 1 <= M <= N = 50.*got 0"):
        check_inducing_count(0, 50, name="M")
    with pytest.raises(ValueError, match="num_inducing must be an integer, got 2.5"):
        check_inducing_count(2.5, 50)


def test_check_choice():
    assert check_choice("prior", "normal", ("normal", "dpp")) == "normal"
    with pytest.raises(ValueError, match="prior must be one of 'normal', 'dpp'; got 'strauss'"):
        check_choice("prior", "strauss", ("normal", "dpp"))


def test_check_same_dim():
    Z = np.zeros((3, 2))
    assert check_same_dim(Z, X) == (Z, X)
    assert check_same_dim(torch.zeros(3, 2), jnp.zeros((5, 2)))[0].shape == (3, 2)
    with pytest.raises(
        ValueError,
        match=r"Z must have the same number of columns as X: Z has shape"
        r" \(3, 4\) \(D = 4\) but X has shape \(6, 2\) \(D = 2\)",
    ):
        check_same_dim(np.zeros((3, 4)), X)
    with pytest.raises(ValueError, match=r"Z must be 2-D, got shape \(3,\)"):
        check_same_dim(np.zeros(3), X)


def test_a_torch_tensor_is_checked_for_finite_values_once_per_version():
    """A Pyro model checks its data at every step: a tensor found finite is not scanned again until it changes in
    place (its version counter moves), and its record goes with it."""
    import gc

    import torch

    from ppl_sparsegp import validation

    X, y = torch.randn(50, 2, dtype=torch.float64), torch.randn(50, dtype=torch.float64)
    validation.check_inputs(X, y)
    assert validation._FINITE_TENSORS[id(X)][0]() is X
    X[3, 1] = float("inf")  # in place: the version moves, so the check runs again
    with pytest.raises(ValueError, match="X must be finite"):
        validation.check_inputs(X, y)
    key = id(y)
    del y
    gc.collect()
    assert key not in validation._FINITE_TENSORS
