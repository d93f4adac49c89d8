"""The site helpers every NumPyro model here is written with: one data plate, hyperparameters, inducing outputs.

* :func:`data_plate` is THE ``"data"`` plate: with ``batch_size=B < N`` it subsamples B indices i.i.d. and NumPyro
  scales every site inside it by N/B; with ``num_data`` it scales externally supplied minibatches. Sites outside it
  (the KL of q(u), priors) count once. No other place scales a data term.
* :func:`hyperparameters` registers one site per kernel and likelihood hyperparameter, named
  ``"<prefix>kernel.<name>"`` / ``"<prefix>likelihood.<name>"``: a positive ``param`` (type-II ML), a ``sample``
  site under its prior, or a constant when fixed; :func:`hyperparameter_guide` gives the guide's point masses at
  ``"<site>_map"`` for those with priors.
* :func:`inducing_outputs` and :func:`inducing_posterior` are the ``"u"`` sample site of the model and the guide.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.distributions import constraints

from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.numpyro.distributions import InducingPosterior, InducingPrior

Array = Any


@contextmanager
def data_plate(n: int, batch_size: int | None = None, num_data: int | None = None) -> Iterator[Array | None]:
    """The ``"data"`` plate over n points; yields the subsample indices [B], or None when all n are used.

    ``batch_size=B < n`` draws B i.i.d. indices (the data term is scaled by n/B); otherwise the plate covers all
    n points, scaled by ``num_data / n`` when the caller passes minibatches of a data set of ``num_data`` points.
    """
    if batch_size is not None and batch_size < n:
        # i.i.d. indices in one vectorised draw (NumPyro's own draw on CPU is a sequential scan over the
        # batch); an outer handler that substitutes the "data" plate still takes precedence.
        draw = jax.random.randint(numpyro.prng_key(), (batch_size,), 0, n)
        with handlers.substitute(data={"data": draw}), numpyro.plate("data", n, subsample_size=batch_size) as idx:
            yield idx
    else:
        scale = 1.0 if num_data is None else num_data / n
        with handlers.scale(scale=scale), numpyro.plate("data", n):
            yield None


def batch(X: Array | None, y: Array, idx: Array | None) -> tuple[Array | None, Array]:
    """The rows of the current batch: X [N, D] -> [B, D] (None stays None: latent inputs) and y [N] or [N, P] ->
    Y [P, B] (outputs first, the layout of the conditionals)."""
    Xb = X if idx is None or X is None else X[idx]
    yb = y if idx is None else y[idx]
    return Xb, (yb[None, :] if yb.ndim == 1 else yb.T)


def hyperparameter_values(kernel: Kernel, likelihood: Likelihood | None, prefix: str = "") -> dict[str, Any]:
    """Site name -> initial value for every kernel and likelihood hyperparameter."""
    sites = {f"{prefix}kernel.{k}": v for k, v in kernel.parameters().items()}
    if likelihood is not None:
        sites.update({f"{prefix}likelihood.{k}": v for k, v in likelihood.parameters().items()})
    return sites


def rebuild(
    kernel: Kernel, likelihood: Likelihood | None, values: Mapping[str, Array], prefix: str = ""
) -> tuple[Kernel, Likelihood | None]:
    """Kernel and likelihood with the hyperparameters in ``values`` (keyed by site name) replaced."""
    k = {s.removeprefix(f"{prefix}kernel."): v for s, v in values.items() if s.startswith(f"{prefix}kernel.")}
    lik = {s.removeprefix(f"{prefix}likelihood."): v for s, v in values.items() if s.startswith(f"{prefix}likelihood.")}
    return kernel.with_parameters(k), (None if likelihood is None else likelihood.with_parameters(lik))


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
) -> None:
    """Guide side: a point mass at the positive param ``"<site>_map"`` for each hyperparameter with a prior
    (MAP estimation under SVI)."""
    for site, init in hyperparameter_values(kernel, likelihood, prefix).items():
        if site in priors:
            value = numpyro.param(f"{site}_map", jnp.asarray(init), constraint=constraints.positive)
            numpyro.sample(site, dist.Delta(value, event_dim=len(priors[site].event_shape)))


def inducing_outputs(num_latent: int, num_inducing: int, Lmm: Array | None, dtype: Any, name: str = "u") -> Array:
    """The model's ``u`` [P, M]: p(u) = N(0, Kmm) given its factor ``Lmm``, or, whitened (``Lmm=None``), v ~ N(0, I)."""
    return numpyro.sample(name, InducingPrior(num_latent, num_inducing, Lmm, dtype))


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
    return loc, numpyro.param(f"{prefix}u_scale_tril", eye, constraint=constraints.lower_cholesky)


def inducing_posterior(loc: Array, scale: Array, name: str = "u") -> Array:
    """The guide's ``u`` ~ q(u) = Π_p N(loc_p, R_p R_pᵀ): loc [P, M], scale [P, M, M] or diagonal [P, M]."""
    return numpyro.sample(name, InducingPosterior(loc, scale))
