"""ArviZ output for Pyro's ``MCMC`` on the Pyro twins, the twin of
:func:`ppl_sparsegp.posterior.diagnostics.from_mcmc`: the same groups, dimension names and attributes, so
``az.summary``, ``az.rhat``, ``az.ess``, ``az.loo`` and ``ppl-sparsegp``'s own readers take either engine's runs.

* ``posterior``: every sampled site [chain, draw, ...] with the GP dims of
  :func:`~ppl_sparsegp.posterior.diagnostics.site_dims` (``"u"`` -> (latent, inducing_point), ...).
* ``sample_stats``: ``diverging`` [chain, draw], from Pyro's per-chain divergence indices (kernels that report
  them: NUTS, HMC).
* ``log_likelihood``: ``"y"`` [chain, draw, obs(, output)], the model's own factor per point (``"potential"``) or
  the predictive density with f integrated out (``"predictive"``), as the NumPyro side's ``log_likelihood_of``.
* ``posterior_predictive``: ``"y"`` drawn once per posterior draw at the training inputs (torch's generator, seeded
  by ``seed``); ``observed_data``: ``"y"``.

ArviZ's own ``az.from_pyro`` gives the posterior alone, without the GP dims and the per-point terms; this builds
the groups with :func:`~ppl_sparsegp.posterior.diagnostics.to_inference_data`, which both ArviZ lines take.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyro.infer
import torch

from ppl_sparsegp import validation
from ppl_sparsegp.infer.mcmc import MCMCResult
from ppl_sparsegp.posterior.diagnostics import LOG_LIKELIHOODS, observation_dims, site_dims, to_inference_data
from ppl_sparsegp.pyro.distributions import observation_distribution
from ppl_sparsegp.pyro.dtype import as_tensor
from ppl_sparsegp.pyro.predict import draws

Array = Any


def from_mcmc(
    mcmc: pyro.infer.MCMC,
    model: Any,
    X: Array,
    y: Array,
    *,
    params: Mapping[str, Array] | None = None,
    seed: int = 0,
    log_likelihood: bool | None = None,
    posterior_predictive: bool = True,
    log_likelihood_of: str = "potential",
    dims: Mapping[str, list[str]] | None = None,
) -> Any:
    """InferenceData (ArviZ 0.x) or a DataTree (ArviZ >= 1.0) of a Pyro ``MCMC`` run of a Pyro twin's ``model``.

    Args:
        mcmc: a ``pyro.infer.MCMC`` that has run, or the result of :func:`ppl_sparsegp.pyro.mcmc.run_mcmc`.
        model: the Pyro model object whose ``.model`` was sampled.
        X [N, D], y [N] or [N, P]: the training data.
        params: values of sites that were not sampled (e.g. a fitted ``"Z"``).
        seed: seeds the posterior predictive draws.
        log_likelihood: None (include when the model has pointwise terms), True (require) or False.
        posterior_predictive: include draws of y at X, one per posterior draw.
        log_likelihood_of: ``"potential"`` or ``"predictive"`` (:data:`~ppl_sparsegp.posterior.diagnostics.
            LOG_LIKELIHOODS`), recorded as the attribute ``log_likelihood``.
        dims: dimension names of sites, replacing those of ``site_dims``.

    Raises:
        ValueError: ``mcmc`` is neither a Pyro ``MCMC`` that has run nor an ``MCMCResult``, or a bad
            ``log_likelihood_of``.
        NotImplementedError: ``log_likelihood=True`` for a model without pointwise terms.
    """
    validation.check_choice("log_likelihood_of", log_likelihood_of, LOG_LIKELIHOODS)
    samples, stats, attrs = _mcmc_parts(mcmc)
    C, S = next(iter(samples.values())).shape[:2]
    flat = {name: value.reshape((C * S, *value.shape[2:])) for name, value in samples.items()}
    X_t, y_t = as_tensor(X), as_tensor(y)

    groups: dict[str, Any] = {"observed_data": {"y": np.asarray(y)}}
    if log_likelihood is not False:
        if log_likelihood_of == "predictive":
            pointwise = lambda d: model.predict_log_density(d, X_t, y_t, X=X_t, y=y_t)  # noqa: E731
        else:
            pointwise = lambda d: model.pointwise_log_likelihood(d, X_t, y_t)  # noqa: E731
        try:
            groups["log_likelihood"] = {"y": _per_draw(pointwise, flat, params, (C, S))}
        except NotImplementedError:
            if log_likelihood:
                raise
    if posterior_predictive:

        def draw_y(d: dict[str, Array]) -> Array:
            _, likelihood = model.fitted(d)
            mean, var = model.predict_f(d, X_t, X=X_t, y=y_t)
            f = mean + torch.sqrt(torch.clamp(var, min=0.0)) * torch.randn_like(mean)
            return observation_distribution(likelihood, f).sample()

        with torch.random.fork_rng():  # draws seeded by `seed` that leave the caller's generator as it was
            torch.manual_seed(seed)
            groups["posterior_predictive"] = {"y": _per_draw(draw_y, flat, params, (C, S))}
    dims = {**site_dims(samples, np.shape(X)[1]), "y": observation_dims(y), **(dims or {})}
    attrs = {**attrs, "backend": "pyro", "log_likelihood": log_likelihood_of if "log_likelihood" in groups else "none"}
    return to_inference_data(samples, sample_stats=stats, dims=dims, attrs=attrs, **groups)


def _mcmc_parts(result: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, Any]]:
    """Draws [C, S, ...], per-draw statistics [C, S] and the run's attributes of a ``pyro.infer.MCMC`` that has
    run or of an :class:`~ppl_sparsegp.infer.mcmc.MCMCResult` (:func:`ppl_sparsegp.pyro.mcmc.run_mcmc`).

    Raises:
        ValueError: ``result`` is neither, or an ``MCMC`` that has not run.
    """
    if isinstance(result, MCMCResult):
        attrs = {"engine": result.kernel_name, "num_warmup": result.num_warmup, "thinning": result.thinning}
        return dict(result.samples), dict(result.extra_fields), attrs
    if not isinstance(result, pyro.infer.MCMC):
        raise ValueError(f"mcmc: expected a pyro.infer.MCMC or an MCMCResult, got {type(result)!r}")
    try:
        grouped = result.get_samples(group_by_chain=True)
    except (AttributeError, KeyError, TypeError, ValueError):
        raise ValueError("mcmc: this pyro.infer.MCMC has no draws yet; call its .run(...) first") from None
    samples = {name: value.detach().cpu().numpy() for name, value in grouped.items()}
    C, S = next(iter(samples.values())).shape[:2]
    stats = {}
    divergences = result.diagnostics().get("divergences")
    if divergences is not None:
        stats["diverging"] = np.zeros((C, S), dtype=bool)
        for c in range(C):
            stats["diverging"][c, divergences.get(f"chain {c}", [])] = True
    return samples, stats, {"engine": type(result.kernel).__name__, "num_warmup": result.warmup_steps, "thinning": 1}


def _per_draw(fn: Any, flat: Mapping[str, np.ndarray], params: Mapping[str, Array] | None, shape: tuple[int, int]):
    """``fn(draw)`` for every draw of ``flat`` [C * S, ...] -> numpy [C, S, ...]."""
    with torch.no_grad():
        values = torch.stack([fn(draw) for draw in draws(flat, params)])
    return values.numpy().reshape((*shape, *values.shape[1:]))
