"""Doubly-stochastic variational deep GP (Salimbeni & Deisenroth 2017; Uhrenholt et al. 2021 App. A; spec 000 §4.1).

Sites: params ``"layer<ℓ>.kernel.<name>"`` (e.g. ``"layer0.kernel.lengthscale"`` [D_ℓ]), ``"likelihood.<name>"``,
``"layer<ℓ>.Z"`` [M_ℓ, D_ℓ]; latent ``"layer<ℓ>.u"`` [D_{ℓ+1}, M_ℓ]; guide params ``"layer<ℓ>.u_loc"``
[D_{ℓ+1}, M_ℓ] and ``"layer<ℓ>.u_scale_tril"`` [D_{ℓ+1}, M_ℓ, M_ℓ]; plate ``"data"``; factor ``"y"`` [B].

Layer ℓ = 0..L-1 maps its input H^ℓ [B, D_ℓ] (H^0 = X) to F^{ℓ+1} [B, D_{ℓ+1}] (D_L = P outputs)::

    u^{ℓ,d} ~ N(0, K_ℓ(Z^ℓ, Z^ℓ))                 one per output dimension d; Z^ℓ [M_ℓ, D_ℓ] shared by them
    F^{ℓ+1}_{:,d} = H^ℓ W^ℓ_{:,d} + g^{ℓ,d}(H^ℓ),    g^{ℓ,d} | u^{ℓ,d} the GP prior conditional
    H^{ℓ+1} = F^{ℓ+1} (+ X with ``add_input``: "the observed input added to the second layer", paper C.4)
    y_n | F^L_n ~ p(y_n | F^L_n)                     any likelihood of ppl_sparsegp.core.likelihoods

W^ℓ is a fixed linear mean on inner layers (:func:`models.numpyro.deep_bsgp.linear_mean_weights`, or None: zero mean);
the last layer has zero mean. Guide: q(u^{ℓ,d}) = N(m^{ℓ,d}, S^{ℓ,d}) over u itself (default; a subset of it is the
marginal of the selected points) or, with ``whiten=True``, over v = L⁻¹u.

Bound (paper Eq. 6)::

    ELBO = Σ_n E_{q(F^L_n)}[log p(y_n | F^L_n)] − Σ_ℓ Σ_d KL[q(u^{ℓ,d}) ‖ p(u^{ℓ,d})],

where q(F^{ℓ+1}_n | H^ℓ_n) is Gaussian per point with mean h W + a_nᵀ m and variance k(h, h) − a_nᵀ(K − S)a_n,
a_n = K⁻¹ k(Z, h) (App. A, with its sign typo corrected; :func:`ppl_sparsegp.core.conditionals.conditional`). The
data term is estimated from ``num_samples`` = S propagated samples: each inner layer's F is drawn pointwise by
reparameterisation, F = μ + σ ε, and the last layer's expectation is exact (Gaussian) or Gauss-Hermite
(``Likelihood.variational_expectation``), averaged over the S samples. The KLs are closed form
(:mod:`ppl_sparsegp.numpyro.distributions`). Minibatches: ``batch_size`` subsamples the ``"data"`` plate (data term
scaled by N/B, KLs counted once; :func:`ppl_sparsegp.numpyro.sites.data_plate`).

Masks: :meth:`DeepSVGP.layers` and :meth:`DeepSVGP.elbo` take one 0/1 mask [M_ℓ] per layer (or None) and evaluate
the bound of the deep GP on the selected inducing inputs at fixed shapes (:class:`Layer` with a mask;
:func:`ppl_sparsegp.core.masking.masked_conditional`; unwhitened only), as
:class:`models.numpyro.selective_deep.SelectiveDeepSVGP` needs; the model and guide here have none.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.distributions import constraints

from ppl_sparsegp import validation
from ppl_sparsegp.core import deep, kl, mixtures, ops
from ppl_sparsegp.core.deep import Layer
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.numpyro import sites
from ppl_sparsegp.numpyro.dtype import as_float

from .._shared import (
    check_deep_settings,
    checked_jitter,
    checked_layers,
    deep_svgp_layers,
    layer_parameter_names,
    rbf_ard,
    scoped_methods,
)
from ._base import _is_concrete, q_parameter

Array = Any


@scoped_methods
@dataclass(eq=False)
class DeepSVGP:
    """Doubly-stochastic deep GP with ``len(Z)`` layers; see the module docstring for the model and its sites.

    Args:
        Z: initial inducing inputs per layer, [M_ℓ, D_ℓ] each (D_0 = D of X, D_ℓ = widths[ℓ-1]).
        widths: output widths D_1..D_L; D_L = P, the number of output columns of y.
        likelihood: e.g. ``Gaussian(variance=1.0)``; its hyperparameters are learned.
        kernels: one per layer (default RBF-ARD, variance 1, lengthscales 1).
        mean_weights: W^ℓ [D_ℓ, D_{ℓ+1}] or None (zero mean) for each of the L − 1 inner layers.
        add_input: add X to the input of every layer after the first (needs inner widths equal to D).
        whiten: q over v = L⁻¹u instead of u (a masked model needs False).
        num_samples: S, propagated samples for the data term.
        batch_size: subsample B points per step through the ``"data"`` plate (None: all N).
        num_data: the full N when the caller passes minibatches itself.
        inner_scale: initial q(u) square root of inner layers, as a multiple of the prior's (the last layer's is
            the prior's), so that inner layers start close to their mean path.
        sum_outputs: the likelihood sees the sum of the last layer's widths[-1] outputs (one column): the released
            code's partial stacks in layer-wise pre-training (``recipes.selective``), whose last layer is an inner one.
        jitter: relative jitter of the model's Cholesky factorisations (keyword only; see :mod:`models.numpyro._base`).
    """

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
            self.Z, self.widths, self.mean_weights, self.kernels, rbf_ard, zero_mean_allowed=True, as_float=as_float
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

    # ---- sites ----------------------------------------------------------------------------------------------
    def hyperparameters(self) -> tuple[list[Kernel], Likelihood]:
        """Every kernel and likelihood hyperparameter as a positive param; the rebuilt kernels and likelihood."""

        def param(site: str, init: Array) -> Array:
            return numpyro.param(site, jnp.asarray(init), constraint=constraints.positive)

        kernels = [
            k.with_parameters({n: param(f"layer{i}.kernel.{n}", v) for n, v in k.parameters().items()})
            for i, k in enumerate(self.kernels)
        ]
        lik = {n: param(f"likelihood.{n}", v) for n, v in self.likelihood.parameters().items()}
        return kernels, self.likelihood.with_parameters(lik)

    def fitted(self, params: Mapping[str, Array]) -> tuple[list[Kernel], Likelihood]:
        """Kernels and likelihood at fitted values (``params[site]``, else the initial value)."""
        kernels = [
            k.with_parameters({n: params.get(f"layer{i}.kernel.{n}", v) for n, v in k.parameters().items()})
            for i, k in enumerate(self.kernels)
        ]
        lik = {n: params.get(f"likelihood.{n}", v) for n, v in self.likelihood.parameters().items()}
        return kernels, self.likelihood.with_parameters(lik)

    def variational_parameters(self, i: int) -> tuple[Array, Array]:
        """Layer i's q(u) params: (u_loc [D_{i+1}, M_i], u_scale_tril [D_{i+1}, M_i, M_i]), initialised at zero
        mean and the prior's square root (times ``inner_scale`` on inner layers)."""
        root = jnp.asarray(self._initial_roots[i])
        P, M = self.widths[i], root.shape[0]
        loc = numpyro.param(f"layer{i}.u_loc", jnp.zeros((P, M), dtype=root.dtype))
        scale = numpyro.param(
            f"layer{i}.u_scale_tril", jnp.broadcast_to(root, (P, M, M)), constraint=constraints.lower_cholesky
        )
        return loc, scale

    @functools.cached_property
    def _initial_roots(self) -> list[np.ndarray]:
        """Initial q(u) square root [M_ℓ, M_ℓ] of every layer (computed once, eagerly, outside any trace)."""
        roots = []
        for i, (kernel, Z) in enumerate(zip(self.kernels, self.Z, strict=True)):
            root = np.eye(Z.shape[0], dtype=Z.dtype) if self.whiten else np.asarray(ops.cholesky(kernel(Z)))
            roots.append(root * (1.0 if i == self.num_layers - 1 else self.inner_scale))
        return roots

    def model(self, X: Array, y: Array | None = None) -> None:
        """Per layer u^ℓ ~ N(0, K_ℓ(Z^ℓ, Z^ℓ)); the data term of the batch, from S propagated samples, as ``"y"``.
        With ``y=None`` (NumPyro's ``Predictive``): f and y at every row of X from one pass through the layers given
        every u^ℓ, as the sites ``"f"`` and ``"y"``."""
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
        """Model side of NumPyro's ``Predictive`` (``y=None``): f and y at every row of X [N, D] from one pass through
        ``layers`` (each at its drawn u: q_mu = u, q_sqrt None), as the sites ``"f"`` and ``"y"``."""
        mean, var = self._propagate(layers, X, numpyro.prng_key(), 1)
        sites.predictive(likelihood, mean[0], var[0])

    def data_factor(self, layers: Sequence[Layer], likelihood: Likelihood, X: Array, y: Array) -> None:
        """Model side of the data term: :meth:`expected_log_likelihood` of the batch of the ``"data"`` plate from
        ``num_samples`` propagated draws through ``layers``, as the factor ``"y"`` (scaled by N/B)."""
        key = numpyro.prng_key()
        if key is None:
            raise ValueError("the deep GP's model needs a PRNG key (run it under SVI or numpyro.handlers.seed)")
        with sites.data_plate(X.shape[0], self.batch_size, self.num_data) as idx:
            Xb, yb = (X, y) if idx is None else (X[idx], y[idx])
            numpyro.factor("y", self.expected_log_likelihood(layers, likelihood, Xb, yb, key, self.num_samples))

    def guide(self, X: Array, y: Array | None = None) -> None:
        """q(u^ℓ) of every layer."""
        for i in range(self.num_layers):
            sites.inducing_posterior(*self.variational_parameters(i), name=f"layer{i}.u")

    # ---- the bound --------------------------------------------------------------------------------------------
    def _propagate(self, layers: Sequence[Layer], X: Array, key: Array, num_samples: int) -> tuple[Array, Array]:
        """S doubly-stochastic passes: the last layer's marginal (mean, var) [S, P, N] given one reparameterised
        draw of every inner layer per pass (:func:`ppl_sparsegp.core.deep.propagate`; Salimbeni & Deisenroth 2017,
        Eq. 10-11); X [N, D], the noise from ``key``."""
        return deep.propagate(
            layers, X, self._noise(key), num_samples,
            whiten=self.whiten, mean_weights=self.mean_weights, add_input=self.add_input,
            sum_outputs=self.sum_outputs,
        )  # fmt: skip

    def _noise(self, key: Array) -> deep.Noise:
        """ε^ℓ of inner layer ℓ: a standard normal draw from the ℓ-th of L − 1 keys split from ``key``."""
        keys = jax.random.split(key, max(self.num_layers - 1, 1))
        return lambda i, shape, dtype: jax.random.normal(keys[i], shape, dtype)

    def expected_log_likelihood(
        self, layers: Sequence[Layer], likelihood: Likelihood, X: Array, y: Array, key: Array, num_samples: int
    ) -> Array:
        """(1/S) Σ_s Σ_p E_{q(F^L_{np} | s)}[log p(y_np | F^L_np)] per point: X [B, D], y [B] or [B, P] -> [B]."""
        return deep.expected_log_likelihood(likelihood, y, *self._propagate(layers, X, key, num_samples))

    def layers(self, params: Mapping[str, Array], masks: Sequence[Array] | None = None) -> list[Layer]:
        """Every layer at fitted ``params``, restricted to ``masks`` (one 0/1 array [M_ℓ] per layer; None: all)."""
        kernels, _ = self.fitted(params)
        out = []
        for i, kernel in enumerate(kernels):
            Z = jnp.asarray(params.get(f"layer{i}.Z", self.Z[i]))
            P, M = self.widths[i], self.num_inducing[i]
            q = (
                q_parameter(params, f"layer{i}.u_loc", (P, M)),
                q_parameter(params, f"layer{i}.u_scale_tril", (P, M, M)),
            )
            mask = None if masks is None else jnp.asarray(masks[i], Z.dtype)
            out.append(Layer.at(kernel, Z, q, mask))
        return out

    def elbo(
        self,
        params: Mapping[str, Array],
        X: Array,
        y: Array,
        key: Array,
        *,
        masks: Sequence[Array] | None = None,
        num_samples: int | None = None,
    ) -> Array:
        """The full-batch bound (paper Eq. 6) at ``params``, its data term from ``num_samples`` propagated samples
        drawn with ``key`` (default ``self.num_samples``); ``masks`` restrict every layer to a subset (scalar)."""
        layers = self.layers(params, masks)
        _, likelihood = self.fitted(params)
        S = num_samples or self.num_samples
        data = jnp.sum(self.expected_log_likelihood(layers, likelihood, jnp.asarray(X), jnp.asarray(y), key, S))
        divergence = sum(kl.kl_qu_pu(la.q_mu, la.q_sqrt, None if self.whiten else la.Lmm) for la in layers)
        return data - divergence

    def check_data(self, X: Array, y: Array | None = None, *, init_params: Mapping[str, Array] | None = None) -> None:
        """Eager checks (skipped for traced values): finite X [N, D_0], y [N] or [N, P] with P = ``num_latent``."""
        if _is_concrete(X, y):
            validation.check_inputs(X, y)
            validation.check_same_dim(self.Z[0], X, z_name="Z[0]")
            if y is not None and (1 if np.ndim(y) == 1 else np.shape(y)[1]) != self.num_latent:
                raise ValueError(f"y: expected {self.num_latent} output column(s) (num_latent)")

    # ---- prediction ------------------------------------------------------------------------------------------
    def predict_f(
        self, params: Mapping[str, Array], X_new: Array, *, key: Array, num_samples: int | None = None
    ) -> tuple[Array, Array]:
        """The S Gaussians of the predictive mixture of F^L at X_new [N*, D]: means and variances [S, N*] (or
        [S, N*, P]), one per propagated draw of the inner layers."""
        S = num_samples or self.num_samples
        mean, var = self._propagate(self.layers(params), jnp.asarray(X_new), key, S)
        if self.num_latent == 1:
            return mean[:, 0], var[:, 0]
        return jnp.swapaxes(mean, 1, 2), jnp.swapaxes(var, 1, 2)

    def predict_y(
        self, params: Mapping[str, Array], X_new: Array, *, key: Array, num_samples: int | None = None
    ) -> tuple[Array, Array]:
        """Mean and variance of the predictive mixture of y at X_new [N*, D]: [N*] (or [N*, P]) each."""
        _, likelihood = self.fitted(params)
        mean, var = likelihood.predict_mean_and_var(*self.predict_f(params, X_new, key=key, num_samples=num_samples))
        return mixtures.mixture_moments(mean, var)

    def predict_log_density(
        self, params: Mapping[str, Array], X_new: Array, y_new: Array, *, key: Array, num_samples: int | None = None
    ) -> Array:
        """log (1/S) Σ_s p(y_new | draw s) per test point: X_new [N*, D], y_new [N*] (or [N*, P]) -> same as y."""
        _, likelihood = self.fitted(params)
        mean, var = self.predict_f(params, X_new, key=key, num_samples=num_samples)
        return mixtures.mixture_log_density(likelihood.log_predictive_density(jnp.asarray(y_new)[None], mean, var))


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
    """A :class:`DeepSVGP` of width D = X.shape[1] on its inner layers, RBF-ARD kernels (lengthscales 1; variance
    1 on the last layer and ``inner_kernel_variance`` on inner ones, as the released code's layer-wise start):
    the layers of :func:`models._shared.deep_svgp_layers` (its docstring gives the arguments), and ``options``,
    further :class:`DeepSVGP` fields (``num_samples``, ``batch_size``, ``whiten``, ...)."""
    layers = deep_svgp_layers(
        X, num_outputs, Z=Z, num_layers=num_layers, add_input=add_input, inner_mean=inner_mean,
        inner_kernel_variance=inner_kernel_variance,
    )  # fmt: skip
    return DeepSVGP(likelihood=likelihood, **layers, **options)
