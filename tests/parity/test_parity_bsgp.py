"""The Pyro BSGP twins (models/pyro/bsgp.py, deep_bsgp.py) and Z priors (ppl_sparsegp/pyro/z_priors.py) against the
NumPyro originals at the same Z, u and hyperparameters, in float64: every site's log-density (the hyperpriors, each
Z prior, the whitened u, the data term of both likelihood terms), the pointwise log-likelihood and the predictions
agree to 1e-10, and a perturbation on the Pyro side moves the value.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from parity_checks import (
    M,
    N,
    apart,
    assert_perturbation_moves,
    assert_same_predictions,
    assert_same_terms,
    close,
    fixed_params,
    numpyro_terms,
    problem,
)

from ppl_sparsegp.core import likelihoods
from ppl_sparsegp.models.numpyro import bsgp as np_bsgp
from ppl_sparsegp.models.numpyro import deep_bsgp as np_deep
from ppl_sparsegp.models.pyro import bsgp as pyro_bsgp
from ppl_sparsegp.models.pyro import deep_bsgp as pyro_deep
from ppl_sparsegp.numpyro import z_priors as np_z
from ppl_sparsegp.pyro import z_priors as pyro_z

Z_PRIOR_CASES = [
    ("normal", {}),
    ("normal", {"scale": 0.7}),
    ("dpp", {}),
    ("strauss", {"gamma": 0.3, "radius": 1.0}),
    ("strauss", {"gamma": 0.3, "radius": 1.0, "smoothness": 0.2}),
    ("uniform", {}),
]


def _draw(p: dict, num_latent: int = 1) -> tuple[dict, dict]:
    """(params, latents): the noise param, and a draw of θ, Z (moved off the initial Z) and v."""
    fixed = fixed_params(p, num_latent)
    latents = {k: fixed[k] for k in ("kernel.lengthscale", "kernel.variance", "Z")}
    latents["u"] = p["rng"].standard_normal((num_latent, M))
    return {k: v for k, v in fixed.items() if k.startswith("likelihood.")}, latents


@pytest.mark.parametrize("name, options", Z_PRIOR_CASES, ids=lambda c: str(c))
def test_z_prior_log_densities_agree(name, options):
    p = problem("gaussian")
    Z = np.stack([p["Z"], p["Z"] * 0.5])  # a batch of two sets of inducing inputs [2, M, D]
    np_prior = np_z.z_prior(name, M, 2, kernel=p["kernel"], **options)
    pyro_prior = pyro_z.z_prior(name, M, 2, kernel=p["kernel"], **options)
    expected = np.asarray(np_prior.log_prob(jnp.asarray(Z)))
    got = pyro_prior.log_prob(torch.as_tensor(Z))
    assert got.shape == (2,)
    close(expected, got.numpy())
    if name != "uniform" and "smoothness" not in options:
        assert pyro_prior.log_prob(torch.as_tensor(Z[0] * 0.3)) != got[0]  # the density depends on Z


def test_z_prior_gradients_agree_for_dpp_and_smoothed_strauss():
    p = problem("gaussian")
    for name, options in (("dpp", {}), ("strauss", {"radius": 1.0, "smoothness": 0.2})):
        np_prior = np_z.z_prior(name, M, 2, kernel=p["kernel"], **options)
        pyro_prior = pyro_z.z_prior(name, M, 2, kernel=p["kernel"], **options)
        Z = torch.as_tensor(p["Z"]).requires_grad_(True)
        pyro_prior.log_prob(Z).backward()
        close(np.asarray(jax.grad(np_prior.log_prob)(jnp.asarray(p["Z"]))), Z.grad.numpy())
        assert torch.any(Z.grad.abs() > 1e-3)


def test_z_priors_reject_what_the_numpyro_ones_reject():
    for make in (
        lambda z: z.z_prior("gauss", M, 2),
        lambda z: z.z_prior("dpp", M, 2),
        lambda z: z.z_prior("strauss", M, 2, gamma=1.5),
        lambda z: z.z_prior("normal", M, 2, radius=1.0),
    ):
        for module in (np_z, pyro_z):
            with pytest.raises(ValueError):
                make(module)
    with pytest.raises(NotImplementedError):
        pyro_z.z_prior("uniform", M, 2).sample()


def test_dpp_prior_draws_from_candidates_with_the_shared_sampler():
    p = problem("gaussian")
    prior = pyro_z.z_prior("dpp", M, 2, kernel=p["kernel"])
    Z = prior.sample_from_candidates(np.random.default_rng(0), p["X"])
    expected = np_z.z_prior("dpp", M, 2, kernel=p["kernel"]).sample_from_candidates(np.random.default_rng(0), p["X"])
    np.testing.assert_array_equal(Z, expected)
    assert Z.shape == (M, 2) and len({tuple(r) for r in Z}) == M


BSGP_CASES = [{"z_prior": name, "z_prior_options": options} for name, options in Z_PRIOR_CASES] + [
    {"likelihood_term": "expected_log"},
    {"num_latent": 2},
    {"likelihood": "bernoulli", "likelihood_term": "expected_log"},
]


@pytest.mark.parametrize("case", BSGP_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_bsgp_log_joint_per_site_and_predictions_agree(case):
    case = dict(case)
    num_latent = case.get("num_latent", 1)
    p = problem(case.pop("likelihood", "gaussian"), num_latent)
    params, draw = _draw(p, num_latent)
    npm = np_bsgp.BSGP(p["kernel"], p["likelihood"], Z=p["Z"], batch_size=None, **case)
    pym = pyro_bsgp.BSGP(p["kernel"], p["likelihood"], Z=p["Z"], batch_size=None, **case)
    args = (p["X"], p["y"])
    terms = assert_same_terms(npm.model, pym.model, params, draw, *args)
    assert set(terms) == {"kernel.lengthscale", "kernel.variance", "Z", "u", "y"}
    assert_perturbation_moves(pym.model, params, draw, *args)
    assert_perturbation_moves(pym.model, params, draw, *args, site="u")
    values = {**params, **draw}
    close(npm.pointwise_log_likelihood(values, *args), pym.pointwise_log_likelihood(values, *args).numpy())
    assert npm.point_estimate_sites() == pym.point_estimate_sites()
    assert set(npm.initial_values()) == set(pym.initial_values())
    assert_same_predictions(npm, pym, values, p["X_new"])
    moved = {**values, "Z": values["Z"] + 0.01}
    apart(npm.predict_f(values, p["X_new"])[0], pym.predict_f(moved, p["X_new"])[0].numpy())


@pytest.mark.parametrize("optimised", [("Z", "kernel.lengthscale", "kernel.variance"), ("Z",)], ids="-".join)
def test_bsgp_with_point_estimated_sites_agrees(optimised):
    """SGHMC-DGP's model (``optimised``: Z and θ as params, no prior terms): the same sample sites and terms on both
    sides with the point estimates as params, the same point-estimate sites and initial values, and predictions."""
    p = problem("gaussian")
    params, draw = _draw(p)
    params.update({k: draw.pop(k) for k in optimised})
    npm = np_bsgp.BSGP(p["kernel"], p["likelihood"], Z=p["Z"], batch_size=None, optimised=optimised)
    pym = pyro_bsgp.BSGP(p["kernel"], p["likelihood"], Z=p["Z"], batch_size=None, optimised=optimised)
    args = (p["X"], p["y"])
    terms = assert_same_terms(npm.model, pym.model, params, draw, *args)
    assert set(terms) == {"kernel.lengthscale", "kernel.variance", "Z", "u", "y"} - set(optimised)
    assert_perturbation_moves(pym.model, params, draw, *args, site="Z")
    assert npm.point_estimate_sites() == pym.point_estimate_sites() == (*optimised, "likelihood.variance")
    assert set(npm.initial_values()) == set(pym.initial_values()) == set(terms) - {"y"}
    values = {**params, **draw}
    assert_same_predictions(npm, pym, values, p["X_new"])


def test_bsgp_minibatch_term_is_scaled_by_n_over_b():
    """With a batch of B < N the data factor is scaled by N/B on both sides (the batches themselves differ)."""
    from parity_checks import numpyro_terms, pyro_terms

    p = problem("gaussian")
    params, draw = _draw(p)
    npm = np_bsgp.BSGP(p["kernel"], p["likelihood"], Z=p["Z"], batch_size=5)
    pym = pyro_bsgp.BSGP(p["kernel"], p["likelihood"], Z=p["Z"], batch_size=5)
    _, np_trace = numpyro_terms(npm.model, params, draw, p["X"], p["y"])
    _, pyro_trace = pyro_terms(pym.model, params, draw, p["X"], p["y"])
    assert np_trace["y"]["scale"] == pytest.approx(25 / 5) and pyro_trace.nodes["y"]["scale"] == pytest.approx(25 / 5)
    assert pyro_trace.nodes["y"]["fn"].batch_shape == (5,)


DEEP_CASES = [
    {},
    {"z_prior": "dpp"},
    {"z_prior": "strauss", "z_prior_options": {"gamma": 0.3, "radius": 1.0, "smoothness": 0.2}},
    {"likelihood_term": "expected_log"},
    {"hidden_width": 3},
]


def _deep_pair(case: dict, monkeypatch) -> tuple:
    """The two deep models (3 layers: widths [H, H, 1]) built by each side's ``deep_bsgp`` with the same inner-layer
    noise patched in, a draw of every layer's θ, Z and v, and the data."""
    case = dict(case)
    p = problem("gaussian")
    layout = {"num_layers": 3, "Z": p["Z"], "hidden_width": case.pop("hidden_width", None), "batch_size": None}
    npm = np_deep.deep_bsgp(p["X"], 1, p["likelihood"], **layout, **case)
    pym = pyro_deep.deep_bsgp(p["X"], 1, p["likelihood"], **layout, **case)
    rng = p["rng"]
    draw = {}
    for i, (Z, width) in enumerate(zip(npm.Z, npm.widths, strict=True)):
        D = Z.shape[1]
        draw[f"layer{i}.kernel.lengthscale"] = rng.uniform(0.6, 1.5, D)
        draw[f"layer{i}.kernel.variance"] = np.array(rng.uniform(0.5, 1.5))
        draw[f"layer{i}.Z"] = np.asarray(Z) + 0.1 * rng.standard_normal(Z.shape)
        draw[f"layer{i}.u"] = rng.standard_normal((width, M))
    noise = {n: [rng.standard_normal((w, n)) for w in npm.widths[:-1]] for n in (p["X"].shape[0], 7)}
    monkeypatch.setattr(npm, "_inner_noise", lambda key, n, dtype: [jnp.asarray(e) for e in noise[n]])
    monkeypatch.setattr(pym, "_inner_noise", lambda n, dtype: [torch.as_tensor(e) for e in noise[n]])
    return npm, pym, {"likelihood.variance": np.array(0.25)}, draw, p


@pytest.mark.parametrize("case", DEEP_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_deep_bsgp_log_joint_per_site_and_predictions_agree(case, monkeypatch):
    npm, pym, params, draw, p = _deep_pair(case, monkeypatch)
    args = (p["X"], p["y"])
    terms = assert_same_terms(npm.model, pym.model, params, draw, *args)
    assert set(terms) == set(draw) | {"y"}
    assert_perturbation_moves(pym.model, params, draw, *args, site="layer0.Z")
    assert_perturbation_moves(pym.model, params, draw, *args, site="layer1.kernel.lengthscale")
    assert npm.point_estimate_sites() == pym.point_estimate_sites() == ("likelihood.variance",)
    assert {k: np.shape(v) for k, v in npm.initial_values().items()} == {
        k: tuple(v.shape) for k, v in pym.initial_values().items()
    }
    values = {**params, **draw}
    key = jax.random.PRNGKey(0)
    for e, g in zip(npm.predict_f(values, p["X_new"], key=key), pym.predict_f(values, p["X_new"]), strict=True):
        close(e, g.numpy())
    y_new = np.sin(p["X_new"][:, 0])
    close(
        npm.predict_log_density(values, p["X_new"], y_new, key=key, num_samples=2),
        pym.predict_log_density(values, p["X_new"], y_new, num_samples=2).numpy(),
    )
    moved = {**values, "layer0.u": values["layer0.u"] * 1.01}
    apart(npm.predict_f(values, p["X_new"], key=key)[0], pym.predict_f(moved, p["X_new"])[0].numpy())


def test_deep_bsgp_with_point_estimated_sites_agrees(monkeypatch):
    """SGHMC-DGP's deep model: every layer's Z and θ params on both sides, the same terms, point-estimate sites,
    initial values and predictions."""
    optimised = ("Z", "kernel.lengthscale", "kernel.variance")
    npm, pym, params, draw, p = _deep_pair({"optimised": optimised}, monkeypatch)
    params.update({k: draw.pop(k) for k in list(draw) if k.partition(".")[2] in optimised})
    args = (p["X"], p["y"])
    terms = assert_same_terms(npm.model, pym.model, params, draw, *args)
    assert set(terms) == {"layer0.u", "layer1.u", "layer2.u", "y"}
    assert_perturbation_moves(pym.model, params, draw, *args, site="layer1.Z")
    sites = npm.point_estimate_sites()
    assert sites == pym.point_estimate_sites() and set(sites) == set(params)
    assert sites[-1] == "likelihood.variance" and len(sites) == 3 * 3 + 1
    assert set(npm.initial_values()) == set(pym.initial_values()) == set(draw)
    values = {**params, **draw}
    key = jax.random.PRNGKey(0)
    for e, g in zip(npm.predict_f(values, p["X_new"], key=key), pym.predict_f(values, p["X_new"]), strict=True):
        close(e, g.numpy())


def test_deep_bsgp_inner_noise_reaches_the_output():
    """Without the patch, two Pyro passes draw different inner-layer noise, so the last layer's moments differ."""
    p = problem("gaussian")
    pym = pyro_deep.deep_bsgp(p["X"], 1, p["likelihood"], num_layers=2, Z=p["Z"])
    values = {k: v for k, v in pym.initial_values().items()}
    values["layer0.u"] = torch.as_tensor(p["rng"].standard_normal((2, M)))
    values["layer1.u"] = torch.as_tensor(p["rng"].standard_normal((1, M)))
    apart(pym.predict_f(values, p["X_new"])[0].numpy(), pym.predict_f(values, p["X_new"])[0].numpy())


@pytest.mark.parametrize("likelihood_term", ["log_expected", "expected_log"])
def test_bsgp_with_a_noise_variance_per_output_agrees_and_is_each_outputs_own(likelihood_term):
    """Two outputs with their own noise variance [2] (``BSGPConfig.noise_per_output``): the same terms, pointwise
    log-likelihood and predictions on both sides, and the data term is the sum of the two one-output models' terms
    (output p with u's row p and noise σ_p²), so each variance reaches its own output only."""
    p = problem("gaussian", 2)
    noise = np.array([0.25, 0.01])
    likelihood = likelihoods.Gaussian(variance=np.array([0.3, 0.3]))
    params, draw = _draw(p, 2)
    params["likelihood.variance"] = noise
    npm = np_bsgp.BSGP(
        p["kernel"], likelihood, Z=p["Z"], num_latent=2, batch_size=None, likelihood_term=likelihood_term
    )
    pym = pyro_bsgp.BSGP(
        p["kernel"], likelihood, Z=p["Z"], num_latent=2, batch_size=None, likelihood_term=likelihood_term
    )
    args = (p["X"], p["y"])
    terms = assert_same_terms(npm.model, pym.model, params, draw, *args)
    assert_perturbation_moves(pym.model, params, draw, *args, site="likelihood.variance")
    values = {**params, **draw}
    pointwise = npm.pointwise_log_likelihood(values, *args)
    assert pointwise.shape == (N, 2)
    close(pointwise, pym.pointwise_log_likelihood(values, *args).numpy())
    assert_same_predictions(npm, pym, values, p["X_new"])
    one_output = 0.0
    for out in range(2):
        single = np_bsgp.BSGP(p["kernel"], p["likelihood"], Z=p["Z"], batch_size=None, likelihood_term=likelihood_term)
        sub = {**draw, "u": draw["u"][out : out + 1]}
        one_output += numpyro_terms(single.model, {"likelihood.variance": noise[out]}, sub, p["X"], p["y"][:, out])[0][
            "y"
        ]
        close(pointwise[:, out], single.pointwise_log_likelihood({**sub, "likelihood.variance": noise[out]}, p["X"],
                                                                 p["y"][:, out]))  # fmt: skip
    close(terms["y"], one_output)
    _, y_var = npm.predict_y(values, p["X_new"])
    f_var = npm.predict_f(values, p["X_new"])[1]
    close(np.asarray(y_var) - np.asarray(f_var), np.broadcast_to(noise, (p["X_new"].shape[0], 2)))
