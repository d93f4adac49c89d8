"""Doubly-stochastic variational deep GP (Salimbeni & Deisenroth 2017; Uhrenholt et al. 2021 App. A) as a Pyro
program, the twin of :mod:`models.numpyro.deep_svgp` (its docstring states the layers, the guide and the bound).

Sites (as the NumPyro twin's): params ``"layer<ℓ>.kernel.<name>"``, ``"likelihood.<name>"``, ``"layer<ℓ>.Z"``
[M_ℓ, D_ℓ]; latent ``"layer<ℓ>.u"`` [D_{ℓ+1}, M_ℓ]; guide params ``"layer<ℓ>.u_loc"`` [D_{ℓ+1}, M_ℓ] and
``"layer<ℓ>.u_scale_tril"`` [D_{ℓ+1}, M_ℓ, M_ℓ]; plate ``"data"``; factor ``"y"`` [B].

The propagation of S samples through the layers, the data term and the predictive mixture are
:mod:`ppl_sparsegp.core.deep`, the functions the NumPyro twin calls; only the noise differs: each inner layer's
ε^ℓ comes from torch's generator (``pyro.set_rng_seed``) where the NumPyro twin splits a JAX key, so the public
methods here take no ``key``. ``TraceMeanField_ELBO`` takes the KLs of q(u^ℓ) in closed form. Masks (a subset of
every layer's inducing inputs) go to :meth:`DeepSVGP.layers` and :meth:`DeepSVGP.elbo`, as on the NumPyro side.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyro
import torch
from torch.distributions import constraints

from ppl_sparsegp import validation
from ppl_sparsegp.core import deep, kl, mixtures, ops
from ppl_sparsegp.core.deep import Layer
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import (
    check_deep_settings,
    checked_jitter,
    checked_layers,
    deep_svgp_layers,
    layer_parameter_names,
    rbf_ard,
    scoped_methods,
)
from ._base import q_parameter

Array = Any


@scoped_methods
@dataclass(eq=False)
class DeepSVGP:
    """Doubly-stochastic deep GP with ``len(Z)`` layers; the fields of :class:`models.numpyro.deep_svgp.DeepSVGP`
    (its docstring describes each). ``Z`` become tensors of torch's default float dtype."""

    Z: Sequence[Array]
    widths: Sequence[int]
    likelihood: Likelihood
    kernels: Sequence[Kernel] | None = None
    mean_weights: Sequence[Array | None] = ()
    add_input: bool = False
    whiten: bool = False
    num_samples: int = 1
    batch_size: int | None = None
    num_data: int | None = None
    inner_scale: float = 1e-3
    sum_outputs: bool = False
    jitter: float | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        self.jitter = checked_jitter(self.jitter)
        self.Z, self.widths, self.mean_weights, self.kernels = checked_layers(
            self.Z, self.widths, self.mean_weights, self.kernels, rbf_ard, zero_mean_allowed=True, as_float=as_tensor
        )
        check_deep_settings(self)

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: per layer ℓ ``"layer<ℓ>.kernel.<name>"``, ``"layer<ℓ>.Z"``,
        ``"layer<ℓ>.u"`` and q(u)'s, and ``"likelihood.<name>"``."""
        return layer_parameter_names(self.likelihood, self.kernels, ("Z", "u", "u_loc", "u_scale_tril"))

    @property
    def num_layers(self) -> int:
        return len(self.Z)

    @property
    def input_dims(self) -> list[int]:
        """D_ℓ, the input width of every layer."""
        return [int(z.shape[1]) for z in self.Z]

    @property
    def num_inducing(self) -> list[int]:
        """M_ℓ of every layer."""
        return [int(z.shape[0]) for z in self.Z]

    @property
    def num_latent(self) -> int:
        """P, the output columns the likelihood sees: widths[-1], or 1 with ``sum_outputs``."""
        return 1 if self.sum_outputs else self.widths[-1]

    def hyperparameters(self) -> tuple[list[Kernel], Likelihood]:
        """Every kernel and likelihood hyperparameter as a positive param; the rebuilt kernels and likelihood."""

        def param(site: str, init: Array) -> Array:
            return pyro.param(site, as_tensor(init), constraint=constraints.positive)

        kernels = [
            k.with_parameters({n: param(f"layer{i}.kernel.{n}", v) for n, v in k.parameters().items()})
            for i, k in enumerate(self.kernels)
        ]
        lik = {n: param(f"likelihood.{n}", v) for n, v in self.likelihood.parameters().items()}
        return kernels, self.likelihood.with_parameters(lik)

    def fitted(self, params: Mapping[str, Array]) -> tuple[list[Kernel], Likelihood]:
        """Kernels and likelihood at fitted values (``params[site]``, else the initial value)."""
        kernels = [
            k.with_parameters({n: as_tensor(params.get(f"layer{i}.kernel.{n}", v)) for n, v in k.parameters().items()})
            for i, k in enumerate(self.kernels)
        ]
        lik = {n: as_tensor(params.get(f"likelihood.{n}", v)) for n, v in self.likelihood.parameters().items()}
        return kernels, self.likelihood.with_parameters(lik)

    def variational_parameters(self, i: int) -> tuple[Array, Array]:
        """Layer i's q(u) params: (u_loc [D_{i+1}, M_i], u_scale_tril [D_{i+1}, M_i, M_i]), initialised at zero
        mean and the prior's square root (times ``inner_scale`` on inner layers)."""
        root = self._initial_roots[i]
        P, M = self.widths[i], root.shape[0]
        loc = pyro.param(f"layer{i}.u_loc", torch.zeros((P, M), dtype=root.dtype))
        scale = pyro.param(
            f"layer{i}.u_scale_tril", root.expand(P, M, M).clone(), constraint=constraints.lower_cholesky
        )
        return loc, scale

    @functools.cached_property
    def _initial_roots(self) -> list[Array]:
        """Initial q(u) square root [M_ℓ, M_ℓ] of every layer (computed once, without gradients)."""
        roots = []
        with torch.no_grad():
            for i, (kernel, Z) in enumerate(zip(self.kernels, self.Z, strict=True)):
                root = torch.eye(Z.shape[0], dtype=Z.dtype) if self.whiten else ops.cholesky(kernel(Z))
                roots.append(root * (1.0 if i == self.num_layers - 1 else self.inner_scale))
        return roots

    def model(self, X: Array, y: Array | None = None) -> None:
        """Per layer u^ℓ ~ N(0, K_ℓ(Z^ℓ, Z^ℓ)); the data term of the batch, from S propagated samples, as ``"y"``.
        With ``y=None`` (``pyro.infer.Predictive``): f and y at every row of X from one pass through the layers
        given every u^ℓ, as the sites ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        kernels, likelihood = self.hyperparameters()
        layers = []
        for i, kernel in enumerate(kernels):
            Z = sites.inducing_inputs(self.Z[i], name=f"layer{i}.Z")
            layer = Layer.at(kernel, Z, self.variational_parameters(i))
            Lmm = None if self.whiten else layer.Lmm
            u = sites.inducing_outputs(self.widths[i], Z.shape[0], Lmm, Z.dtype, name=f"layer{i}.u")
            layers.append(layer if y is not None else layer._replace(q_mu=u, q_sqrt=None))
        if y is None:
            self.predictive_draws(layers, likelihood, X)
            return
        self.data_factor(layers, likelihood, X, y)

    def predictive_draws(self, layers: Sequence[Layer], likelihood: Likelihood, X: Array) -> None:
        """Model side of ``Predictive`` (``y=None``): f and y at every row of X [N, D] from one pass through
        ``layers`` (each at its drawn u: q_mu = u, q_sqrt None), as the sites ``"f"`` and ``"y"``."""
        mean, var = self._propagate(layers, X, 1)
        sites.predictive(likelihood, mean[0], var[0])

    def data_factor(self, layers: Sequence[Layer], likelihood: Likelihood, X: Array, y: Array) -> None:
        """Model side of the data term: :meth:`expected_log_likelihood` of the batch of the ``"data"`` plate from
        ``num_samples`` propagated draws through ``layers``, as the factor ``"y"`` (scaled by N/B)."""
        with sites.data_plate(X.shape[0], self.batch_size, self.num_data) as idx:
            Xb, yb = (X, y) if idx is None else (X[idx], y[idx])
            pyro.factor("y", self.expected_log_likelihood(layers, likelihood, Xb, yb, self.num_samples))

    def guide(self, X: Array, y: Array | None = None) -> None:
        """q(u^ℓ) of every layer."""
        for i in range(self.num_layers):
            sites.inducing_posterior(*self.variational_parameters(i), name=f"layer{i}.u")

    def _propagate(self, layers: Sequence[Layer], X: Array, num_samples: int) -> tuple[Array, Array]:
        """S doubly-stochastic passes (:func:`ppl_sparsegp.core.deep.propagate`): the last layer's marginal (mean,
        var) [S, P, N]; X [N, D]."""
        return deep.propagate(
            layers, X, self._noise(), num_samples,
            whiten=self.whiten, mean_weights=self.mean_weights, add_input=self.add_input,
            sum_outputs=self.sum_outputs,
        )  # fmt: skip

    def _noise(self) -> deep.Noise:
        """ε^ℓ of inner layer ℓ: a standard normal draw from torch's generator."""
        return lambda i, shape, dtype: torch.randn(shape, dtype=dtype)

    def expected_log_likelihood(
        self, layers: Sequence[Layer], likelihood: Likelihood, X: Array, y: Array, num_samples: int
    ) -> Array:
        """(1/S) Σ_s Σ_p E_{q(F^L_{np} | s)}[log p(y_np | F^L_np)] per point: X [B, D], y [B] or [B, P] -> [B]."""
        return deep.expected_log_likelihood(likelihood, y, *self._propagate(layers, X, num_samples))

    def layers(self, params: Mapping[str, Array], masks: Sequence[Array] | None = None) -> list[Layer]:
        """Every layer at fitted ``params``, restricted to ``masks`` (one 0/1 array [M_ℓ] per layer; None: all)."""
        kernels, _ = self.fitted(params)
        out = []
        for i, kernel in enumerate(kernels):
            Z = as_tensor(params.get(f"layer{i}.Z", self.Z[i]))
            P, M = self.widths[i], self.num_inducing[i]
            q = (
                q_parameter(params, f"layer{i}.u_loc", (P, M)),
                q_parameter(params, f"layer{i}.u_scale_tril", (P, M, M)),
            )
            mask = None if masks is None else as_tensor(masks[i]).to(Z.dtype)
            out.append(Layer.at(kernel, Z, q, mask))
        return out

    def elbo(
        self,
        params: Mapping[str, Array],
        X: Array,
        y: Array,
        *,
        masks: Sequence[Array] | None = None,
        num_samples: int | None = None,
    ) -> Array:
        """The full-batch bound (paper Eq. 6) at ``params``, its data term from ``num_samples`` propagated samples
        (default ``self.num_samples``; torch's generator); ``masks`` restrict every layer to a subset (scalar)."""
        layers = self.layers(params, masks)
        _, likelihood = self.fitted(params)
        S = num_samples or self.num_samples
        data = torch.sum(self.expected_log_likelihood(layers, likelihood, as_tensor(X), as_tensor(y), S))
        divergence = sum(kl.kl_qu_pu(la.q_mu, la.q_sqrt, None if self.whiten else la.Lmm) for la in layers)
        return data - divergence

    def check_data(self, X: Array, y: Array | None = None) -> None:
        """Eager checks: finite X [N, D_0], y [N] or [N, P] with P = ``num_latent``."""
        validation.check_inputs(X, y)
        validation.check_same_dim(self.Z[0], X, z_name="Z[0]")
        if y is not None and (1 if y.ndim == 1 else y.shape[1]) != self.num_latent:
            raise ValueError(f"y: expected {self.num_latent} output column(s) (num_latent)")

    def predict_f(
        self, params: Mapping[str, Array], X_new: Array, *, num_samples: int | None = None
    ) -> tuple[Array, Array]:
        """The S Gaussians of the predictive mixture of F^L at X_new [N*, D]: means and variances [S, N*] (or
        [S, N*, P]), one per propagated draw of the inner layers (torch's generator)."""
        S = num_samples or self.num_samples
        with torch.no_grad():
            mean, var = self._propagate(self.layers(params), as_tensor(X_new), S)
        if self.num_latent == 1:
            return mean[:, 0], var[:, 0]
        return mean.transpose(1, 2), var.transpose(1, 2)

    def predict_y(
        self, params: Mapping[str, Array], X_new: Array, *, num_samples: int | None = None
    ) -> tuple[Array, Array]:
        """Mean and variance of the predictive mixture of y at X_new [N*, D]: [N*] (or [N*, P]) each."""
        _, likelihood = self.fitted(params)
        with torch.no_grad():
            return mixtures.mixture_moments(
                *likelihood.predict_mean_and_var(*self.predict_f(params, X_new, num_samples=num_samples))
            )

    def predict_log_density(
        self, params: Mapping[str, Array], X_new: Array, y_new: Array, *, num_samples: int | None = None
    ) -> Array:
        """log (1/S) Σ_s p(y_new | draw s) per test point: X_new [N*, D], y_new [N*] (or [N*, P]) -> same as y."""
        _, likelihood = self.fitted(params)
        mean, var = self.predict_f(params, X_new, num_samples=num_samples)
        with torch.no_grad():
            return mixtures.mixture_log_density(likelihood.log_predictive_density(as_tensor(y_new)[None], mean, var))


def deep_svgp(
    X: Array,
    num_outputs: int,
    likelihood: Likelihood,
    *,
    Z: Array | Sequence[Array],
    num_layers: int = 2,
    add_input: bool = False,
    inner_mean: Literal["linear", "zero"] = "linear",
    inner_kernel_variance: float = 0.1,
    **options: Any,
) -> DeepSVGP:
    """The Pyro :class:`DeepSVGP` that :func:`models.numpyro.deep_svgp.deep_svgp` builds with the same arguments:
    the layers of :func:`models._shared.deep_svgp_layers` and ``options``, further :class:`DeepSVGP` fields."""
    layers = deep_svgp_layers(
        X, num_outputs, Z=Z, num_layers=num_layers, add_input=add_input, inner_mean=inner_mean,
        inner_kernel_variance=inner_kernel_variance,
    )  # fmt: skip
    return DeepSVGP(likelihood=likelihood, **layers, **options)
