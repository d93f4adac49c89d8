"""The Pyro fit loop (ppl_sparsegp.pyro.svi.fit_svi): a resumed run takes the same steps as an uninterrupted one,
bit for bit; another run's checkpoint is refused, naming what differs; the caller's arrays are not moved by the
optimiser; a non-finite loss stops the run with the last finite params; bad arguments fail before any step."""

import functools

import numpy as np
import pyro
import pytest
import torch

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.infer.checkpoint import CheckpointError, CheckpointMismatchError
from ppl_sparsegp.infer.svi import NonFiniteLossError
from ppl_sparsegp.models.pyro import svgp
from ppl_sparsegp.pyro import svi as svi_module
from ppl_sparsegp.pyro.svi import fit_svi

STEPS = 30


def _data(n: int = 60):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (n, 1))
    return X, np.sin(2 * X[:, 0]) + 0.1 * rng.standard_normal(n)


def _svgp(Z):
    return svgp.SVGP(kernels.RBF(), likelihoods.Gaussian(variance=0.1), Z=Z, batch_size=20)


def test_a_resumed_run_takes_the_same_steps_as_an_uninterrupted_one(tmp_path):
    X, y = _data()
    gp = _svgp(X[:5])
    straight = fit_svi(gp.model, gp.guide, X, y, num_steps=STEPS)
    path = tmp_path / "checkpoint.npz"
    first = fit_svi(gp.model, gp.guide, X, y, num_steps=STEPS // 3, checkpoint=path, checkpoint_every=4)
    resumed = fit_svi(gp.model, gp.guide, X, y, num_steps=STEPS, checkpoint=path, checkpoint_every=4)

    assert first.steps_run == STEPS // 3 and resumed.resumed_from == STEPS // 3
    assert resumed.steps_run == STEPS - STEPS // 3 and len(resumed.losses) == STEPS
    np.testing.assert_array_equal(resumed.losses, straight.losses)
    for name, value in straight.params.items():
        torch.testing.assert_close(resumed.params[name], value, rtol=0, atol=0)
    assert straight.losses[-1] < straight.losses[0]


def test_another_runs_checkpoint_is_refused_naming_what_differs(tmp_path):
    X, y = _data()
    gp = _svgp(X[:5])
    path = tmp_path / "checkpoint.npz"
    fit_svi(gp.model, gp.guide, X, y, num_steps=5, checkpoint=path, fingerprint={"lr": 0.01})
    with pytest.raises(CheckpointMismatchError, match="lr 0.01 -> 0.1"):
        fit_svi(gp.model, gp.guide, X, y, num_steps=10, checkpoint=path, fingerprint={"lr": 0.1})
    with pytest.raises(CheckpointMismatchError, match="seed 0 -> 1"):
        fit_svi(gp.model, gp.guide, X, y, num_steps=10, checkpoint=path, fingerprint={"lr": 0.01}, seed=1)
    with pytest.raises(CheckpointError, match="holds 5 steps, more than the 3"):
        fit_svi(gp.model, gp.guide, X, y, num_steps=3, checkpoint=path, fingerprint={"lr": 0.01})


def test_the_optimiser_moves_its_params_not_the_callers_arrays():
    X, y = _data()
    X_before = X.copy()
    gp = _svgp(X[:5])  # Z a view of the training inputs
    fit = fit_svi(gp.model, gp.guide, X, y, num_steps=5)
    np.testing.assert_array_equal(X, X_before)
    assert not torch.equal(fit.params["Z"], torch.as_tensor(X_before[:5]))


def test_a_non_finite_loss_stops_the_run_with_the_last_finite_params():
    def model():
        x = pyro.param("x", torch.tensor(1.0))
        pyro.factor("barrier", torch.log(torch.relu(x)) - 3 * x)  # loss 3x - log x: infinite once x <= 0

    def guide():
        pass

    sgd = functools.partial(torch.optim.SGD, lr=1.0)  # x = 1 - (3 - 1) = -1 after the first step
    with pytest.raises(NonFiniteLossError, match="non-finite at step 1") as error:
        fit_svi(model, guide, num_steps=5, optimizer=sgd, loss=pyro.infer.Trace_ELBO())
    assert float(error.value.params["x"]) == 1.0


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"num_steps": 0}, "num_steps"),
        ({"num_steps": 5, "checkpoint_every": 0}, "checkpoint_every"),
        ({"num_steps": 5, "threads": 0}, "threads"),
        ({"num_steps": 5, "optimizer": 0.01}, "optimizer: expected a callable"),
        ({"num_steps": 5, "optimizer": lambda params: None}, "optimizer: expected it to return"),
        ({"num_steps": 5, "callback_every": 0}, "callback_every"),
        ({"num_steps": 5, "callback": "record"}, "callback: expected a callable"),
    ],
)
def test_bad_arguments_are_named(bad, message):
    X, y = _data()
    gp = _svgp(X[:5])
    with pytest.raises(ValueError, match=message):
        fit_svi(gp.model, gp.guide, X, y, **bad)


def test_bad_data_fails_in_validate_before_any_step():
    X, y = _data()
    gp = _svgp(X[:5])
    with pytest.raises(ValueError, match="y"):
        fit_svi(gp.model, gp.guide, X, y[:-1], num_steps=5, validate=gp.check_data)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_fit_runs_on_its_threads_and_restores_the_callers(threads):
    seen = []

    def model():
        seen.append(torch.get_num_threads())
        pyro.factor("quadratic", -((pyro.param("x", torch.tensor(1.0)) - 2.0) ** 2))

    before = torch.get_num_threads()
    fit_svi(model, lambda: None, num_steps=3, threads=threads, loss=pyro.infer.Trace_ELBO())
    assert set(seen) == {threads} and torch.get_num_threads() == before


@pytest.mark.parametrize("size, expected", [(4, 1), (512, 3)])
def test_auto_threads_are_one_for_small_params_and_torchs_own_for_a_large_one(size, expected):
    """threads="auto": a step with a 512 x 512 param (M = 512's q(u) factor) runs on torch's own count (3 here), a
    small one on one thread; the caller's count is restored."""
    seen = []

    def model():
        seen.append(torch.get_num_threads())
        x = pyro.param("x", torch.ones(size, size))
        pyro.factor("quadratic", -((x - 2.0) ** 2).sum())

    previous = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        fit_svi(model, lambda: None, num_steps=3, loss=pyro.infer.Trace_ELBO())
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(previous)
    assert seen[0] == 1 and set(seen[1:]) == {expected}  # the params are created on one thread, then chosen


def test_init_params_start_the_fit_and_unknown_names_are_refused():
    X, y = _data()
    gp = _svgp(X[:5])
    start = {"kernel.lengthscale": np.array(0.3), "Z": X[10:15]}
    fit = fit_svi(
        gp.model, gp.guide, X, y, num_steps=1, init_params=start, optimizer=functools.partial(torch.optim.SGD, lr=0.0)
    )
    torch.testing.assert_close(fit.params["kernel.lengthscale"], torch.tensor(0.3, dtype=torch.float64))
    torch.testing.assert_close(fit.params["Z"], torch.as_tensor(X[10:15]))
    with pytest.raises(ValueError, match=r"init_params: no params \['lengthscale'\]"):
        fit_svi(gp.model, gp.guide, X, y, num_steps=1, init_params={"lengthscale": 0.3})


def test_a_score_function_fit_resumes_with_its_baselines(tmp_path):
    """TraceGraph_ELBO on a selective SGPR: λ's score-function gradient with Pyro's decaying-average baseline, a
    param the ELBO creates during the steps; a resumed run restores it and takes the uninterrupted run's steps."""
    from ppl_sparsegp.models.pyro.selective import BASELINE_PARAM, SelectiveSGPR
    from ppl_sparsegp.models.pyro.sgpr import SGPR

    X, y = _data(40)
    gp = SelectiveSGPR(SGPR(kernels.RBF(), likelihoods.Gaussian(variance=0.1), Z=X[:6]), alpha=0.1)
    options = {"num_steps": 12, "loss": pyro.infer.TraceGraph_ELBO(), "checkpoint_every": 4}
    straight = fit_svi(gp.model, gp.guide, X, y, **options)
    assert BASELINE_PARAM in straight.params and float(straight.params[BASELINE_PARAM]) != 0.0
    path = tmp_path / "checkpoint.npz"
    fit_svi(gp.model, gp.guide, X, y, **{**options, "num_steps": 8}, checkpoint=path)
    resumed = fit_svi(gp.model, gp.guide, X, y, **options, checkpoint=path)
    np.testing.assert_array_equal(resumed.losses, straight.losses)
    for name, value in straight.params.items():
        torch.testing.assert_close(resumed.params[name], value, rtol=0, atol=0)


def test_a_param_no_optimiser_group_holds_stays_put_and_gets_no_gradient():
    seen = []

    def model():
        fixed = pyro.param("fixed", torch.tensor(2.0), constraint=torch.distributions.constraints.positive)
        seen.append(fixed.requires_grad)
        pyro.sample("x", pyro.distributions.Normal(pyro.param("loc", torch.tensor(0.0)), fixed), obs=torch.tensor(1.0))

    def only_loc(params):
        names = {id(p): name for name, p in pyro.get_param_store().named_parameters()}
        return torch.optim.Adam([p for p in params if names[id(p)] == "loc"], lr=0.1)

    fit = fit_svi(model, lambda: None, num_steps=3, optimizer=only_loc, loss=pyro.infer.Trace_ELBO())

    assert seen[0] and seen[1:] == [False, False, False]  # created trainable, held without a gradient while fitting
    assert fit.params["fixed"].item() == 2.0 and fit.params["loc"].item() != 0.0
    assert pyro.get_param_store().get_param("fixed").unconstrained().requires_grad  # trainable again afterwards


def test_the_callback_runs_at_its_steps_and_checkpoints_follow_them(tmp_path, monkeypatch):
    """With a callback every 3 of 8 steps (and at the last), it gets the losses since its previous call and the
    params, and checkpoints due every 2 steps are written only at its steps (3, 6, 8); a run stopped after step 4
    and resumed calls it at the same steps, with the losses of the steps it ran."""
    X, y = _data()
    gp = _svgp(X[:5])
    calls = []

    def record(step, losses, params):
        calls.append((step, losses, params["kernel.variance"].clone()))

    straight = fit_svi(gp.model, gp.guide, X, y, num_steps=8, callback=record, callback_every=3)
    assert [step for step, *_ in calls] == [3, 6, 8]
    np.testing.assert_array_equal(np.concatenate([losses for _, losses, _ in calls]), straight.losses)
    assert torch.equal(calls[-1][2], straight.params["kernel.variance"])

    saved, save = [], svi_module.checkpoints.save

    def counting_save(*args, counters, **kwargs):
        saved.append(counters["step"])
        save(*args, counters=counters, **kwargs)

    monkeypatch.setattr(svi_module.checkpoints, "save", counting_save)
    path = tmp_path / "checkpoint.npz"
    calls.clear()
    fit_svi(
        gp.model, gp.guide, X, y, num_steps=4, checkpoint=path, checkpoint_every=2, callback=record, callback_every=3
    )
    assert saved == [3, 4] and [step for step, *_ in calls] == [3, 4]
    calls.clear()
    resumed = fit_svi(
        gp.model, gp.guide, X, y, num_steps=8, checkpoint=path, checkpoint_every=2, callback=record, callback_every=3
    )
    assert saved == [3, 4, 6, 8] and [step for step, *_ in calls] == [6, 8]
    np.testing.assert_array_equal(calls[0][1], straight.losses[4:6])
    np.testing.assert_array_equal(resumed.losses, straight.losses)
