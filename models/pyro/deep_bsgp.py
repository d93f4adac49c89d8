"""Deep BSGP (BSGP App. A) as a Pyro program, the twin of :mod:`models.numpyro.deep_bsgp` (its docstring states the
model): L sparse GP layers, each with sampled hyperparameters θ^ℓ, inducing inputs Z^ℓ [M, D_ℓ] and whitened outputs
v^ℓ [D_{ℓ+1}, M]; inner layers propagate one reparameterised draw F^{ℓ+1} = F^ℓ W^ℓ + (m + √s ε)ᵀ per evaluation
(:func:`ppl_sparsegp.core.conditionals.propagate_layer`, BSGP Eq. 16), ε from torch's generator, and the last
layer scores a minibatch of the ``"data"`` plate (scaled by N/B) with the data term of :mod:`models.pyro.bsgp`.

Site names (as the NumPyro twin's): ``"layer<ℓ>.kernel.lengthscale"`` [D_ℓ], ``"layer<ℓ>.kernel.variance"``,
``"layer<ℓ>.Z"`` [M, D_ℓ], ``"layer<ℓ>.u"`` [D_{ℓ+1}, M], ``"likelihood.variance"`` (a param, a point estimate of
the SG-MCMC kernel, unless given a prior), plate ``"data"``, factor ``"y"``. The potential is stochastic, so it
suits :mod:`ppl_sparsegp.pyro.sgmcmc`, not NUTS. Predictions propagate each draw's inner layers with one random
draw from torch's generator (the NumPyro twin takes a JAX key instead). ``optimised`` makes those per-layer sites
``pyro.param`` sites without priors, as in the NumPyro twin (SGHMC-DGP's model).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from ppl_sparsegp import validation
from ppl_sparsegp.core import conditionals
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.pyro.dtype import as_tensor
from ppl_sparsegp.pyro.sites import batch, data_plate, predictive

from .._shared import (
    as_output_columns,
    bsgp_kernel,
    check_likelihood_term,
    checked_jitter,
    checked_layers,
    checked_optimised,
    data_log_likelihood,
    deep_bsgp_layout,
    layer_parameter_names,
    scoped_methods,
)
from .bsgp import bsgp_priors, build_z_prior, check_z_prior

Array = Any
Layer = tuple[Kernel, Array, Array]


@scoped_methods
@dataclass(eq=False)
class DeepBSGP:
    """Deep BSGP with ``len(Z)`` layers; the fields are the NumPyro twin's (priors and ``z_prior`` as Pyro
    distributions): Z [M, D_ℓ] per layer, ``widths`` D_1..D_L, ``mean_weights`` W^ℓ for the L − 1 inner layers,
    ``kernels`` (default :func:`models._shared.bsgp_kernel`), ``likelihood_priors``, ``z_prior``,
    ``z_prior_options``, ``likelihood_term``, ``batch_size`` and the keyword ``jitter``."""

    Z: Sequence[Array]
    widths: Sequence[int]
    likelihood: Likelihood
    mean_weights: Sequence[Array] = ()
    kernels: Sequence[Kernel] | None = None
    likelihood_priors: Mapping[str, dist.TorchDistribution] = field(default_factory=dict)
    z_prior: str | dist.TorchDistribution = "normal"
    z_prior_options: Mapping[str, Any] = field(default_factory=dict)
    likelihood_term: Literal["log_expected", "expected_log"] = "log_expected"
    batch_size: int | None = 1000
    optimised: Sequence[str] = ()
    jitter: float | None = field(default=None, kw_only=True)
    random_prediction: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.jitter = checked_jitter(self.jitter)
        self.Z, self.widths, self.mean_weights, self.kernels = checked_layers(
            self.Z, self.widths, self.mean_weights, self.kernels, bsgp_kernel, zero_mean_allowed=False,
            as_float=as_tensor,
        )  # fmt: skip
        self.mean_weights = [as_tensor(W) for W in self.mean_weights]
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
        """``"likelihood.<name>"`` and per layer ℓ ``"layer<ℓ>.kernel.<name>"``, ``"layer<ℓ>.Z"``, ``"layer<ℓ>.u"``."""
        return layer_parameter_names(self.likelihood, self.kernels, ("Z", "u"))

    @property
    def num_layers(self) -> int:
        return len(self.Z)

    @property
    def num_latent(self) -> int:
        return int(self.widths[-1])

    # ---- sites ----------------------------------------------------------------------------------------------
    def _layer_sample(self, i: int) -> Layer:
        """Sample layer i's kernel hyperparameters, Z [M, D_i] and v [D_{i+1}, M]."""
        base, Z0 = self.kernels[i], self.Z[i]
        values = {}
        for site, prior in bsgp_priors(base).items():
            name = site.removeprefix("kernel.")
            if site in self.optimised:
                init = as_tensor(base.parameters()[name])
                values[name] = pyro.param(f"layer{i}.{site}", init, constraint=constraints.positive)
            else:
                values[name] = pyro.sample(f"layer{i}.{site}", prior)
        kernel = base.with_parameters(values)
        if "Z" in self.optimised:
            Z = pyro.param(f"layer{i}.Z", Z0.clone())
        else:
            Z = pyro.sample(f"layer{i}.Z", build_z_prior(self.z_prior, self.z_prior_options, *Z0.shape, kernel))
        zeros = torch.zeros((self.widths[i], Z0.shape[0]), dtype=Z0.dtype)
        v = pyro.sample(f"layer{i}.u", dist.Normal(zeros, 1.0).to_event(2))
        return kernel, Z, v

    def _likelihood_sample(self) -> Likelihood:
        values = {}
        for name, init in self.likelihood.parameters().items():
            site = f"likelihood.{name}"
            if site in self.likelihood_priors:
                values[name] = pyro.sample(site, self.likelihood_priors[site])
            else:
                values[name] = pyro.param(site, as_tensor(init), constraint=constraints.positive)
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
                values[f"layer{i}.kernel.{k}"] = as_tensor(v)
            values[f"layer{i}.Z"] = Z.clone()
            values[f"layer{i}.u"] = torch.zeros((self.widths[i], Z.shape[0]), dtype=Z.dtype)
        return {k: v for k, v in values.items() if k.partition(".")[2] not in self.optimised}

    # ---- the model ------------------------------------------------------------------------------------------
    def _inner_noise(self, num_points: int, dtype: torch.dtype) -> list[Array]:
        """ε^ℓ [D_{ℓ+1}, B] ~ N(0, I) for each inner layer ℓ = 0..L-2, from torch's generator."""
        return [torch.randn((width, num_points), dtype=dtype) for width in self.widths[:-1]]

    def _propagate(self, layers: Sequence[Layer], X: Array, noise: Sequence[Array]) -> tuple[Array, Array]:
        """One doubly-stochastic pass: the last layer's (mean, var) [P, B] given the inner layers' draws with
        standard normal ``noise`` ε^ℓ [D_{ℓ+1}, B]."""
        F = X
        for i, (kernel, Z, v) in enumerate(layers):
            mean, var = conditionals.inducing_conditional(kernel, Z, F, v)
            if i == len(layers) - 1:
                return mean, var
            F = conditionals.propagate_layer(F, self.mean_weights[i].to(F.dtype), mean, var, noise[i])
        raise AssertionError("unreachable: a deep GP has at least one layer")

    def _pass(self, layers: Sequence[Layer], X: Array) -> tuple[Array, Array]:
        """:meth:`_propagate` with fresh noise."""
        return self._propagate(layers, X, self._inner_noise(X.shape[0], X.dtype))

    def model(self, X: Array, y: Array | None = None) -> None:
        """Sample every layer, then score a minibatch with one doubly-stochastic pass (BSGP Eq. 16); with ``y=None``
        (``pyro.infer.Predictive``), f and y at every row of X from one pass, as the sites ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        likelihood = self._likelihood_sample()
        layers = [self._layer_sample(i) for i in range(self.num_layers)]
        if y is None:
            predictive(likelihood, *self._pass(layers, X))
            return
        with data_plate(X.shape[0], self.batch_size) as idx:
            Xb, Yb = batch(X, y, idx)
            mean, var = self._pass(layers, Xb)
            ell = data_log_likelihood(likelihood, self.likelihood_term, Yb, mean, var)
            pyro.factor("y", torch.sum(ell, dim=0))

    def check_data(self, X: Array, y: Array | None = None) -> None:
        """Eager checks: finite X [N, D_0] and y [N] or [N, P] with P = widths[-1]."""
        validation.check_inputs(X, y)
        validation.check_same_dim(self.Z[0], X)
        if y is not None and (1 if y.ndim == 1 else y.shape[1]) != self.num_latent:
            raise ValueError(f"y: expected {self.num_latent} output column(s) (widths[-1])")

    # ---- prediction from posterior draws --------------------------------------------------------------------
    def _layers_from(self, params: Mapping[str, Array]) -> list[Layer]:
        layers = []
        for i, kernel in enumerate(self.kernels):
            values = {k: as_tensor(params[f"layer{i}.kernel.{k}"]) for k in kernel.parameters()}
            Z, v = as_tensor(params[f"layer{i}.Z"]), as_tensor(params[f"layer{i}.u"])
            layers.append((kernel.with_parameters(values), Z, v))
        return layers

    def fitted(self, params: Mapping[str, Array]) -> tuple[None, Likelihood]:
        """(None, the likelihood at a draw's values, else the point estimate ``params[site]``, else its init)."""
        values = {k: as_tensor(params.get(f"likelihood.{k}", v)) for k, v in self.likelihood.parameters().items()}
        return None, self.likelihood.with_parameters(values)

    def predict_f(
        self, params: Mapping[str, Array], X_new: Array, *, X: Array | None = None, y: Array | None = None
    ) -> tuple[Array, Array]:
        """The last layer's Gaussian at X_new [S, D_0] given one draw of the inner layers (torch's generator):
        ([S] or [S, P], same). ``X`` and ``y`` are accepted for a common signature and not used."""
        with torch.no_grad():
            mean, var = self._pass(self._layers_from(params), as_tensor(X_new))
        return as_output_columns(mean, var, self.num_latent == 1)

    def predict_y(self, params: Mapping[str, Array], X_new: Array, **data: Array) -> tuple[Array, Array]:
        """Predictive mean and variance of y at X_new [S, D_0] for one draw of the inner layers."""
        _, likelihood = self.fitted(params)
        return likelihood.predict_mean_and_var(*self.predict_f(params, X_new, **data))

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """Not defined: given a draw, the data term still depends on the random inner-layer propagation."""
        raise NotImplementedError(
            "DeepBSGP: its data term depends on a random draw of the inner layers, so it has no pointwise "
            "log-likelihood per posterior draw"
        )

    def predict_log_density(
        self,
        params: Mapping[str, Array],
        X_new: Array,
        y_new: Array,
        *,
        num_samples: int = 1,
        X: Array | None = None,
        y: Array | None = None,
    ) -> Array:
        """log (1/S) Σ_s p(y_new | draw, inner-layer draw s) over S = ``num_samples`` propagations: [N*] or
        [N*, P]. ``X`` and ``y`` are accepted for a common signature and not used."""
        _, likelihood = self.fitted(params)
        y_new = as_tensor(y_new)
        with torch.no_grad():
            logp = torch.stack(
                [likelihood.log_predictive_density(y_new, *self.predict_f(params, X_new)) for _ in range(num_samples)]
            )
        return torch.logsumexp(logp, dim=0) - math.log(num_samples)


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
