"""IDSGP: input-dependent sparse GP (Jafrasteh, Villacampa-Calvo & Hernández-Lobato 2022) as a Pyro program, the
twin of :mod:`models.numpyro.idsgp` (its docstring states the model, the guide and the objective, paper eqs 4-7).

A network (:func:`ppl_sparsegp.pyro.nn.inducing_network`, a ``torch.nn`` module) maps each input x to its own
inducing inputs Z(x) [M, D] and q(u | x) = N(m(x), L(x) L(x)ᵀ).

Site names: as the NumPyro twin's, hyperparameter sites; plate ``"data"``; latent ``"u"`` [B, M]; factor ``"y"``
[B]; with output dropout, latent ``"dropout"`` [B, O]; except the network's weights, which Pyro registers one param
per tensor, ``"network.<parameter>"`` (e.g. ``"network.0.weight"``; :func:`ppl_sparsegp.pyro.nn.module`), where
NumPyro has the one site ``"network$params"`` (:func:`ppl_sparsegp.pyro.nn.load_numpyro_weights` copies those weights
into :attr:`IDSGP.network`).

Objective: (N/B) Σ_batch E_{q(f_n)}[log p(y_n | f_n)] − (1/B) Σ_batch KL[q(u | x_n) ‖ p(u | x_n)]: ``"u"`` sits in
the data plate (scale N/B) under a further scale 1/N, so the KL is averaged over the batch, not scaled by N/B.

Output dropout (``dropout`` > 0): as the NumPyro twin's, the keep mask is the site ``"dropout"`` ~ Bernoulli(1 - p)
[B, O] in the guide and the model (replayed from the guide; KL exactly 0), drawn in training steps only
(``train=True``, given y), by torch's
generator, which :func:`ppl_sparsegp.pyro.svi.fit_svi` seeds and checkpoints (so a resumed run draws the same masks).
The mask's distribution (:class:`KeepMask`) declares a reparameterised draw: it has no parameters, so the gradient
given the draw is the objective's, and ``TraceMeanField_ELBO`` (which refuses guides with score-function terms) takes
it.
The twins draw different masks from a seed; given the same mask (``poutine.condition``) they score the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine

from ppl_sparsegp import validation
from ppl_sparsegp.core import conditionals, kl, ops
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.network_outputs import dropped_out
from ppl_sparsegp.pyro import nn, sites
from ppl_sparsegp.pyro.dtype import as_tensor

from .._shared import check_output_columns
from ._base import GPModel

Array = Any

NETWORK = "network"
"""The name under which :func:`ppl_sparsegp.pyro.nn.module` registers the network's parameters."""
DROPOUT = "dropout"
"""The site of the output-dropout keep mask [B, O] (module docstring)."""


class KeepMask(dist.Bernoulli):
    """Bernoulli keep indicators whose draw counts as reparameterised (``rsample`` is ``sample``): the probability
    is a constant, no parameter's gradient flows through the draw, so no score-function term is owed."""

    has_rsample = True

    def rsample(self, sample_shape: tuple[int, ...] = ()) -> torch.Tensor:
        return self.sample(torch.Size(sample_shape))


@dataclass(eq=False)
class IDSGP(GPModel):
    """Input-dependent sparse GP; the fields of :class:`models.numpyro.idsgp.IDSGP`.

    Args (beyond :class:`GPModel`'s kernel, likelihood, priors, fixed):
        input_dim: D; num_inducing: M, inducing points per input.
        hidden: widths of the network's hidden layers (all equal); activation: a name in
            :data:`ppl_sparsegp.pyro.nn.ACTIVATIONS`; seed: the seed of the network's initial weights.
        network: a ``torch.nn`` module x [B, D] -> [B, O] (:func:`ppl_sparsegp.pyro.nn.inducing_output_size`) to use
            instead of the network built from ``hidden``, ``activation`` and ``seed``; or the NumPyro twin's equinox
            network (or its weights), whose weights that built network takes (so ``twin_of`` carries them over).
        batch_size: subsample B data points per step through the ``"data"`` plate (None: all N).
        num_data: the full N when the caller passes minibatches itself.
        dropout: the rate p in [0, 1) of dropout on the network's outputs while training (module docstring; 0: none).
    """

    input_dim: int = 1
    num_inducing: int = 50
    hidden: Sequence[int] = (50,)
    activation: str = "sigmoid"
    seed: int = 0
    network: Any = field(default=None, repr=False)
    batch_size: int | None = None
    num_data: int | None = None
    dropout: float = 0.0

    def __post_init__(self) -> None:
        validation.check_count("input_dim", self.input_dim, 1)
        validation.check_count("num_inducing", self.num_inducing, 1)
        validation.check_count("seed", self.seed, 0)
        validation.check_count("batch_size", self.batch_size, 1, optional=True)
        validation.check_count("num_data", self.num_data, 1, optional=True)
        self.dropout = validation.check_rate("dropout", self.dropout)
        if self.batch_size is not None and self.num_data is not None:
            raise ValueError("batch_size and num_data: give one (plate subsampling or external minibatches)")
        if self.activation not in nn.ACTIVATIONS:
            raise ValueError(f"activation: expected one of {sorted(nn.ACTIVATIONS)}, got {self.activation!r}")
        for width in self.hidden:
            validation.check_count("hidden", width, 1)
        if not isinstance(self.network, torch.nn.Module):
            weights = self.network
            self.network = nn.inducing_network(
                self.input_dim, self.num_inducing, self.hidden, self.activation, self.seed
            )
            if weights is not None:
                nn.load_numpyro_weights(self.network, weights)
        super().__post_init__()

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameters', the network's parameters and ``"u"``."""
        return super().parameter_names() | set(nn.param_values(NETWORK, self.network)) | {"u"}

    def check_data(self, X: Array, y: Array | None = None) -> None:
        """:meth:`GPModel.check_data`, X's columns against ``input_dim`` and y a single output [N]."""
        super().check_data(X, y)
        if X.ndim != 2 or X.shape[1] != self.input_dim:
            raise ValueError(f"X: expected [N, {self.input_dim}] (input_dim={self.input_dim}), got {tuple(X.shape)}")
        check_output_columns(y, 1)

    def _outputs(self, network: Callable[[Array], Array], X: Array, train: bool) -> Array:
        """The network's outputs [B, O] at every row of X [B, D]; in a training step (``train``) with ``dropout``
        > 0, dropped out by the keep mask of the site ``"dropout"`` (module docstring)."""
        out = network(X)
        if not train or self.dropout == 0.0:
            return out
        keep = KeepMask(probs=torch.full_like(out, 1.0 - self.dropout).detach()).to_event(1)
        return dropped_out(out, pyro.sample(DROPOUT, keep), self.dropout)

    def _per_input(self, kernel: Kernel, out: Array, X: Array) -> tuple[Array, ...]:
        """For every row x_n of X [B, D]: chol K(Z_n, Z_n) [B, M, M], k(Z_n, x_n) [B, M], k(x_n, x_n) [B], m_n [B, M]
        and L_n [B, M, M] from the network's outputs ``out`` [B, O] at those rows."""
        Z, m, L = nn.split_inducing_outputs(out, self.num_inducing, self.input_dim)
        Kmm, kmn = torch.func.vmap(lambda Zn, xn: (kernel(Zn), kernel(Zn, xn[None])[:, 0]))(Z, X)
        return ops.cholesky(Kmm), kmn, kernel.diag(X), m, L

    def _scale_of_u(self, n: int) -> float:
        """The factor that turns the plate's N/B into the KL's 1/B (module docstring)."""
        return 1.0 / (self.num_data or n)

    def model(self, X: Array, y: Array | None = None, *, train: bool = False) -> None:
        """u_n ~ p(u | x_n) and the data term of the batch as the factor ``"y"``; with ``y=None``
        (``pyro.infer.Predictive``), f and y at every row of X given u as the sites ``"f"`` and ``"y"``; ``train``:
        a training step, with the output dropout (given y)."""
        X, y = as_tensor(X), as_tensor(y)
        self.check_data(X, y)
        kernel, likelihood = self.hyperparameters()
        network = nn.module(NETWORK, self.network)
        n = X.shape[0]
        with sites.data_plate(n, None if y is None else self.batch_size, self.num_data) as idx:
            Xb = X if idx is None else X[idx]
            Lmm, kmn, knn, m, L = self._per_input(kernel, self._outputs(network, Xb, train and y is not None), Xb)
            with poutine.scale(scale=self._scale_of_u(n)):
                u = pyro.sample("u", dist.MultivariateNormal(torch.zeros_like(m), scale_tril=Lmm))
            if y is None:
                mean, var = conditionals.per_input_conditional(Lmm, kmn, knn, u, None, whiten=False)
            else:
                mean, var = conditionals.per_input_conditional(Lmm, kmn, knn, m, L, whiten=False)
                _, Yb = sites.batch(X, y, idx)
                pyro.factor("y", likelihood.variational_expectation(Yb, mean[None], var[None])[0])
        if y is None:
            sites.predictive(likelihood, mean[None], var[None])

    def guide(self, X: Array, y: Array | None = None, *, train: bool = False) -> None:
        """Point masses of the hyperparameters with priors and u_n ~ q(u | x_n) for every input in the batch;
        ``train``: a training step, with the output dropout (given y)."""
        X = as_tensor(X)
        self.hyperparameter_guide()
        network = nn.module(NETWORK, self.network)
        n = X.shape[0]
        with sites.data_plate(n, None if y is None else self.batch_size, self.num_data) as idx:
            Xb = X if idx is None else X[idx]
            out = self._outputs(network, Xb, train and y is not None)
            _, m, L = nn.split_inducing_outputs(out, self.num_inducing, self.input_dim)
            with poutine.scale(scale=self._scale_of_u(n)):
                pyro.sample("u", dist.MultivariateNormal(m, scale_tril=L))

    def _network(self, params: Mapping[str, Array]) -> Callable[[Array], Array]:
        """The network with the fitted weights ``params["network.<parameter>"]`` (the initial ones if absent)."""
        return nn.fitted(self.network, params, NETWORK)

    def inducing_sets(self, params: Mapping[str, Array], X_new: Array) -> tuple[Array, Array, Array]:
        """Each input's own inducing inputs Z(x) [S, M, D] and q(u | x): mean m(x) [S, M] and lower-triangular
        L(x) [S, M, M], from the network with the fitted weights at every row of X_new [S, D]."""
        X_new = as_tensor(X_new)
        validation.check_same_dim(torch.zeros((1, self.input_dim)), X_new, z_name="input_dim", x_name="X_new")
        with torch.no_grad():
            return nn.split_inducing_outputs(self._network(params)(X_new), self.num_inducing, self.input_dim)

    def _marginals(self, params: Mapping[str, Array], X: Array) -> tuple[Array, Array, Array]:
        """q(f(x_n)) [N], [N] at every row of X, and each input's KL[q(u | x_n) || p(u | x_n)] [N]."""
        kernel, _ = self.fitted(params)
        X = as_tensor(X)
        Lmm, kmn, knn, m, L = self._per_input(kernel, self._network(params)(X), X)
        mean, var = conditionals.per_input_conditional(Lmm, kmn, knn, m, L, whiten=False)
        kls = torch.func.vmap(lambda mn, Ln, Kn: kl.kl_qu_pu(mn[None], Ln[None], Kn))(m, L, Lmm)
        return mean, var, kls

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """E_{q(f_n | x_n)}[log p(y_n | f_n)] per data point [N], the per-point term of the objective."""
        _, likelihood = self.fitted(params)
        mean, var, _ = self._marginals(params, X)
        return likelihood.variational_expectation(torch.ravel(as_tensor(y)), mean, var)

    def elbo(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """The full-batch objective (module docstring with B = N): Σ_n E_q[log p(y_n|f_n)] - mean_n KL_n (scalar)."""
        _, likelihood = self.fitted(params)
        mean, var, kls = self._marginals(params, X)
        return torch.sum(likelihood.variational_expectation(torch.ravel(as_tensor(y)), mean, var)) - torch.mean(kls)

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f(x*)) with the network run at each test input (paper eq 7): mean and variance [S]; given a draw of
        every input's own u, ``params["u"]`` [S, M], p(f(x*) | u(x*)) instead."""
        if full_cov:
            raise ValueError(
                "full_cov: IDSGP predicts every input from its own inducing set and has no joint covariance; "
                "use full_cov=False"
            )
        validation.check_same_dim(torch.zeros((1, self.input_dim)), X_new, z_name="input_dim", x_name="X_new")
        if "u" not in params:
            mean, var, _ = self._marginals(params, X_new)
            return mean, var
        u = as_tensor(params["u"])
        if tuple(u.shape) != (X_new.shape[0], self.num_inducing):
            raise ValueError(
                f"params['u']: expected one u per input, [{X_new.shape[0]}, {self.num_inducing}], got {tuple(u.shape)}"
            )
        kernel, _ = self.fitted(params)
        Lmm, kmn, knn, _, L = self._per_input(kernel, self._network(params)(X_new), X_new)
        return conditionals.per_input_conditional(Lmm, kmn, knn, u, torch.zeros_like(L), whiten=False)
