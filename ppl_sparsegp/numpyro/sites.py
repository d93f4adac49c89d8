"""The site helpers every NumPyro model here is written with: one data plate, hyperparameters, inducing outputs.

* :func:`data_plate` is THE ``"data"`` plate: with ``batch_size=B < N`` it subsamples B indices i.i.d. and NumPyro
  scales every site inside it by N/B; with ``num_data`` it scales externally supplied minibatches. Sites outside it
  (the KL of q(u), priors) count once. No other place scales a data term.
* :func:`hyperparameters` registers one site per kernel and likelihood hyperparameter, named
  ``"<prefix>kernel.<name>"`` / ``"<prefix>likelihood.<name>"``: a positive ``param`` (type-II ML), a ``sample``
  site under its prior, or a constant when fixed; :func:`hyperparameter_guide` gives the guide's point masses at
  ``"<site>_map"`` for those with priors.
* :func:`inducing_outputs` and :func:`inducing_posterior` are the ``"u"`` sample site of the model and the guide;
  :func:`inducing_inputs` is the param ``"Z"``. :func:`whitened_inducing_data` is the rest of a model sampled by
  MCMC over whitened inducing outputs (SGPMC, BSGP): v at ``"u"``, then the data given v.
* :func:`inclusion` and :func:`inclusion_posterior` are the ``"inclusion"`` site of a selective model (the inducing
  set s ∈ {0,1}^K drawn from K candidates, Uhrenholt et al. 2021): s ~ p_α(s) ∝ exp(−α|s|²) in the model,
  s ~ q_λ(s) = Π_k Bernoulli(λ_k) in the guide, with λ the param ``"inclusion_probs"`` and the score-function
  baseline declared beside it.
* :func:`latent_inputs` and :func:`latent_posterior` are the ``"X"`` site of a GP-LVM inside the data plate:
  x_n ~ N(0, I_Q) in the model, x_n ~ N(μ_n, diag s_n²) in the guide, with μ, s the params ``"X_loc"``,
  ``"X_scale"`` [N, Q] (:func:`latent_posterior_parameters`), of which the guide takes the plate's rows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions import constraints

from ppl_sparsegp.core import conditionals, ops
from ppl_sparsegp.core.hyperparameters import rebuild as rebuild
from ppl_sparsegp.core.hyperparameters import site_values
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.infer.score_function import score_function_baseline
from ppl_sparsegp.numpyro.distributions import (
    InducingPosterior,
    InducingPrior,
    lower_cholesky,
    observation_distribution,
)
from ppl_sparsegp.numpyro.dtype import as_float
from ppl_sparsegp.numpyro.subset_prior import IndependentInclusion, SubsetPointProcess

Array = Any


def distinct_indices(key: Array, n: int, size: int) -> Array:
    """``size`` < n distinct indices [size] from range(n), every subset of that size equally likely: those of the
    ``size`` largest of n float32 uniforms (``lax.top_k``; on this CPU 1.2 ms for 1024 of 60,000 against 30 ms for
    the first 1024 of ``jax.random.permutation``). When the size-th and the next largest are equal (float32 ties,
    probability about 2n/2^24 a draw), the first ``size`` of a permutation instead: given no tie at that boundary the
    set is exchangeable, hence uniform, so the mixture is exactly uniform. The order within the set is not uniform
    (sorted by the uniforms, equal ones by index); the callers use it as a set. The top-k's outputs pass an
    optimisation barrier: when the tie test reads its values, XLA's CPU compiler otherwise turns the top-k into a much
    slower program (the draw of 1024 of 60,000 took 14.2 ms of CPU time, 1.4 ms with the barrier; benchmarks/README.md,
    "SAS-GP's step profiled")."""
    uniforms_key, permutation_key = jax.random.split(key)
    top = jax.lax.top_k(jax.random.uniform(uniforms_key, (n,), jnp.float32), size + 1)
    largest, indices = jax.lax.optimization_barrier(top)
    return jax.lax.cond(
        largest[size - 1] == largest[size],
        lambda: jax.random.permutation(permutation_key, n)[:size].astype(indices.dtype),
        lambda: indices[:size],
    )


@contextmanager
def data_plate(
    n: int, batch_size: int | None = None, num_data: int | None = None, *, replace: bool = True
) -> Iterator[Array | None]:
    """The ``"data"`` plate over n points; yields the subsample indices [B], or None when all n are used.

    ``batch_size=B < n`` draws B indices (the data term is scaled by n/B): i.i.d., or with ``replace=False`` B
    distinct ones (SAS-GP splits a batch of distinct points into an active and a held-out set); otherwise the
    plate covers all n points, scaled by ``num_data / n`` when the caller passes minibatches of a data set of
    ``num_data`` points.
    A model run without a PRNG key (no ``seed`` handler: ``numpyro.infer.log_likelihood``, which ``az.from_numpyro``
    calls) draws no batch either: the plate covers all n points, so pointwise log-likelihoods come for every point.
    """
    key = numpyro.prng_key() if batch_size is not None and batch_size < n else None
    if key is not None:
        # One vectorised draw (NumPyro's own draw on CPU is a sequential scan over the batch; without replacement
        # :func:`distinct_indices`); an outer handler that substitutes the "data" plate still takes precedence.
        draw = jax.random.randint(key, (batch_size,), 0, n) if replace else distinct_indices(key, n, batch_size)
        with handlers.substitute(data={"data": draw}), numpyro.plate("data", n, subsample_size=batch_size) as idx:
            yield idx
    else:
        scale = 1.0 if num_data is None else num_data / n
        with handlers.scale(scale=scale), numpyro.plate("data", n):
            yield None


def batch(X: Array | None, y: Array, idx: Array | None) -> tuple[Array | None, Array]:
    """The rows of the current batch: X [N, D] -> [B, D] (None stays None: latent inputs) and y [N] or [N, P] ->
    Y [P, B] (outputs first, the layout of the conditionals)."""
    Xb = X if idx is None or X is None else jnp.asarray(X)[idx]  # numpy data under a traced idx: index as jax
    yb = y if idx is None else jnp.asarray(y)[idx]
    return Xb, (yb[None, :] if yb.ndim == 1 else yb.T)


def predictive(likelihood: Likelihood, mean: Array, var: Array) -> tuple[Array, Array]:
    """The ``y=None`` branch of a model, NumPyro's ``Predictive`` idiom: f ~ N(mean, var) independently per point
    and output as the site ``"f"`` and y ~ p(y | f) as ``"y"``, both [S] (one output) or [S, P].

    Args:
        likelihood: p(y | f), as :func:`ppl_sparsegp.numpyro.distributions.observation_distribution` gives it.
        mean, var: f's distribution at the S points given the model's other sites, [P, S] (outputs first, the
            layout of the conditionals).

    Returns:
        The draws (f, y); y [S] for a multi-class likelihood (f [S, J]).
    """
    mean, var = (mean[0], var[0]) if mean.shape[0] == 1 else (mean.T, var.T)
    f = numpyro.sample("f", dist.Normal(mean, jnp.sqrt(var)).to_event(mean.ndim))
    return f, observations(likelihood, f)


def predictive_at_values(likelihood: Likelihood, F: Array) -> tuple[Array, Array]:
    """The ``y=None`` branch of the models whose latent site fixes f at the training inputs (VGP, GPMC: f = L v):
    f [P, N] as the deterministic site ``"f"`` and y ~ p(y | f) as ``"y"``, in the layout of :func:`predictive`."""
    f = numpyro.deterministic("f", F[0] if F.shape[0] == 1 else F.T)
    return f, observations(likelihood, f)


def observations(likelihood: Likelihood, f: Array) -> Array:
    """y ~ p(y | f) as the site ``"y"``, one event over every point and output of f [S] or [S, P] (a multi-class
    likelihood: f [S, J] gives y [S])."""
    y = observation_distribution(likelihood, f)
    return numpyro.sample("y", y.to_event(f.ndim - (likelihood.latent_dim is not None)))


def prior_predictive(kernel: Kernel, likelihood: Likelihood, X: Array) -> tuple[Array, Array]:
    """The ``y=None`` branch of the models without inducing outputs (GPR, SGPR): f ~ N(0, k(X, X)) jointly at the S
    rows of X as the site ``"f"`` [S] and y ~ p(y | f) as ``"y"`` [S], one output. Their model has no other
    latent site, so ``Predictive`` draws the prior predictive (with fitted hyperparameters when ``params`` are
    given); their ``predict_f`` conditions on the training data."""
    K = kernel(X)
    f = numpyro.sample("f", dist.MultivariateNormal(jnp.zeros(X.shape[0], K.dtype), scale_tril=ops.cholesky(K)))
    return f, observations(likelihood, f)


def hyperparameter_values(kernel: Kernel, likelihood: Likelihood | None, prefix: str = "") -> dict[str, Any]:
    """Site name -> initial value for every kernel and likelihood hyperparameter
    (:func:`ppl_sparsegp.core.hyperparameters.site_values`; floating arrays in JAX's default float dtype,
    :mod:`ppl_sparsegp.numpyro.dtype`)."""
    return {site: as_float(value) for site, value in site_values(kernel, likelihood, prefix).items()}


def hyperparameters(
    kernel: Kernel,
    likelihood: Likelihood | None,
    priors: Mapping[str, dist.Distribution],
    fixed: Collection[str] = (),
    prefix: str = "",
) -> tuple[Kernel, Likelihood | None]:
    """Model side: register every hyperparameter site and return kernel and likelihood built from their values.

    A site in ``fixed`` keeps its initial value, one in ``priors`` is ``sample``-d from it, any other is a
    positive ``param``."""
    values: dict[str, Array] = {}
    for site, init in hyperparameter_values(kernel, likelihood, prefix).items():
        if site in fixed:
            values[site] = jnp.asarray(init)
        elif site in priors:
            values[site] = numpyro.sample(site, priors[site])
        else:
            values[site] = numpyro.param(site, jnp.asarray(init), constraint=constraints.positive)
    return rebuild(kernel, likelihood, values, prefix)


def hyperparameter_guide(
    kernel: Kernel, likelihood: Likelihood | None, priors: Mapping[str, dist.Distribution], prefix: str = ""
) -> dict[str, Array]:
    """Guide side: a point mass at the positive param ``"<site>_map"`` for each hyperparameter with a prior
    (MAP estimation under SVI); returns their values by site."""
    values = {}
    for site, init in hyperparameter_values(kernel, likelihood, prefix).items():
        if site in priors:
            values[site] = numpyro.param(f"{site}_map", jnp.asarray(init), constraint=constraints.positive)
            numpyro.sample(site, dist.Delta(values[site], event_dim=len(priors[site].event_shape)))
    return values


def guide_hyperparameters(
    kernel: Kernel, likelihood: Likelihood, priors: Mapping[str, dist.Distribution], fixed: Collection[str] = ()
) -> tuple[Kernel, Likelihood]:
    """Guide side, for a guide that needs the kernel (VGP's q depends on K): the point masses of
    :func:`hyperparameter_guide`, and the kernel and likelihood at the values the model sees: the point mass of a
    site with a prior, the initial value of a fixed one, else the model's own positive ``param`` (the same name, so
    the same value)."""
    values = hyperparameter_guide(kernel, likelihood, priors)
    for site, init in hyperparameter_values(kernel, likelihood).items():
        if site in fixed:
            values[site] = jnp.asarray(init)
        elif site not in priors:
            values[site] = numpyro.param(site, jnp.asarray(init), constraint=constraints.positive)
    return rebuild(kernel, likelihood, values)


def inducing_outputs(num_latent: int, num_inducing: int, Lmm: Array | None, dtype: Any, name: str = "u") -> Array:
    """The model's ``u`` [P, M]: p(u) = N(0, Kmm) given its factor ``Lmm``, or, whitened (``Lmm=None``), v ~ N(0, I)."""
    return numpyro.sample(name, InducingPrior(num_latent, num_inducing, Lmm, dtype))


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
    whitened conditional (:func:`ppl_sparsegp.core.conditionals.inducing_conditional`). With ``y=None`` (NumPyro's
    ``Predictive``): f and y at every row of X given v, as :func:`predictive` draws them."""
    v = inducing_outputs(num_latent, Z.shape[0], None, Z.dtype)
    if y is None:
        predictive(likelihood, *conditionals.inducing_conditional(kernel, Z, X, v))
        return
    with data_plate(y.shape[0], batch_size) as idx:
        Xb, Yb = batch(X, y, idx)
        mean, var = conditionals.inducing_conditional(kernel, Z, Xb, v)
        numpyro.factor("y", jnp.sum(log_likelihood(Yb, mean, var), axis=0))


def inducing_posterior_parameters(
    num_latent: int, num_inducing: int, dtype: Any, q_diag: bool = False, prefix: str = ""
) -> tuple[Array, Array]:
    """q(u)'s params: ``"u_loc"`` [P, M] (zeros) and ``"u_scale_tril"`` [P, M, M] (identity), or, ``q_diag``,
    ``"u_scale"`` [P, M] (ones)."""
    P, M = num_latent, num_inducing
    loc = numpyro.param(f"{prefix}u_loc", jnp.zeros((P, M), dtype=dtype))
    if q_diag:
        return loc, numpyro.param(f"{prefix}u_scale", jnp.ones((P, M), dtype=dtype), constraint=constraints.positive)
    eye = jnp.broadcast_to(jnp.eye(M, dtype=dtype), (P, M, M))
    # lower_cholesky: NumPyro's constraint with the tril positions as program constants (numpyro/distributions.py)
    return loc, numpyro.param(f"{prefix}u_scale_tril", eye, constraint=lower_cholesky)


def inducing_posterior(loc: Array, scale: Array, name: str = "u") -> Array:
    """The guide's ``u`` ~ q(u) = Π_p N(loc_p, R_p R_pᵀ): loc [P, M], scale [P, M, M] or diagonal [P, M]."""
    return numpyro.sample(name, InducingPosterior(loc, scale))


def inducing_inputs(Z: Array, learn: bool = True, name: str = "Z") -> Array:
    """The inducing inputs Z [M, D]: the param ``name`` started at ``Z``, or the constant ``Z`` when not learned."""
    return numpyro.param(name, jnp.asarray(Z)) if learn else jnp.asarray(Z)


def inclusion(num_candidates: int, alpha: float, dtype: Any, prefix: str = "") -> Array:
    """Model side: the inducing set s ~ p_α(s) ∝ exp(−α |s|²) over K candidates at the site ``"<prefix>inclusion"``
    (:class:`~ppl_sparsegp.numpyro.subset_prior.SubsetPointProcess`) -> a 0/1 mask [K] of ``dtype``."""
    return numpyro.sample(f"{prefix}inclusion", SubsetPointProcess(num_candidates, alpha)).astype(dtype)


def inclusion_posterior(
    num_candidates: int, initial: float, dtype: Any, prefix: str = "", baseline: bool = True
) -> Array:
    """Guide side: λ = the param ``"<prefix>inclusion_probs"`` [K] in (0, 1) (started at ``initial``; learned as
    logits), the score-function baseline (:func:`~ppl_sparsegp.infer.score_function.score_function_baseline`; a
    guide with several inclusion sites declares it once: ``baseline=False`` on the others), and
    s ~ q_λ(s) = Π_k Bernoulli(λ_k) at ``"<prefix>inclusion"`` -> a 0/1 mask [K] of ``dtype``."""
    init = jnp.full((num_candidates,), initial, dtype=dtype)
    probs = numpyro.param(f"{prefix}inclusion_probs", init, constraint=constraints.unit_interval)
    if baseline:
        score_function_baseline()
    return numpyro.sample(f"{prefix}inclusion", IndependentInclusion(probs)).astype(dtype)


def latent_inputs(num_rows: int, latent_dim: int, dtype: Any, name: str = "X") -> Array:
    """Model side, inside the data plate: the GP-LVM's latent inputs x_n ~ N(0, I_Q) of the plate's rows -> [B, Q]."""
    zeros = jnp.zeros((num_rows, latent_dim), dtype=dtype)
    return numpyro.sample(name, dist.Normal(zeros, 1.0).to_event(1))


def latent_posterior_parameters(X_init: Array, scale_init: float) -> tuple[Array, Array]:
    """Guide side: q(X)'s params ``"X_loc"`` [N, Q] (started at ``X_init``) and ``"X_scale"`` [N, Q] (positive,
    started at ``scale_init``). Register them outside the data plate and pass them to :func:`latent_posterior`."""
    init = jnp.asarray(X_init)
    loc = numpyro.param("X_loc", init)
    scale_init = jnp.full(init.shape, scale_init, dtype=init.dtype)
    return loc, numpyro.param("X_scale", scale_init, constraint=constraints.positive)


def latent_posterior(loc: Array, scale: Array, idx: Array | None, name: str = "X") -> Array:
    """Guide side, inside the data plate: x_n ~ N(μ_n, diag s_n²) for the plate's rows ``idx`` [B] (None: all N)
    of loc, scale [N, Q] -> [B, Q]."""
    rows = (loc, scale) if idx is None else (loc[idx], scale[idx])
    return numpyro.sample(name, dist.Normal(*rows).to_event(1))
