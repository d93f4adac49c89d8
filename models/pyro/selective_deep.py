"""Probabilistic selection of inducing points in a deep GP (Uhrenholt et al. 2021 §5.2, App. A; spec 000 §4.1) as a
Pyro program, the twin of :mod:`models.numpyro.selective_deep` (its docstring states the per-layer priors and guides).

Sites (as the NumPyro twin's): those of :class:`models.pyro.deep_svgp.DeepSVGP`, the latent ``"layer<ℓ>.inclusion"``
[K_ℓ] and the guide param ``"layer<ℓ>.inclusion_probs"`` [K_ℓ] of every layer::

    s^ℓ ~ p_{α_ℓ}(s^ℓ),   q(s^1..s^L) = Π_ℓ Π_k Bernoulli(s^ℓ_k | λ^ℓ_k),
    ELBO = E_q[L(s^1..s^L)] − Σ_ℓ KL[q_{λ^ℓ} ‖ p_{α_ℓ}]

The recipe (:func:`ppl_sparsegp.recipes.selective_pyro.fit_selective_deep`) fits it with
:class:`ppl_sparsegp.pyro.score_function.ScoreFunctionELBO`, as the NumPyro twin: one baseline of the joint score
Σ_ℓ log q(s^ℓ), every KL in closed form. Each layer's inclusion site also carries Pyro's decaying-average baseline
(:func:`ppl_sparsegp.pyro.sites.score_function_baseline`), one per site, which ``pyro.infer.TraceGraph_ELBO`` reads;
both estimators are unbiased. The deep GP's noise comes from torch's generator, so
``subset_bound`` takes no key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ppl_sparsegp.core.deep import Layer
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.core.masking import masked_q
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor
from ppl_sparsegp.pyro.subset_prior import SubsetPointProcess

from .._shared import check_alpha, scoped_methods
from .deep_svgp import DeepSVGP
from .selective import INCLUSION_PARAM, INCLUSION_SITE, SubsetSelection, gp_parameters

Array = Any


def inclusion_site(layer: int) -> str:
    """The name of layer ``layer``'s inclusion site, ``"layer<l>.inclusion"``."""
    return f"layer{layer}.{INCLUSION_SITE}"


def inclusion_param(layer: int) -> str:
    """The name of layer ``layer``'s inclusion probabilities λ, ``"layer<l>.inclusion_probs"``."""
    return f"layer{layer}.{INCLUSION_PARAM}"


@scoped_methods
@dataclass(eq=False)
class SelectiveDeepSVGP:
    """A :class:`DeepSVGP` whose layer ℓ uses a random subset of its K_ℓ candidates ``ordinary.Z[ℓ]`` (unwhitened
    q); the fields of :class:`models.numpyro.selective_deep.SelectiveDeepSVGP`."""

    ordinary: DeepSVGP
    alpha: float | Sequence[float] = field(default=0.05, kw_only=True)
    alpha_per_output: bool = field(default=False, kw_only=True)
    initial_inclusion: float = field(default=0.5, kw_only=True)
    selections: list[SubsetSelection] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.ordinary, DeepSVGP):
            raise ValueError(f"ordinary: expected the DeepSVGP over every candidate, got {self.ordinary!r}")
        if self.ordinary.whiten:
            raise ValueError(
                "ordinary.whiten: SelectiveDeepSVGP needs a DeepSVGP with whiten=False (a subset of whitened v is "
                "no marginal)"
            )
        L = self.num_layers
        given = list(self.alpha) if isinstance(self.alpha, Sequence | np.ndarray) else [self.alpha] * L
        if len(given) != L:
            raise ValueError(f"alpha: expected one number or {L} (one per layer), got {self.alpha!r}")
        self.alpha = [check_alpha(a) for a in given]
        if not isinstance(self.alpha_per_output, bool):
            raise ValueError(f"alpha_per_output: expected True or False, got {self.alpha_per_output!r}")
        self.selections = [
            SubsetSelection(K, a, self.initial_inclusion, prefix=f"layer{i}.")
            for i, (K, a) in enumerate(zip(self.num_inducing, self.alphas, strict=True))
        ]

    @property
    def jitter(self) -> float | None:
        """The deep GP's relative jitter."""
        return self.ordinary.jitter

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the deep GP's and each layer's selection's."""
        return self.ordinary.parameter_names().union(*(s.parameter_names() for s in self.selections))

    @property
    def num_layers(self) -> int:
        return self.ordinary.num_layers

    @property
    def num_inducing(self) -> list[int]:
        """K_ℓ of every layer."""
        return self.ordinary.num_inducing

    @property
    def alphas(self) -> list[float]:
        """α_ℓ of every layer's prior (× D_{ℓ+1} with ``alpha_per_output``)."""
        widths = self.ordinary.widths
        return [a * (w if self.alpha_per_output else 1) for a, w in zip(self.alpha, widths, strict=True)]

    def check_data(self, X: Array, y: Array | None = None) -> None:
        """The checks of :meth:`DeepSVGP.check_data`."""
        self.ordinary.check_data(X, y)

    def model(self, X: Array, y: Array | None = None) -> None:
        """s^ℓ ~ p_{α_ℓ}(s^ℓ) and u^ℓ | s^ℓ ~ N(0, K̂_ℓ) per layer; the data term of the deep GP on the selected
        inducing inputs, from S propagated samples of the batch, as the factor ``"y"``. With ``y=None``: f and y at
        every row of X from one pass given every s^ℓ and u^ℓ, as ``"f"`` and ``"y"``."""
        X, y = as_tensor(X), as_tensor(y)
        deep = self.ordinary
        masks = [
            sites.inclusion(sel.num_candidates, sel.alpha, Z.dtype, sel.prefix)
            for sel, Z in zip(self.selections, deep.Z, strict=True)
        ]
        self.check_data(X, y)
        kernels, likelihood = deep.hyperparameters()
        layers = []
        for i, (kernel, mask) in enumerate(zip(kernels, masks, strict=True)):
            Z = sites.inducing_inputs(deep.Z[i], name=f"layer{i}.Z")
            layer = Layer.at(kernel, Z, deep.variational_parameters(i), mask)
            u = sites.inducing_outputs(deep.widths[i], Z.shape[0], layer.Lmm, Z.dtype, name=f"layer{i}.u")
            layers.append(layer if y is not None else layer._replace(q_mu=u, q_sqrt=None))
        if y is None:
            deep.predictive_draws(layers, likelihood, X)
            return
        deep.data_factor(layers, likelihood, X, y)

    def guide(self, X: Array, y: Array | None = None) -> None:
        """s^ℓ ~ q_{λ^ℓ}(s^ℓ) of every layer (each with its baseline), then q(u^ℓ_s), the marginal of q(u^ℓ)."""
        masks = [
            sites.inclusion_posterior(sel.num_candidates, self.initial_inclusion, Z.dtype, sel.prefix)
            for sel, Z in zip(self.selections, self.ordinary.Z, strict=True)
        ]
        for i, mask in enumerate(masks):
            q = masked_q(*self.ordinary.variational_parameters(i), mask)
            sites.inducing_posterior(*q, name=f"layer{i}.u")

    def fitted(self, params: Mapping[str, Array]) -> tuple[list[Kernel], Likelihood]:
        """Kernels and likelihood at fitted values (:meth:`DeepSVGP.fitted`)."""
        return self.ordinary.fitted(params)

    def subset_bound(self, params: Mapping[str, Array], X: Array, y: Array, masks: Sequence[Array]) -> Array:
        """L(s): the deep GP's bound at ``params`` with layer ℓ restricted to the candidates in ``masks[ℓ]`` [K_ℓ]
        (:meth:`DeepSVGP.elbo`, from the model's ``num_samples`` propagated draws; scalar)."""
        return self.ordinary.elbo(params, X, y, masks=masks)

    def inclusion_priors(self) -> list[SubsetPointProcess]:
        """p_{α_ℓ} of every layer."""
        return [sel.prior() for sel in self.selections]

    def inclusion_probabilities(self, params: Mapping[str, Array]) -> list[Array]:
        """Fitted λ^ℓ [K_ℓ] of every layer (the initial value where ``params`` has none)."""
        return [sel.probabilities(params) for sel in self.selections]

    def kl_selection(self, params: Mapping[str, Array]) -> list[float]:
        """KL[q_{λ^ℓ} ‖ p_{α_ℓ}] of every layer at fitted λ."""
        return [float(sel.kl(params)) for sel in self.selections]

    def prune(self, params: Mapping[str, Array], masks: Sequence[Array]) -> tuple[DeepSVGP, dict[str, Array]]:
        """An ordinary :class:`DeepSVGP` on the selected candidates and its parameters: Z^ℓ restricted to the
        kept rows, q(u^ℓ_I) = N(m_I, S_II) (Gaussian marginal), every other fitted value carried over."""
        if len(masks) != self.num_layers:
            raise ValueError(f"masks: expected {self.num_layers} masks (one per layer), got {len(masks)}")
        pruned = gp_parameters(params)
        for i, (sel, mask, Z) in enumerate(zip(self.selections, masks, self.ordinary.Z, strict=True)):
            pruned.update(sel.restrict(params, mask, Z, "u_scale_tril", name=f"masks[{i}]"))
        Zs = [torch.as_tensor(pruned[f"layer{i}.Z"]) for i in range(self.num_layers)]
        return replace(self.ordinary, Z=Zs), pruned
