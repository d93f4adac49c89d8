"""GPR, SGPR and SVGP as NumPyro programs, checked against each other and against oracles."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro import handlers
from numpyro.infer import Trace_ELBO, TraceMeanField_ELBO
from numpyro.infer.util import log_density

from ppl_sparsegp.core import conditionals, kernels, likelihoods, ops
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP


def _data(rng, N=40, D=2, P=1):
    X = rng.uniform(-2, 2, (N, D))
    f = np.sin(2 * X[:, 0]) + 0.5 * np.cos(X[:, -1])
    y = f[:, None] + 0.2 * rng.standard_normal((N, P))
    return X, (y[:, 0] if P == 1 else y)


def _kernel(D=2):
    return kernels.RBF(variance=1.2, lengthscale=np.full(D, 0.9))


def _loss(gp, params, X, y, elbo=None, key=0, model=None):
    """NumPyro's negative ELBO of (model or gp.model, gp.guide) at constrained parameter values (compiled)."""
    elbo = elbo or TraceMeanField_ELBO()
    model = model or gp.model
    fn = jax.jit(lambda p, k: elbo.loss(k, p, model, gp.guide, X, y))
    keys = jax.random.split(jax.random.PRNGKey(0), key) if key else [jax.random.PRNGKey(0)]
    values = [float(fn(params, k)) for k in keys]
    return values[0] if not key else np.array(values)


def test_gpr_model_density_is_the_exact_marginal_likelihood(rng):
    X, y = _data(rng, P=2)
    gp = GPR(kernel=_kernel(), likelihood=likelihoods.Gaussian(0.1))
    logp, _ = log_density(gp.model, (X, y), {}, {})
    np.testing.assert_allclose(logp, gp.log_marginal_likelihood({}, X, y), rtol=1e-10)
    manual = sum(
        -0.5 * y[:, p] @ np.linalg.solve(_kernel()(X) + 0.1 * np.eye(40), y[:, p])
        - 0.5 * np.linalg.slogdet(_kernel()(X) + 0.1 * np.eye(40))[1]
        - 20 * np.log(2 * np.pi)
        for p in range(2)
    )
    np.testing.assert_allclose(logp, manual, rtol=1e-7)


def test_sgpr_with_z_equal_x_matches_gpr_bound_and_predictions(rng):
    X, y = _data(rng)
    Xs = rng.uniform(-2, 2, (7, 2))
    lik = likelihoods.Gaussian(0.05)
    gpr, sgpr = GPR(kernel=_kernel(), likelihood=lik), SGPR(kernel=_kernel(), likelihood=lik, Z=X.copy())
    np.testing.assert_allclose(-_loss(sgpr, {}, X, y), gpr.log_marginal_likelihood({}, X, y), rtol=1e-6)
    for a, b in zip(sgpr.predict_y({}, Xs, X=X, y=y), gpr.predict_y({}, Xs, X=X, y=y), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("whiten", [True, False])
def test_svgp_elbo_at_analytic_optimum_equals_sgpr_bound(rng, whiten):
    X, y = _data(rng)
    Z = X[::4].copy()
    lik = likelihoods.Gaussian(0.05)
    sgpr = SGPR(kernel=_kernel(), likelihood=lik, Z=Z)
    svgp = SVGP(kernel=_kernel(), likelihood=lik, Z=Z, whiten=whiten)
    q_mu, q_sqrt = sgpr.optimal_qu({}, X, y, whiten=whiten)
    params = {"u_loc": q_mu, "u_scale_tril": q_sqrt, "Z": Z}
    np.testing.assert_allclose(-_loss(svgp, params, X, y), sgpr.elbo({}, X, y), rtol=1e-7)
    np.testing.assert_allclose(svgp.elbo(params, X, y), sgpr.elbo({}, X, y), rtol=1e-7)


def test_whitened_and_unwhitened_elbos_agree_for_equivalent_parameters(rng):
    X, y = _data(rng, P=2)
    Z = X[::5].copy()
    lik = likelihoods.Bernoulli("probit")
    yb = (y > 0).astype(float)
    q_mu = rng.standard_normal((2, len(Z)))
    q_sqrt = np.tril(rng.standard_normal((2, len(Z), len(Z)))) * 0.2 + 0.6 * np.eye(len(Z))
    Lmm = np.asarray(ops.cholesky(jnp.asarray(_kernel()(Z))))
    white = SVGP(kernel=_kernel(), likelihood=lik, Z=Z, num_latent=2)
    plain = SVGP(kernel=_kernel(), likelihood=lik, Z=Z, num_latent=2, whiten=False)
    loss_w = _loss(white, {"u_loc": q_mu, "u_scale_tril": q_sqrt}, X, yb)
    loss_u = _loss(plain, {"u_loc": q_mu @ Lmm.T, "u_scale_tril": Lmm @ q_sqrt}, X, yb)
    np.testing.assert_allclose(loss_u, loss_w, rtol=1e-8)


@pytest.mark.parametrize("q_diag", [False, True])
def test_minibatch_elbo_is_unbiased_over_a_partition(rng, q_diag):
    X, y = _data(rng, N=48)
    Z = X[::6].copy()
    common = dict(kernel=_kernel(), likelihood=likelihoods.StudentT(df=4.0, scale=0.3), Z=Z, q_diag=q_diag)
    full = SVGP(**common)
    batched = SVGP(**common, batch_size=12)
    M = len(Z)
    scale = rng.uniform(0.3, 1.0, (1, M)) if q_diag else np.tril(rng.standard_normal((1, M, M))) * 0.1 + np.eye(M)
    params = {"u_loc": rng.standard_normal((1, M)), ("u_scale" if q_diag else "u_scale_tril"): scale}
    perm = rng.permutation(48).reshape(4, 12)
    batch_losses = [
        _loss(batched, params, X, y, model=handlers.substitute(batched.model, data={"data": jnp.asarray(idx)}))
        for idx in perm
    ]
    np.testing.assert_allclose(np.mean(batch_losses), _loss(full, params, X, y), rtol=1e-10)
    assert np.std(batch_losses) > 1e-3  # the batches really differ


def test_sampled_data_term_is_an_unbiased_estimate_of_the_analytic_elbo(rng):
    X, y = _data(rng, N=30)
    Z = X[::5].copy()
    M = len(Z)
    params = {"u_loc": 0.3 * rng.standard_normal((1, M)), "u_scale_tril": 0.4 * np.eye(M)[None]}
    lik = likelihoods.Poisson()
    counts = rng.poisson(2.0, 30).astype(float)
    exact = -_loss(SVGP(kernel=_kernel(), likelihood=lik, Z=Z), params, X, counts)
    sampled = SVGP(kernel=_kernel(), likelihood=lik, Z=Z, data_term="sampled")
    draws = -_loss(sampled, params, X, counts, Trace_ELBO(), key=400)
    assert abs(draws.mean() - exact) < 4 * draws.std() / np.sqrt(len(draws))


@pytest.mark.parametrize("lik", [likelihoods.Gaussian(0.2), likelihoods.Bernoulli("logit")])
def test_elbo_gradients_match_finite_differences(rng, lik):
    X, y = _data(rng, N=25)
    if isinstance(lik, likelihoods.Bernoulli):
        y = (y > 0).astype(float)
    Z = X[::5].copy()
    M = len(Z)
    gp = SVGP(kernel=_kernel(), likelihood=lik, Z=Z)
    params = {
        "kernel.variance": jnp.asarray(1.2),
        "kernel.lengthscale": jnp.asarray([0.9, 1.1]),
        "Z": jnp.asarray(Z),
        "u_loc": jnp.asarray(rng.standard_normal((1, M))),
        "u_scale_tril": jnp.asarray(np.tril(rng.standard_normal((1, M, M))) * 0.1 + 0.7 * np.eye(M)),
    }
    params.update({f"likelihood.{k}": jnp.asarray(v) for k, v in lik.parameters().items()})
    elbo = jax.jit(lambda p: gp.elbo(p, X, y))
    grads = jax.jit(jax.grad(lambda p: gp.elbo(p, X, y)))(params)  # one compilation, not one per operation
    eps = 1e-6
    for name, value in params.items():
        flat = np.asarray(value, dtype=float).ravel()
        for i in rng.choice(flat.size, size=min(3, flat.size), replace=False):
            up, down = flat.copy(), flat.copy()
            up[i] += eps
            down[i] -= eps
            f_up = elbo({**params, name: jnp.asarray(up.reshape(np.shape(value)))})
            f_down = elbo({**params, name: jnp.asarray(down.reshape(np.shape(value)))})
            fd = (f_up - f_down) / (2 * eps)
            np.testing.assert_allclose(np.asarray(grads[name]).ravel()[i], fd, rtol=1e-5, atol=1e-6)


def test_priors_make_sample_sites_with_map_points_in_the_guide(rng):
    X, y = _data(rng)
    priors = {"kernel.lengthscale": dist.LogNormal(0.0, 1.0).expand([2]).to_event(1)}
    gp = SVGP(kernel=_kernel(), likelihood=likelihoods.Gaussian(0.1), Z=X[:5], priors=priors)
    guide_trace = handlers.trace(handlers.seed(gp.guide, 0)).get_trace(X, y)
    model_trace = handlers.trace(handlers.seed(gp.model, 0)).get_trace(X, y)
    assert guide_trace["kernel.lengthscale"]["fn"].__class__.__name__ == "Delta"
    assert "kernel.lengthscale_map" in guide_trace
    assert model_trace["kernel.lengthscale"]["type"] == "sample"
    assert model_trace["kernel.variance"]["type"] == "param"
    # The MAP objective adds the log prior of the point estimate to the ELBO.
    value = np.array([0.9, 0.9])
    base = SVGP(kernel=_kernel(), likelihood=likelihoods.Gaussian(0.1), Z=X[:5])
    diff = _loss(base, {}, X, y) - _loss(gp, {"kernel.lengthscale_map": value}, X, y)
    np.testing.assert_allclose(diff, dist.LogNormal(0.0, 1.0).log_prob(value).sum(), rtol=1e-8)


def test_fixed_sites_are_constants(rng):
    X, y = _data(rng)
    gp = SVGP(kernel=_kernel(), likelihood=likelihoods.Gaussian(0.1), Z=X[:5], fixed=("likelihood.variance",))
    trace = handlers.trace(handlers.seed(gp.model, 0)).get_trace(X, y)
    assert "likelihood.variance" not in trace


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(priors={"kernel.nope": dist.Normal()}), "priors"),
        (dict(fixed=("likelihood.scale",)), "fixed"),
        (dict(batch_size=0), "batch_size"),
        (dict(num_latent=2.5), "num_latent"),
        (dict(data_term="mc"), "data_term"),
        (dict(Z=np.zeros(3)), "Z"),
    ],
)
def test_bad_model_arguments_name_the_argument(rng, kwargs, match):
    args = dict(kernel=_kernel(), likelihood=likelihoods.Gaussian(0.1), Z=np.zeros((3, 2)))
    with pytest.raises(ValueError, match=match):
        SVGP(**{**args, **kwargs})


def test_gpr_and_sgpr_refuse_non_gaussian_likelihoods():
    for cls, extra in ((GPR, {}), (SGPR, {"Z": np.zeros((2, 1))})):
        with pytest.raises(ValueError, match="likelihood"):
            cls(kernel=_kernel(1), likelihood=likelihoods.Poisson(), **extra)


def test_optimal_q_of_unwhitened_and_whitened_give_same_predictions(rng):
    X, y = _data(rng)
    Z = X[::3].copy()
    sg = SGPR(kernel=_kernel(), likelihood=likelihoods.Gaussian(0.1), Z=Z)
    Xs = rng.uniform(-2, 2, (5, 2))
    Lmm = ops.cholesky(jnp.asarray(_kernel()(Z)))
    outs = []
    for whiten in (True, False):
        q_mu, q_sqrt = sg.optimal_qu({}, X, y, whiten=whiten)
        outs.append(conditionals.conditional(_kernel()(Z, Xs), Lmm, _kernel().diag(Xs), q_mu, q_sqrt, whiten=whiten))
    np.testing.assert_allclose(outs[0][0], outs[1][0], atol=1e-8)
    np.testing.assert_allclose(outs[0][1], outs[1][1], atol=1e-8)
