"""Deep BSGP: L sparse GP layers, each with sampled inducing inputs, outputs and hyperparameters (BSGP App. A).

Layer ℓ = 0..L-1 maps F^ℓ [B, D_ℓ] (F^0 = X) to F^{ℓ+1} [B, D_{ℓ+1}] (D_L = P outputs)::

    θ^ℓ ~ bsgp_priors,  Z^ℓ ~ p_ξ(Z) [M, D_ℓ],  v^ℓ ~ N(0, I) [D_{ℓ+1}, M]
    F^{ℓ+1} = F^ℓ W^ℓ + G^ℓ,  G^ℓ_{:,j} | v^ℓ ~ N(a^ℓᵀ v^ℓ_j, diag(k^ℓ_nn − a^ℓᵀ a^ℓ))   (whitened conditional)

with a fixed linear mean W^ℓ on inner layers (identity when the widths match; otherwise the top right-singular
vectors of X, or zero padding, as Salimbeni & Deisenroth 2017) and zero mean on the last layer. The target
(BSGP Eq. 15) is estimated without bias by the doubly-stochastic scheme of Eq. 16: one draw of each inner
layer's F^{ℓ+1} per evaluation (``F = m + √s ε``, ε from the model's PRNG key, so the potential is stochastic
and suits SG-MCMC, not NUTS), then the last layer's data term ℓ_n in closed form or by quadrature (the
``likelihood_term`` of :mod:`models.numpyro.bsgp`), on a minibatch of ``batch_size`` points scaled by N/B.

Site names: ``"layer<ℓ>.kernel.lengthscale"`` [D_ℓ], ``"layer<ℓ>.kernel.variance"``, ``"layer<ℓ>.Z"`` [M, D_ℓ],
``"layer<ℓ>.u"`` [D_{ℓ+1}, M], ``"likelihood.variance"`` (a param optimised by the sampler unless given a
prior), plate ``"data"``, factor ``"y"``. Prediction propagates each posterior draw's inner layers with one
random draw (spec §2.5), so :meth:`DeepBSGP.predict_f` takes a PRNG key.

``optimised`` (suffixes among ``"Z"``, ``"kernel.lengthscale"``, ``"kernel.variance"``) makes those sites of every
layer ``param`` sites without priors, point estimates of the SG-MCMC kernel (:meth:`DeepBSGP.point_estimate_sites`):
SGHMC-DGP's model (Havasi et al. 2018; :mod:`ppl_sparsegp.recipes.sghmc_dgp`), only the v^ℓ sampled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp
from numpyro.distributions import constraints

from ppl_sparsegp import validation
from ppl_sparsegp.core import conditionals
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.numpyro.dtype import as_float
from ppl_sparsegp.numpyro.sites import batch, data_plate, predictive

from .._shared import (
    as_output_columns,
    checked_jitter,
    checked_layers,
    checked_optimised,
    deep_bsgp_layout,
    layer_parameter_names,
    scoped_methods,
)
from .._shared import linear_mean_weights as linear_mean_weights
from .bsgp import bsgp_kernel, bsgp_priors, build_z_prior, check_likelihood_term, check_z_prior, data_log_likelihood

Array = Any


@scoped_methods
@dataclass(eq=False)
class DeepBSGP:
    """Deep BSGP with ``len(Z)`` layers; see the module docstring for the model and its sites.

    Args:
        Z: initial inducing inputs per layer, [M, D_ℓ] each (the paper: k-means on X W for every layer).
        widths: output widths D_1..D_L; D_L = P, the number of outputs of y.
        likelihood: e.g. ``Gaussian(variance=1.0)``.
        mean_weights: W^ℓ [D_ℓ, D_{ℓ+1}] for the inner layers (``linear_mean_weights``), L − 1 of them.
        kernels: one per layer (default :func:`models.numpyro.bsgp.bsgp_kernel` of the layer's input width).
        priors: per-layer site suffix -> prior (default :func:`models.numpyro.bsgp.bsgp_priors`).
        likelihood_priors: likelihood site -> prior (default none: the noise is a point estimate).
        z_prior, z_prior_options, likelihood_term, batch_size: as :class:`models.numpyro.bsgp.BSGP`.
        optimised: per-layer site suffixes (``"Z"``, ``"kernel.<name>"``) that are point estimates of every layer
            (module docstring); default none (deep BSGP).
        jitter: relative jitter of the model's Cholesky factorisations (keyword only; see :mod:`models.numpyro._base`).
    """

    Z: Sequence[Array]
    widths: Sequence[int]
    likelihood: Likelihood
    mean_weights: Sequence[Array] = ()
    kernels: Sequence[Kernel] | None = None
    likelihood_priors: Mapping[str, dist.Distribution] = field(default_factory=dict)
    z_prior: str | dist.Distribution = "normal"
    z_prior_options: Mapping[str, Any] = field(default_factory=dict)
    likelihood_term: Literal["log_expected", "expected_log"] = "log_expected"
    batch_size: int | None = 1000
    optimised: Sequence[str] = ()
    jitter: float | None = field(default=None, kw_only=True)
    random_prediction: ClassVar[bool] = True
    """Prediction propagates random draws of the inner layers, so it takes a key (``posterior.diagnostics``)."""

    def __post_init__(self) -> None:
        self.jitter = checked_jitter(self.jitter)
        self.Z, self.widths, self.mean_weights, self.kernels = checked_layers(
            self.Z, self.widths, self.mean_weights, self.kernels, bsgp_kernel,
            zero_mean_allowed=False, as_float=as_float,
        )  # fmt: skip
        check_likelihood_term(self.likelihood_term)
        kernel_sites = set(bsgp_priors(self.kernels[0]))
        self.optimised = checked_optimised(self.optimised, kernel_sites, (), ())
        for z in self.Z:
            check_z_prior(self.z_prior, z.shape[0], z.shape[1])
        unknown = set(self.likelihood_priors) - {f"likelihood.{k}" for k in self.likelihood.parameters()}
        if unknown:
            raise ValueError(f"likelihood_priors: unknown sites {sorted(unknown)}")
        validation.check_count("batch_size", self.batch_size, minimum=1, optional=True)

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: ``"likelihood.<name>"`` and per layer ℓ
        ``"layer<ℓ>.kernel.<name>"``, ``"layer<ℓ>.Z"`` and ``"layer<ℓ>.u"``."""
        return layer_parameter_names(self.likelihood, self.kernels, ("Z", "u"))

    @property
    def num_layers(self) -> int:
        return len(self.Z)

    @property
    def input_dims(self) -> list[int]:
        return [int(z.shape[1]) for z in self.Z]

    @property
    def num_latent(self) -> int:
        return int(self.widths[-1])

    # ---- sites ----------------------------------------------------------------------------------------------
    def _layer_sample(self, i: int) -> tuple[Kernel, Array, Array]:
        """Sample layer i's kernel hyperparameters, Z [M, D_i] and v [D_{i+1}, M]."""
        base, Z0 = self.kernels[i], self.Z[i]
        values = {}
        for site, prior in bsgp_priors(base).items():
            name = site.removeprefix("kernel.")
            if site in self.optimised:
                init = jnp.asarray(base.parameters()[name])
                values[name] = numpyro.param(f"layer{i}.{site}", init, constraint=constraints.positive)
            else:
                values[name] = numpyro.sample(f"layer{i}.{site}", prior)
        kernel = base.with_parameters(values)
        if "Z" in self.optimised:
            Z = numpyro.param(f"layer{i}.Z", jnp.asarray(Z0))
        else:
            Z = numpyro.sample(f"layer{i}.Z", build_z_prior(self.z_prior, self.z_prior_options, *Z0.shape, kernel))
        v = numpyro.sample(f"layer{i}.u", dist.Normal(0.0, 1.0).expand([self.widths[i], Z0.shape[0]]).to_event(2))
        return kernel, Z, v

    def _likelihood_sample(self) -> Likelihood:
        values = {}
        for name, init in self.likelihood.parameters().items():
            site = f"likelihood.{name}"
            if site in self.likelihood_priors:
                values[name] = numpyro.sample(site, self.likelihood_priors[site])
            else:
                values[name] = numpyro.param(site, jnp.asarray(init), constraint=constraints.positive)
        return self.likelihood.with_parameters(values)

    def point_estimate_sites(self) -> tuple[str, ...]:
        """The ``optimised`` sites of every layer, then the likelihood's without a prior (the noise)."""
        layers = (f"layer{i}.{s}" for i in range(self.num_layers) for s in self.optimised)
        return (*layers, *(f"likelihood.{k}" for k in self.likelihood.parameters() if k not in self.likelihood_priors))

    def initial_values(self) -> dict[str, Array]:
        """Of the sampled sites: Z as given, v = 0, kernel hyperparameters at the kernels' values (spec §2.4)."""
        values: dict[str, Array] = {}
        for i, (kernel, Z) in enumerate(zip(self.kernels, self.Z, strict=True)):
            for k, v in kernel.parameters().items():
                values[f"layer{i}.kernel.{k}"] = jnp.asarray(v)
            values[f"layer{i}.Z"] = jnp.asarray(Z)
            values[f"layer{i}.u"] = jnp.zeros((self.widths[i], Z.shape[0]), Z.dtype)
        return {k: v for k, v in values.items() if k.partition(".")[2] not in self.optimised}

    # ---- the model ------------------------------------------------------------------------------------------
    def _inner_noise(self, key: Array, num_points: int, dtype: Any) -> list[Array]:
        """ε^ℓ [D_{ℓ+1}, B] ~ N(0, I) for each inner layer ℓ = 0..L-2, one key split off ``key`` per layer."""
        noise = []
        for width in self.widths[:-1]:
            key, sub = jax.random.split(key)
            noise.append(jax.random.normal(sub, (width, num_points), dtype))
        return noise

    def _propagate(
        self, layers: Sequence[tuple[Kernel, Array, Array]], X: Array, noise: Sequence[Array]
    ) -> tuple[Array, Array]:
        """One doubly-stochastic pass: the last layer's (mean, var) [P, B] given the inner layers' draws with
        standard normal ``noise`` ε^ℓ [D_{ℓ+1}, B] (:func:`ppl_sparsegp.core.conditionals.propagate_layer`)."""
        F = X
        for i, (kernel, Z, v) in enumerate(layers):
            mean, var = conditionals.inducing_conditional(kernel, Z, F, v)
            if i == len(layers) - 1:
                return mean, var
            F = conditionals.propagate_layer(F, jnp.asarray(self.mean_weights[i], F.dtype), mean, var, noise[i])
        raise AssertionError("unreachable: a deep GP has at least one layer")

    def _pass(self, layers: Sequence[tuple[Kernel, Array, Array]], X: Array, key: Array) -> tuple[Array, Array]:
        """:meth:`_propagate` with the inner layers' noise drawn from ``key``."""
        dtype = jnp.result_type(X, *(a for _, Z, v in layers for a in (Z, v)))
        return self._propagate(layers, X, self._inner_noise(key, X.shape[0], dtype))

    def model(self, X: Array, y: Array | None = None) -> None:
        """Sample every layer, then score a minibatch with one doubly-stochastic pass (BSGP Eq. 16); with ``y=None``
        (NumPyro's ``Predictive``), f and y at every row of X from one pass, as the sites ``"f"`` and ``"y"``."""
        self.check_data(X, y)
        likelihood = self._likelihood_sample()
        layers = [self._layer_sample(i) for i in range(self.num_layers)]
        key = numpyro.prng_key()
        if key is None:
            raise ValueError("DeepBSGP.model needs a PRNG key (run it under numpyro.handlers.seed or an MCMC kernel)")
        if y is None:
            predictive(likelihood, *self._pass(layers, X, key))
            return
        with data_plate(X.shape[0], self.batch_size) as idx:
            Xb, Yb = batch(X, y, idx)
            mean, var = self._pass(layers, Xb, key)
            numpyro.factor("y", jnp.sum(data_log_likelihood(likelihood, self.likelihood_term, Yb, mean, var), axis=0))

    def check_data(self, X: Array, y: Array | None = None) -> None:
        """Eager checks: finite X [N, D_0] and y [N] or [N, P] with P = widths[-1]."""
        if not any(isinstance(a, jax.core.Tracer) for a in (X, y) if a is not None):
            validation.check_inputs(X, y)
            validation.check_same_dim(self.Z[0], X)
            if y is not None and (1 if np.ndim(y) == 1 else np.shape(y)[1]) != self.num_latent:
                raise ValueError(f"y: expected {self.num_latent} output column(s) (widths[-1])")

    # ---- prediction from posterior draws --------------------------------------------------------------------
    def _layers_from(self, params: Mapping[str, Array]) -> list[tuple[Kernel, Array, Array]]:
        layers = []
        for i, kernel in enumerate(self.kernels):
            values = {k: params[f"layer{i}.kernel.{k}"] for k in kernel.parameters()}
            layers.append((kernel.with_parameters(values), params[f"layer{i}.Z"], params[f"layer{i}.u"]))
        return layers

    def fitted(self, params: Mapping[str, Array]) -> tuple[None, Likelihood]:
        """(None, the likelihood at a draw's values, else the point estimate ``params[site]``, else its init)."""
        values = {k: params.get(f"likelihood.{k}", v) for k, v in self.likelihood.parameters().items()}
        return None, self.likelihood.with_parameters(values)

    def predict_f(
        self,
        params: Mapping[str, Array],
        X_new: Array,
        *,
        key: Array | None = None,
        X: Array | None = None,
        y: Array | None = None,
    ):
        """The last layer's Gaussian at X_new [S, D_0] given one draw of the inner layers: ([S] or [S, P], same).

        ``X`` and ``y`` (the training data that GPR and SGPR predict from) are accepted for a common signature
        and not used.
        """
        if key is None:
            raise ValueError("key: DeepBSGP.predict_f propagates a random draw through the inner layers; pass a key")
        mean, var = self._pass(self._layers_from(params), jnp.asarray(X_new), key)
        return as_output_columns(mean, var, self.num_latent == 1)

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """Not defined: given a draw, the data term still depends on the random inner-layer propagation."""
        raise NotImplementedError(
            "DeepBSGP: its data term depends on a random draw of the inner layers, so it has no pointwise "
            "log-likelihood per posterior draw; az.loo / az.waic need a shallow model"
        )

    def predict_log_density(
        self,
        params: Mapping[str, Array],
        X_new: Array,
        y_new: Array,
        *,
        key: Array | None = None,
        num_samples: int = 1,
        X: Array | None = None,
        y: Array | None = None,
    ) -> Array:
        """log (1/S) Σ_s p(y_new | draw, inner-layer draw s) over S = ``num_samples`` propagations (keys split from
        ``key``): an estimate of log p(y_new | draw) with the inner layers integrated out, [N*] or [N*, P].

        ``X`` and ``y`` (the training data that GPR and SGPR predict from) are accepted for a common signature
        and not used.
        """
        if key is None:
            raise ValueError(
                "key: DeepBSGP.predict_log_density propagates random draws of the inner layers; pass a key"
            )
        _, likelihood = self.fitted(params)

        def one(sub: Array) -> Array:
            return likelihood.log_predictive_density(jnp.asarray(y_new), *self.predict_f(params, X_new, key=sub))

        logp = jax.vmap(one)(jax.random.split(key, num_samples))
        return logsumexp(logp, axis=0) - math.log(num_samples)


def deep_bsgp(
    X: Array,
    num_outputs: int,
    likelihood: Likelihood,
    *,
    num_layers: int,
    Z: Array,
    hidden_width: int | None = None,
    **options: Any,
) -> DeepBSGP:
    """The paper's architecture (:func:`models._shared.deep_bsgp_layout`): ``num_layers`` layers, inner width D
    (``hidden_width``), Z [M, D] (k-means on X) for the first layer and Z W for the others, linear means from
    :func:`linear_mean_weights` on inner layers."""
    layout = deep_bsgp_layout(X, num_outputs, num_layers=num_layers, Z=Z, hidden_width=hidden_width)
    return DeepBSGP(likelihood=likelihood, **layout, **options)
