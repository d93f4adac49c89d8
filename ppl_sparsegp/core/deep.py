"""The doubly-stochastic deep GP's algebra (Salimbeni & Deisenroth 2017; Uhrenholt et al. 2021 App. A), written
once for the NumPyro and Pyro DeepSVGP: a layer at given values, the propagation of S samples through the layers
given standard-normal noise, and the data term from the last layer's marginals (the predictive mixture over
samples is :mod:`ppl_sparsegp.core.mixtures`).

Layer ℓ = 0..L-1 maps H^ℓ [S N, D_ℓ] (H^0 = X repeated S times, sample-major) to F^{ℓ+1}: per point, q(F^{ℓ+1}_n |
H^ℓ_n) = N(μ_n, σ²_n) is the sparse conditional of q(u^ℓ) (:func:`ppl_sparsegp.core.conditionals.conditional`, or
:func:`~ppl_sparsegp.core.masking.masked_conditional` on a subset of the inducing inputs); an inner layer draws
F = μ + σ ε (Eq. 10-11 of Salimbeni & Deisenroth, ε the given noise), adds the fixed linear mean H W^ℓ and, with
``add_input``, X; the last layer's marginals are returned (with ``sum_outputs``, the marginal of the sum of its
independent outputs: means and variances summed, as the released code's partial stacks in layer-wise training).
Randomness stays with the caller: ``noise(ℓ, shape, dtype)`` returns ε^ℓ (JAX keys on the NumPyro side, torch's
generator on the Pyro side, fixed arrays in the parity tests).

Backend-neutral (jax, torch, numpy) through the array API and :mod:`ppl_sparsegp.core.ops`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from . import conditionals, ops
from .kernels import Kernel
from .likelihoods import Likelihood
from .masking import masked_cholesky, masked_conditional, masked_q

Array = Any
Noise = Callable[[int, tuple[int, ...], Any], Array]
"""``noise(ℓ, shape, dtype)``: standard-normal ε^ℓ of ``shape`` [D_{ℓ+1}, S N] for inner layer ℓ."""


class Layer(NamedTuple):
    """One layer at given values: kernel, Z [M, D_in], Lmm [M, M], q_mu [D_out, M], q_sqrt [D_out, M, M] (None: a
    point mass at a draw q_mu = u), mask [M] (None: every inducing input)."""

    kernel: Kernel
    Z: Array
    Lmm: Array
    q_mu: Array
    q_sqrt: Array | None
    mask: Array | None

    @classmethod
    def at(cls, kernel: Kernel, Z: Array, q: tuple[Array, Array], mask: Array | None = None) -> Layer:
        """The layer with kernel, Z [M, D_in] and q = (q_mu, q_sqrt), restricted to the candidates in ``mask`` [M]
        (None: all): Lmm and q those of the selected inducing inputs (:mod:`ppl_sparsegp.core.masking`)."""
        Kmm = kernel(Z)
        if mask is None:
            return cls(kernel, Z, ops.cholesky(Kmm), q[0], q[1], None)
        return cls(kernel, Z, masked_cholesky(Kmm, mask), *masked_q(q[0], q[1], mask), mask)


def propagate(
    layers: Sequence[Layer],
    X: Array,
    noise: Noise,
    num_samples: int,
    *,
    whiten: bool,
    mean_weights: Sequence[Array | None],
    add_input: bool,
    sum_outputs: bool = False,
) -> tuple[Array, Array]:
    """S doubly-stochastic passes through ``layers`` (module docstring): the last layer's marginal mean and variance
    [S, P, N] given one draw of every inner layer per pass ([S, 1, N], the sum of its P outputs, with
    ``sum_outputs``).

    Args:
        layers: L layers (:class:`Layer`); X: inputs [N, D_0]; noise: ε^ℓ of each inner layer (:data:`Noise`).
        num_samples: S; whiten: q(u) over v = L⁻¹u; mean_weights: W^ℓ [D_ℓ, D_{ℓ+1}] or None (zero mean) for the
            L − 1 inner layers; add_input: X added to the input of every later layer; sum_outputs: return the
            marginal of Σ_p F^L_p (given the inner draws the outputs are independent: means and variances add).
    """
    xp = ops.namespace(X)
    N = X.shape[0]
    X_rep = xp.concat([X] * num_samples, axis=0)  # [S N, D], sample-major
    H = X_rep
    for i, layer in enumerate(layers):
        Kmn, Knn = layer.kernel(layer.Z, H), layer.kernel.diag(H)
        if layer.mask is None:
            mean, var = conditionals.conditional(Kmn, layer.Lmm, Knn, layer.q_mu, layer.q_sqrt, whiten=whiten)
        else:
            mean, var = masked_conditional(Kmn, layer.Lmm, Knn, layer.mask, layer.q_mu, layer.q_sqrt)
        xp = ops.namespace(mean, var)  # X may be numpy while the layers' values are traced (Predictive's vmap)
        if i == len(layers) - 1:
            if sum_outputs:
                mean, var = xp.sum(mean, axis=0, keepdims=True), xp.sum(var, axis=0, keepdims=True)
            shape = (mean.shape[0], num_samples, N)
            return xp.permute_dims(xp.reshape(mean, shape), (1, 0, 2)), xp.permute_dims(
                xp.reshape(var, shape), (1, 0, 2)
            )
        eps = noise(i, tuple(mean.shape), mean.dtype)
        F = ops.matrix_transpose(mean + xp.sqrt(xp.maximum(var, 0.0 * var)) * eps)
        W = mean_weights[i]
        F = F if W is None else F + xp.asarray(H) @ xp.asarray(W, dtype=H.dtype)
        H = F + X_rep if add_input else F
    raise ValueError("layers: a deep GP has at least one layer")


def expected_log_likelihood(likelihood: Likelihood, y: Array, mean: Array, var: Array) -> Array:
    """(1/S) Σ_s Σ_p E_{N(f | mean, var)}[log p(y_np | f)] per point: y [B] or [B, P], mean and var [S, P, B] (the
    last layer's marginals of :func:`propagate`) -> [B]."""
    xp = ops.namespace(mean)
    Y = y[None, :] if y.ndim == 1 else ops.matrix_transpose(y)
    return xp.mean(xp.sum(likelihood.variational_expectation(Y, mean, var), axis=1), axis=0)
