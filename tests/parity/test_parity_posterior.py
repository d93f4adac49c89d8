"""The Pyro side's posterior tools against the NumPyro side's at the same posterior draws of SGPMC, in float64: the
mixture predictive moments and log predictive density over draws (ppl_sparsegp.pyro.predict against
ppl_sparsegp.posterior.predict), and the pointwise log-likelihood group of the ArviZ output of a Pyro NUTS run
(ppl_sparsegp.pyro.diagnostics.from_mcmc) against the NumPyro model's at those draws, with the GP dims."""

from __future__ import annotations

import numpy as np
import pyro
import pytest
import torch
from parity_checks import close, fixed_params, problem

from ppl_sparsegp.data import Standardizer
from ppl_sparsegp.models.numpyro import sgpmc as np_sgpmc
from ppl_sparsegp.models.pyro import sgpmc as pyro_sgpmc
from ppl_sparsegp.posterior import diagnostics as np_diagnostics
from ppl_sparsegp.posterior import predict as np_predict
from ppl_sparsegp.pyro import diagnostics as pyro_diagnostics
from ppl_sparsegp.pyro import predict as pyro_predict

DRAWS = 5


def _twins(likelihood: str):
    p = problem(likelihood)
    npm = np_sgpmc.SGPMC(
        p["kernel"], p["likelihood"], Z=p["Z"], priors=np_sgpmc.default_priors(p["kernel"], p["likelihood"])
    )
    pym = pyro_sgpmc.SGPMC(
        p["kernel"], p["likelihood"], Z=p["Z"], priors=pyro_sgpmc.default_priors(p["kernel"], p["likelihood"])
    )
    hyper = {k: v for k, v in fixed_params(p).items() if k.startswith(("kernel", "likelihood"))}
    samples = {k: np.stack([v * (1 + 0.1 * s) for s in range(DRAWS)]) for k, v in hyper.items()}
    samples["u"] = p["rng"].standard_normal((DRAWS, 1, p["Z"].shape[0]))
    return p, npm, pym, samples


@pytest.mark.parametrize("likelihood", ["gaussian", "bernoulli"])
def test_the_mixture_over_draws_agrees(likelihood):
    p, npm, pym, samples = _twins(likelihood)
    expected = np_predict.posterior_predictive(npm, samples, p["X_new"])
    got = pyro_predict.posterior_predictive(pym, samples, p["X_new"])
    for name in ("f_mean", "f_var", "y_mean", "y_var"):
        close(getattr(expected, name), getattr(got, name))
    y_new = p["y"][: len(p["X_new"])]
    close(
        np_predict.log_predictive_density(npm, samples, p["X_new"], y_new),
        pyro_predict.log_predictive_density(pym, samples, p["X_new"], y_new),
    )
    one_draw = {k: v[:1] for k, v in samples.items()}
    assert np.abs(pyro_predict.posterior_predictive(pym, one_draw, p["X_new"]).f_var - got.f_var).max() > 1e-6


def test_the_mixture_in_original_units():
    p, npm, pym, samples = _twins("gaussian")
    scaler = Standardizer.fit(p["X"], 3.0 * p["y"] + 1.0)
    expected = np_predict.posterior_predictive(npm, samples, p["X_new"], standardizer=scaler)
    got = pyro_predict.posterior_predictive(pym, samples, p["X_new"], standardizer=scaler)
    for name in ("f_mean", "f_var", "y_mean", "y_var"):
        close(getattr(expected, name), getattr(got, name))
    y_new = p["y"][: len(p["X_new"])]
    close(
        np_predict.log_predictive_density(npm, samples, p["X_new"], y_new, standardizer=scaler),
        pyro_predict.log_predictive_density(pym, samples, p["X_new"], y_new, standardizer=scaler),
    )


def test_draws_of_unequal_length_are_refused():
    p, _, pym, samples = _twins("gaussian")
    samples["u"] = samples["u"][:2]
    with pytest.raises(ValueError, match="samples: expected site"):
        pyro_predict.posterior_predictive(pym, samples, p["X_new"])


def test_the_arviz_output_of_a_pyro_nuts_run():
    p, npm, pym, _ = _twins("gaussian")
    X, y = torch.as_tensor(p["X"]), torch.as_tensor(p["y"])
    pyro.set_rng_seed(0)
    nuts = pyro.infer.NUTS(pym.model, max_tree_depth=4)
    mcmc = pyro.infer.MCMC(nuts, num_samples=6, warmup_steps=6, num_chains=2, disable_progbar=True)
    mcmc.run(X, y)
    draws = {k: v.numpy() for k, v in mcmc.get_samples(group_by_chain=True).items()}
    c, s = 1, 4
    draw = {k: v[c, s] for k, v in draws.items()}
    for log_likelihood_of in ("potential", "predictive"):
        idata = pyro_diagnostics.from_mcmc(mcmc, pym, p["X"], p["y"], log_likelihood_of=log_likelihood_of)

        assert {"posterior", "sample_stats", "log_likelihood", "posterior_predictive", "observed_data"} <= set(
            np_diagnostics.group_names(idata)
        )
        assert idata["posterior"]["u"].dims == ("chain", "draw", "latent", "inducing_point")
        assert idata["posterior"]["kernel.lengthscale"].dims == ("chain", "draw", "input_dim")
        assert idata["sample_stats"]["diverging"].shape == (2, 6)
        assert idata["posterior_predictive"]["y"].shape == (2, 6, len(p["y"]))
        assert idata["log_likelihood"].attrs["log_likelihood"] == log_likelihood_of
        # the log-likelihood of each draw is the NumPyro twin's at that draw
        if log_likelihood_of == "predictive":
            expected = npm.predict_log_density(draw, p["X"], p["y"])
        else:
            expected = npm.pointwise_log_likelihood(draw, p["X"], p["y"])
        close(expected, idata["log_likelihood"]["y"].values[c, s])
        summary = np_diagnostics.summary(idata, var_names=["kernel.variance"])
        assert np.isfinite(np.asarray(summary["mean"])).all()


def test_chains_start_from_the_fitted_guide_as_on_the_numpyro_side():
    """pyro.mcmc.init_from_svi puts θ at the guide's point masses (the same unconstrained values as NumPyro's) and
    v at draws of q(v), one per chain."""
    import jax

    from ppl_sparsegp.infer.mcmc import init_from_svi as numpyro_init
    from ppl_sparsegp.models.numpyro import svgp as np_svgp
    from ppl_sparsegp.models.pyro import svgp as pyro_svgp
    from ppl_sparsegp.pyro.mcmc import init_from_svi as pyro_init

    p, npm, pym, _ = _twins("gaussian")
    priors = (
        np_sgpmc.default_priors(p["kernel"], p["likelihood"]),
        pyro_sgpmc.default_priors(p["kernel"], p["likelihood"]),
    )
    np_guide = np_svgp.SVGP(p["kernel"], p["likelihood"], Z=p["Z"], priors=priors[0], learn_Z=False)
    pyro_guide = pyro_svgp.SVGP(p["kernel"], p["likelihood"], Z=p["Z"], priors=priors[1], learn_Z=False)
    params = {f"{k}_map": v for k, v in fixed_params(p).items() if k.startswith(("kernel", "likelihood"))}
    params.update({k: v for k, v in fixed_params(p).items() if k.startswith("u_")})
    expected = numpyro_init(npm.model, np_guide.guide, params, p["X"], p["y"], key=jax.random.PRNGKey(0), num_chains=3)
    got = pyro_init(pym.model, pyro_guide.guide, params, p["X"], p["y"], num_chains=3)
    assert set(got) == set(expected) == {"kernel.variance", "kernel.lengthscale", "likelihood.variance", "u"}
    for name in ("kernel.variance", "kernel.lengthscale", "likelihood.variance"):
        close(expected[name], got[name].numpy())
        close(np.log(params[f"{name}_map"]) * np.ones_like(got[name].numpy()), got[name].numpy())
    assert got["u"].shape == (3, 1, p["Z"].shape[0]) and not torch.allclose(got["u"][0], got["u"][1])
