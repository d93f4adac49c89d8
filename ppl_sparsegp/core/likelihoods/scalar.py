"""Likelihoods of a scalar latent f, elementwise over any leading shape: Gaussian, Bernoulli (probit, logit),
Poisson, Student-t, Exponential, Gamma and Beta."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

from ppl_sparsegp.core import ops
from ppl_sparsegp.core.likelihoods.base import Likelihood, check_positive, coerce
from ppl_sparsegp.core.ops import Array

_LOG_2PI = math.log(2.0 * math.pi)


@dataclasses.dataclass(frozen=True, eq=False)
class Gaussian(Likelihood):
    """``p(y | f) = N(y | f, variance)``; every expectation in closed form.

    Attributes:
        variance: noise variance sigma^2 > 0 (learnable).
    """

    variance: Any = 1.0

    _parameter_names: ClassVar[tuple[str, ...]] = ("variance",)

    def log_prob(self, y: Array, f: Array) -> Array:
        """``-1/2 log(2 pi sigma^2) - (y - f)^2 / (2 sigma^2)``; [...]."""
        xp, (f,), (y, s2) = coerce((f,), (y, self.variance))
        return -0.5 * (_LOG_2PI + xp.log(s2)) - (y - f) ** 2 / (2.0 * s2)

    def conditional_mean(self, f: Array) -> Array:
        """``E[y | f] = f``; [...]."""
        return f

    def conditional_variance(self, f: Array) -> Array:
        """``Var[y | f] = sigma^2``, broadcast to f [...]."""
        xp, (f,), (s2,) = coerce((f,), (self.variance,))
        return xp.zeros_like(f) + s2

    def variational_expectation(self, y: Array, mean: Array, var: Array) -> Array:
        """``-1/2 log(2 pi sigma^2) - ((y - mean)^2 + var) / (2 sigma^2)``; [...]."""
        xp, (mean, var), (y, s2) = coerce((mean, var), (y, self.variance))
        return -0.5 * (_LOG_2PI + xp.log(s2)) - ((y - mean) ** 2 + var) / (2.0 * s2)

    def log_predictive_density(self, y: Array, mean: Array, var: Array) -> Array:
        """``log N(y | mean, var + sigma^2)``; [...]."""
        xp, (mean, var), (y, s2) = coerce((mean, var), (y, self.variance))
        total = var + s2
        return -0.5 * (_LOG_2PI + xp.log(total)) - (y - mean) ** 2 / (2.0 * total)

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """``(mean, var + sigma^2)``; each [...]."""
        _, (mean, var), (s2,) = coerce((mean, var), (self.variance,))
        return mean, var + s2


@dataclasses.dataclass(frozen=True, eq=False)
class Bernoulli(Likelihood):
    """Binary ``y in {0, 1}`` with ``p(y = 1 | f) = link(f)``, no hyperparameters.

    * ``link="probit"``: ``log p(y | f) = log Phi((2y - 1) f)``; the predictive is closed form,
      ``q(y) = Phi((2y - 1) mean / sqrt(1 + var))``.
    * ``link="logit"``: ``log p(y | f) = log sigmoid((2y - 1) f)``; the predictive is by quadrature.

    The variational expectation has no closed form for either link and uses quadrature.

    Attributes:
        link: ``"probit"`` (default) or ``"logit"``.
    """

    link: str = "probit"

    LINKS: ClassVar[tuple[str, ...]] = ("probit", "logit")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.link not in self.LINKS:
            raise ValueError(f"unknown Bernoulli link {self.link!r}; valid links: {', '.join(self.LINKS)}")

    def _log_link(self, x: Array) -> Array:
        """``log link(x)``: ``log Phi(x)`` or ``log sigmoid(x)``; [...]."""
        return ops.normal_logcdf(x) if self.link == "probit" else ops.log_sigmoid(x)

    def log_prob(self, y: Array, f: Array) -> Array:
        """``log link((2y - 1) f)``; [...]."""
        _, (f,), (y,) = coerce((f,), (y,))
        return self._log_link((2.0 * y - 1.0) * f)

    def conditional_mean(self, f: Array) -> Array:
        """``p(y = 1 | f) = link(f)``; [...]."""
        xp, (f,), _ = coerce((f,))
        return xp.exp(self._log_link(f))

    def conditional_variance(self, f: Array) -> Array:
        """``link(f) link(-f)``; [...]."""
        xp, (f,), _ = coerce((f,))
        return xp.exp(self._log_link(f) + self._log_link(-f))

    def log_predictive_density(self, y: Array, mean: Array, var: Array) -> Array:
        """Probit: ``log Phi((2y - 1) mean / sqrt(1 + var))``; logit: quadrature. Result [...]."""
        if self.link == "logit":
            return super().log_predictive_density(y, mean, var)
        xp, (mean, var), (y,) = coerce((mean, var), (y,))
        return ops.normal_logcdf((2.0 * y - 1.0) * mean / xp.sqrt(1.0 + var))

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """``(p, p (1 - p))`` with ``p = q(y = 1)`` and ``1 - p = q(y = 0)`` computed directly."""
        xp, (mean, var), _ = coerce((mean, var))
        p1 = xp.exp(self.log_predictive_density(xp.ones_like(mean), mean, var))
        p0 = xp.exp(self.log_predictive_density(xp.zeros_like(mean), mean, var))
        return p1, p1 * p0


@dataclasses.dataclass(frozen=True, eq=False)
class Poisson(Likelihood):
    """Counts ``y in {0, 1, 2, ...}`` (as floats) with rate ``binsize * exp(f)``.

    ``log p(y | f) = y (f + log binsize) - binsize exp(f) - log y!``. With bin size ``binsize`` this
    is the binned log-Gaussian Cox process likelihood (Matthews 2016, Section 6.6.1,
    ``BinnedPoisson``). No learnable parameters. The variational expectation and the predictive
    moments are closed form; the predictive density is by quadrature.

    Attributes:
        binsize: fixed positive exposure Delta, a float or an array broadcasting with y [...].
    """

    binsize: Any = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("binsize", self.binsize)

    def log_prob(self, y: Array, f: Array) -> Array:
        """``y (f + log binsize) - binsize exp(f) - log Gamma(y + 1)``; [...]."""
        xp, (f,), (y, dt) = coerce((f,), (y, self.binsize))
        return y * (f + xp.log(dt)) - dt * xp.exp(f) - ops.gammaln(y + 1.0)

    def conditional_mean(self, f: Array) -> Array:
        """``binsize exp(f)``; [...]."""
        xp, (f,), (dt,) = coerce((f,), (self.binsize,))
        return dt * xp.exp(f)

    def conditional_variance(self, f: Array) -> Array:
        """``binsize exp(f)`` (equal to the mean); [...]."""
        return self.conditional_mean(f)

    def variational_expectation(self, y: Array, mean: Array, var: Array) -> Array:
        """``y (mean + log binsize) - binsize exp(mean + var / 2) - log Gamma(y + 1)``; [...]."""
        xp, (mean, var), (y, dt) = coerce((mean, var), (y, self.binsize))
        return y * (mean + xp.log(dt)) - dt * xp.exp(mean + 0.5 * var) - ops.gammaln(y + 1.0)

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """``E[y] = m = binsize exp(mean + var/2)``, ``Var[y] = m + m^2 (exp(var) - 1)``; [...]."""
        xp, (mean, var), (dt,) = coerce((mean, var), (self.binsize,))
        m = dt * xp.exp(mean + 0.5 * var)
        return m, m + m**2 * xp.expm1(var)


@dataclasses.dataclass(frozen=True, eq=False)
class StudentT(Likelihood):
    """Student-t noise around the latent: ``y = f + scale * eps``, ``eps ~ t_df``.

    ``log p(y | f) = lgamma((df+1)/2) - lgamma(df/2) - 1/2 log(df pi) - log scale
    - (df+1)/2 log(1 + ((y - f) / scale)^2 / df)``.
    Expectations are by quadrature, except the predictive moments ``E[y] = mean`` (NaN when
    df <= 1, where the mean does not exist) and ``Var[y] = var + scale^2 df / (df - 2)`` (inf
    when 1 < df <= 2 and NaN when df <= 1, as ``scipy.stats.t.var``).

    Attributes:
        df: degrees of freedom, a fixed positive Python float (not learnable).
        scale: scale > 0 of the noise (learnable).
    """

    df: float = 3.0
    scale: Any = 1.0

    _parameter_names: ClassVar[tuple[str, ...]] = ("scale",)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("df", self.df)
        object.__setattr__(self, "df", float(self.df))

    def log_prob(self, y: Array, f: Array) -> Array:
        """Student-t log density of ``y`` with location ``f``; [...]."""
        nu = self.df
        const = math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu) - 0.5 * math.log(nu * math.pi)
        xp, (f,), (y, scale) = coerce((f,), (y, self.scale))
        z = (y - f) / scale
        return const - xp.log(scale) - 0.5 * (nu + 1.0) * xp.log1p(z**2 / nu)

    def _noise_variance_factor(self) -> float:
        """``Var[eps] = df / (df - 2)`` of the standard t (inf if 1 < df <= 2, NaN if df <= 1)."""
        if self.df > 2.0:
            return self.df / (self.df - 2.0)
        return math.inf if self.df > 1.0 else math.nan

    def conditional_mean(self, f: Array) -> Array:
        """``E[y | f] = f`` (NaN when df <= 1); [...]."""
        return f if self.df > 1.0 else f + math.nan

    def conditional_variance(self, f: Array) -> Array:
        """``Var[y | f] = scale^2 df / (df - 2)``, broadcast to f [...]."""
        xp, (f,), (scale,) = coerce((f,), (self.scale,))
        return xp.zeros_like(f) + scale**2 * self._noise_variance_factor()

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """``(mean, var + scale^2 df / (df - 2))``, NaN or inf for small df (see class); [...]."""
        _, (mean, var), (scale,) = coerce((mean, var), (self.scale,))
        return self.conditional_mean(mean), var + scale**2 * self._noise_variance_factor()


@dataclasses.dataclass(frozen=True, eq=False)
class Gamma(Likelihood):
    """Positive ``y`` with ``y | f ~ Gamma(shape k, scale exp(f))`` (GPflow's exp inverse link).

    ``log p(y | f) = (k - 1) log y - y exp(-f) - k f - log Gamma(k)``; ``E[y | f] = k exp(f)``,
    ``Var[y | f] = k exp(2 f)``. Closed forms under ``q(f) = N(mean, var)``, from ``E[exp(a f)] = exp(a mean +
    a^2 var / 2)``: the variational expectation and the predictive moments ``E[y] = k exp(mean + var / 2)``,
    ``Var[y] = k (k + 1) exp(2 mean + 2 var) - E[y]^2``; the predictive density is by quadrature.

    Attributes:
        shape: k > 0 (learnable).
    """

    shape: Any = 1.0

    _parameter_names: ClassVar[tuple[str, ...]] = ("shape",)

    def log_prob(self, y: Array, f: Array) -> Array:
        """``(k - 1) log y - y exp(-f) - k f - log Gamma(k)``; [...]."""
        xp, (f,), (y, k) = coerce((f,), (y, self.shape))
        return (k - 1.0) * xp.log(y) - y * xp.exp(-f) - k * f - ops.gammaln(k)

    def conditional_mean(self, f: Array) -> Array:
        """``k exp(f)``; [...]."""
        xp, (f,), (k,) = coerce((f,), (self.shape,))
        return k * xp.exp(f)

    def conditional_variance(self, f: Array) -> Array:
        """``k exp(2 f)``; [...]."""
        xp, (f,), (k,) = coerce((f,), (self.shape,))
        return k * xp.exp(2.0 * f)

    def variational_expectation(self, y: Array, mean: Array, var: Array) -> Array:
        """``(k - 1) log y - y exp(-mean + var / 2) - k mean - log Gamma(k)``; [...]."""
        xp, (mean, var), (y, k) = coerce((mean, var), (y, self.shape))
        return (k - 1.0) * xp.log(y) - y * xp.exp(0.5 * var - mean) - k * mean - ops.gammaln(k)

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """``E[y] = k exp(mean + var / 2)``, ``Var[y] = k (k + 1) exp(2 mean + 2 var) - E[y]^2``; [...]."""
        xp, (mean, var), (k,) = coerce((mean, var), (self.shape,))
        m = k * xp.exp(mean + 0.5 * var)
        return m, k * (k + 1.0) * xp.exp(2.0 * (mean + var)) - m**2


@dataclasses.dataclass(frozen=True, eq=False)
class Exponential(Gamma):
    """Positive ``y`` with ``y | f ~ Exponential(scale exp(f))``: :class:`Gamma` with the shape fixed at 1,
    ``log p(y | f) = -f - y exp(-f)``; no learnable parameters."""

    shape: Any = dataclasses.field(default=1.0, init=False)

    _parameter_names: ClassVar[tuple[str, ...]] = ()


@dataclasses.dataclass(frozen=True, eq=False)
class Beta(Likelihood):
    """``y`` in (0, 1) with ``y | f ~ Beta(s m, s (1 - m))``, mean ``m = Phi(f)`` (GPflow's probit inverse link).

    ``log p(y | f) = log Gamma(s) - log Gamma(a) - log Gamma(b) + (a - 1) log y + (b - 1) log(1 - y)`` with
    ``a = s Phi(f)``, ``b = s Phi(-f)`` (each tail computed directly, and kept at least the dtype's smallest normal
    number so that both stay positive); ``E[y | f] = m``, ``Var[y | f] = m (1 - m) / (s + 1)``. Every expectation is
    by quadrature.

    Attributes:
        scale: the precision s > 0 (learnable).
    """

    scale: Any = 1.0

    _parameter_names: ClassVar[tuple[str, ...]] = ("scale",)

    def _means(self, f: Array) -> tuple[Array, Array]:
        """``(Phi(f), Phi(-f))``, each at least the dtype's smallest normal number; [...] each."""
        xp, (f,), _ = coerce((f,))
        tiny = float(xp.finfo(f.dtype).smallest_normal)
        return xp.maximum(ops.normal_cdf(f), tiny), xp.maximum(ops.normal_cdf(-f), tiny)

    def log_prob(self, y: Array, f: Array) -> Array:
        """The Beta log density of ``y`` with mean ``Phi(f)`` and precision s; [...]."""
        xp, (f,), (y, s) = coerce((f,), (y, self.scale))
        m, rest = self._means(f)
        a, b = s * m, s * rest
        norm = ops.gammaln(s) - ops.gammaln(a) - ops.gammaln(b)
        return norm + (a - 1.0) * xp.log(y) + (b - 1.0) * xp.log1p(-y)

    def conditional_mean(self, f: Array) -> Array:
        """``Phi(f)``; [...]."""
        return self._means(f)[0]

    def conditional_variance(self, f: Array) -> Array:
        """``Phi(f) Phi(-f) / (s + 1)``; [...]."""
        _, (f,), (s,) = coerce((f,), (self.scale,))
        m, rest = self._means(f)
        return m * rest / (s + 1.0)
