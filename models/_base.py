"""What every GP model here shares: hyperparameter sites, eager input checks, and prediction of y.

Hyperparameter sites are named ``"kernel.<name>"`` and ``"likelihood.<name>"`` after the keys of
``Kernel.parameters()`` / ``Likelihood.parameters()`` (e.g. ``"kernel.lengthscale"``,
``"kernel.k0.variance"``, ``"likelihood.variance"``). Each one is, by default, a positive ``numpyro.param``
(a point estimate, type-II maximum likelihood). Naming it in ``priors`` makes it a ``numpyro.sample`` site with
that prior; the guide then holds a point mass at the positive param ``"<site>_map"`` (MAP estimation under SVI,
a random variable under MCMC). Naming it in ``fixed`` keeps it at its initial value.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from ppl_sparsegp import validation
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.infer.checkpoint import tree_sha256
from ppl_sparsegp.numpyro import sites

Array = Any


def _is_concrete(*arrays: Array) -> bool:
    return not any(isinstance(a, jax.core.Tracer) for a in arrays if a is not None)


@dataclass(eq=False)
class GPModel:
    """Base class: a kernel, a likelihood, and how their hyperparameters are treated.

    Subclasses define ``model(X, y)``, ``guide(X, y)`` and ``predict_f(params, X_new, ...)``.
    """

    kernel: Kernel
    likelihood: Likelihood
    priors: Mapping[str, dist.Distribution] = field(default_factory=dict)
    fixed: Collection[str] = ()

    def __post_init__(self) -> None:
        names = set(self.hyperparameter_sites())
        for arg, given in (("priors", set(self.priors)), ("fixed", set(self.fixed))):
            unknown = given - names
            if unknown:
                raise ValueError(
                    f"{arg} names unknown hyperparameter sites {sorted(unknown)}; expected some of {sorted(names)}"
                )
        both = set(self.priors) & set(self.fixed)
        if both:
            raise ValueError(f"sites {sorted(both)} are in both `priors` and `fixed`; choose one")

    def hyperparameter_sites(self) -> dict[str, Any]:
        """Site name -> initial value for every kernel and likelihood hyperparameter."""
        return sites.hyperparameter_values(self.kernel, self.likelihood)

    def hyperparameters(self) -> tuple[Kernel, Likelihood]:
        """Model side: register every hyperparameter site (:func:`ppl_sparsegp.numpyro.sites.hyperparameters`)
        and return the kernel and likelihood at their values."""
        return sites.hyperparameters(self.kernel, self.likelihood, self.priors, self.fixed)

    def hyperparameter_guide(self) -> None:
        """Guide side: a point mass at ``"<site>_map"`` for each hyperparameter that has a prior."""
        sites.hyperparameter_guide(self.kernel, self.likelihood, self.priors)

    def fitted(self, params: Mapping[str, Array]) -> tuple[Kernel, Likelihood]:
        """Kernel and likelihood at fitted values: ``params[site]``, else ``params[site + '_map']``, else init."""
        values = {}
        for site, init in self.hyperparameter_sites().items():
            values[site] = params.get(site, params.get(f"{site}_map", jnp.asarray(init)))
        return sites.rebuild(self.kernel, self.likelihood, values)

    def check_data(self, X: Array, y: Array | None = None, *, init_params: Mapping[str, Array] | None = None) -> None:
        """Eager checks of the data, of Z against X, and of initial hyperparameter values.

        ``fit_svi`` calls this before compiling. Entries of traced values are unknown and skipped.
        """
        if _is_concrete(X, y):
            validation.check_inputs(X, y)
        names = self.hyperparameter_sites()
        given = {s: np.asarray(v) for s, v in (init_params or {}).items() if s in names}
        kernel, _ = sites.rebuild(self.kernel, self.likelihood, given)  # rejects non-finite, non-positive values
        Z = getattr(self, "Z", None)
        if Z is not None and _is_concrete(X):
            validation.check_same_dim(Z, X)
        if _is_concrete(X):
            kernel.diag(X[:1])  # the kernel takes X's columns (ARD lengths, active_dims), or ValueError

    def predict_f(self, params: Mapping[str, Array], X_new: Array, **data: Array):
        raise NotImplementedError

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """log-likelihood terms per data point, [N] or [N, P], for LOO/WAIC (models whose data term factorises)."""
        raise NotImplementedError(
            f"{type(self).__name__}: its data term does not factorise over data points given the sampled "
            "variables, so it has no pointwise log-likelihood; use SVGP or SGPMC for az.loo / az.waic"
        )

    def predict_y(self, params: Mapping[str, Array], X_new: Array, **data: Array) -> tuple[Array, Array]:
        """Predictive mean and variance of y at ``X_new`` [S, D] -> ([S] or [S, P], same)."""
        _, likelihood = self.fitted(params)
        mean, var = self.predict_f(params, X_new, **data)
        return likelihood.predict_mean_and_var(mean, var)

    def predict_log_density(self, params: Mapping[str, Array], X_new: Array, y_new: Array, **data: Array) -> Array:
        """log p(y_new | data) per test point and output: [S] or [S, P] (thesis eq 4.28, no log inside)."""
        _, likelihood = self.fitted(params)
        mean, var = self.predict_f(params, X_new, **data)
        return likelihood.log_predictive_density(jnp.asarray(y_new), mean, var)


def check_sparse_settings(Z: Array, **counts: int | None) -> None:
    """Eager checks shared by the sparse models: inducing inputs ``Z`` [M, D] given and finite, and each of
    ``counts`` (e.g. ``num_latent``, ``batch_size``) None or a positive integer.

    Raises:
        ValueError: naming the argument and what was expected.
    """
    if Z is None:
        raise ValueError("Z: expected inducing inputs of shape [M, D], got None")
    validation.check_inputs(Z, x_name="Z")
    for name, value in counts.items():
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")


def as_output_columns(mean: Array, var: Array, single_output: bool) -> tuple[Array, Array]:
    """[P, S] core layout -> [S] (one output) or [S, P]; full covariances [P, S, S] -> [S, S] or kept."""
    if var.ndim == 3:
        return (mean[0], var[0]) if single_output else (mean.T, var)
    return (mean[0], var[0]) if single_output else (mean.T, var.T)


def to_numpy_params(params: Mapping[str, Array]) -> dict[str, np.ndarray]:
    """Fitted parameters as numpy arrays (for saving)."""
    return {k: np.asarray(v) for k, v in params.items()}


def part_fingerprint(part: Kernel | Likelihood) -> str:
    """A kernel or likelihood for a checkpoint's fingerprint: its class names (``Sum/RBF/Linear``) and the sha256 of
    its parameter values (dtypes, shapes and bytes; first 16 hex digits), e.g. ``"Sum/RBF/Linear 85d75e4bd1e0cf87"``."""
    names = re.findall(r"\b([A-Z]\w*)\(", repr(part)) or [type(part).__name__]
    return f"{'/'.join(names)} {tree_sha256(dict(part.parameters()))[:16]}"


def base_fields(obj: Any, cls: type) -> dict[str, Any]:
    """The values of ``obj``'s fields that the dataclass ``cls`` takes in ``__init__`` (to build the ``cls`` that
    ``obj`` holds or prunes to, e.g. the ordinary SVGP inside a selective one)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(cls) if f.init}
