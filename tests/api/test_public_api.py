"""``import ppl_sparsegp as psg``: every name in ``__all__`` resolves, and the everyday loop runs through it."""

import numpy as np
import optax

import ppl_sparsegp as psg


def test_every_exported_name_resolves():
    for name in psg.__all__:
        assert getattr(psg, name) is not None, name
    assert set(psg.__all__) <= set(dir(psg))


def test_the_everyday_loop_through_the_top_level_names():
    ds, scaler = psg.standardize(psg.load_dataset("diabetes"))
    D = ds.X_train.shape[1]
    gp = psg.SVGP(
        kernel=psg.kernels.RBF(lengthscale=np.ones(D)),
        likelihood=psg.likelihoods.Gaussian(variance=0.1),
        Z=psg.kmeans(ds.X_train, 16),
    )
    res = psg.fit_svi(
        gp.model, gp.guide, ds.X_train, ds.y_train, optimizer=optax.adam(0.02), num_steps=300, validate=gp.check_data
    )
    mean, _ = gp.predict_y(res.params, ds.X_test)
    rmse = psg.metrics.rmse(scaler.inverse_mean(ds.y_test), scaler.inverse_mean(mean))
    assert rmse < 0.85 * float(np.std(scaler.inverse_mean(ds.y_test)))  # better than the constant predictor


def test_unknown_names_raise_attribute_error():
    try:
        psg.SVGPP  # noqa: B018
    except AttributeError as err:
        assert "SVGPP" in str(err)
    else:
        raise AssertionError("psg.SVGPP resolved")
