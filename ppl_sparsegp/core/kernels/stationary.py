"""Stationary kernels k(x, x') = f((x - x') / ell): RBF, the Matérns 1/2, 3/2, 5/2, the periodic kernel and the
cosine kernel."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ppl_sparsegp.core.kernels.base import (
    Kernel,
    _cast,
    _check_hyperparameter,
    _ones,
    _safe_sqrt,
    _scaled_sqdist,
    _zero_diagonal,
)

Array = Any


class Stationary(Kernel):
    """``k(x, x') = variance * g(r^2)`` with ``r^2 = sum_d ((x_d - x'_d) / lengthscale_d)^2``.

    Args:
        variance: signal variance ``sigma^2`` (scalar > 0), equal to ``k(x, x)``.
        lengthscale: ``ell``, a scalar (isotropic) or a vector [D] (ARD), > 0.
        active_dims: input columns used (see :class:`Kernel`).
    """

    __slots__ = ("variance", "lengthscale")
    param_names = ("variance", "lengthscale")
    ard_names = ("lengthscale",)

    def __init__(
        self,
        variance: Any = 1.0,
        lengthscale: Any = 1.0,
        active_dims: Iterable[int] | None = None,
    ) -> None:
        super().__init__(active_dims)
        name = type(self).__name__
        object.__setattr__(self, "variance", _check_hyperparameter(name, "variance", variance, 0))
        object.__setattr__(self, "lengthscale", _check_hyperparameter(name, "lengthscale", lengthscale, 1))

    def _profile(self, xp, r2: Array) -> Array:
        """``g(r^2)`` with ``g(0) = 1``, elementwise."""
        raise NotImplementedError

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        variance, lengthscale = _cast(xp, self.variance, X), _cast(xp, self.lengthscale, X)
        r2 = _scaled_sqdist(xp, X / lengthscale, None if X2 is None else X2 / lengthscale)
        return variance * self._profile(xp, r2)

    def _diag(self, xp, X: Array) -> Array:
        return _cast(xp, self.variance, X) * _ones(xp, X.shape[0], X)


class RBF(Stationary):
    """Squared exponential (radial basis function) kernel: ``k = sigma^2 exp(-r^2 / 2)``.

    Shapes: X [N, D], X2 [M, D] -> [N, M]; lengthscale scalar or [D].
    """

    __slots__ = ()

    def _profile(self, xp, r2: Array) -> Array:
        return xp.exp(-0.5 * r2)


class Matern12(Stationary):
    """Matérn 1/2 (exponential, Ornstein-Uhlenbeck) kernel: ``k = sigma^2 exp(-r)``.

    Shapes: X [N, D], X2 [M, D] -> [N, M]; lengthscale scalar or [D].
    """

    __slots__ = ()

    def _profile(self, xp, r2: Array) -> Array:
        return xp.exp(-_safe_sqrt(xp, r2))


class Matern32(Stationary):
    """Matérn 3/2 kernel: ``k = sigma^2 (1 + sqrt(3) r) exp(-sqrt(3) r)``.

    Shapes: X [N, D], X2 [M, D] -> [N, M]; lengthscale scalar or [D].
    """

    __slots__ = ()

    def _profile(self, xp, r2: Array) -> Array:
        s = math.sqrt(3.0) * _safe_sqrt(xp, r2)
        return (1.0 + s) * xp.exp(-s)


class Matern52(Stationary):
    """Matérn 5/2 kernel: ``k = sigma^2 (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r)``.

    Shapes: X [N, D], X2 [M, D] -> [N, M]; lengthscale scalar or [D].
    """

    __slots__ = ()

    def _profile(self, xp, r2: Array) -> Array:
        s = math.sqrt(5.0) * _safe_sqrt(xp, r2)
        return (1.0 + s + (5.0 / 3.0) * r2) * xp.exp(-s)


class Periodic(Kernel):
    """MacKay's periodic (exp-sine-squared) kernel, as a product over input dimensions.

    ``k(x, x') = sigma^2 exp(-2 sum_d sin^2(pi (x_d - x'_d) / p_d) / ell_d^2)``

    In one dimension this is scikit-learn's ``ExpSineSquared(length_scale=ell, periodicity=p)``
    times ``sigma^2``. It is evaluated through ``2 sin^2(t) = 1 - cos(2 t)`` and
    ``cos(u - u') = cos u cos u' + sin u sin u'`` with ``u_d = 2 pi x_d / p_d``, i.e. as inner
    products of cosine and sine features, so memory is O(N M) rather than O(N M D).

    Args:
        variance: ``sigma^2``, scalar > 0.
        lengthscale: ``ell``, scalar or [D], > 0.
        period: ``p``, scalar or [D], > 0.
        active_dims: input columns used (see :class:`Kernel`).

    Shapes: X [N, D], X2 [M, D] -> [N, M].
    """

    __slots__ = ("variance", "lengthscale", "period")
    param_names = ("variance", "lengthscale", "period")
    ard_names = ("lengthscale", "period")

    def __init__(
        self,
        variance: Any = 1.0,
        lengthscale: Any = 1.0,
        period: Any = 1.0,
        active_dims: Iterable[int] | None = None,
    ) -> None:
        super().__init__(active_dims)
        for name, value, max_ndim in (
            ("variance", variance, 0),
            ("lengthscale", lengthscale, 1),
            ("period", period, 1),
        ):
            object.__setattr__(self, name, _check_hyperparameter("Periodic", name, value, max_ndim))

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        variance = _cast(xp, self.variance, X)
        weight = _ones(xp, X.shape[1], X) / _cast(xp, self.lengthscale, X) ** 2  # [D]
        period = _cast(xp, self.period, X)

        def features(Z: Array) -> tuple[Array, Array]:
            u = (2.0 * math.pi) * Z / period
            return xp.cos(u), xp.sin(u)

        cos1, sin1 = features(X)
        cos2, sin2 = (cos1, sin1) if X2 is None else features(X2)
        # s[i, j] = sum_d w_d (1 - cos(u_id - u'_jd)) = 2 sum_d w_d sin^2(pi (x_id - x'_jd) / p_d)
        s = xp.sum(weight) - (cos1 * weight) @ cos2.T - (sin1 * weight) @ sin2.T
        s = xp.clip(s, min=0.0)
        if X2 is None:
            s = _zero_diagonal(xp, s)
        return variance * xp.exp(-s)

    def _diag(self, xp, X: Array) -> Array:
        return _cast(xp, self.variance, X) * _ones(xp, X.shape[0], X)


class Cosine(Stationary):
    """Cosine kernel (thesis Ch 6, GPflow's ``Cosine``): ``k = sigma^2 cos(sum_d (x_d - x'_d) / ell_d)``.

    A positive semi-definite kernel of rank 2, evaluated as ``cos(s - s') = cos s cos s' + sin s sin s'`` with
    ``s = sum_d x_d / ell_d``, so memory is O(N M) and no [N, M, D] array is formed.

    Shapes: X [N, D], X2 [M, D] -> [N, M]; lengthscale scalar or [D].
    """

    __slots__ = ()

    def _K(self, xp, X: Array, X2: Array | None) -> Array:
        variance, lengthscale = _cast(xp, self.variance, X), _cast(xp, self.lengthscale, X)
        weight = _ones(xp, X.shape[1], X) / lengthscale  # [D]
        s1 = xp.sum(X * weight, axis=1)
        s2 = s1 if X2 is None else xp.sum(X2 * weight, axis=1)
        return variance * (xp.cos(s1)[:, None] * xp.cos(s2)[None, :] + xp.sin(s1)[:, None] * xp.sin(s2)[None, :])
