"""Probabilistic selection of inducing points for the Bayesian GP-LVM (Uhrenholt et al. 2021, §5.3, App. C.5) as
Pyro programs, the twins of :mod:`models.numpyro.selective_gplvm` (its docstring states the models and bounds).

Sites (as the NumPyro twins'): those of the GP-LVM (:mod:`models.pyro.gplvm`: latent ``"X"`` [B, Q] in the plate
``"data"``, guide params ``"X_loc"``, ``"X_scale"`` [N, Q], hyperparameters, ``"Z"`` [K, Q]; :class:`SelectiveGPLVM`
also ``"u"`` [D, K], factor ``"y"``, ``"u_loc"`` [D, K], ``"u_scale_tril"`` [D, K, K]; :class:`SelectiveCollapsedGPLVM`
the factor ``"collapsed_bound"``) and of the selection (:mod:`models.pyro.selective`: latent ``"inclusion"`` [K],
guide param ``"inclusion_probs"`` [K] with Pyro's decaying-average baseline)::

    s ~ p_α(s) ∝ exp(−α |s|²),   q_λ(s) = Π_k Bernoulli(s_k | λ_k),   ELBO = E_{q_λ(s)}[L(s)] − KL[q_λ ‖ p_α]

Fit with :class:`ppl_sparsegp.pyro.score_function.ScoreFunctionELBO` (λ by the score function, the rest pathwise, the
KLs in closed form: the NumPyro twin's estimator), as :func:`ppl_sparsegp.recipes.selective_pyro.fit_selective_gplvm`
does; ``pyro.infer.TraceGraph_ELBO`` has the same expectation but estimates the KLs from the draws (noisier).
``elbo`` estimates the ELBO with the KLs of s, u and X in closed form (the value of the NumPyro twin's
``ScoreFunctionELBO``), ``subset_bound`` is the bound of the GP-LVM pruned to a mask; both draw from torch's
generator where the NumPyro twins take a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pyro
import torch
from pyro import poutine
from pyro.infer import TraceMeanField_ELBO

from ppl_sparsegp.core.masking import masked_conditional, masked_q
from ppl_sparsegp.pyro import sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .gplvm import BayesianGPLVM, CollapsedGPLVM
from .selective import SelectiveModel, selected_collapsed_data, selected_inducing_outputs

Array = Any


def selection_elbo(self: Any, params: Mapping[str, Array], Y: Array, num_samples: int = 1) -> Array:
    """The ``elbo`` of both selective GP-LVMs: a full-batch estimate of E_{q_λ}[L(s)] − KL[q_λ ‖ p_α] from
    ``num_samples`` joint draws of (s, X) (and u), every KL in closed form (scalar). It is the value of Pyro's
    ``TraceMeanField_ELBO``, run with validation off because s is not reparameterisable (its gradient would miss the
    score-function term; fit with :class:`~ppl_sparsegp.pyro.score_function.ScoreFunctionELBO`)."""
    if getattr(self.ordinary, "batch_size", None) is not None:
        self = replace(self, ordinary=replace(self.ordinary, batch_size=None))
    values = {k: as_tensor(v) for k, v in params.items()}
    model, guide = poutine.substitute(self.model, data=values), poutine.substitute(self.guide, data=values)
    with pyro.validation_enabled(False), torch.no_grad():
        loss = TraceMeanField_ELBO(num_particles=num_samples).loss(model, guide, as_tensor(Y))
    return torch.as_tensor(-loss)


def pruned_bound(self: Any, params: Mapping[str, Array], Y: Array, mask: Array, num_samples: int = 1) -> Array:
    """The ``subset_bound`` of both selective GP-LVMs: L(s), the bound of the GP-LVM pruned to the candidates in a
    concrete ``mask`` [K], from ``num_samples`` draws of X (scalar)."""
    model, sparse = self.prune(params, mask)
    return model.elbo(sparse, Y, num_samples)


class SelectiveGPLVM(SelectiveModel):
    """Bayesian GP-LVM over a random subset of the K candidate inducing inputs (q(u) unwhitened).

    ``SelectiveGPLVM(BayesianGPLVM(kernel, likelihood, Z=grid, X_init=X0, num_latent=D), alpha=3.0)``.
    """

    ordinary_class = BayesianGPLVM
    elbo = selection_elbo
    subset_bound = pruned_bound

    def model(self, Y: Array | None = None) -> None:
        """s ~ p_α(s), u_d | s ~ N(0, K̂mm); for the rows of the batch, x_n ~ N(0, I) and the data term of the
        GP-LVM on Z*_s as the factor ``"y"``. With ``Y=None``: x_n for every row, then f and y there given s and u
        as the sites ``"f"`` and ``"y"`` [N, D]."""
        Y = as_tensor(Y)
        self.check_data(Y)
        lvm = self.ordinary
        N, latents = lvm.latents.num_points, lvm.latents
        s = sites.inclusion(self.num_candidates, self.alpha, lvm.Z.dtype)
        kernel, likelihood = lvm.hyperparameters()
        Z, Lmm, q_mu, q_sqrt = selected_inducing_outputs(lvm, kernel, s, given_u=Y is None)
        if Y is None:
            with sites.data_plate(N):
                X = sites.latent_inputs(N, latents.latent_dim, latents.dtype)
            sites.predictive(likelihood, *masked_conditional(kernel(Z, X), Lmm, kernel.diag(X), s, q_mu, q_sqrt))
            return
        with sites.data_plate(N, lvm.batch_size) as idx:
            X = sites.latent_inputs(N if idx is None else idx.shape[0], latents.latent_dim, latents.dtype)
            _, Yb = sites.batch(None, Y, idx)
            mean, var = masked_conditional(kernel(Z, X), Lmm, kernel.diag(X), s, q_mu, q_sqrt)
            pyro.factor("y", torch.sum(likelihood.expectation_by_output(Yb, mean, var), dim=0))

    def guide(self, Y: Array | None = None) -> None:
        """s ~ q_λ(s), point masses of the hyperparameters with priors, u ~ q(u_s) (the marginal of q(u)), and
        x_n ~ q(x_n) for the rows of the batch (every row when ``Y`` is None)."""
        lvm = self.ordinary
        D, K, dtype = lvm.num_latent, self.num_candidates, lvm.Z.dtype
        s = sites.inclusion_posterior(K, self.initial_inclusion, dtype)
        lvm.hyperparameter_guide()
        sites.inducing_posterior(*masked_q(*sites.inducing_posterior_parameters(D, K, dtype, lvm.q_diag), s))
        loc, scale = sites.latent_posterior_parameters(lvm.X_init, lvm.X_scale_init)
        with sites.data_plate(lvm.latents.num_points, None if Y is None else lvm.batch_size) as idx:
            sites.latent_posterior(loc, scale, idx)


class SelectiveCollapsedGPLVM(SelectiveModel):
    """Collapsed GP-LVM over a random subset of the K candidate inducing inputs: L(s) is Titsias' bound with the
    selected candidates at the latent draw.

    ``SelectiveCollapsedGPLVM(CollapsedGPLVM(kernel, likelihood, Z=grid, X_init=X0), alpha=3.0)``.
    """

    ordinary_class = CollapsedGPLVM
    elbo = selection_elbo
    subset_bound = pruned_bound

    def model(self, Y: Array | None = None) -> None:
        """x_n ~ N(0, I) for every row, s ~ p_α(s), and Titsias' bound of the candidates in s at X as the factor
        ``"collapsed_bound"`` (sites in the guide's order); with ``Y=None``, the prior f and y of one output at X."""
        Y = as_tensor(Y)
        self.check_data(Y)
        lvm = self.ordinary
        kernel, likelihood = lvm.hyperparameters()
        Z = sites.inducing_inputs(lvm.Z, lvm.learn_Z)
        with sites.data_plate(lvm.latents.num_points):
            X = sites.latent_inputs(lvm.latents.num_points, lvm.latents.latent_dim, lvm.latents.dtype)
        s = sites.inclusion(self.num_candidates, self.alpha, Z.dtype)
        selected_collapsed_data(kernel, likelihood, Z, X, Y, s)

    def guide(self, Y: Array | None = None) -> None:
        """Point masses of the hyperparameters with priors, x_n ~ q(x_n), and s ~ q_λ(s); no q(u) (collapsed)."""
        lvm = self.ordinary
        lvm.hyperparameter_guide()
        loc, scale = sites.latent_posterior_parameters(lvm.X_init, lvm.X_scale_init)
        with sites.data_plate(lvm.latents.num_points) as idx:
            sites.latent_posterior(loc, scale, idx)
        sites.inclusion_posterior(self.num_candidates, self.initial_inclusion, lvm.Z.dtype)
