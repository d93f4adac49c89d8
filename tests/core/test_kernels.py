"""Kernels against independent numpy/scipy formulas and scikit-learn, on numpy, jax and torch."""

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist
from sklearn.gaussian_process import kernels as sk

from ppl_sparsegp.core.kernels import (
    RBF,
    Constant,
    Cosine,
    Kernel,
    Linear,
    Matern12,
    Matern32,
    Matern52,
    Periodic,
    Product,
    Sum,
    White,
    kernel_from_name,
)

jax.config.update("jax_enable_x64", True)

D = 3
LS_ARD = np.array([0.7, 1.3, 2.1])
VAR = 1.7


@pytest.fixture
def X():
    return np.random.default_rng(0).normal(size=(12, D))


@pytest.fixture
def X2():
    return np.random.default_rng(1).normal(size=(7, D))


def r_oracle(X, X2, lengthscale):
    return cdist(X / lengthscale, X2 / lengthscale)


STATIONARY = {
    RBF: (lambda r: np.exp(-0.5 * r**2), lambda ls: sk.RBF(length_scale=ls)),
    Matern12: (lambda r: np.exp(-r), lambda ls: sk.Matern(length_scale=ls, nu=0.5)),
    Matern32: (
        lambda r: (1 + np.sqrt(3) * r) * np.exp(-np.sqrt(3) * r),
        lambda ls: sk.Matern(length_scale=ls, nu=1.5),
    ),
    Matern52: (
        lambda r: (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r),
        lambda ls: sk.Matern(length_scale=ls, nu=2.5),
    ),
}


@pytest.mark.parametrize("cls", list(STATIONARY))
@pytest.mark.parametrize("lengthscale", [0.8, LS_ARD], ids=["iso", "ard"])
def test_stationary_matches_formula_and_sklearn(cls, lengthscale, X, X2):
    profile, sklearn_kernel = STATIONARY[cls]
    k = cls(variance=VAR, lengthscale=lengthscale)
    expected = VAR * profile(r_oracle(X, X2, lengthscale))
    np.testing.assert_allclose(k(X, X2), expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(k(X, X2), VAR * sklearn_kernel(lengthscale)(X, X2), rtol=1e-12)
    np.testing.assert_allclose(k(X), VAR * sklearn_kernel(lengthscale)(X), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(np.diag(k(X)), np.full(len(X), VAR))


def test_rbf_value_by_hand():
    k = RBF(variance=2.0, lengthscale=[1.0, 2.0])
    K = k(np.array([[0.0, 0.0]]), np.array([[1.0, 2.0]]))
    # r^2 = 1^2 + (2/2)^2 = 2, k = 2 exp(-1)
    np.testing.assert_allclose(K, [[2.0 * np.exp(-1.0)]], rtol=1e-15)


def periodic_oracle(X, X2, variance, lengthscale, period):
    diff = X[:, None, :] - X2[None, :, :]
    sin2 = np.sin(np.pi * diff / period) ** 2
    return variance * np.exp(-2.0 * np.sum(sin2 / lengthscale**2, axis=-1))


def test_periodic_matches_sklearn_in_1d():
    rng = np.random.default_rng(2)
    X, X2 = rng.uniform(-3, 3, size=(10, 1)), rng.uniform(-3, 3, size=(6, 1))
    k = Periodic(variance=0.6, lengthscale=0.9, period=1.4)
    oracle = sk.ExpSineSquared(length_scale=0.9, periodicity=1.4)
    np.testing.assert_allclose(k(X, X2), 0.6 * oracle(X, X2), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(k(X), 0.6 * oracle(X), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("lengthscale, period", [(0.9, 1.4), (LS_ARD, np.array([1.0, 2.5, 0.6]))], ids=["iso", "ard"])
def test_periodic_matches_formula(lengthscale, period, X, X2):
    k = Periodic(variance=VAR, lengthscale=lengthscale, period=period)
    expected = periodic_oracle(X, X2, VAR, lengthscale, period)
    np.testing.assert_allclose(k(X, X2), expected, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(k(X), periodic_oracle(X, X, VAR, lengthscale, period), rtol=1e-11)
    # exactly periodic: shifting one input by a whole period changes nothing
    shifted = X2 + 2.0 * np.broadcast_to(period, (D,))
    np.testing.assert_allclose(k(X, shifted), expected, rtol=1e-10, atol=1e-13)


def test_cosine_matches_formula(X, X2):
    """k = sigma^2 cos(sum_d (x_d - x'_d) / ell_d), from the differences directly."""
    k = Cosine(VAR, LS_ARD)
    differences = (X[:, None, :] - X2[None, :, :]) / LS_ARD
    np.testing.assert_allclose(k(X, X2), VAR * np.cos(differences.sum(-1)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(k.diag(X), np.full(len(X), VAR))
    assert np.linalg.matrix_rank(k(X), tol=1e-8) <= 2


def test_linear_matches_sklearn_and_formula(X, X2):
    np.testing.assert_allclose(Linear(variance=0.4)(X, X2), 0.4 * sk.DotProduct(sigma_0=0.0)(X, X2), rtol=1e-13)
    var = np.array([0.5, 2.0, 3.0])
    expected = np.einsum("nd,d,md->nm", X, var, X2)
    np.testing.assert_allclose(Linear(variance=var)(X, X2), expected, rtol=1e-13)
    np.testing.assert_allclose(Linear(variance=var).diag(X), np.sum(var * X**2, axis=1))


def test_white_and_constant(X, X2):
    np.testing.assert_array_equal(White(0.3)(X), 0.3 * np.eye(len(X)))
    np.testing.assert_array_equal(White(0.3)(X, X2), np.zeros((len(X), len(X2))))
    np.testing.assert_array_equal(White(0.3)(X, X), np.zeros((len(X), len(X))))
    np.testing.assert_array_equal(White(0.3).diag(X), np.full(len(X), 0.3))
    np.testing.assert_array_equal(Constant(2.5)(X, X2), np.full((len(X), len(X2)), 2.5))
    np.testing.assert_array_equal(Constant(2.5).diag(X), np.full(len(X), 2.5))


def all_kernels():
    """One of each kernel, ARD where possible, plus composites and active_dims."""
    return {
        "rbf": RBF(VAR, LS_ARD),
        "matern12": Matern12(VAR, 0.9),
        "matern32": Matern32(VAR, LS_ARD),
        "matern52": Matern52(VAR, LS_ARD),
        "linear": Linear(np.array([0.5, 2.0, 3.0])),
        "periodic": Periodic(VAR, LS_ARD, np.array([1.0, 2.5, 0.6])),
        "cosine": Cosine(VAR, LS_ARD),
        "white": White(0.3),
        "constant": Constant(0.7),
        "sum": RBF(VAR, LS_ARD) + Linear(0.2) + White(0.1),
        "product": Matern52(VAR, 1.1, active_dims=[0, 1]) * Periodic(0.5, 2.0, 1.5, active_dims=[2]),
        "nested": Sum([Product([RBF(), Linear(0.3)]), Matern32(0.5, [1.0, 2.0], active_dims=(0, 2))]),
    }


KERNEL_NAMES = list(all_kernels())


@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_gram_is_psd_and_diag_matches(name, X):
    k = all_kernels()[name]
    K = k(X)
    np.testing.assert_allclose(K, K.T, rtol=1e-14, atol=1e-15)
    eig = np.linalg.eigvalsh(K)
    assert eig.min() > -1e-10 * eig.max()
    np.testing.assert_allclose(k.diag(X), np.diag(K), rtol=1e-13, atol=1e-14)


def evaluate(k, X, X2):
    return k(X), k(X, X2), k.diag(X)


@pytest.mark.parametrize("backend", ["jax", "torch"])
@pytest.mark.parametrize("name", KERNEL_NAMES)
def test_same_numbers_on_every_backend(name, backend, X, X2):
    k = all_kernels()[name]
    if backend == "jax":  # under jit, as in the models (and one compilation instead of one per op)
        got = jax.jit(lambda X, X2: evaluate(k, X, X2))(jnp.asarray(X), jnp.asarray(X2))
        array_type = jax.Array
    else:
        got = evaluate(k, torch.asarray(X), torch.asarray(X2))
        array_type = torch.Tensor
    for g, want in zip(got, evaluate(k, X, X2), strict=True):
        assert isinstance(g, array_type)
        assert str(g.dtype).endswith("float64")
        np.testing.assert_allclose(np.asarray(g), want, rtol=1e-12, atol=1e-14)


def test_backend_follows_the_hyperparameters(X):
    """A numpy X with jax (here traced, as in a jitted model) or torch values computes in that backend."""
    want = Matern32(VAR, LS_ARD)(X)
    got_jax = jax.jit(lambda v, ls: Matern32(v, ls)(X))(VAR, jnp.asarray(LS_ARD))
    got_torch = Matern32(torch.asarray(VAR, dtype=torch.float64), torch.asarray(LS_ARD))(X)
    assert isinstance(got_jax, jax.Array) and isinstance(got_torch, torch.Tensor)
    np.testing.assert_allclose(np.asarray(got_jax), want, rtol=1e-13)
    np.testing.assert_allclose(got_torch.numpy(), want, rtol=1e-13)
    with pytest.raises(TypeError):
        RBF(jnp.asarray(VAR), torch.asarray(LS_ARD))(X)


def test_float32_and_integer_inputs(X):
    k = RBF(VAR, LS_ARD) + Linear(0.5)
    K32 = k(torch.asarray(X, dtype=torch.float32))
    assert K32.dtype == torch.float32
    np.testing.assert_allclose(K32.numpy(), k(X), rtol=1e-5, atol=1e-5)
    Xi = np.array([[0, 1], [2, 3]])
    np.testing.assert_allclose(RBF(1.0, 2.0)(Xi), RBF(1.0, 2.0)(Xi.astype(float)), rtol=1e-15)


def test_sum_and_product_numbers(X, X2):
    a, b, c = RBF(VAR, LS_ARD), Linear(0.3), Periodic(0.5, 1.2, 2.0)
    np.testing.assert_allclose((a + b)(X, X2), a(X, X2) + b(X, X2), rtol=1e-15)
    np.testing.assert_allclose((a * b)(X, X2), a(X, X2) * b(X, X2), rtol=1e-15)
    np.testing.assert_allclose((a * b + c).diag(X), a.diag(X) * b.diag(X) + c.diag(X), rtol=1e-15)
    np.testing.assert_allclose(Product([a, b, c])(X), a(X) * b(X) * c(X), rtol=1e-15)
    flat = a + b + c
    assert isinstance(flat, Sum) and flat.kernels == (a, b, c)
    assert (a * b * c).kernels == (a, b, c)
    assert isinstance(a * b + c, Sum) and isinstance((a * b + c).kernels[0], Product)


def test_parameters_and_with_parameters_round_trip(X):
    a, b, c = RBF(1.0, LS_ARD), Linear(0.3), Matern32(0.5, 2.0)
    nested = Sum([Sum([a, b]), c])
    params = nested.parameters()
    assert list(params) == [
        "k0.k0.variance",
        "k0.k0.lengthscale",
        "k0.k1.variance",
        "k1.variance",
        "k1.lengthscale",
    ]
    assert params["k0.k1.variance"] == 0.3
    same = nested.with_parameters(params)
    np.testing.assert_array_equal(same(X), nested(X))

    changed = nested.with_parameters({"k0.k0.lengthscale": 3.0, "k1.variance": 2.0})
    direct = Sum([Sum([RBF(1.0, 3.0), b]), Matern32(2.0, 2.0)])
    np.testing.assert_allclose(changed(X), direct(X), rtol=1e-15)
    assert changed.parameters()["k0.k1.variance"] == 0.3  # missing keys keep their values
    assert nested.parameters()["k1.variance"] == 0.5  # the original is untouched

    assert RBF(2.0, 3.0).with_parameters({"lengthscale": 4.0}).parameters() == {
        "variance": 2.0,
        "lengthscale": 4.0,
    }
    for bad in ["k0.k0.period", "k2.variance", "variance"]:
        with pytest.raises(ValueError, match=bad):
            nested.with_parameters({bad: 1.0})


def test_kernels_are_immutable_but_picklable(X):
    k = RBF()
    with pytest.raises(AttributeError):
        k.lengthscale = 2.0
    composite = Sum([RBF(VAR, LS_ARD, active_dims=[0, 1, 2]), Linear(0.3)]) * White(0.1)
    for clone in [pickle.loads(pickle.dumps(composite)), copy.deepcopy(composite)]:
        assert repr(clone) == repr(composite)
        np.testing.assert_array_equal(clone(X), composite(X))


def test_active_dims(X, X2):
    k = RBF(VAR, [0.5, 2.0], active_dims=(0, 2))
    np.testing.assert_allclose(k(X, X2), RBF(VAR, [0.5, 2.0])(X[:, [0, 2]], X2[:, [0, 2]]))
    np.testing.assert_allclose(k.diag(X), np.full(len(X), VAR))
    # a composite's active_dims apply first, then its parts' own
    outer = Sum([Linear(1.0, active_dims=[1]), RBF()], active_dims=[2, 0])
    expected = np.outer(X[:, 0], X2[:, 0]) + RBF()(X[:, [2, 0]], X2[:, [2, 0]])
    np.testing.assert_allclose(outer(X, X2), expected, rtol=1e-14)
    np.testing.assert_allclose(Linear(2.0, active_dims=[1]).diag(X), 2.0 * X[:, 1] ** 2)
    assert k.with_parameters({"variance": 1.0}).active_dims == (0, 2)
    with pytest.raises(ValueError, match="active_dims"):
        RBF(active_dims=[5])(X)


@pytest.mark.parametrize("cls", list(STATIONARY))
def test_gradients_finite_at_coincident_points(cls):
    X = np.random.default_rng(3).normal(size=(6, 2))
    X = np.concatenate([X, X[:2]])  # duplicated rows: r = 0 off the diagonal too

    def total(variance, lengthscale, X):
        k = cls(variance, lengthscale)
        return k(X).sum() + k(X, X).sum()

    grads = jax.jit(jax.grad(total, argnums=(0, 1, 2)))(1.3, jnp.asarray([0.7, 1.6]), jnp.asarray(X))
    for g in grads:
        assert np.all(np.isfinite(np.asarray(g)))

    # the lengthscale gradient agrees with central finite differences of the scipy oracle (whose
    # distances are exactly 0 at duplicates; the expansion used by the kernels is not, to rounding)
    profile = STATIONARY[cls][0]

    def oracle(lengthscale):
        return 2 * 1.3 * profile(r_oracle(X, X, lengthscale)).sum()

    h, ls = 1e-6, np.array([0.7, 1.6])
    fd = [(oracle(ls + h * e) - oracle(ls - h * e)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(grads[1], fd, rtol=1e-7)
    # d/dvariance of variance * g = sum g (to the rounding of distances at duplicates, see above)
    np.testing.assert_allclose(grads[0], oracle(ls) / 1.3, rtol=1e-9)

    Xt = torch.asarray(X, requires_grad=True)
    cls(1.3, [0.7, 1.6])(Xt).sum().backward()
    assert torch.all(torch.isfinite(Xt.grad))


@pytest.mark.parametrize("cls", [RBF, Matern32, Matern52])
def test_input_gradient_matches_finite_differences(cls):
    X = np.random.default_rng(4).normal(size=(5, 2))
    X = np.concatenate([X, X[:1]])
    k = cls(1.0, [0.8, 1.2])
    weights = np.random.default_rng(5).normal(size=(6, 6))

    def f(X):
        return (k(X) * weights).sum()

    grad = np.asarray(jax.jit(jax.grad(f))(jnp.asarray(X)))
    h, fd = 1e-6, np.zeros_like(X)
    for idx in np.ndindex(*X.shape):
        e = np.zeros_like(X)
        e[idx] = h
        fd[idx] = (f(X + e) - f(X - e)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-7)


def test_validation_of_concrete_values(X):
    for bad in [
        lambda: RBF(variance=0.0),
        lambda: RBF(lengthscale=[1.0, -1.0]),
        lambda: Periodic(period=-2.0),
        lambda: Linear(variance=np.array([1.0, np.nan])),
        lambda: RBF(variance=np.ones(2)),
        lambda: RBF(lengthscale=np.ones((2, 2))),
    ]:
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(ValueError, match="shape"):
        RBF()(X[:, 0])
    with pytest.raises(ValueError, match="columns"):
        RBF()(X, X[:, :2])
    with pytest.raises(TypeError):
        Sum([RBF(), 1.0])
    # jax/torch values are not inspected (they may be tracers, or live on a device)
    assert float(RBF(variance=torch.asarray(-1.0, dtype=torch.float64))(X[:1])[0, 0]) == -1.0


def test_kernel_from_name():
    k = kernel_from_name("RBF + linear", input_dim=3)
    assert isinstance(k, Sum)
    assert [type(p) for p in k.kernels] == [RBF, Linear]
    params = k.parameters()
    assert set(params) == {"k0.variance", "k0.lengthscale", "k1.variance"}
    np.testing.assert_array_equal(params["k0.lengthscale"], np.ones(3))
    np.testing.assert_array_equal(params["k1.variance"], np.ones(3))
    assert params["k0.variance"] == 1.0

    iso = kernel_from_name("periodic", input_dim=3, ard=False)
    assert isinstance(iso, Periodic)
    assert iso.parameters() == {"variance": 1.0, "lengthscale": 1.0, "period": 1.0}
    for name, cls in [("matern12", Matern12), ("matern32", Matern32), ("matern52", Matern52), ("cosine", Cosine)]:
        assert isinstance(kernel_from_name(name, 2), cls)
    assert all(isinstance(kernel_from_name(n, 1), Kernel) for n in ["rbf", "linear"])

    valued = kernel_from_name("periodic+linear", 2, variance=0.5, lengthscale=3.0, dtype=np.float32).parameters()
    assert {k: v.dtype for k, v in valued.items()} == dict.fromkeys(valued, np.float32)
    assert {k: v.tolist() for k, v in valued.items()} == {
        "k0.variance": 0.5, "k0.lengthscale": [3.0, 3.0], "k0.period": [1.0, 1.0], "k1.variance": [0.5, 0.5]
    }  # fmt: skip

    with pytest.raises(ValueError, match="matern52"):
        kernel_from_name("rbf+spectral", input_dim=2)
    with pytest.raises(ValueError):
        kernel_from_name("rbf", input_dim=0)


def test_repr():
    assert repr(RBF(2.0, 3.0, active_dims=[1])) == "RBF(variance=2.0, lengthscale=3.0, active_dims=(1,))"
    assert repr(White(0.1) + Constant(1.0)) == "Sum([White(variance=0.1), Constant(variance=1.0)])"
