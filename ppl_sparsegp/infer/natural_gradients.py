"""Natural-gradient steps for the Gaussian factors of a guide, alternated with the optimiser on everything else.

A guide's Gaussian ``q(u) = prod_p N(m_p, S_p)`` held by two params, a ``loc`` [..., M] and a lower-triangular
``scale`` [..., M, M] (S = L L^T) or a positive diagonal ``scale`` [..., M] (S = diag(s^2)), is moved by a natural-
gradient step in its natural parameters theta = (S^-1 m, -S^-1 / 2), using that the natural gradient of the loss
in theta is its ordinary gradient in the expectation parameters eta = (m, S + m m^T) (Hensman et al. 2013;
Salimbeni et al. 2018)::

    theta <- theta - step_size * d loss / d eta

With a Gaussian likelihood and an exact data term, one step of size 1 lands on the optimal q(u) for the current
hyperparameters (Titsias' q*(u)). The loss is the negative ELBO of the SVI step; the step uses that step's
minibatch. The engine knows nothing about GPs: it reads the two params by name.

A step stays a Gaussian only while the new precision S^-1 + 2 gamma d loss / d S is positive definite. That holds
for every step size when the expected log-likelihood is concave in f (Gaussian, Bernoulli, Poisson, softmax). The
robust-max likelihood's is not (near a tie, more variance raises the chance that the label's latent is the
largest), and a step can leave the cone: measured on the three-class test problem at step size 0.05, the first step
fails in float64 (fit_svi stops with NonFiniteLossError) while softmax trains. Use Adam alone for robust-max.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax

from ppl_sparsegp.validation import check_positive_float

Array = Any


@dataclass(frozen=True)
class NaturalGradient:
    """Which guide params form the Gaussian, and the step size.

    Args:
        loc: the param of the means m [..., M].
        scale: the param of the square roots, lower-triangular L [..., M, M], or, with ``diagonal``, the standard
            deviations s [..., M].
        step_size: gamma > 0 (1 for a Gaussian likelihood with the full batch; about 0.1 otherwise).
        diagonal: ``scale`` is the diagonal s (a mean-field q(u), SVGP's ``q_diag``).
    """

    loc: str = "u_loc"
    scale: str = "u_scale_tril"
    step_size: float = 0.1
    diagonal: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_size", check_positive_float("step_size", self.step_size))

    @property
    def sites(self) -> tuple[str, str]:
        return self.loc, self.scale

    def others_only(self, optimizer: optax.GradientTransformation) -> optax.GradientTransformation:
        """``optimizer`` on every param but the two of the Gaussian, which it leaves alone."""
        if not isinstance(optimizer, optax.GradientTransformation):
            raise ValueError(f"optimizer: natural_gradient needs an optax GradientTransformation, got {optimizer!r}")

        def labels(params: dict[str, Array]) -> dict[str, str]:
            return {name: "natural" if name in self.sites else "other" for name in params}

        return optax.multi_transform({"other": optimizer, "natural": optax.set_to_zero()}, labels)

    def step(self, loss: Callable[[Array, Array], Array], loc: Array, scale: Array) -> tuple[Array, Array]:
        """One natural-gradient step of ``loss(loc, scale)`` from (``loc``, ``scale``); returns the new pair."""
        if self.diagonal:
            return _diagonal_step(loss, loc, scale, self.step_size)
        return _full_step(loss, loc, scale, self.step_size)


def _outer(m: Array) -> Array:
    return m[..., :, None] * m[..., None, :]


def _symmetric(A: Array) -> Array:
    return 0.5 * (A + jnp.swapaxes(A, -1, -2))


def _full_step(loss: Callable, m: Array, L: Array, gamma: float) -> tuple[Array, Array]:
    """theta = (S^-1 m, -S^-1 / 2), eta = (m, S + m m^T), S = L L^T [..., M, M]."""
    S = L @ jnp.swapaxes(L, -1, -2)

    def loss_of_eta(eta1: Array, eta2: Array) -> Array:
        return loss(eta1, jnp.linalg.cholesky(_symmetric(eta2 - _outer(eta1))))

    g1, g2 = jax.grad(loss_of_eta, argnums=(0, 1))(m, S + _outer(m))
    eye = jnp.broadcast_to(jnp.eye(m.shape[-1], dtype=m.dtype), S.shape)
    precision = jax.scipy.linalg.cho_solve((L, True), eye)
    theta1 = jnp.einsum("...ij,...j->...i", precision, m) - gamma * g1
    new_precision = precision + 2.0 * gamma * _symmetric(g2)  # -2 (theta2 - gamma g2)
    R = jnp.linalg.cholesky(new_precision)
    S_new = jax.scipy.linalg.cho_solve((R, True), eye)
    m_new = jax.scipy.linalg.cho_solve((R, True), theta1[..., None])[..., 0]
    return m_new, jnp.linalg.cholesky(_symmetric(S_new))


def _diagonal_step(loss: Callable, m: Array, s: Array, gamma: float) -> tuple[Array, Array]:
    """The same for S = diag(s^2): theta = (m / s^2, -1 / (2 s^2)), eta = (m, s^2 + m^2)."""
    g1, g2 = jax.grad(lambda e1, e2: loss(e1, jnp.sqrt(e2 - e1**2)), argnums=(0, 1))(m, s**2 + m**2)
    theta1 = m / s**2 - gamma * g1
    precision = 1.0 / s**2 + 2.0 * gamma * g2
    return theta1 / precision, 1.0 / jnp.sqrt(precision)
