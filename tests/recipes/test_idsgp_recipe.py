"""fit_idsgp: its config refuses bad settings by name, epochs are ceil(N / B) steps, the white floor stays fixed, a
checkpointed fit resumes with more epochs, and with output dropout it resumes to the steps of an uninterrupted fit."""

import jax
import numpy as np
import pytest

from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.checkpoint import CheckpointError
from ppl_sparsegp.recipes.idsgp import IDSGPConfig, build_idsgp, fit_idsgp

RNG = np.random.default_rng(1)
X = RNG.uniform(-2.0, 2.0, (45, 2))
Y = np.sin(X[:, 0]) + 0.1 * RNG.standard_normal(45)


@pytest.mark.parametrize(
    "setting, name",
    [({"activation": "swish"}, "activation"), ({"kernel": "rbff"}, "rbff"), ({"batch_size": 0}, "batch_size"),
     ({"white_floor": -1e-3}, "white_floor"), ({"hidden": (0,)}, "hidden"), ({"num_epochs": 0}, "num_epochs"),
     ({"dropout": 1.0}, "dropout"), ({"dropout": -0.5}, "dropout")],
)  # fmt: skip
def test_the_config_refuses_bad_settings_by_name(setting, name):
    with pytest.raises(ValueError, match=name):
        IDSGPConfig(**setting)


def test_the_white_floor_is_a_fixed_third_part_of_the_kernel():
    model = build_idsgp(IDSGPConfig(white_floor=1e-3), X, Gaussian(0.1))
    assert model.fixed == ("kernel.k2.variance",)
    assert float(model.kernel.parameters()["k2.variance"]) == pytest.approx(1e-3)
    assert build_idsgp(IDSGPConfig(), X, Gaussian(0.1)).fixed == ()


@pytest.mark.slow
def test_a_fit_runs_epochs_of_ceil_n_over_b_steps_and_resumes_with_more(tmp_path):
    config = IDSGPConfig(num_inducing=3, hidden=(6,), batch_size=10, num_epochs=2, white_floor=1e-3)
    checkpoint = str(tmp_path / "idsgp.npz")
    fit = fit_idsgp(X, Y, config, likelihood=Gaussian(0.1), checkpoint=checkpoint, progress=False)
    assert fit.steps_per_epoch == 5 and len(fit.svi.losses) == 10 and fit.epochs_run == 2
    assert "kernel.k2.variance" not in fit.params  # fixed: not a parameter
    more = fit_idsgp(X, Y, config, likelihood=Gaussian(0.1), checkpoint=checkpoint, progress=False, num_epochs=3)
    assert more.svi.resumed_from == 10 and len(more.svi.losses) == 15 and more.epochs_run == 1
    mean, var = more.model.predict_y(more.params, X[:4])
    assert np.all(np.isfinite(mean)) and np.all(var > 0)


@pytest.mark.slow
def test_a_dropout_fit_resumes_to_the_steps_of_an_uninterrupted_one(tmp_path):
    config = IDSGPConfig(num_inducing=3, hidden=(6,), batch_size=10, num_epochs=2, dropout=0.5)
    checkpoint = str(tmp_path / "idsgp.npz")
    fit_idsgp(X, Y, config, likelihood=Gaussian(0.1), checkpoint=checkpoint, progress=False)
    resumed = fit_idsgp(X, Y, config, likelihood=Gaussian(0.1), checkpoint=checkpoint, progress=False, num_epochs=3)
    straight = fit_idsgp(X, Y, config, likelihood=Gaussian(0.1), progress=False, num_epochs=3)
    assert resumed.svi.resumed_from == 10
    np.testing.assert_array_equal(resumed.svi.losses, straight.svi.losses)
    for a, b in zip(jax.tree.leaves(resumed.params), jax.tree.leaves(straight.params), strict=True):
        np.testing.assert_array_equal(a, b)
    without = fit_idsgp(X, Y, config, likelihood=Gaussian(0.1), progress=False, num_epochs=3, dropout=0.0)
    assert not np.allclose(without.svi.losses, straight.svi.losses)  # the masks change the steps
    with pytest.raises(CheckpointError, match="idsgp.dropout"):  # another rate is another run
        fit_idsgp(X, Y, config, likelihood=Gaussian(0.1), checkpoint=checkpoint, progress=False, dropout=0.25)
