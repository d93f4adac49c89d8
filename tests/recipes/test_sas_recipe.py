"""fit_sas: its config refuses bad settings by name, epochs are ceil(N / B) steps, the model takes the config's
initial values, and a checkpointed fit resumes with more epochs (and refuses a changed one)."""

import numpy as np
import pytest

from ppl_sparsegp.infer.checkpoint import CheckpointError
from ppl_sparsegp.recipes.sas_gplvm import SASConfig, build_sas, fit_sas

RNG = np.random.default_rng(2)
Y = np.tanh(RNG.standard_normal((70, 2)) @ RNG.standard_normal((2, 5))) + 0.05 * RNG.standard_normal((70, 5))


@pytest.mark.parametrize(
    "setting, name",
    [({"num_active": 0}, "num_active"), ({"num_active": 50, "batch_size": 50}, "batch_size"),
     ({"weight": "mean"}, "weight"), ({"activation": "swish"}, "activation"), ({"hidden": (0,)}, "hidden"),
     ({"noise_variance": 0.0}, "noise_variance"), ({"num_epochs": 0}, "num_epochs")],
)  # fmt: skip
def test_the_config_refuses_bad_settings_by_name(setting, name):
    with pytest.raises(ValueError, match=name):
        SASConfig(**setting)


def test_the_model_takes_the_configs_initial_values_and_caps_the_batch_at_n():
    model = build_sas(SASConfig(num_active=10, batch_size=500, lengthscale=0.7, bayesian=True), Y)
    assert model.batch_size == 70 and model.bayesian and model.data_dim == 5
    np.testing.assert_allclose(model.kernel.lengthscale, [0.7, 0.7])
    assert float(model.likelihood.variance) == 0.5


@pytest.mark.slow
def test_a_fit_runs_epochs_of_ceil_n_over_b_steps_and_resumes_with_more(tmp_path):
    config = SASConfig(num_active=8, batch_size=30, hidden=(8,), num_epochs=2, learning_rate=0.01)
    checkpoint = str(tmp_path / "sas.npz")
    fit = fit_sas(Y, config, checkpoint=checkpoint, progress=False)
    assert fit.steps_per_epoch == 3 and len(fit.svi.losses) == 6 and fit.seconds_per_epoch > 0
    more = fit_sas(Y, config, checkpoint=checkpoint, progress=False, num_epochs=3)
    assert more.svi.resumed_from == 6 and len(more.svi.losses) == 9
    assert np.all(np.isfinite(more.model.encode(more.params, Y)))
    with pytest.raises(CheckpointError, match="sas.num_active"):
        fit_sas(Y, config, checkpoint=checkpoint, progress=False, num_active=9)


def test_too_few_rows_are_refused_before_compiling():
    with pytest.raises(ValueError, match=r"Y: expected \[N, D\] with N > num_active = 100"):
        fit_sas(Y)
