"""What every Pyro GP model here shares, the twin of :mod:`models.numpyro._base`: hyperparameter sites, eager input
checks, and prediction of f and y.

Hyperparameter sites carry the NumPyro twins' names (``"kernel.<name>"``, ``"likelihood.<name>"``, from
:mod:`ppl_sparsegp.core.hyperparameters`): a positive ``pyro.param`` by default; naming a site in ``priors`` (a
Pyro distribution) makes it a ``pyro.sample`` site with the guide's point mass at the param ``"<site>_map"``; naming
it in ``fixed`` keeps its initial value. The jitter scope and the eager checks of every public method are
:func:`models._shared.scoped_methods`, as on the NumPyro side.

Arrays: the model, the guide and the predictions take numpy arrays or torch tensors and compute on tensors of
torch's default dtype (:mod:`ppl_sparsegp.pyro.dtype`); fitted values are read from a ``params`` dict such as
:func:`ppl_sparsegp.pyro.sites.param_store_values` returns. Predictions are tensors without gradients.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import pyro.distributions as dist
import torch

from ppl_sparsegp import validation
from ppl_sparsegp.core import hyperparameters
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import check_latent_functions, checked_jitter, leading_output_axis, no_pointwise_terms, scoped_methods

Array = Any


@scoped_methods
@dataclass(eq=False)
class GPModel:
    """Base class: a kernel, a likelihood, how their hyperparameters are treated, and the relative jitter.

    Subclasses define ``model(X, y)``, ``guide(X, y)`` and ``_posterior_f`` (what :meth:`predict_f` returns), and
    add the names of their own sites to :meth:`parameter_names`. A ``Z`` field (inducing inputs [M, D]) and the
    kernel's and likelihood's hyperparameter values become tensors of torch's default dtype (so a kernel from a
    NumPyro fit, holding jax arrays, can be given).

    Args:
        kernel, likelihood: from :mod:`ppl_sparsegp.core`.
        priors: site name -> Pyro prior, for the hyperparameters sampled or MAP-estimated.
        fixed: site names held at their initial values.
        jitter: relative diagonal jitter of every Cholesky factorisation in the model's methods (keyword only; None:
            :data:`ppl_sparsegp.core.ops.JITTER` of the dtype).
    """

    kernel: Kernel
    likelihood: Likelihood
    priors: Mapping[str, dist.TorchDistribution] = field(default_factory=dict)
    fixed: Collection[str] = ()
    jitter: float | None = field(default=None, kw_only=True)
    components: ClassVar[tuple[str, ...]] = ()
    """Fields holding the parts a model is composed of (the SVGP at given inputs and the latent inputs of a
    GP-LVM), whose parameter names are the model's too."""
    predicts_from_data: ClassVar[bool] = False
    """Whether :meth:`predict_f` needs the training data ``X``, ``y`` (GPR, SGPR, the collapsed GP-LVM)."""
    multiclass: ClassVar[bool] = False
    """Whether the model takes a multi-class likelihood (J latent functions per label: SVGP, SGPMC)."""

    def __post_init__(self) -> None:
        self.jitter = checked_jitter(self.jitter)
        check_latent_functions(self, self.likelihood)
        if getattr(self, "Z", None) is not None:
            self.Z = as_tensor(validation.as_array(self.Z))
        # hyperparameter values as tensors, whatever arrays they were built with (a NumPyro fit's are jax arrays)
        values = sites.hyperparameter_values(self.kernel, self.likelihood)
        self.kernel, self.likelihood = hyperparameters.rebuild(self.kernel, self.likelihood, values)
        hyperparameters.check_choices(self.hyperparameter_sites(), self.priors, self.fixed)

    def hyperparameter_sites(self) -> dict[str, Array]:
        """Site name -> initial value for every kernel and likelihood hyperparameter."""
        return sites.hyperparameter_values(self.kernel, self.likelihood)

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameter sites, the guide's ``"<site>_map"`` of those
        with priors, and the names of the parts listed in :attr:`components` (subclasses add their own sites)."""
        names = set(self.hyperparameter_sites()) | {f"{site}_map" for site in self.priors}
        return names.union(*(getattr(self, part).parameter_names() for part in self.components))

    def hyperparameters(self) -> tuple[Kernel, Likelihood]:
        """Model side: register every hyperparameter site (:func:`ppl_sparsegp.pyro.sites.hyperparameters`) and
        return the kernel and likelihood at their values."""
        return sites.hyperparameters(self.kernel, self.likelihood, self.priors, self.fixed)

    def hyperparameter_guide(self) -> None:
        """Guide side: a point mass at ``"<site>_map"`` for each hyperparameter that has a prior."""
        sites.hyperparameter_guide(self.kernel, self.likelihood, self.priors)

    def fitted(self, params: Mapping[str, Array]) -> tuple[Kernel, Likelihood]:
        """Kernel and likelihood at fitted values: ``params[site]``, else ``params[site + '_map']``, else init."""
        values = {}
        for site, init in self.hyperparameter_sites().items():
            values[site] = as_tensor(params.get(site, params.get(f"{site}_map", init)))
        return hyperparameters.rebuild(self.kernel, self.likelihood, values)

    def check_data(self, X: Array, y: Array | None = None) -> None:
        """Eager checks of the data X [N, D] and y [N] or [N, P] (labels [N] for a multi-class likelihood) and of Z
        against X, before any computation.

        Raises:
            ValueError: naming the argument and what was expected.
        """
        validation.check_inputs(X, y)
        if y is not None and self.likelihood.latent_dim is not None:
            validation.check_labels("y", y, self.likelihood.latent_dim)
        Z = getattr(self, "Z", None)
        if Z is not None:
            validation.check_same_dim(Z, X)
        self.kernel.diag(X[:1])  # the kernel takes X's columns (ARD lengths, active_dims), or ValueError

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

        ``X`` [N, D] and ``y`` [N] or [N, P] are the training data, which GPR and SGPR need and the others ignore.

        Raises:
            ValueError: ``X`` or ``y`` missing where the model predicts from the training data.
        """
        if self.predicts_from_data and (X is None or y is None):
            raise ValueError(
                f"X and y: {type(self).__name__} predicts from the training data; pass X=[N, D] and y=[N] or [N, P]"
            )
        with torch.no_grad():
            return self._posterior_f(params, as_tensor(X_new), full_cov, as_tensor(X), as_tensor(y))

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """:meth:`predict_f` of the model (its arguments checked and converted)."""
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
        with torch.no_grad():
            return likelihood.log_predictive_density(as_tensor(y_new), mean, var)


def q_parameter(params: Mapping[str, Array], site: str, shape: tuple[int, ...]) -> Array:
    """``params[site]``, a parameter of q(u) or a draw of u, as a tensor in its site's shape [P, M] or [P, M, M]
    (:func:`models._shared.leading_output_axis`); a ``*u_scale_tril`` read on and below its diagonal only.

    Raises:
        ValueError: another shape, naming ``params[site]`` and the expected one.
    """
    value = as_tensor(params[site])
    value = value[None] if leading_output_axis(site, tuple(value.shape), shape) else value
    return torch.tril(value) if site.endswith("u_scale_tril") else value


def twin_of(numpyro_model: Any, **changes: Any) -> GPModel:
    """The Pyro twin of a model of :mod:`ppl_sparsegp.models.numpyro`: the class of the same name in the
    ``models.pyro`` module of the same name, built with the same field values (kernel, likelihood, Z, whiten, ...)
    except ``changes``; a field holding a NumPyro model (a selective model's ``ordinary``) holds its twin.

    Priors are distributions of one engine, so a NumPyro model with ``priors`` needs the twin's own in ``changes``
    (e.g. ``priors=models.pyro.sgpmc.default_priors(kernel, likelihood)``).

    Raises:
        ValueError: the model has no Pyro twin, or has priors and ``changes`` gives none.
    """
    kind = type(numpyro_model)
    name = kind.__module__.rsplit(".", 1)[-1]
    try:
        module = importlib.import_module(f"{__package__}.{name}")
    except ModuleNotFoundError:
        module = None
    twin = getattr(module, kind.__name__, None)
    if twin is None:
        raise ValueError(f"model: {kind.__name__} has no Pyro twin in ppl_sparsegp.models.pyro yet")
    values = {f.name: getattr(numpyro_model, f.name) for f in fields(numpyro_model) if f.init}
    numpyro_package = f"{__package__.rsplit('.', 1)[0]}.numpyro."
    values = {k: twin_of(v) if type(v).__module__.startswith(numpyro_package) else v for k, v in values.items()}
    if values.get("priors") and "priors" not in changes:
        raise ValueError(
            f"priors: {kind.__name__}'s priors are NumPyro distributions; give the twin Pyro ones (priors=...)"
        )
    return twin(**{**values, **changes})
