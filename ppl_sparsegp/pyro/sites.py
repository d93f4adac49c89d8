"""The site helpers the Pyro models are written with, the twins of :mod:`ppl_sparsegp.numpyro.sites` under the same
names and with the same site names, constraints and scaling.

* :func:`data_plate` is THE ``"data"`` plate: with ``batch_size=B < N`` it subsamples B indices i.i.d. (with
  replacement, as the NumPyro twin; or B distinct ones) and Pyro scales every site inside it by N/B; with
  ``num_data`` it scales externally supplied minibatches by ``num_data / N``. Sites outside it (the KL of q(u),
  priors) count once.
* :func:`hyperparameters` registers one site per kernel and likelihood hyperparameter, named as
  :mod:`ppl_sparsegp.core.hyperparameters` names them: a positive ``param``, a ``sample`` site under its prior (a
  Pyro distribution), or a constant when fixed; :func:`hyperparameter_guide` gives the guide's point masses at
  ``"<site>_map"`` for those with priors.
* :func:`inducing_outputs` and :func:`inducing_posterior` are the ``"u"`` sample site of the model and the guide,
  :func:`inducing_posterior_parameters` q(u)'s params ``"u_loc"`` and ``"u_scale_tril"`` (or ``"u_scale"``), and
  :func:`inducing_inputs` the param ``"Z"``. :func:`whitened_inducing_data` is the rest of a model sampled by MCMC
  over whitened inducing outputs (SGPMC): v at ``"u"``, then the data given v.
* :func:`latent_inputs` and :func:`latent_posterior` are the ``"X"`` site of a GP-LVM inside the data plate:
  x_n ~ N(0, I_Q) in the model, x_n ~ N(μ_n, diag s_n²) in the guide, with μ, s the params ``"X_loc"``,
  ``"X_scale"`` [N, Q] (:func:`latent_posterior_parameters`), of which the guide takes the plate's rows.
* :func:`guide_hyperparameters` is the kernel and likelihood of a guide that needs them (VGP's q(v) depends on K).
* :func:`predictive`, :func:`predictive_at_values` and :func:`prior_predictive` are the ``y=None`` branches: the
  sites ``"f"`` and ``"y"``.
* :func:`inclusion` and :func:`inclusion_posterior` are the ``"inclusion"`` site of a selective model (the inducing
  set s ∈ {0,1}^K drawn from K candidates, Uhrenholt et al. 2021): s ~ p_α(s) ∝ exp(−α|s|²) in the model,
  s ~ q_λ(s) = Π_k Bernoulli(λ_k) in the guide, with λ the param ``"inclusion_probs"``. The score-function
  baseline is Pyro's own: the guide site carries ``infer={"baseline": ...}`` (:func:`score_function_baseline`),
  which ``TraceGraph_ELBO`` reads; its running average lives in the param store at
  :func:`baseline_param_name` of the site.

Randomness is Pyro's: torch's generator (``pyro.set_rng_seed``) draws the batch indices and every sample.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch.distributions import constraints

from ppl_sparsegp.core import conditionals, ops
from ppl_sparsegp.core.hyperparameters import rebuild as rebuild
from ppl_sparsegp.core.hyperparameters import site_values
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.pyro.distributions import InducingPosterior, InducingPrior, observation_distribution
from ppl_sparsegp.pyro.dtype import as_tensor
from ppl_sparsegp.pyro.subset_prior import IndependentInclusion, SubsetPointProcess

Array = Any


@contextmanager
def data_plate(
    n: int, batch_size: int | None = None, num_data: int | None = None, *, replace: bool = True
) -> Iterator[Array | None]:
    """The ``"data"`` plate over n points; yields the subsample indices [B], or None when all n are used.

    ``batch_size=B < n`` draws B indices (the data term is scaled by n/B): uniformly with replacement, as the NumPyro
    twin, or with ``replace=False`` B distinct ones (SAS-GP splits a batch of distinct points into an active and a
    held-out set); otherwise the plate covers all n points, scaled by ``num_data / n`` when the caller passes
    minibatches of a data set of ``num_data`` points. The indices are the value of the plate's sample site
    ``"data"``, so ``poutine.condition`` (or the guide's trace, replayed into the model) sets them.
    """
    if batch_size is not None and batch_size < n:
        draw = torch.randint(0, n, (batch_size,)) if replace else torch.randperm(n)[:batch_size]
        with pyro.plate("data", n, subsample=draw) as idx:
            yield idx
    else:
        scale = 1.0 if num_data is None else num_data / n
        with poutine.scale(scale=scale), pyro.plate("data", n):
            yield None


def batch(X: Array | None, y: Array, idx: Array | None) -> tuple[Array | None, Array]:
    """The rows of the current batch: X [N, D] -> [B, D] (None stays None: latent inputs) and y [N] or [N, P] ->
    Y [P, B] (outputs first, the layout of the conditionals)."""
    Xb = X if idx is None or X is None else X[idx]
    yb = y if idx is None else y[idx]
    return Xb, (yb[None, :] if yb.ndim == 1 else yb.T)


def predictive(likelihood: Likelihood, mean: Array, var: Array) -> tuple[Array, Array]:
    """The ``y=None`` branch of a model (``pyro.infer.Predictive``): f ~ N(mean, var) independently per point as
    the site ``"f"`` and y ~ p(y | f) as ``"y"``, both [S] (one output) or [S, P]; mean, var [P, S]."""
    mean, var = (mean[0], var[0]) if mean.shape[0] == 1 else (mean.T, var.T)
    f = pyro.sample("f", dist.Normal(mean, torch.sqrt(var)).to_event(mean.ndim))
    return f, observations(likelihood, f)


def predictive_at_values(likelihood: Likelihood, F: Array) -> tuple[Array, Array]:
    """The ``y=None`` branch of the models whose latent site fixes f at the training inputs (VGP, GPMC: f = L v):
    f [P, N] as the deterministic site ``"f"`` and y ~ p(y | f) as ``"y"``, in the layout of :func:`predictive`."""
    f = pyro.deterministic("f", F[0] if F.shape[0] == 1 else F.T)
    return f, observations(likelihood, f)


def observations(likelihood: Likelihood, f: Array) -> Array:
    """y ~ p(y | f) as the site ``"y"``, one event over every point and output of f [S] or [S, P] (a multi-class
    likelihood: f [S, J] gives y [S])."""
    y = observation_distribution(likelihood, f)
    return pyro.sample("y", y.to_event(f.ndim - (likelihood.latent_dim is not None)))


def prior_predictive(kernel: Kernel, likelihood: Likelihood, X: Array) -> tuple[Array, Array]:
    """The ``y=None`` branch of GPR and SGPR: f ~ N(0, k(X, X)) jointly at the S rows of X as the site ``"f"`` [S]
    and y ~ p(y | f) as ``"y"`` [S]."""
    K = kernel(X)
    f = pyro.sample("f", dist.MultivariateNormal(torch.zeros(X.shape[0], dtype=K.dtype), scale_tril=ops.cholesky(K)))
    return f, observations(likelihood, f)


def hyperparameter_values(kernel: Kernel, likelihood: Likelihood | None, prefix: str = "") -> dict[str, Array]:
    """Site name -> initial value for every kernel and likelihood hyperparameter
    (:func:`ppl_sparsegp.core.hyperparameters.site_values`), as tensors of torch's default float dtype."""
    return {site: as_tensor(value) for site, value in site_values(kernel, likelihood, prefix).items()}


def hyperparameters(
    kernel: Kernel,
    likelihood: Likelihood | None,
    priors: Mapping[str, dist.TorchDistribution],
    fixed: Collection[str] = (),
    prefix: str = "",
) -> tuple[Kernel, Likelihood | None]:
    """Model side: register every hyperparameter site and return kernel and likelihood built from their values.

    A site in ``fixed`` keeps its initial value, one in ``priors`` is ``sample``-d from it, any other is a
    positive ``param``."""
    values: dict[str, Array] = {}
    for site, init in hyperparameter_values(kernel, likelihood, prefix).items():
        if site in fixed:
            values[site] = init
        elif site in priors:
            values[site] = pyro.sample(site, priors[site])
        else:
            values[site] = pyro.param(site, init, constraint=constraints.positive)
    return rebuild(kernel, likelihood, values, prefix)


def hyperparameter_guide(
    kernel: Kernel, likelihood: Likelihood | None, priors: Mapping[str, dist.TorchDistribution], prefix: str = ""
) -> dict[str, Array]:
    """Guide side: a point mass at the positive param ``"<site>_map"`` for each hyperparameter with a prior
    (MAP estimation under SVI); returns their values by site."""
    values = {}
    for site, init in hyperparameter_values(kernel, likelihood, prefix).items():
        if site in priors:
            values[site] = pyro.param(f"{site}_map", init, constraint=constraints.positive)
            pyro.sample(site, dist.Delta(values[site], event_dim=len(priors[site].event_shape)))
    return values


def guide_hyperparameters(
    kernel: Kernel,
    likelihood: Likelihood,
    priors: Mapping[str, dist.TorchDistribution],
    fixed: Collection[str] = (),
) -> tuple[Kernel, Likelihood]:
    """Guide side, for a guide that needs the kernel (VGP's q depends on K): the point masses of
    :func:`hyperparameter_guide`, and the kernel and likelihood at the values the model sees: the point mass of a
    site with a prior, the initial value of a fixed one, else the model's own positive ``param`` (the same name, so
    the same value)."""
    values = hyperparameter_guide(kernel, likelihood, priors)
    for site, init in hyperparameter_values(kernel, likelihood).items():
        if site in fixed:
            values[site] = init
        elif site not in priors:
            values[site] = pyro.param(site, init, constraint=constraints.positive)
    return rebuild(kernel, likelihood, values)


def inducing_outputs(num_latent: int, num_inducing: int, Lmm: Array | None, dtype: Any, name: str = "u") -> Array:
    """The model's ``u`` [P, M]: p(u) = N(0, Kmm) given its factor ``Lmm``, or, whitened (``Lmm=None``), v ~ N(0, I)."""
    return pyro.sample(name, InducingPrior(num_latent, num_inducing, Lmm, dtype))


def whitened_inducing_data(
    kernel: Kernel,
    likelihood: Likelihood,
    Z: Array,
    num_latent: int,
    X: Array,
    y: Array | None,
    batch_size: int | None,
    log_likelihood: Callable[[Array, Array, Array], Array],
) -> None:
    """Model side, after the hyperparameters and Z [M, D]: v ~ N(0, I) at site ``"u"`` [P, M] (u = Lmm v), then the
    factor ``"y"`` of Σ_p ℓ_pn for every point n of a batch of the ``"data"`` plate (``batch_size`` of them, None:
    all), with ℓ = ``log_likelihood(Y [P, B], mean [P, B], var [P, B])`` -> [P, B] and f_n | v ~ N(mean, var) the
    whitened conditional (:func:`ppl_sparsegp.core.conditionals.inducing_conditional`; thesis eq 5.26). With
    ``y=None``: f and y at every row of X given v, as :func:`predictive` draws them."""
    v = inducing_outputs(num_latent, Z.shape[0], None, Z.dtype)
    if y is None:
        predictive(likelihood, *conditionals.inducing_conditional(kernel, Z, X, v))
        return
    with data_plate(y.shape[0], batch_size) as idx:
        Xb, Yb = batch(X, y, idx)
        mean, var = conditionals.inducing_conditional(kernel, Z, Xb, v)
        pyro.factor("y", torch.sum(log_likelihood(Yb, mean, var), dim=0))


def inducing_posterior_parameters(
    num_latent: int, num_inducing: int, dtype: Any, q_diag: bool = False, prefix: str = ""
) -> tuple[Array, Array]:
    """q(u)'s params: ``"u_loc"`` [P, M] (zeros) and ``"u_scale_tril"`` [P, M, M] (identity), or, ``q_diag``,
    ``"u_scale"`` [P, M] (ones)."""
    P, M = num_latent, num_inducing
    loc = pyro.param(f"{prefix}u_loc", torch.zeros((P, M), dtype=dtype))
    if q_diag:
        return loc, pyro.param(f"{prefix}u_scale", torch.ones((P, M), dtype=dtype), constraint=constraints.positive)
    eye = torch.eye(M, dtype=dtype).expand(P, M, M).clone()
    return loc, pyro.param(f"{prefix}u_scale_tril", eye, constraint=constraints.lower_cholesky)


def inducing_posterior(loc: Array, scale: Array, name: str = "u") -> Array:
    """The guide's ``u`` ~ q(u) = Π_p N(loc_p, R_p R_pᵀ): loc [P, M], scale [P, M, M] or diagonal [P, M]."""
    return pyro.sample(name, InducingPosterior(loc, scale))


def inducing_inputs(Z: Array, learn: bool = True, name: str = "Z") -> Array:
    """The inducing inputs Z [M, D]: the param ``name`` started at a copy of ``Z`` (an optimiser moves the param in
    place, and must not move the caller's array, or the training inputs Z was taken from), or the constant ``Z`` when
    not learned."""
    return pyro.param(name, lambda: as_tensor(Z).detach().clone()) if learn else as_tensor(Z)


def latent_inputs(num_rows: int, latent_dim: int, dtype: Any, name: str = "X") -> Array:
    """Model side, inside the data plate: the GP-LVM's latent inputs x_n ~ N(0, I_Q) of the plate's rows -> [B, Q]."""
    zeros = torch.zeros((num_rows, latent_dim), dtype=dtype)
    return pyro.sample(name, dist.Normal(zeros, torch.ones_like(zeros)).to_event(1))


def latent_posterior_parameters(X_init: Array, scale_init: float) -> tuple[Array, Array]:
    """Guide side: q(X)'s params ``"X_loc"`` [N, Q] (started at ``X_init``) and ``"X_scale"`` [N, Q] (positive,
    started at ``scale_init``). Register them outside the data plate and pass them to :func:`latent_posterior`."""
    init = as_tensor(X_init)
    loc = pyro.param("X_loc", init.clone())
    scale = pyro.param("X_scale", torch.full(init.shape, scale_init, dtype=init.dtype), constraint=constraints.positive)
    return loc, scale


def latent_posterior(loc: Array, scale: Array, idx: Array | None, name: str = "X") -> Array:
    """Guide side, inside the data plate: x_n ~ N(μ_n, diag s_n²) for the plate's rows ``idx`` [B] (None: all N)
    of loc, scale [N, Q] -> [B, Q]."""
    rows = (loc, scale) if idx is None else (loc[idx], scale[idx])
    return pyro.sample(name, dist.Normal(*rows).to_event(1))


def param_store_values() -> dict[str, Array]:
    """Pyro's param store as a ``params`` dict for the models' predictions: name -> constrained value, detached."""
    return {name: value.detach().clone() for name, value in pyro.get_param_store().items()}


BASELINE_DECAY = 0.95
"""β of the decaying-average score-function baseline, the released code's and
:class:`ppl_sparsegp.infer.score_function.ScoreFunctionELBO`'s default."""


def score_function_baseline(decay: float = BASELINE_DECAY) -> dict[str, Any]:
    """The ``infer`` dict of a non-reparameterised guide site that gives it Pyro's decaying-average baseline under
    ``TraceGraph_ELBO``: b_t = β b_{t−1} + (1 − β) L_{t−1}, b_0 = 0, with L the site's downstream cost (its own
    log p − log q and every later model and guide term). b_t holds no term of the current draw, so the estimator
    stays unbiased; unlike the NumPyro twin's normalised average, it starts at 0."""
    return {"baseline": {"use_decaying_avg_baseline": True, "baseline_beta": decay}}


def baseline_param_name(site: str) -> str:
    """The param-store name under which ``TraceGraph_ELBO`` keeps the decaying average baseline of ``site``."""
    return f"__baseline_avg_downstream_cost_{site}"


def inclusion(num_candidates: int, alpha: float, dtype: Any, prefix: str = "") -> Array:
    """Model side: the inducing set s ~ p_α(s) ∝ exp(−α |s|²) over K candidates at the site ``"<prefix>inclusion"``
    (:class:`~ppl_sparsegp.pyro.subset_prior.SubsetPointProcess`) -> a 0/1 mask [K] of ``dtype``."""
    alpha = torch.as_tensor(alpha, dtype=dtype)
    return pyro.sample(f"{prefix}inclusion", SubsetPointProcess(num_candidates, alpha)).to(dtype)


def inclusion_posterior(
    num_candidates: int, initial: float, dtype: Any, prefix: str = "", baseline: bool = True
) -> Array:
    """Guide side: λ = the param ``"<prefix>inclusion_probs"`` [K] in (0, 1) (started at ``initial``; learned as
    logits through the sigmoid of ``constraints.unit_interval``) and s ~ q_λ(s) = Π_k Bernoulli(λ_k) at
    ``"<prefix>inclusion"``, with the decaying-average baseline (:func:`score_function_baseline`) unless
    ``baseline=False`` -> a 0/1 mask [K] of ``dtype``."""
    init = torch.full((num_candidates,), initial, dtype=dtype)
    probs = pyro.param(f"{prefix}inclusion_probs", init, constraint=constraints.unit_interval)
    infer = score_function_baseline() if baseline else {}
    return pyro.sample(f"{prefix}inclusion", IndependentInclusion(probs), infer=infer).to(dtype)
