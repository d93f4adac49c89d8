"""Positive params through softplus (ppl_sparsegp.infer.positive_transform, ``fit_svi(positive_transform=...)``):
only params declared ``constraints.positive`` change transform; a robust-max classifier's kernel variance, which the
objective barely sees, drifts geometrically through exp until float32 overflows and only linearly through softplus;
the transform is part of a checkpoint's fingerprint; a bad name fails first."""

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from numpyro import handlers
from numpyro.distributions import constraints
from sklearn.datasets import load_digits

from ppl_sparsegp.core.kernels import RBF, White
from ppl_sparsegp.core.likelihoods import RobustMax
from ppl_sparsegp.infer.checkpoint import CheckpointMismatchError
from ppl_sparsegp.infer.positive_transform import SoftplusPositive
from ppl_sparsegp.infer.svi import NonFiniteLossError, fit_svi, with_positive_transform
from ppl_sparsegp.models.numpyro.svgp import SVGP


def _three_params(y=None):
    positive = numpyro.param("positive", 2.0, constraint=constraints.positive)
    real = numpyro.param("real", 0.5)
    unit = numpyro.param("unit", 0.25, constraint=constraints.unit_interval)
    numpyro.sample("y", dist.Normal(real * unit, positive), obs=y)


def _constraints(fn) -> dict[str, object]:
    trace = handlers.trace(handlers.seed(fn, 0)).get_trace(y=1.0)
    return {name: site["kwargs"].get("constraint") for name, site in trace.items() if site["type"] == "param"}


def test_only_positive_params_go_through_softplus():
    assert _constraints(_three_params)["positive"] is constraints.positive
    found = _constraints(SoftplusPositive(_three_params))
    assert found == {"positive": constraints.softplus_positive, "real": None, "unit": constraints.unit_interval}
    assert with_positive_transform(_three_params, "exp") is _three_params

    fits = {
        transform: fit_svi(
            _three_params,
            lambda y=None: None,
            optimizer=optax.adam(0.01),
            num_steps=1,
            progress=False,
            positive_transform=transform,
            y=1.0,
        )  # fmt: skip
        for transform in ("exp", "softplus")
    }
    raw = {transform: fit.state.optim_state[1][0] for transform, fit in fits.items()}
    # one Adam step moves each unconstrained value by the learning rate: from log 2 through exp, from softplus⁻¹(2)
    # = log(e² - 1) through softplus; the params that are not positive alike under both
    for transform, start in (("exp", np.log(2.0)), ("softplus", np.log(np.expm1(2.0)))):
        np.testing.assert_allclose(abs(float(raw[transform]["positive"]) - start), 0.01, rtol=1e-5)
    softplus = np.log1p(np.exp(float(raw["softplus"]["positive"])))
    np.testing.assert_allclose(float(fits["softplus"].params["positive"]), softplus, rtol=1e-6)
    for name in ("real", "unit"):
        assert float(raw["exp"][name]) == float(raw["softplus"][name])


def _digits_robustmax() -> tuple[SVGP, np.ndarray, np.ndarray]:
    X, y = load_digits(return_X_y=True)
    X = (X / 16 * 2 - 1).astype(np.float32)
    kernel = RBF(variance=np.float32(10.0), lengthscale=np.float32(10.0)) + White(variance=np.float32(0.01))
    Z = X[np.random.default_rng(0).choice(len(X), 20, replace=False)]
    return SVGP(kernel, RobustMax(10), Z=Z, num_latent=10, batch_size=200), X, y


def test_a_robustmax_kernel_variance_overflows_float32_through_exp_and_stays_bounded_through_softplus():
    """Digits in float32, Adam at 0.1 (the MNIST collapse of benchmarks/README.md in 2,000 steps instead of 20,000).
    Measured: through exp the variance was 2e4 at step 300, 5e19 at 1,000 and 5e36 at 1,500, and the loss became
    non-finite at step 1,637; through softplus it went 10 -> 41.8 in 2,000 steps, the loss falling as far."""
    with jax.enable_x64(False):  # float32 throughout, as the MNIST run
        gp, X, y = _digits_robustmax()
        options = dict(optimizer=optax.adam(0.1), num_steps=2000, steps_per_dispatch=100, progress=False)
        with pytest.raises(NonFiniteLossError) as overflowed:
            fit_svi(gp.model, gp.guide, X, y, **options)
        assert float(overflowed.value.params["kernel.k0.variance"]) > 1e30
        fit = fit_svi(gp.model, gp.guide, X, y, positive_transform="softplus", **options)
        variance = float(fit.params["kernel.k0.variance"])
        assert 10.0 < variance < 10.0 + 0.1 * 2000  # softplus adds at most about the learning rate a step
        assert np.mean(fit.losses[-200:]) < 0.5 * np.mean(fit.losses[:100])
        error = np.mean(np.argmax(np.asarray(gp.predict_y(fit.params, X)[0]), axis=1) != y)
        assert error < 0.1


def test_the_transform_is_part_of_the_checkpoint_and_a_bad_name_fails_first(tmp_path):
    path = tmp_path / "run.npz"
    options = dict(optimizer=optax.adam(0.01), progress=False, checkpoint=path, y=1.0)
    fit_svi(_three_params, lambda y=None: None, num_steps=2, positive_transform="softplus", **options)
    with pytest.raises(CheckpointMismatchError, match="positive_transform 'softplus' -> 'exp'"):
        fit_svi(_three_params, lambda y=None: None, num_steps=4, **options)
    resumed = fit_svi(_three_params, lambda y=None: None, num_steps=4, positive_transform="softplus", **options)
    assert resumed.resumed_from == 2
    with pytest.raises(ValueError, match="^positive_transform must be one of 'exp', 'softplus'; got 'log'"):
        fit_svi(_three_params, lambda y=None: None, num_steps=4, positive_transform="log", **options)
