"""The Pyro twin of the doubly-stochastic deep GP (models/pyro/deep_svgp.py) against the NumPyro model at the same
fixed parameters, in float64, with the same noise ε^ℓ of every inner layer on both sides (each instance's
``_noise`` replaced by one fixed draw per layer and shape): every site's log-density, the closed-form KLs of
q(u^ℓ), the TraceMeanField ELBO, ``elbo`` (with masks too) and the predictive mixture agree to 1e-10; a perturbed
parameter on the Pyro side moves the value, so the comparison can fail.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.infer
import pyro.infer
import pytest
import torch
from numpyro import handlers
from numpyro.distributions.kl import kl_divergence as numpyro_kl
from parity_checks import (
    D,
    M,
    N,
    apart,
    assert_perturbation_moves,
    assert_same_terms,
    close,
    numpyro_terms,
    problem,
    pyro_terms,
)
from pyro import poutine
from torch.distributions.kl import kl_divergence as torch_kl

from ppl_sparsegp.core import kernels
from ppl_sparsegp.models.numpyro import deep_svgp as np_deep
from ppl_sparsegp.models.pyro import deep_svgp as pyro_deep

# a guide reads only some of the params that both traces are given
pytestmark = pytest.mark.filterwarnings("ignore:pyro.module data did not find params")

B = 10


def _fixed_noise(i: int, shape: tuple[int, ...]) -> np.ndarray:
    """ε^ℓ of a given shape, the same draw on both sides: a numpy generator seeded by the layer and the shape."""
    return np.random.default_rng([100 + i, *shape]).standard_normal(shape)


def _models(case: dict, p: dict) -> tuple[np_deep.DeepSVGP, pyro_deep.DeepSVGP]:
    num_layers, P = case.pop("num_layers", 2), case.pop("num_outputs", 1)
    Z = [p["Z"] + 0.1 * i for i in range(num_layers)]
    widths = [D] * (num_layers - 1) + [D if case.get("sum_outputs") else P]  # summed to P = 1
    kerns = [kernels.RBF(variance=1.0 - 0.2 * i, lengthscale=np.array([0.9, 1.2])) for i in range(num_layers)]
    W = [np.array([[1.0, 0.2], [-0.1, 0.8]])] * (num_layers - 1)
    common = {"Z": Z, "widths": widths, "likelihood": p["likelihood"], "kernels": kerns, "mean_weights": W, **case}
    npm, pym = np_deep.DeepSVGP(**common), pyro_deep.DeepSVGP(**common)
    npm._noise = lambda key: lambda i, shape, dtype: jnp.asarray(_fixed_noise(i, shape), dtype=dtype)
    pym._noise = lambda: lambda i, shape, dtype: torch.as_tensor(_fixed_noise(i, shape), dtype=dtype)
    return npm, pym


def _params(npm: np_deep.DeepSVGP, p: dict) -> dict[str, np.ndarray]:
    rng, params = p["rng"], {}
    if "likelihood.variance" in npm.parameter_names():
        params["likelihood.variance"] = np.array(0.25)
    for i, (z, w) in enumerate(zip(npm.Z, npm.widths, strict=True)):
        params[f"layer{i}.kernel.variance"] = np.array(0.7 + 0.1 * i)
        params[f"layer{i}.kernel.lengthscale"] = np.array([0.8, 1.1 + 0.1 * i])
        params[f"layer{i}.Z"] = np.asarray(z) + 0.05
        params[f"layer{i}.u_loc"] = 0.5 * rng.standard_normal((w, M))
        params[f"layer{i}.u_scale_tril"] = np.tril(0.1 * rng.standard_normal((w, M, M))) + 0.4 * np.eye(M)
    return params


DEEP_CASES = [
    {"likelihood": "gaussian"},
    {"likelihood": "gaussian", "num_samples": 3, "whiten": True},
    {"likelihood": "bernoulli", "num_samples": 2, "add_input": True},
    {"likelihood": "gaussian", "num_layers": 3, "num_outputs": 2, "num_samples": 2},
    {"likelihood": "gaussian", "num_layers": 1},
    {"likelihood": "gaussian", "num_samples": 2, "batch_size": B},
    {"likelihood": "gaussian", "num_data": 100},
    {"likelihood": "gaussian", "num_samples": 2, "sum_outputs": True},
]


@pytest.mark.parametrize("case", DEEP_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.slow
def test_deep_svgp_log_densities_kls_elbo_and_predictions_agree(case):
    case = dict(case)
    p = problem(case.pop("likelihood"), case.get("num_outputs", 1))
    npm, pym = _models(case, p)
    params = _params(npm, p)
    rng = p["rng"]
    latents = {f"layer{i}.u": rng.standard_normal((w, M)) for i, w in enumerate(npm.widths)}
    if "batch_size" in case:
        latents["data"] = rng.choice(N, B)  # the plate's indices, the same on both sides
    args = (p["X"], p["y"])

    terms = assert_same_terms(npm.model, pym.model, params, latents, *args)
    assert set(terms) == {*(f"layer{i}.u" for i in range(npm.num_layers)), "y"}
    guide_terms = assert_same_terms(npm.guide, pym.guide, params, latents, *args)
    assert set(guide_terms) == {f"layer{i}.u" for i in range(npm.num_layers)}
    assert_perturbation_moves(pym.model, params, latents, *args, site="layer0.kernel.lengthscale")
    assert_perturbation_moves(pym.model, params, latents, *args, site=f"layer{npm.num_layers - 1}.u_loc")

    _, np_model_trace = numpyro_terms(npm.model, params, latents, *args)
    _, np_guide_trace = numpyro_terms(npm.guide, params, latents, *args)
    _, pyro_model_trace = pyro_terms(pym.model, params, latents, *args)
    _, pyro_guide_trace = pyro_terms(pym.guide, params, latents, *args)
    for i in range(npm.num_layers):
        site = f"layer{i}.u"
        close(
            numpyro_kl(np_guide_trace[site]["fn"], np_model_trace[site]["fn"]),
            torch_kl(pyro_guide_trace.nodes[site]["fn"], pyro_model_trace.nodes[site]["fn"]),
        )
    if "batch_size" not in case:
        # the data term uses q(u)'s parameters and the fixed noise, the KLs are closed form: the losses are exact
        data = {k: jnp.asarray(v) for k, v in params.items()}
        np_loss = numpyro.infer.TraceMeanField_ELBO().loss(
            jax.random.PRNGKey(0), {}, handlers.substitute(npm.model, data=data),
            handlers.substitute(npm.guide, data=data), *args,
        )  # fmt: skip
        tensors = {k: torch.as_tensor(v) for k, v in params.items()}
        pyro_loss = pyro.infer.TraceMeanField_ELBO().loss(
            poutine.substitute(pym.model, data=tensors), poutine.substitute(pym.guide, data=tensors), *args
        )
        close(np_loss, pyro_loss)
        if "num_data" not in case:
            close(-np_loss, pym.elbo(params, *args))

    key = jax.random.PRNGKey(0)  # the NumPyro methods take a key; the fixed noise ignores it
    close(npm.elbo(params, *args, key), pym.elbo(params, *args))
    if not case.get("whiten"):
        masks = [np.arange(M) % (2 + i) != 1 for i in range(npm.num_layers)]
        close(npm.elbo(params, *args, key, masks=masks), pym.elbo(params, *args, masks=masks))
        apart(npm.elbo(params, *args, key), pym.elbo(params, *args, masks=masks))
    X_new, y_new = p["X_new"], p["y"][: len(p["X_new"])]
    for method in ("predict_f", "predict_y"):
        for e, g in zip(getattr(npm, method)(params, X_new, key=key), getattr(pym, method)(params, X_new), strict=True):
            close(e, g.numpy())
    close(npm.predict_log_density(params, X_new, y_new, key=key), pym.predict_log_density(params, X_new, y_new).numpy())
    changed = {**params, "layer0.kernel.variance": params["layer0.kernel.variance"] * 1.001}
    if npm.num_layers > 1:
        apart(npm.predict_f(params, X_new, key=key)[0], pym.predict_f(changed, X_new)[0].numpy())
