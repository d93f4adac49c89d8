"""The SVI fit loop: convergence, checkpoint/resume, early stopping, callbacks, errors, float32."""

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from _lowered_programs import LoweredPrograms, dense_constant_sizes

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.infer.svi import EarlyStopping, NonFiniteLossError, fit_svi
from ppl_sparsegp.models.numpyro.svgp import SVGP


def _normal_model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)


def _normal_guide(y):
    loc = numpyro.param("loc", 0.0)
    scale = numpyro.param("scale", 1.0, constraint=dist.constraints.positive)
    numpyro.sample("mu", dist.Normal(loc, scale))


def test_fit_reaches_the_conjugate_posterior(rng):
    y = jnp.asarray(rng.normal(3.0, 1.0, 50))
    schedule = optax.exponential_decay(0.05, transition_steps=1000, decay_rate=0.2)
    res = fit_svi(_normal_model, _normal_guide, y, optimizer=optax.adam(schedule), num_steps=3000, progress=False)
    post_var = 1.0 / (1.0 / 100.0 + 50.0)
    np.testing.assert_allclose(res.params["loc"], post_var * float(y.sum()), atol=0.02)
    np.testing.assert_allclose(res.params["scale"], np.sqrt(post_var), rtol=0.15)
    assert res.losses.shape == (3000,) and res.steps_per_second > 0 and res.compile_seconds > 0


def _svgp_problem(rng, dtype=np.float64):
    X = rng.uniform(-3, 3, (200, 1)).astype(dtype)
    y = (np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(200)).astype(dtype)
    gp = SVGP(
        kernel=kernels.RBF(variance=1.0, lengthscale=np.ones(1, dtype)),
        likelihood=likelihoods.Gaussian(0.1),
        Z=X[::20].copy(),
        batch_size=50,
    )
    return gp, X, y


SVGP_FIT = dict(optimizer=optax.adam(0.01), key=3, progress=False, steps_per_dispatch=50)


@pytest.fixture(scope="module")
def svgp_full_run(tmp_path_factory):
    """An uninterrupted 300-step SVGP fit (the SVGP compilation takes most of ten seconds), made once for the module;
    its checkpoint, written once at the end, is the other model's checkpoint of the refusal test."""
    gp, X, y = _svgp_problem(np.random.default_rng(0))
    ckpt = tmp_path_factory.mktemp("svgp") / "full.npz"
    full = fit_svi(
        gp.model,
        gp.guide,
        X,
        y,
        num_steps=300,
        checkpoint=ckpt,
        checkpoint_every=1000,
        **SVGP_FIT,
        validate=gp.check_data,
    )
    return full, ckpt


def test_killed_and_resumed_run_equals_uninterrupted_run(rng, tmp_path, svgp_full_run, capsys):
    gp, X, y = _svgp_problem(rng)
    kw = SVGP_FIT
    full, _ = svgp_full_run
    ckpt = tmp_path / "run.npz"

    def kill_after_200(step, losses, params):
        if step == 200:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit_svi(
            gp.model,
            gp.guide,
            X,
            y,
            num_steps=300,
            checkpoint=ckpt,
            checkpoint_every=1000,
            callback=kill_after_200,
            **kw,
            validate=gp.check_data,
        )
    resumed = fit_svi(
        gp.model, gp.guide, X, y, num_steps=300, checkpoint=ckpt, **{**kw, "progress": True}, validate=gp.check_data
    )
    assert resumed.steps_run == 100 and len(resumed.losses) == 300 and resumed.resumed_from == 200
    assert full.resumed_from == 0
    assert "SVI (resumed from step 200)" in capsys.readouterr().err
    np.testing.assert_array_equal(resumed.losses, full.losses)
    for name in full.params:
        np.testing.assert_array_equal(resumed.params[name], full.params[name])


def test_the_progress_bar_carries_its_label(rng, capsys):
    gp, X, y = _svgp_problem(rng)
    kw = {**SVGP_FIT, "progress": True, "steps_per_dispatch": 5}
    result = fit_svi(gp.model, gp.guide, X, y, num_steps=10, label="pre-train", **kw, validate=gp.check_data)
    shown = capsys.readouterr().err
    assert "pre-train" in shown and f"loss={result.losses[-1]:.4g}" in shown  # the loss a caller prints last
    fit_svi(gp.model, gp.guide, X, y, num_steps=10, **kw, validate=gp.check_data)
    assert "SVI" in capsys.readouterr().err


def test_checkpoint_from_another_model_is_refused(tmp_path, svgp_full_run):
    _, svgp_checkpoint = svgp_full_run
    ckpt = tmp_path / "run.npz"
    shutil.copyfile(svgp_checkpoint, ckpt)  # an SVGP checkpoint, offered to a one-parameter model
    with pytest.raises(ValueError, match="checkpoint"):
        fit_svi(_normal_model, _normal_guide, jnp.ones(3), optimizer=optax.adam(0.01), num_steps=10, checkpoint=ckpt)


def test_init_params_read_back_as_numpy_arrays_start_the_fit_where_they_say(svgp_full_run):
    """Parameters saved to and read from an .npz file are numpy arrays, the lower-triangular u_scale_tril included."""
    full, _ = svgp_full_run
    gp, X, y = _svgp_problem(np.random.default_rng(0))
    saved = {name: np.asarray(value) for name, value in full.params.items()}
    short = dict(SVGP_FIT, steps_per_dispatch=1)
    as_numpy = fit_svi(gp.model, gp.guide, X, y, num_steps=1, init_params=saved, **short, validate=gp.check_data)
    as_jax = fit_svi(
        gp.model, gp.guide, X, y, num_steps=1, init_params=dict(full.params), **short, validate=gp.check_data
    )
    np.testing.assert_array_equal(as_numpy.losses, as_jax.losses)
    assert as_numpy.losses[0] < full.losses[0] - 10.0  # it started from the fitted values, not the initial ones


def test_early_stopping_and_callback_stop_the_run(rng):
    y = jnp.asarray(rng.normal(3.0, 1.0, 50))
    common = dict(optimizer=optax.adam(0.1), num_steps=20000, progress=False, steps_per_dispatch=100)
    res = fit_svi(_normal_model, _normal_guide, y, early_stopping=EarlyStopping(patience=500, min_delta=1e-3), **common)
    assert res.stopped_early and len(res.losses) < 20000
    res = fit_svi(_normal_model, _normal_guide, y, callback=lambda step, l, p: step >= 300, **common)
    assert res.stopped_early and len(res.losses) == 300


def test_callback_runs_before_its_steps_checkpoint_and_a_stop_writes_one(rng, tmp_path):
    """Whatever a callback stores at step s is never behind the checkpoint (it runs before the checkpoint of s is
    written), and a run stopped by its callback leaves a checkpoint at the stopping step."""
    y = jnp.asarray(rng.normal(3.0, 1.0, 50))
    ckpt = tmp_path / "run.npz"
    seen = []

    def look(step, losses, params):
        seen.append((step, int(np.load(ckpt)["step"]) if ckpt.exists() else None))
        return step >= 250

    common = dict(optimizer=optax.adam(0.1), num_steps=1000, progress=False, steps_per_dispatch=50)
    res = fit_svi(_normal_model, _normal_guide, y, callback=look, checkpoint=ckpt, checkpoint_every=100, **common)
    assert res.stopped_early and len(res.losses) == 250
    assert seen == [(50, None), (100, None), (150, 100), (200, 100), (250, 200)]
    assert int(np.load(ckpt)["step"]) == 250


def test_continuing_from_a_state_equals_one_long_run(rng):
    y = jnp.asarray(rng.normal(3.0, 1.0, 50))
    kw = dict(optimizer=optax.adam(0.05), progress=False, steps_per_dispatch=100)
    one = fit_svi(_normal_model, _normal_guide, y, num_steps=400, **kw)
    first = fit_svi(_normal_model, _normal_guide, y, num_steps=200, **kw)
    second = fit_svi(_normal_model, _normal_guide, y, num_steps=200, init_state=first.state, **kw)
    np.testing.assert_allclose(np.concatenate([first.losses, second.losses]), one.losses, rtol=1e-12)


def test_non_finite_loss_raises_with_last_finite_params():
    def model(y):
        s = numpyro.param("s", 1.0)
        numpyro.factor("f", -jnp.log(s) * y)  # log of a negative number once s crosses 0

    def guide(y):
        pass

    with pytest.raises(NonFiniteLossError, match="non-finite") as info:
        fit_svi(model, guide, 1.0, optimizer=optax.sgd(0.3), num_steps=100, progress=False, steps_per_dispatch=10)
    assert np.isfinite(info.value.params["s"]) and info.value.step < 100


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_steps=0), "num_steps"),
        (dict(num_steps=10, steps_per_dispatch=-1), "steps_per_dispatch"),
        (dict(num_steps=10, optimizer="adam"), "optimizer"),
        (dict(num_steps=10, early_stopping=5), "early_stopping"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    kwargs = {"optimizer": optax.adam(0.1), **kwargs}
    with pytest.raises(ValueError, match=match):
        fit_svi(_normal_model, _normal_guide, jnp.ones(3), progress=False, **kwargs)


@pytest.mark.slow
def test_float32_svgp_training_has_no_nan(rng):
    with jax.enable_x64(False):
        gp, X, y = _svgp_problem(rng, np.float32)
        res = fit_svi(
            gp.model, gp.guide, X, y, optimizer=optax.adam(0.02), num_steps=1500, progress=False, validate=gp.check_data
        )
        assert res.params["u_loc"].dtype == jnp.float32
        assert np.all(np.isfinite(res.losses)) and res.losses[-100:].mean() < res.losses[:100].mean()
        mean, var = gp.predict_y(res.params, X)
        assert np.all(np.isfinite(np.asarray(var))) and float(jnp.sqrt(jnp.mean((mean - y) ** 2))) < 0.2


def test_no_program_of_fit_svi_embeds_the_data_or_the_initial_values(monkeypatch):
    """The data and ``init_params`` are arguments of every program the fit compiles, initialisation included
    (closed over, they were constants of the init program, which XLA folds at compile time)."""

    def model(y):
        w = numpyro.sample("w", dist.Normal(jnp.zeros(57), 1.0).to_event(1))
        numpyro.sample("y", dist.Normal(w.sum(), 1.0).expand([y.shape[0]]).to_event(1), obs=y)

    def guide(y):
        numpyro.sample("w", dist.Normal(numpyro.param("loc", jnp.zeros(57)), 0.1).to_event(1))

    programs = LoweredPrograms(jax.jit)
    monkeypatch.setattr(jax, "jit", programs)
    y, start = np.linspace(0.0, 1.0, 43), {"loc": np.linspace(-1.0, 1.0, 57)}
    fit = fit_svi(model, guide, y, optimizer=optax.adam(0.01), num_steps=3, key=0, init_params=start, progress=False)
    assert np.all(np.isfinite(fit.losses)) and len(programs.texts) >= 2  # initialisation and the step chunk
    sizes = [size for text in programs.texts for size in dense_constant_sizes(text)]
    assert 43 not in sizes and 57 not in sizes, sizes
