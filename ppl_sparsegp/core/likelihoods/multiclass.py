"""Likelihoods of a class label from J latent functions (Matthews 2016, Section 3.4): robust-max and softmax.

A label ``y`` in {0, ..., J - 1} (as a float or an integer) depends on the J latent values ``f`` [..., J] of its
point, latent axis last. Under a factorised ``q(f) = prod_j N(f_j | mean_j, var_j)`` every method takes ``y`` [...]
and ``mean``, ``var`` [..., J]; the expectations reduce the latent axis ([...]), and the predictive moments are
those of the one-hot label: the class probabilities ``p`` [..., J] and ``p (1 - p)``. Models hold the latent axis
first ([J, B], the layout of the conditionals) and call :meth:`MultiClass.expectation_by_output`.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from functools import lru_cache

import array_api_compat
import numpy as np

from ppl_sparsegp.core import ops
from ppl_sparsegp.core.likelihoods.base import Likelihood, coerce
from ppl_sparsegp.core.ops import Array, namespace


def _one_hot(y: Array, num_classes: int) -> Array:
    """The one-hot code of labels ``y`` [...] -> [..., J], in ``y``'s (floating) dtype."""
    xp = namespace(y)
    classes = xp.arange(num_classes, dtype=y.dtype, device=array_api_compat.device(y))
    return xp.astype(y[..., None] == classes, y.dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class MultiClass(Likelihood):
    """Base class of the J-class likelihoods: ``p(y = k | f)`` for ``f`` [..., J].

    A subclass implements :meth:`log_prob`, :meth:`conditional_mean` (the class probabilities given f),
    :meth:`variational_expectation` and :meth:`class_probabilities` (the predictive ``q(y = k)``).

    Attributes:
        num_classes: J >= 2, the number of classes and of latent functions.
    """

    num_classes: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            J = operator.index(self.num_classes)
        except TypeError:
            J = 0
        if J < 2:
            raise ValueError(f"num_classes must be an integer >= 2, got {self.num_classes!r}")
        object.__setattr__(self, "num_classes", J)

    @property
    def latent_dim(self) -> int:  # type: ignore[override]
        """J: the latent functions of one label."""
        return self.num_classes

    def one_hot(self, y: Array, like: Array) -> Array:
        """Labels ``y`` [...] one-hot [..., J], in the backend and dtype of the latent array ``like``."""
        _, _, (y,) = coerce((like,), (y,))
        return _one_hot(y, self.num_classes)

    def conditional_variance(self, f: Array) -> Array:
        """``p (1 - p)`` of the one-hot label given f, p = :meth:`conditional_mean`; [..., J]."""
        p = self.conditional_mean(f)
        return p * (1.0 - p)

    def class_probabilities(self, mean: Array, var: Array) -> Array:
        """The predictive ``q(y = k) = E_q[p(y = k | f)]`` of every class; mean, var [..., J] -> [..., J]."""
        raise NotImplementedError

    def log_predictive_density(self, y: Array, mean: Array, var: Array) -> Array:
        """``log q(y)`` of the labels ``y`` [...]; mean, var [..., J] -> [...]."""
        xp = namespace(mean)
        p = self.class_probabilities(mean, var)
        return xp.log(xp.sum(self.one_hot(y, p) * p, axis=-1))

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """The one-hot label's predictive moments: ``(p, p (1 - p))``, p = :meth:`class_probabilities`; [..., J]."""
        p = self.class_probabilities(mean, var)
        return p, p * (1.0 - p)

    def expectation_by_output(self, Y: Array, mean: Array, var: Array) -> Array:
        """``Y`` [1, B] and ``mean``, ``var`` [J, B] (latent first) -> [1, B]."""
        T = ops.matrix_transpose
        return self.variational_expectation(Y[0], T(mean), T(var))[None]


@dataclasses.dataclass(frozen=True, eq=False)
class RobustMax(MultiClass):
    """The robust-max likelihood (Girolami and Rogers 2006; thesis Section 3.4): the label is the index of the
    largest latent value, flipped to any other class with probability ``epsilon``::

        p(y = k | f) = 1 - epsilon          if k = argmax_j f_j,
                       epsilon / (J - 1)    otherwise.

    Under ``q(f)`` everything follows from ``P_k = q(f_k > f_j for all j != k)``, a 1-D integral over ``f_k``
    (thesis eq 3.41), by Gauss-Hermite quadrature of :attr:`quadrature_order` nodes::

        P_k = E_{f_k ~ N(mean_k, var_k)}[prod_{j != k} Phi((f_k - mean_j) / sqrt(var_j))]
        E_q[log p(y | f)] = P_y log(1 - epsilon) + (1 - P_y) log(epsilon / (J - 1))
        q(y = k) = P_k (1 - epsilon) + (1 - P_k) epsilon / (J - 1)

    The P_k of all classes sum to 1; their quadrature values miss by the quadrature error (about 1e-3 at 20 nodes
    where one class's sd is 8 times another's, 1e-6 at 80), so :meth:`class_probabilities` divides them by their
    sum and the predicted probabilities sum to 1.

    Attributes:
        epsilon: the flip probability, in (0, 1) (fixed, not learnable).
    """

    epsilon: float = 1e-3

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < float(self.epsilon) < 1.0:
            raise ValueError(f"epsilon must be in (0, 1), got {self.epsilon!r}")
        object.__setattr__(self, "epsilon", float(self.epsilon))

    def _log_probabilities(self) -> tuple[float, float]:
        """log(1 - epsilon) and log(epsilon / (J - 1))."""
        return math.log1p(-self.epsilon), math.log(self.epsilon / (self.num_classes - 1))

    def log_prob(self, y: Array, f: Array) -> Array:
        """``log(1 - epsilon)`` where ``f_y`` is the largest value, else ``log(epsilon / (J - 1))``; [...]."""
        xp, (f,), _ = coerce((f,))
        is_max = xp.sum(self.one_hot(y, f) * f, axis=-1) >= xp.max(f, axis=-1)
        top, rest = self._log_probabilities()
        zero = 0.0 * f[..., 0]
        return xp.where(is_max, zero + top, zero + rest)

    def conditional_mean(self, f: Array) -> Array:
        """``1 - epsilon`` at ``argmax f``, ``epsilon / (J - 1)`` elsewhere; [..., J]."""
        xp, (f,), _ = coerce((f,))
        top = xp.astype(xp.argmax(f, axis=-1), f.dtype)
        code = _one_hot(top, self.num_classes)
        return (1.0 - self.epsilon) * code + self.epsilon / (self.num_classes - 1) * (1.0 - code)

    def _max_probability(self, code: Array, mean: Array, var: Array) -> Array:
        """``P_y``: the probability under q(f) that the class of one-hot ``code`` [..., J] has the largest value;
        mean, var broadcast with code -> [...]."""
        xp, (mean, var), (code,) = coerce((mean, var), (code,))
        t, w = ops.gauss_hermite(self.quadrature_order, like=mean)
        mean_y, sd_y = xp.sum(code * mean, axis=-1), xp.sqrt(xp.sum(code * var, axis=-1))
        f_y = mean_y[..., None] + sd_y[..., None] * t  # [..., Q]
        z = (f_y[..., None] - mean[..., None, :]) / xp.sqrt(var)[..., None, :]  # [..., Q, J]
        others = xp.where(code[..., None, :] > 0, 0.0 * z, ops.normal_logcdf(z))
        return xp.sum(w * xp.exp(xp.sum(others, axis=-1)), axis=-1)

    def variational_expectation(self, y: Array, mean: Array, var: Array) -> Array:
        """``P_y log(1 - epsilon) + (1 - P_y) log(epsilon / (J - 1))``; [...]."""
        P = self._max_probability(self.one_hot(y, mean), mean, var)
        top, rest = self._log_probabilities()
        return P * top + (1.0 - P) * rest

    def class_probabilities(self, mean: Array, var: Array) -> Array:
        """``P_k (1 - epsilon) + (1 - P_k) epsilon / (J - 1)`` of every class k, the P_k normalised; [..., J]."""
        xp, (mean, var), _ = coerce((mean, var))
        codes = xp.eye(self.num_classes, dtype=mean.dtype, device=array_api_compat.device(mean))  # one-hot of each k
        P = self._max_probability(codes, mean[..., None, :], var[..., None, :])
        P = P / xp.sum(P, axis=-1, keepdims=True)
        rest = self.epsilon / (self.num_classes - 1)
        return P * (1.0 - self.epsilon) + (1.0 - P) * rest


@lru_cache(maxsize=16)
def _standard_normal_draws(seed: int, num_samples: int, num_classes: int) -> np.ndarray:
    """The fixed standard normal draws [S, J] of :class:`Softmax`."""
    return np.random.default_rng(seed).standard_normal((num_samples, num_classes))


@dataclasses.dataclass(frozen=True, eq=False)
class Softmax(MultiClass):
    """The softmax (multinomial logit) likelihood, ``p(y = k | f) = exp(f_k) / sum_j exp(f_j)``.

    No closed form or 1-D quadrature exists; the expectations are Monte Carlo over reparameterised draws
    ``f_s = mean + sqrt(var) eps_s``, s = 1..S, with ``eps_s ~ N(0, I_J)`` drawn once from ``seed`` and reused
    (common random numbers: the estimates are smooth, deterministic functions of mean and var, so that SVI, L-BFGS
    and NUTS see one objective; their error shrinks as 1/sqrt(S))::

        E_q[log p(y | f)] ~= 1/S sum_s (f_sy - logsumexp_j f_sj)
        q(y = k)          ~= 1/S sum_s softmax(f_s)_k

    Attributes:
        num_samples: S >= 1 draws per point.
        seed: the seed of the draws, an integer >= 0.
    """

    num_samples: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, least in (("num_samples", 1), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
            object.__setattr__(self, name, int(value))

    def _draws(self, mean: Array, var: Array) -> Array:
        """``f_s = mean + sqrt(var) eps_s``: mean, var [..., J] -> [..., S, J]."""
        xp, (mean, var), _ = coerce((mean, var))
        eps = _standard_normal_draws(self.seed, self.num_samples, self.num_classes)
        eps = xp.asarray(eps, dtype=mean.dtype, device=array_api_compat.device(mean))
        return mean[..., None, :] + xp.sqrt(var)[..., None, :] * eps

    def log_prob(self, y: Array, f: Array) -> Array:
        """``f_y - logsumexp_j f_j``; y [...], f [..., J] -> [...]."""
        xp, (f,), _ = coerce((f,))
        return xp.sum(self.one_hot(y, f) * f, axis=-1) - ops.logsumexp(f, axis=-1)

    def conditional_mean(self, f: Array) -> Array:
        """``softmax(f)``; [..., J]."""
        xp, (f,), _ = coerce((f,))
        return xp.exp(f - ops.logsumexp(f, axis=-1)[..., None])

    def variational_expectation(self, y: Array, mean: Array, var: Array) -> Array:
        """``1/S sum_s log p(y | f_s)``; [...]."""
        xp, (mean, var), (y,) = coerce((mean, var), (y,))
        return xp.mean(self.log_prob(y[..., None], self._draws(mean, var)), axis=-1)

    def class_probabilities(self, mean: Array, var: Array) -> Array:
        """``1/S sum_s softmax(f_s)``; [..., J]."""
        return namespace(mean).mean(self.conditional_mean(self._draws(mean, var)), axis=-2)
