"""The likelihood base class: p(y | f) with Gauss-Hermite expectations, and the coercion every likelihood uses."""

from __future__ import annotations

import abc
import dataclasses
import operator
from typing import Any, ClassVar

import array_api_compat
import numpy as np

from ppl_sparsegp.core import ops
from ppl_sparsegp.core.ops import Array, namespace


def coerce(latent: tuple[Any, ...], others: tuple[Any, ...] = ()) -> tuple[Any, list, list]:
    """Bring latent arrays and other values (data, hyperparameters) to one backend and dtype.

    The backend is that of the first non-numpy array among all values (numpy otherwise). The dtype
    is the promoted dtype of the latent values, or the backend's default float for integers.

    Returns:
        (xp, latent arrays, other arrays), shapes unchanged.
    """
    arrays = [v for v in (*latent, *others) if ops.is_array(v)]
    foreign = [v for v in arrays if not isinstance(v, np.ndarray | np.generic)]
    ref = foreign[0] if foreign else None
    xp = namespace(ref) if ref is not None else namespace(np.empty(0))
    device = None if ref is None else array_api_compat.device(ref)

    def convert(v: Any, dtype: Any) -> Array:
        if ops.is_array(v) and namespace(v) is xp:
            return v if dtype is None or v.dtype == dtype else xp.astype(v, dtype)
        return xp.asarray(v, dtype=dtype, device=device)

    lat = [convert(v, None) for v in latent]
    dtype = xp.result_type(*lat)
    if not xp.isdtype(dtype, "real floating"):
        dtype = xp.asarray(0.0, device=device).dtype
    return xp, [convert(v, dtype) for v in lat], [convert(v, dtype) for v in others]


def check_positive(name: str, value: Any) -> None:
    """Raise ValueError unless a concrete ``value`` (Python number, numpy or concrete jax array) is positive and
    finite. jax tracers (no values yet) and torch tensors (reading them would sync a device) are not checked."""
    if ops.is_jax(value):
        values = ops.concrete_values(value)  # None for a tracer
    elif isinstance(value, int | float | np.ndarray | np.generic):
        values = value
    else:
        values = None
    if values is not None:
        arr = np.asarray(values, dtype=float)
        if not (np.all(arr > 0) and np.all(np.isfinite(arr))):
            raise ValueError(f"{name} must be positive and finite, got {value!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Likelihood(abc.ABC):
    """Base class: a factorised likelihood ``p(y | f)`` with Gauss-Hermite expectations.

    A subclass implements :meth:`log_prob`, :meth:`conditional_mean` and
    :meth:`conditional_variance`, lists its learnable (positive) hyperparameters in
    ``_parameter_names`` and overrides the expectations that have closed forms.

    Attributes:
        quadrature_order: number of Gauss-Hermite nodes for the expectations without a closed form.
    """

    quadrature_order: int = dataclasses.field(default=20, kw_only=True)

    _parameter_names: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        order = operator.index(self.quadrature_order)
        if order < 1:
            raise ValueError(f"quadrature_order must be a positive integer, got {self.quadrature_order!r}")
        object.__setattr__(self, "quadrature_order", order)
        for name in self._parameter_names:
            check_positive(name, getattr(self, name))

    latent_dim: ClassVar[int | None] = None
    """None: elementwise, one latent function per output column; J: one output from J latent functions f [..., J]
    (:class:`~ppl_sparsegp.core.likelihoods.multiclass.MultiClass`)."""

    # -- hyperparameters

    def parameters(self) -> dict[str, Any]:
        """The learnable hyperparameters by name, all positive (empty when there are none)."""
        return {name: getattr(self, name) for name in self._parameter_names}

    def with_parameters(self, params: dict[str, Any]) -> Likelihood:
        """A copy with the hyperparameters in ``params`` replaced (any backend, e.g. samples).

        Raises:
            ValueError: a key is not one of :meth:`parameters`.
        """
        unknown = sorted(set(params) - set(self._parameter_names))
        if unknown:
            valid = ", ".join(self._parameter_names) or "none"
            raise ValueError(f"{type(self).__name__} has no parameter(s) {unknown}; valid parameters: {valid}")
        return dataclasses.replace(self, **params)

    # -- the likelihood

    @abc.abstractmethod
    def log_prob(self, y: Array, f: Array) -> Array:
        """``log p(y | f)``; y and f broadcast to [...], result [...]."""

    @abc.abstractmethod
    def conditional_mean(self, f: Array) -> Array:
        """``E[y | f]``, f [...] -> [...]."""

    @abc.abstractmethod
    def conditional_variance(self, f: Array) -> Array:
        """``Var[y | f]``, f [...] -> [...]."""

    # -- expectations under q(f) = N(mean, var), by Gauss-Hermite quadrature

    def _quadrature_nodes(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """Nodes ``f_i = mean + sqrt(var) t_i`` [..., Q] and weights ``w_i`` [Q], Q the order."""
        xp, (mean, var), _ = coerce((mean, var))
        t, w = ops.gauss_hermite(self.quadrature_order, like=mean)
        return mean[..., None] + xp.sqrt(var)[..., None] * t, w

    def _expect(self, g: Any, mean: Array, var: Array) -> Array:
        """``E_{N(f | mean, var)}[g(f)] ~= sum_i w_i g(f_i)`` for an elementwise ``g``; [...]."""
        f, w = self._quadrature_nodes(mean, var)
        return namespace(f).sum(w * g(f), axis=-1)

    def variational_expectation(self, y: Array, mean: Array, var: Array) -> Array:
        """``E_{N(f | mean, var)}[log p(y | f)]``; y, mean, var broadcast to [...], result [...].

        Base class: ``sum_i w_i log p(y | f_i)`` by Gauss-Hermite quadrature.
        """
        _, _, (y,) = coerce((mean, var), (y,))
        return self._expect(lambda f: self.log_prob(y[..., None], f), mean, var)

    def log_predictive_density(self, y: Array, mean: Array, var: Array) -> Array:
        """``log E_{N(f | mean, var)}[p(y | f)]``; y, mean, var broadcast to [...], result [...].

        Base class: ``logsumexp_i (log w_i + log p(y | f_i))`` by Gauss-Hermite quadrature.
        """
        xp, _, (y,) = coerce((mean, var), (y,))
        f, w = self._quadrature_nodes(mean, var)
        return ops.logsumexp(xp.log(w) + self.log_prob(y[..., None], f), axis=-1)

    def expectation_by_output(self, Y: Array, mean: Array, var: Array) -> Array:
        """:meth:`variational_expectation` in the layout of the conditionals, latent functions first: ``Y`` [P, B],
        ``mean``, ``var`` [P, B] -> [P, B] (one row per output; a multi-latent likelihood reads ``Y`` [1, B] and
        ``mean``, ``var`` [J, B] and gives [1, B]). A model's data term is its sum over axis 0."""
        return self.variational_expectation(Y, mean, var)

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """Moments of the predictive ``q(y) = int p(y | f) N(f | mean, var) df``; mean, var [...].

        Base class, by quadrature and the law of total variance:
        ``E[y] = E_q[E[y|f]]``, ``Var[y] = E_q[Var[y|f]] + E_q[E[y|f]^2] - E[y]^2``.

        Returns:
            (E[y], Var[y]), each [...].
        """
        m = self._expect(self.conditional_mean, mean, var)
        second = self._expect(lambda f: self.conditional_variance(f) + self.conditional_mean(f) ** 2, mean, var)
        return m, second - m**2
