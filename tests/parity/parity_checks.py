"""What every parity test (tests/parity) shares: the tolerance, a small float64 problem with fixed parameters away
from the initial ones, each side's per-site log-densities under the same params and latent values, and the checks
that the two sides agree and that a perturbation on the Pyro side moves the value (so that agreement can fail).
Imported by the test modules beside it (pytest puts this directory on ``sys.path``).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from numpyro import handlers
from pyro import poutine

from ppl_sparsegp.core import kernels, likelihoods

TOLERANCE = 1e-10
"""|NumPyro − Pyro| <= TOLERANCE · max(1, |NumPyro|) for every compared number."""
N, M, D = 25, 6, 2


def close(a, b) -> None:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape
    np.testing.assert_array_less(np.abs(a - b), TOLERANCE * np.maximum(1.0, np.abs(a)))


def apart(a, b) -> None:
    """A perturbed parameter moved the value well beyond the tolerance."""
    assert np.max(np.abs(np.asarray(a) - np.asarray(b))) > 1e3 * TOLERANCE * max(1.0, np.max(np.abs(np.asarray(a))))


def problem(likelihood: str, num_latent: int = 1, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (N, D))
    f = np.sin(2 * X[:, :1]) + X[:, 1:] * np.arange(1, num_latent + 1)
    if likelihood == "gaussian":
        y, lik = f + 0.2 * rng.standard_normal(f.shape), likelihoods.Gaussian(variance=0.3)
    else:
        y, lik = (f > 0).astype(np.float64), likelihoods.Bernoulli()
    return {
        "X": X,
        "y": y[:, 0] if num_latent == 1 else y,
        "Z": X[:M] + 0.05,
        "kernel": kernels.RBF(variance=1.3, lengthscale=np.array([0.7, 1.4])),
        "likelihood": lik,
        "X_new": rng.uniform(-2.5, 2.5, (7, D)),
        "rng": rng,
    }


def fixed_params(p: dict, num_latent: int = 1, q_diag: bool = False) -> dict[str, np.ndarray]:
    """Values away from the initial ones for every param of the models (hyperparameters, Z, q(u))."""
    rng = p["rng"]
    params = {"kernel.variance": np.array(0.9), "kernel.lengthscale": np.array([0.8, 1.1]), "Z": p["Z"] + 0.1}
    if isinstance(p["likelihood"], likelihoods.Gaussian):
        params["likelihood.variance"] = np.array(0.25)
    params["u_loc"] = rng.standard_normal((num_latent, M))
    if q_diag:
        params["u_scale"] = rng.uniform(0.3, 1.0, (num_latent, M))
    else:
        params["u_scale_tril"] = np.tril(0.2 * rng.standard_normal((num_latent, M, M))) + 0.7 * np.eye(M)
    return params


def numpyro_terms(model, params: dict, latents: dict, *args) -> tuple[dict[str, float], dict]:
    """Site name -> its scaled log-density summed, of ``model`` run with ``params`` and sample sites at
    ``latents``; and the trace."""
    data = {k: jnp.asarray(v) for k, v in {**params, **latents}.items()}
    trace = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=data)).get_trace(*args)
    terms = {}
    for name, site in trace.items():
        if site["type"] == "sample" and not site.get("is_auxiliary") and not name == "data":
            scale = 1.0 if site["scale"] is None else site["scale"]
            terms[name] = float(jnp.sum(site["fn"].log_prob(site["value"])) * scale)
    return terms, trace


def pyro_terms(model, params: dict, latents: dict, *args) -> tuple[dict[str, float], object]:
    """The Pyro twin of :func:`numpyro_terms`."""
    tensors = {k: torch.as_tensor(v) for k, v in params.items()}
    conditioned = poutine.condition(
        poutine.substitute(model, data=tensors), data={k: torch.as_tensor(v) for k, v in latents.items()}
    )
    trace = poutine.trace(conditioned).get_trace(*args)
    trace.compute_log_prob()
    terms = {
        name: float(site["log_prob_sum"])
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and name != "data"
    }
    return terms, trace


def assert_same_terms(np_model, pyro_model, params: dict, latents: dict, *args) -> dict[str, float]:
    expected, _ = numpyro_terms(np_model, params, latents, *args)
    got, _ = pyro_terms(pyro_model, params, latents, *args)
    assert set(got) == set(expected), (sorted(got), sorted(expected))
    for name in expected:
        close(expected[name], got[name])
    return got


def assert_perturbation_moves(pyro_model, params: dict, latents: dict, *args, site: str = "kernel.lengthscale") -> None:
    """Scaling one param or latent value by 1.001 on the Pyro side moves its log joint."""
    before, _ = pyro_terms(pyro_model, params, latents, *args)
    params, latents = ({**d, site: d[site] * 1.001} if site in d else d for d in (params, latents))
    after, _ = pyro_terms(pyro_model, params, latents, *args)
    apart(sum(before.values()), sum(after.values()))


def assert_same_predictions(np_model, pyro_model, params: dict, X_new, **data) -> None:
    for method in ("predict_f", "predict_y"):
        expected = getattr(np_model, method)(params, X_new, **data)
        got = getattr(pyro_model, method)(params, X_new, **data)
        for e, g in zip(expected, got, strict=True):
            close(e, g.numpy())
    changed = {**params, "kernel.variance": params["kernel.variance"] * 1.001}
    apart(np_model.predict_f(params, X_new, **data)[1], pyro_model.predict_f(changed, X_new, **data)[1].numpy())
