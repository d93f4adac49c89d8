"""IDSGP: input-dependent sparse GP (Jafrasteh, Villacampa-Calvo & Hernández-Lobato 2022).

A network maps each input x to its own inducing inputs Z(x) [M, D] and its own q(u | x) = N(m(x), L(x) L(x)ᵀ)
(:mod:`ppl_sparsegp.numpyro.nn`; an equinox MLP registered with ``numpyro.contrib.module.eqx_module``). The prior
of f is the GP prior whatever the network outputs (the paper's eq 4): only u's prior depends on x.

Site names: hyperparameter sites of :mod:`models.numpyro._base`; param ``"network$params"`` (the network's weights,
shared by model and guide); plate ``"data"``; latent ``"u"`` [B, M] (one inducing vector per input in the plate);
factor ``"y"`` [B]; with output dropout, latent ``"dropout"`` [B, O] (below).

Generative model, for each x_n in the batch (paper §3.1, eqs 4-6)::

    Z_n = Z(x_n),  u_n ~ N(0, K(Z_n, Z_n))
    f(x_n) | u_n ~ p(f(x_n) | u_n)            (the GP prior conditional)
    y_n | f ~ p(y_n | f(x_n))                 (Gaussian, probit or logit; any scalar likelihood of the core)

Guide: u_n ~ q(u | x_n) = N(m(x_n), L(x_n) L(x_n)ᵀ), the network evaluated at x_n.

Objective (paper eq 6 with x̃ = x_n, Algorithm 1; spec 002 §1.3)::

    (N/B) Σ_{n∈batch} E_{q(f_n)}[log p(y_n | f_n)]  -  (1/B) Σ_{n∈batch} KL[q(u | x_n) || p(u | x_n)]

The data term is scored, as SVGP's analytic data term is, under the marginal q(f_n) of q(u | x_n)
(:func:`ppl_sparsegp.core.conditionals.per_input_conditional`), in closed form or by Gauss-Hermite. The KL is
averaged over the batch, not scaled by N/B: ``"u"`` sits in the data plate (scale N/B) under a further scale 1/N.
With ``TraceMeanField_ELBO`` the KL is NumPyro's closed-form Gaussian KL, so the estimate is the paper's exactly.

Output dropout (``dropout`` = rate p > 0; the authors' UCI launchers use 0.5 on the output layer, spec 002 §1.5 and
pitfall 5): while training, the network's outputs [B, O] (Z, m and raw L alike) are multiplied by a keep mask
ε / (1 - p) (:func:`ppl_sparsegp.core.network_outputs.dropped_out`), ε ~ Bernoulli(1 - p) per output and per input of
the batch.
ε is the sample site ``"dropout"`` in the guide and the model with the same distribution, so the model replays the
guide's mask (Z(x) and q(u | x) of one step see the same mask), its KL term is exactly 0, and the objective is the
above averaged over masks. Only training steps drop out: ``model(X, y, train=True)`` and ``guide(X, y, train=True)``
(what :func:`ppl_sparsegp.recipes.idsgp.fit_idsgp` fits), which draw ε from a key of its own split off the step's
key (so a checkpoint, which stores that key, resumes it); by default (``train=False``) model and guide use the whole
network, as do prediction, ``elbo``, ``pointwise_log_likelihood``, ``Predictive`` and the guide's posterior draws.
The mask's distribution has no parameters, so the gradient given the draw is the objective's; NumPyro's ``SVI.init``
still warns of a discrete latent site, which :func:`ppl_sparsegp.recipes.idsgp.fit_idsgp` silences.

Prediction runs the network at the test input (a point mass x̃ = x*, eq 7); there is no joint covariance between
test points, each being predicted from its own inducing set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.contrib.module import eqx_module

from ppl_sparsegp import validation
from ppl_sparsegp.core import conditionals, kl, ops
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.network_outputs import dropped_out
from ppl_sparsegp.numpyro import nn, sites
from ppl_sparsegp.numpyro.dtype import as_float

from .._shared import check_output_columns
from ._base import GPModel

Array = Any

NETWORK = "network"
"""The name under which ``eqx_module`` registers the network; its param site is ``"network$params"``."""
NETWORK_PARAMS = f"{NETWORK}$params"
DROPOUT = "dropout"
"""The site of the output-dropout keep mask [B, O] (module docstring)."""


@dataclass(eq=False)
class IDSGP(GPModel):
    """Input-dependent sparse GP: every input has its own M inducing points and q(u), output by a network.

    Args (beyond :class:`GPModel`'s kernel, likelihood, priors, fixed):
        input_dim: D, the number of input columns.
        num_inducing: M, inducing points per input.
        hidden: widths of the network's hidden layers (all equal; the paper's UCI setting is one layer of 50).
        activation: the hidden layers' activation, a name in :data:`ppl_sparsegp.numpyro.nn.ACTIVATIONS`.
        seed: the seed of the network's initial weights.
        network: an equinox module x [D] -> [O] (:func:`ppl_sparsegp.numpyro.nn.inducing_output_size`) to use
            instead of the MLP built from ``hidden``, ``activation`` and ``seed``.
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
        if self.network is None:
            dtype = as_float(np.zeros(())).dtype
            key = jax.random.PRNGKey(self.seed)
            self.network = nn.inducing_network(
                self.input_dim, self.num_inducing, self.hidden, self.activation, key, dtype
            )
        super().__post_init__()

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameters', the network's and ``"u"``."""
        return super().parameter_names() | {NETWORK_PARAMS, "u"}

    def check_data(self, X: Array, y: Array | None = None, *, init_params: Mapping[str, Array] | None = None) -> None:
        """:meth:`GPModel.check_data`, X's columns against ``input_dim`` and y a single output [N]."""
        super().check_data(X, y, init_params=init_params)
        if np.ndim(X) != 2 or np.shape(X)[1] != self.input_dim:
            raise ValueError(f"X: expected [N, {self.input_dim}] (input_dim={self.input_dim}), got {np.shape(X)}")
        check_output_columns(y, 1)

    def _outputs(self, network: Any, X: Array, train: bool) -> Array:
        """The network's outputs [B, O] at every row of X [B, D]; in a training step (``train``) with ``dropout``
        > 0, dropped out by the keep mask of the site ``"dropout"``, drawn with a key of its own (module docstring)."""
        out = jax.vmap(network)(X)
        if not train or self.dropout == 0.0:
            return out
        key = numpyro.prng_key()
        keep = dist.Bernoulli(probs=jnp.full(out.shape, 1.0 - self.dropout, out.dtype)).to_event(1)
        return dropped_out(out, numpyro.sample(DROPOUT, keep, rng_key=key), self.dropout)

    def _per_input(self, kernel: Kernel, out: Array, X: Array) -> tuple[Array, ...]:
        """For every row x_n of X [B, D]: chol K(Z_n, Z_n) [B, M, M], k(Z_n, x_n) [B, M], k(x_n, x_n) [B], m_n [B, M]
        and L_n [B, M, M] from the network's outputs ``out`` [B, O] at those rows."""
        Z, m, L = nn.split_inducing_outputs(out, self.num_inducing, self.input_dim)
        Kmm, kmn = jax.vmap(lambda Zn, xn: (kernel(Zn), kernel(Zn, xn[None])[:, 0]))(Z, X)
        return ops.cholesky(Kmm), kmn, kernel.diag(X), m, L

    def _scale_of_u(self, n: int) -> float:
        """The factor that turns the plate's N/B into the KL's 1/B (module docstring)."""
        return 1.0 / (self.num_data or n)

    def model(self, X: Array, y: Array | None = None, *, train: bool = False) -> None:
        """u_n ~ p(u | x_n) and the data term of the batch as the factor ``"y"`` (module docstring); with ``y=None``
        (NumPyro's ``Predictive``), f and y at every row of X given u as the sites ``"f"`` and ``"y"``; ``train``:
        a training step, with the output dropout (given y)."""
        self.check_data(X, y)
        kernel, likelihood = self.hyperparameters()
        network = eqx_module(NETWORK, self.network)
        n = X.shape[0]
        with sites.data_plate(n, None if y is None else self.batch_size, self.num_data) as idx:
            Xb = X if idx is None else jnp.asarray(X)[idx]
            Lmm, kmn, knn, m, L = self._per_input(kernel, self._outputs(network, Xb, train and y is not None), Xb)
            with handlers.scale(scale=self._scale_of_u(n)):
                u = numpyro.sample("u", dist.MultivariateNormal(jnp.zeros_like(m), scale_tril=Lmm))
            if y is None:
                mean, var = conditionals.per_input_conditional(Lmm, kmn, knn, u, None, whiten=False)
            else:
                mean, var = conditionals.per_input_conditional(Lmm, kmn, knn, m, L, whiten=False)
                _, Yb = sites.batch(None, y, idx)
                numpyro.factor("y", likelihood.variational_expectation(Yb, mean[None], var[None])[0])
        if y is None:
            sites.predictive(likelihood, mean[None], var[None])

    def guide(self, X: Array, y: Array | None = None, *, train: bool = False) -> None:
        """Point masses of the hyperparameters with priors and u_n ~ q(u | x_n) for every input in the batch;
        ``train``: a training step, with the output dropout (given y)."""
        self.hyperparameter_guide()
        network = eqx_module(NETWORK, self.network)
        n = X.shape[0]
        with sites.data_plate(n, None if y is None else self.batch_size, self.num_data) as idx:
            Xb = X if idx is None else jnp.asarray(X)[idx]
            out = self._outputs(network, Xb, train and y is not None)
            _, m, L = nn.split_inducing_outputs(out, self.num_inducing, self.input_dim)
            with handlers.scale(scale=self._scale_of_u(n)):
                numpyro.sample("u", dist.MultivariateNormal(m, scale_tril=L))

    def _network(self, params: Mapping[str, Array]) -> Any:
        """The network with the fitted weights ``params["network$params"]`` (the initial ones if absent)."""
        return nn.fitted(self.network, params, NETWORK_PARAMS)

    def inducing_sets(self, params: Mapping[str, Array], X_new: Array) -> tuple[Array, Array, Array]:
        """Each input's own inducing inputs Z(x) [S, M, D] and q(u | x): mean m(x) [S, M] and lower-triangular
        L(x) [S, M, M], from the network with the fitted weights at every row of X_new [S, D]."""
        validation.check_same_dim(np.zeros((1, self.input_dim)), X_new, z_name="input_dim", x_name="X_new")
        out = jax.vmap(self._network(params))(jnp.asarray(X_new))
        return nn.split_inducing_outputs(out, self.num_inducing, self.input_dim)

    def _marginals(self, params: Mapping[str, Array], X: Array) -> tuple[Array, Array, Array]:
        """q(f(x_n)) [N], [N] at every row of X, and each input's KL[q(u | x_n) || p(u | x_n)] [N]."""
        kernel, _ = self.fitted(params)
        X = jnp.asarray(X)
        Lmm, kmn, knn, m, L = self._per_input(kernel, jax.vmap(self._network(params))(X), X)
        mean, var = conditionals.per_input_conditional(Lmm, kmn, knn, m, L, whiten=False)
        kls = jax.vmap(lambda mn, Ln, Kn: kl.kl_qu_pu(mn[None], Ln[None], Kn))(m, L, Lmm)
        return mean, var, kls

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """E_{q(f_n | x_n)}[log p(y_n | f_n)] per data point [N], the per-point term of the objective."""
        _, likelihood = self.fitted(params)
        mean, var, _ = self._marginals(params, X)
        return likelihood.variational_expectation(jnp.ravel(jnp.asarray(y)), mean, var)

    def elbo(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """The full-batch objective (module docstring with B = N): Σ_n E_q[log p(y_n|f_n)] - mean_n KL_n (scalar)."""
        _, likelihood = self.fitted(params)
        mean, var, kls = self._marginals(params, X)
        return jnp.sum(likelihood.variational_expectation(jnp.ravel(jnp.asarray(y)), mean, var)) - jnp.mean(kls)

    def _posterior_f(
        self, params: Mapping[str, Array], X_new: Array, full_cov: bool, X: Array | None, y: Array | None
    ) -> tuple[Array, Array]:
        """q(f(x*)) with the network run at each test input (paper eq 7): mean and variance [S]; given a draw of
        every input's own u, ``params["u"]`` [S, M] (ArviZ output), p(f(x*) | u(x*)) instead."""
        if full_cov:
            raise ValueError(
                "full_cov: IDSGP predicts every input from its own inducing set and has no joint covariance; "
                "use full_cov=False"
            )
        validation.check_same_dim(np.zeros((1, self.input_dim)), X_new, z_name="input_dim", x_name="X_new")
        if "u" not in params:
            mean, var, _ = self._marginals(params, X_new)
            return mean, var
        u = jnp.asarray(params["u"])
        if u.shape != (X_new.shape[0], self.num_inducing):
            raise ValueError(
                f"params['u']: expected one u per input, [{X_new.shape[0]}, {self.num_inducing}], got {u.shape}"
            )
        kernel, _ = self.fitted(params)
        Lmm, kmn, knn, _, L = self._per_input(kernel, jax.vmap(self._network(params))(X_new), X_new)
        return conditionals.per_input_conditional(Lmm, kmn, knn, u, jnp.zeros_like(L), whiten=False)
