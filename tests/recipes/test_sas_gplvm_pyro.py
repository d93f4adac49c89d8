"""The Pyro twin of fit_sas: it refuses bad input before any step; a checkpointed fit resumed with more epochs takes
the steps of an uninterrupted one; at a fixed active set and full batch it starts at the NumPyro recipe's weights and
takes the NumPyro recipe's steps (losses to 1e-8 in float64), and the fit, under NumPyro's names, scores as the
NumPyro fit in evaluate_sas and gives the Pyro model's exact log marginal; a minibatch fit reconstructs held-out
rows far better than its start."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ppl_sparsegp.cli.pyro_backend import numpyro_params
from ppl_sparsegp.models.numpyro import sas_gplvm as numpyro_sas
from ppl_sparsegp.models.pyro import sas_gplvm as pyro_sas
from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.recipes import sas_gplvm, sas_gplvm_pyro

RNG = np.random.default_rng(2)
ROWS = np.tanh(RNG.standard_normal((70, 2)) @ RNG.standard_normal((2, 5))) + 0.05 * RNG.standard_normal((70, 5))
Y, Y_TEST = ROWS[:50], ROWS[50:]
SMALL = sas_gplvm.SASConfig(num_active=10, batch_size=25, hidden=(8,), num_epochs=2, learning_rate=0.01)


@pytest.fixture(autouse=True)
def float64():
    with default_dtype("float64"):
        yield


def _numpyro_view(fit, numpyro_model) -> dict:
    return numpyro_params(fit.params, {pyro_sas.ENCODER: (fit.model.encoder, numpyro_model.encoder)})


@pytest.mark.parametrize(
    "Y_given, setting, match",
    [(Y, {"num_active": 0}, "num_active"), (Y, {"batch_size": 10}, "batch_size"),
     (Y[:10], {}, r"Y: expected \[N, D\] with N > num_active = 10"), (Y[:, 0], {}, r"Y: expected \[N, D\]")],
)  # fmt: skip
def test_bad_input_is_refused_before_any_step(Y_given, setting, match, tmp_path):
    checkpoint = tmp_path / "sas.npz"
    with pytest.raises(ValueError, match=match):
        sas_gplvm_pyro.fit_sas(Y_given, SMALL, checkpoint=str(checkpoint), **setting)
    assert not checkpoint.exists()


def test_a_resumed_bayesian_fit_takes_the_steps_of_an_uninterrupted_one(tmp_path):
    checkpoint = str(tmp_path / "sas.npz")
    first = sas_gplvm_pyro.fit_sas(Y, SMALL, bayesian=True, checkpoint=checkpoint, progress=False)
    assert first.steps_per_epoch == 2 and len(first.svi.losses) == 4
    resumed = sas_gplvm_pyro.fit_sas(Y, SMALL, bayesian=True, checkpoint=checkpoint, progress=False, num_epochs=3)
    straight = sas_gplvm_pyro.fit_sas(Y, SMALL, bayesian=True, progress=False, num_epochs=3)
    assert resumed.svi.resumed_from == 4 and len(resumed.svi.losses) == 6
    np.testing.assert_array_equal(resumed.svi.losses, straight.svi.losses)
    for name, value in straight.params.items():
        assert torch.equal(resumed.params[name], value), name


@pytest.mark.slow
def test_at_a_fixed_active_set_it_takes_the_numpyro_recipes_steps_and_scores_alike(monkeypatch):
    order = np.random.default_rng(0).permutation(len(Y))
    active, held = order[:10], order[10:]
    monkeypatch.setattr(numpyro_sas, "split_active", lambda key, B, A: (np.asarray(active), np.asarray(held)))
    monkeypatch.setattr(pyro_sas, "split_active", lambda B, A: (torch.as_tensor(active), torch.as_tensor(held)))
    config = sas_gplvm.SASConfig(num_active=10, batch_size=100, hidden=(8,), num_epochs=25, learning_rate=0.01)
    by_numpyro = sas_gplvm.fit_sas(Y, config, seed=1, progress=False)
    by_pyro = sas_gplvm_pyro.fit_sas(Y, config, seed=1, progress=False)

    assert by_pyro.steps_per_epoch == 1  # the batch is every row: the loss is deterministic
    assert by_pyro.svi.losses[0] == pytest.approx(by_numpyro.svi.losses[0], rel=1e-10)  # the same initial estimate
    np.testing.assert_allclose(by_pyro.svi.losses, by_numpyro.svi.losses, rtol=1e-8)
    assert by_pyro.svi.losses[-1] < by_pyro.svi.losses[0] - 20.0
    params = _numpyro_view(by_pyro, by_numpyro.model)
    pyro_marginal = float(by_pyro.model.exact_log_marginal(by_pyro.params, Y))
    assert float(by_numpyro.model.exact_log_marginal(params, Y)) == pytest.approx(pyro_marginal, rel=1e-10)
    expected = sas_gplvm.evaluate_sas(by_numpyro.model, by_numpyro.params, Y, Y_TEST)
    got = sas_gplvm.evaluate_sas(by_numpyro.model, params, Y, Y_TEST)
    assert got.keys() == expected.keys()
    for name in expected:
        assert got[name] == pytest.approx(expected[name], rel=1e-6), name


def test_a_minibatch_fit_reconstructs_held_out_rows_far_better_than_its_start():
    fit = sas_gplvm_pyro.fit_sas(Y, SMALL, num_epochs=60, progress=False)
    model = sas_gplvm.build_sas(SMALL, Y)
    start = sas_gplvm.evaluate_sas(model, {}, Y, Y_TEST)
    fitted = sas_gplvm.evaluate_sas(model, _numpyro_view(fit, model), Y, Y_TEST)
    assert fitted["rmse"] < 0.5 * start["rmse"] and fitted["nlpd"] < start["nlpd"] - 0.3
    assert np.all(np.isfinite(sas_gplvm.encode_rows(model, _numpyro_view(fit, model), Y_TEST)))
