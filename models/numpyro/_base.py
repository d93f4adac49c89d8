"""What every GP model here shares: hyperparameter sites, eager input checks, and prediction of y.

Hyperparameter sites are named ``"kernel.<name>"`` and ``"likelihood.<name>"`` after the keys of
``Kernel.parameters()`` / ``Likelihood.parameters()`` (e.g. ``"kernel.lengthscale"``,
``"kernel.k0.variance"``, ``"likelihood.variance"``). Each one is, by default, a positive ``numpyro.param``
(a point estimate, type-II maximum likelihood). Naming it in ``priors`` makes it a ``numpyro.sample`` site with
that prior; the guide then holds a point mass at the positive param ``"<site>_map"`` (MAP estimation under SVI,
a random variable under MCMC). Naming it in ``fixed`` keeps it at its initial value.

Every model class has a keyword-only field ``jitter`` (None: :data:`ppl_sparsegp.core.ops.JITTER` of the dtype) and
is wrapped by :func:`scoped_methods`: :class:`GPModel` carries the decorator, which its subclasses inherit through
``__init_subclass__``; the model classes not derived from it (the deep GPs) are decorated themselves
(:mod:`models._shared`, shared with the Pyro twins, holds it and the checks below). Each public method a class
defines (every function not starting with ``_``: model, guide, elbo, predict_f, ...) then runs

* inside :func:`ppl_sparsegp.core.ops.model_jitter` of the model's ``jitter``: every Cholesky factor formed inside,
  traced (the model and guide under SVI or MCMC) or eager (predictions, bounds), starts from it. A caller overrides
  it for one call with ``with ops.relative_jitter(j): gp.predict_f(...)`` (or for one fit, around ``fit_svi``);
  ``ops.cholesky(A, jitter=j)`` itself takes precedence over both;
* with pandas DataFrames and Series among the arguments as their numpy arrays
  (:func:`ppl_sparsegp.validation.as_array`), and after eager checks of what the caller passed, at the outermost
  call only (a model's method calling another, or
  a component model's, passes its own values): ``X_new`` and ``y_new`` finite
  (:func:`ppl_sparsegp.validation.check_inputs`, skipped for traced values inside ``jit``) and the keys of a
  ``params`` dict among the model's :meth:`parameter_names` (:func:`ppl_sparsegp.validation.check_keys`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist

from ppl_sparsegp import validation
from ppl_sparsegp.core import hyperparameters
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.infer.checkpoint import tree_sha256
from ppl_sparsegp.numpyro import sites
from ppl_sparsegp.numpyro.dtype import as_float

from .._shared import base_fields as base_fields
from .._shared import check_latent_functions, checked_jitter, leading_output_axis, no_pointwise_terms, scoped_methods

Array = Any


def _is_concrete(*arrays: Array) -> bool:
    return not any(isinstance(a, jax.core.Tracer) for a in arrays if a is not None)


@scoped_methods
@dataclass(eq=False)
class GPModel:
    """Base class: a kernel, a likelihood, how their hyperparameters are treated, and the relative jitter.

    Subclasses define ``model(X, y)``, ``guide(X, y)`` and ``_posterior_f`` (what :meth:`predict_f` returns), and
    add the names of their own sites to :meth:`parameter_names`. A ``Z`` field (inducing inputs [M, D]) is cast to
    JAX's default float dtype (:mod:`ppl_sparsegp.numpyro.dtype`), and with it the sites shaped on it.

    Args:
        jitter: relative diagonal jitter of every Cholesky factorisation in the model's methods (a finite number
            >= 0; keyword only), or None for :data:`ppl_sparsegp.core.ops.JITTER` of the dtype (module docstring).
    """

    kernel: Kernel
    likelihood: Likelihood
    priors: Mapping[str, dist.Distribution] = field(default_factory=dict)
    fixed: Collection[str] = ()
    jitter: float | None = field(default=None, kw_only=True)
    components: ClassVar[tuple[str, ...]] = ()
    """Fields holding the parts a model is composed of (e.g. the SVGP at given inputs and the latent inputs of a
    GP-LVM), whose parameter names are the model's too."""
    predicts_from_data: ClassVar[bool] = False
    """Whether :meth:`predict_f` needs the training data ``X``, ``y`` (GPR, SGPR, the collapsed GP-LVM)."""
    multiclass: ClassVar[bool] = False
    """Whether the model takes a multi-class likelihood (J latent functions per label: SVGP, SGPMC)."""

    def __post_init__(self) -> None:
        self.jitter = checked_jitter(self.jitter)
        check_latent_functions(self, self.likelihood)
        if getattr(self, "Z", None) is not None:
            self.Z = as_float(validation.as_array(self.Z))
        hyperparameters.check_choices(self.hyperparameter_sites(), self.priors, self.fixed)

    def hyperparameter_sites(self) -> dict[str, Any]:
        """Site name -> initial value for every kernel and likelihood hyperparameter."""
        return sites.hyperparameter_values(self.kernel, self.likelihood)

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameter sites, the guide's ``"<site>_map"`` of those
        with priors, and the names of the parts listed in :attr:`components` (subclasses add their own sites)."""
        names = set(self.hyperparameter_sites()) | {f"{site}_map" for site in self.priors}
        return names.union(*(getattr(self, part).parameter_names() for part in self.components))

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
        if y is not None and self.likelihood.latent_dim is not None:
            validation.check_labels("y", y, self.likelihood.latent_dim)
        validation.check_keys("init_params", init_params or {}, self.parameter_names())
        names = self.hyperparameter_sites()
        given = {s: np.asarray(v) for s, v in (init_params or {}).items() if s in names}
        kernel, _ = sites.rebuild(self.kernel, self.likelihood, given)  # rejects non-finite, non-positive values
        Z = getattr(self, "Z", None)
        if Z is not None and _is_concrete(X):
            validation.check_same_dim(Z, X)
        if _is_concrete(X):
            kernel.diag(X[:1])  # the kernel takes X's columns (ARD lengths, active_dims), or ValueError

    def predict_f(
        self,
        params: Mapping[str, Array],
        X_new: Array,
        *,
        full_cov: bool = False,
        X: Array | None = None,
        y: Array | None = None,
    ) -> tuple[Array, Array]:
        """The posterior of f at ``X_new`` [S, D] (for a posterior draw in ``params``: of that draw): mean and
        variance [S], or [S, P] with several outputs; with ``full_cov`` the covariance [S, S] or [P, S, S].

        ``X`` [N, D] and ``y`` [N] or [N, P] are the training data, which the models that predict from it (GPR,
        SGPR, the collapsed GP-LVM: ``predicts_from_data``) need and the others ignore.

        Raises:
            ValueError: ``X`` or ``y`` missing where the model predicts from the training data.
        """
        if self.predicts_from_data and (X is None or y is None):
            raise ValueError(
                f"X and y: {type(self).__name__} predicts from the training data; pass X=[N, D] and y=[N] or [N, P]"
            )
        return self._posterior_f(params, jnp.asarray(X_new), full_cov, X, y)

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """:meth:`predict_f` of the model (its arguments checked)."""
        raise NotImplementedError

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """log-likelihood terms per data point, [N] or [N, P], for LOO/WAIC (models whose data term factorises)."""
        raise no_pointwise_terms(self)

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


def q_parameter(params: Mapping[str, Array], site: str, shape: tuple[int, ...]) -> Array:
    """``params[site]``, a parameter of q(u), in its site's shape: [P, M] (``u_loc``, ``u_scale``, a draw ``u``) or
    [P, M, M] (``u_scale_tril``), as :func:`models._shared.leading_output_axis` reads it. A ``*u_scale_tril`` is
    read on and below its diagonal only, as NumPyro's lower-Cholesky constraint would.

    Raises:
        ValueError: another shape, naming ``params[site]`` and the expected one.
    """
    value = jnp.asarray(params[site])
    value = value[None] if leading_output_axis(site, tuple(value.shape), shape) else value
    return jnp.tril(value) if site.endswith("u_scale_tril") else value


def to_numpy_params(params: Mapping[str, Array]) -> dict[str, np.ndarray]:
    """Fitted parameters as numpy arrays (for saving)."""
    return {k: np.asarray(v) for k, v in params.items()}


def part_fingerprint(part: Kernel | Likelihood) -> str:
    """A kernel or likelihood for a checkpoint's fingerprint: its class names (``Sum/RBF/Linear``) and the sha256 of
    its parameter values (dtypes, shapes and bytes; first 16 hex digits), e.g. ``"Sum/RBF/Linear 85d75e4bd1e0cf87"``."""
    names = re.findall(r"\b([A-Z]\w*)\(", repr(part)) or [type(part).__name__]
    return f"{'/'.join(names)} {tree_sha256(dict(part.parameters()))[:16]}"
