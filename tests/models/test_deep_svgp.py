"""DeepSVGP: one layer is SVGP, zero-variance inner layers are their mean path, masks are subsets, bad input."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ppl_sparsegp.core import kl
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian, StudentT
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.deep_svgp import DeepSVGP, deep_svgp
from ppl_sparsegp.models.numpyro.svgp import SVGP

KEY = jax.random.PRNGKey(3)


def problem(rng, n=25, d=2):
    X = rng.normal(size=(n, d))
    return X, np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)


def random_q(rng, params, layer, P, M):
    params[f"layer{layer}.u_loc"] = jnp.asarray(rng.normal(size=(P, M)))
    params[f"layer{layer}.u_scale_tril"] = jnp.asarray(np.tril(0.3 * rng.normal(size=(P, M, M))) + np.eye(M))


@pytest.mark.parametrize("likelihood", [Gaussian(0.1), StudentT(df=4.0, scale=0.3)], ids=["gaussian", "student-t"])
@pytest.mark.slow
def test_one_layer_elbo_is_the_unwhitened_svgp_elbo(rng, likelihood):
    X, y = problem(rng)
    Z = X[:6]
    deep = DeepSVGP(Z=[Z], widths=[1], likelihood=likelihood, kernels=[RBF(0.8, np.array([1.0, 2.0]))])
    params = {}
    random_q(rng, params, 0, 1, 6)
    shallow = SVGP(kernel=RBF(0.8, np.array([1.0, 2.0])), likelihood=likelihood, Z=Z, whiten=False)
    svgp_params = {"u_loc": params["layer0.u_loc"], "u_scale_tril": params["layer0.u_scale_tril"]}
    np.testing.assert_allclose(
        jax.jit(deep.elbo)(params, X, y, KEY), jax.jit(shallow.elbo)(svgp_params, X, y), rtol=1e-12
    )
    mean, var = deep.predict_f(params, X[:4], key=KEY, num_samples=3)
    expected = shallow.predict_f(svgp_params, X[:4])
    assert mean.shape == (3, 4)
    np.testing.assert_allclose(mean, np.broadcast_to(expected[0], (3, 4)), rtol=1e-10)
    np.testing.assert_allclose(var, np.broadcast_to(expected[1], (3, 4)), rtol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("add_input", [False, True])
def test_inner_layers_with_zero_variance_reduce_to_the_mean_path(rng, add_input):
    """A near-zero inner kernel variance and q(u) = 0: F¹ = X W (+ X), so the bound is the last layer's SVGP
    bound on inputs X W (+ X), whatever the random draw."""
    X, y = problem(rng)
    W = np.array([[0.5, 1.0], [-1.0, 0.3]])
    Z2 = X[5:10] @ W + (X[5:10] if add_input else 0.0)
    kernels = [RBF(1e-14, np.ones(2)), RBF(0.8, np.array([1.0, 1.5]))]
    deep = DeepSVGP(
        Z=[X[:4], Z2], widths=[2, 1], likelihood=Gaussian(0.1), kernels=kernels, mean_weights=[W], add_input=add_input
    )
    params = {}
    random_q(rng, params, 0, 2, 4)
    random_q(rng, params, 1, 1, 5)
    params["layer0.u_loc"] = jnp.zeros((2, 4))
    H = X @ W + (X if add_input else 0.0)
    shallow = SVGP(kernel=kernels[1], likelihood=Gaussian(0.1), Z=Z2, whiten=False)
    svgp_params = {"u_loc": params["layer1.u_loc"], "u_scale_tril": params["layer1.u_scale_tril"]}
    Kmm0 = kernels[0](jnp.asarray(X[:4]))
    kl0 = kl.kl_qu_pu(params["layer0.u_loc"], params["layer0.u_scale_tril"], np.linalg.cholesky(Kmm0))
    expected = jax.jit(shallow.elbo)(svgp_params, H, y) - kl0
    elbo = jax.jit(deep.elbo)
    for seed in range(2):
        np.testing.assert_allclose(elbo(params, X, y, jax.random.PRNGKey(seed)), expected, rtol=1e-6)


@pytest.mark.slow
def test_masked_elbo_is_the_elbo_of_the_pruned_model_with_the_same_draws(rng):
    X, y = problem(rng, d=2)
    deep = deep_svgp(X, 1, Gaussian(0.2), Z=[X[:6], X[6:11]], add_input=True, inner_mean="zero", num_samples=3)
    params = {}
    random_q(rng, params, 0, 2, 6)
    random_q(rng, params, 1, 1, 5)
    masks = [np.array([1, 0, 1, 1, 0, 1.0]), np.array([0, 1, 1, 0, 1.0])]
    index = [np.flatnonzero(m) for m in masks]
    pruned = DeepSVGP(**{**_fields(deep), "Z": [deep.Z[0][index[0]], deep.Z[1][index[1]]]})
    sub = dict(params)
    for i, idx in enumerate(index):
        sub[f"layer{i}.Z"] = deep.Z[i][idx]
        S = params[f"layer{i}.u_scale_tril"] @ np.swapaxes(params[f"layer{i}.u_scale_tril"], -1, -2)
        sub[f"layer{i}.u_loc"] = params[f"layer{i}.u_loc"][:, idx]
        sub[f"layer{i}.u_scale_tril"] = np.linalg.cholesky(S[:, idx][:, :, idx])
    masked = jax.jit(deep.elbo)(params, X, y, KEY, masks=masks)
    np.testing.assert_allclose(masked, jax.jit(pruned.elbo)(sub, X, y, KEY), rtol=1e-9)
    all_points = jax.jit(deep.elbo)(params, X, y, KEY, masks=[np.ones(6), np.ones(5)])
    assert abs(float(masked - all_points)) > 1.0  # the masks matter


def _fields(model):
    return {f.name: getattr(model, f.name) for f in dataclasses.fields(DeepSVGP)}


@pytest.mark.slow
def test_svi_fits_with_minibatches_and_predicts_a_mixture(rng):
    X = rng.uniform(-2, 2, size=(120, 1))
    y = np.sign(X[:, 0]) + 0.05 * rng.normal(size=120)
    deep = deep_svgp(X, 1, Gaussian(0.5), Z=X[:10], num_samples=2, batch_size=40)
    res = fit_svi(
        deep.model,
        deep.guide,
        X,
        y,
        optimizer=optax.adam(0.03),
        num_steps=300,
        progress=False,
        validate=deep.check_data,
    )
    assert np.mean(res.losses[-50:]) < 0.5 * np.mean(res.losses[:10])
    mean, var = deep.predict_y(res.params, X, key=KEY, num_samples=8)
    assert mean.shape == var.shape == (120,) and np.all(np.asarray(var) > 0)
    assert np.sqrt(np.mean((np.asarray(mean) - y) ** 2)) < np.std(y)
    logp = deep.predict_log_density(res.params, X[:5], y[:5], key=KEY, num_samples=8)
    means, variances = deep.predict_f(res.params, X[:5], key=KEY, num_samples=8)
    noise = res.params["likelihood.variance"]
    mixture = np.log(
        np.mean(np.exp(-0.5 * (y[:5] - means) ** 2 / (variances + noise)) / np.sqrt(2 * np.pi * (variances + noise)), 0)
    )
    np.testing.assert_allclose(logp, mixture, rtol=1e-8)


X_OK = np.linspace(0, 1, 10)[:, None]


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ({"Z": []}, "Z"),
        ({"Z": X_OK[:3]}, "Z"),
        ({"Z": [X_OK[:3], np.full((3, 1), np.nan)]}, "Z"),
        ({"widths": [1]}, "widths"),
        ({"widths": [1, 0]}, "widths"),
        ({"Z": [X_OK[:3], np.zeros((3, 2))]}, "Z\\[1\\]"),
        ({"mean_weights": []}, "mean_weights"),
        ({"mean_weights": [np.ones((2, 2))]}, "mean_weights\\[0\\]"),
        ({"kernels": [RBF()]}, "kernels"),
        ({"num_samples": 0}, "num_samples"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 5, "num_data": 10}, "num_data"),
        ({"inner_scale": 0.0}, "inner_scale"),
        ({"whiten": 1}, "whiten"),
        ({"widths": [2, 1], "Z": [X_OK[:3], np.zeros((3, 2))], "mean_weights": [None], "add_input": True}, "add_input"),
    ],
)
def test_bad_arguments_are_refused_with_their_name(overrides, name):
    args = {"Z": [X_OK[:3], X_OK[:4]], "widths": [1, 1], "likelihood": Gaussian(), "mean_weights": [None]}
    with pytest.raises(ValueError, match=name):
        DeepSVGP(**{**args, **overrides})


def test_bad_data_is_refused_before_compiling():
    deep = DeepSVGP(Z=[X_OK[:3]], widths=[1], likelihood=Gaussian())
    with pytest.raises(ValueError, match="y"):
        deep.check_data(X_OK, np.ones((10, 2)))
    with pytest.raises(ValueError):
        deep.check_data(np.ones((10, 2)), np.ones(10))
    with pytest.raises(ValueError, match="inner_mean"):
        deep_svgp(X_OK, 1, Gaussian(), Z=X_OK[:3], inner_mean="affine")
    with pytest.raises(ValueError, match="Z"):
        deep_svgp(X_OK, 1, Gaussian(), Z=[X_OK[:3]], num_layers=2)
