"""Likelihoods p(y | f) for a scalar latent f, with their Gaussian expectations.

Every method is elementwise and broadcasts over any leading shape ``[...]``. A variational marginal
``q(f) = N(f | mean, var)`` is given by two arrays ``mean`` and ``var`` of broadcastable shapes.
Sparse variational GPs need three integrals (Matthews 2016, Sections 4.3 and 6.6.1):

* ``variational_expectation``  ``E_q[log p(y | f)]``   (the data term of the ELBO),
* ``log_predictive_density``   ``log E_q[p(y | f)]``   (the NLPD of a test point),
* ``predict_mean_and_var``     ``E_q[y], Var_q[y]``    (moments of the predictive ``q(y)``).

The base class :class:`Likelihood` computes all three by Gauss-Hermite quadrature from ``log_prob``
and the conditional moments; a subclass overrides them where a closed form exists (Gaussian, Poisson
with exp link, Bernoulli-probit predictive). With ``t_i, w_i`` the nodes and weights of
:func:`ppl_sparsegp.core.ops.gauss_hermite` (standard normal, ``sum_i w_i = 1``), ``f_i = mean +
sqrt(var) t_i``:

    E_q[g(f)]         ~= sum_i w_i g(f_i)
    log E_q[p(y | f)] ~= logsumexp_i (log w_i + log p(y | f_i))

The number of nodes is :attr:`Likelihood.quadrature_order` (default 20, as in GPflow; the single
place for this default). Quadrature is accurate when the integrand is smooth on the scale
``sqrt(var)``. A density ``p(y | f)`` much narrower than ``sqrt(var)`` in f (a Student-t whose
``scale`` is small next to ``sqrt(var)``, a Poisson with large counts and large ``var``) needs a
higher order, above all for ``log_predictive_density``.

Likelihood objects are frozen dataclasses holding their hyperparameters: Python floats, numpy arrays
or arrays of any backend (jax tracers included, when a NumPyro model rebuilds the likelihood from
sampled values with :meth:`Likelihood.with_parameters`). Construction checks positivity only for
concrete Python/numpy values, so it never forces a device sync. All arithmetic uses the array API
plus :mod:`ppl_sparsegp.core.ops`, so it runs on jax.numpy, torch and numpy. Inputs from several backends
are moved to the one that is not numpy (numpy data with jax latents computes in jax) and cast to the
floating dtype of the latent arrays (``f``, or ``mean`` and ``var``); integer labels and counts
are cast too. Nothing here draws random numbers: :func:`ppl_sparsegp.numpyro.distributions.observation_distribution`
gives the NumPyro distribution of y given f, for posterior predictive draws.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import operator
from typing import Any, ClassVar

import array_api_compat
import numpy as np

from . import ops
from .ops import Array, namespace

__all__ = [
    "Bernoulli",
    "Gaussian",
    "Likelihood",
    "Poisson",
    "StudentT",
    "likelihood_from_name",
    "likelihood_with_noise",
]

_LOG_2PI = math.log(2.0 * math.pi)


def _coerce(latent: tuple[Any, ...], others: tuple[Any, ...] = ()) -> tuple[Any, list, list]:
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


def _check_positive(name: str, value: Any) -> None:
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
            _check_positive(name, getattr(self, name))

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
        xp, (mean, var), _ = _coerce((mean, var))
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
        _, _, (y,) = _coerce((mean, var), (y,))
        return self._expect(lambda f: self.log_prob(y[..., None], f), mean, var)

    def log_predictive_density(self, y: Array, mean: Array, var: Array) -> Array:
        """``log E_{N(f | mean, var)}[p(y | f)]``; y, mean, var broadcast to [...], result [...].

        Base class: ``logsumexp_i (log w_i + log p(y | f_i))`` by Gauss-Hermite quadrature.
        """
        xp, _, (y,) = _coerce((mean, var), (y,))
        f, w = self._quadrature_nodes(mean, var)
        return ops.logsumexp(xp.log(w) + self.log_prob(y[..., None], f), axis=-1)

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
        xp, (f,), (y, s2) = _coerce((f,), (y, self.variance))
        return -0.5 * (_LOG_2PI + xp.log(s2)) - (y - f) ** 2 / (2.0 * s2)

    def conditional_mean(self, f: Array) -> Array:
        """``E[y | f] = f``; [...]."""
        return f

    def conditional_variance(self, f: Array) -> Array:
        """``Var[y | f] = sigma^2``, broadcast to f [...]."""
        xp, (f,), (s2,) = _coerce((f,), (self.variance,))
        return xp.zeros_like(f) + s2

    def variational_expectation(self, y: Array, mean: Array, var: Array) -> Array:
        """``-1/2 log(2 pi sigma^2) - ((y - mean)^2 + var) / (2 sigma^2)``; [...]."""
        xp, (mean, var), (y, s2) = _coerce((mean, var), (y, self.variance))
        return -0.5 * (_LOG_2PI + xp.log(s2)) - ((y - mean) ** 2 + var) / (2.0 * s2)

    def log_predictive_density(self, y: Array, mean: Array, var: Array) -> Array:
        """``log N(y | mean, var + sigma^2)``; [...]."""
        xp, (mean, var), (y, s2) = _coerce((mean, var), (y, self.variance))
        total = var + s2
        return -0.5 * (_LOG_2PI + xp.log(total)) - (y - mean) ** 2 / (2.0 * total)

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """``(mean, var + sigma^2)``; each [...]."""
        _, (mean, var), (s2,) = _coerce((mean, var), (self.variance,))
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
        _, (f,), (y,) = _coerce((f,), (y,))
        return self._log_link((2.0 * y - 1.0) * f)

    def conditional_mean(self, f: Array) -> Array:
        """``p(y = 1 | f) = link(f)``; [...]."""
        xp, (f,), _ = _coerce((f,))
        return xp.exp(self._log_link(f))

    def conditional_variance(self, f: Array) -> Array:
        """``link(f) link(-f)``; [...]."""
        xp, (f,), _ = _coerce((f,))
        return xp.exp(self._log_link(f) + self._log_link(-f))

    def log_predictive_density(self, y: Array, mean: Array, var: Array) -> Array:
        """Probit: ``log Phi((2y - 1) mean / sqrt(1 + var))``; logit: quadrature. Result [...]."""
        if self.link == "logit":
            return super().log_predictive_density(y, mean, var)
        xp, (mean, var), (y,) = _coerce((mean, var), (y,))
        return ops.normal_logcdf((2.0 * y - 1.0) * mean / xp.sqrt(1.0 + var))

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """``(p, p (1 - p))`` with ``p = q(y = 1)`` and ``1 - p = q(y = 0)`` computed directly."""
        xp, (mean, var), _ = _coerce((mean, var))
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
        _check_positive("binsize", self.binsize)

    def log_prob(self, y: Array, f: Array) -> Array:
        """``y (f + log binsize) - binsize exp(f) - log Gamma(y + 1)``; [...]."""
        xp, (f,), (y, dt) = _coerce((f,), (y, self.binsize))
        return y * (f + xp.log(dt)) - dt * xp.exp(f) - ops.gammaln(y + 1.0)

    def conditional_mean(self, f: Array) -> Array:
        """``binsize exp(f)``; [...]."""
        xp, (f,), (dt,) = _coerce((f,), (self.binsize,))
        return dt * xp.exp(f)

    def conditional_variance(self, f: Array) -> Array:
        """``binsize exp(f)`` (equal to the mean); [...]."""
        return self.conditional_mean(f)

    def variational_expectation(self, y: Array, mean: Array, var: Array) -> Array:
        """``y (mean + log binsize) - binsize exp(mean + var / 2) - log Gamma(y + 1)``; [...]."""
        xp, (mean, var), (y, dt) = _coerce((mean, var), (y, self.binsize))
        return y * (mean + xp.log(dt)) - dt * xp.exp(mean + 0.5 * var) - ops.gammaln(y + 1.0)

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """``E[y] = m = binsize exp(mean + var/2)``, ``Var[y] = m + m^2 (exp(var) - 1)``; [...]."""
        xp, (mean, var), (dt,) = _coerce((mean, var), (self.binsize,))
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
        _check_positive("df", self.df)
        object.__setattr__(self, "df", float(self.df))

    def log_prob(self, y: Array, f: Array) -> Array:
        """Student-t log density of ``y`` with location ``f``; [...]."""
        nu = self.df
        const = math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu) - 0.5 * math.log(nu * math.pi)
        xp, (f,), (y, scale) = _coerce((f,), (y, self.scale))
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
        xp, (f,), (scale,) = _coerce((f,), (self.scale,))
        return xp.zeros_like(f) + scale**2 * self._noise_variance_factor()

    def predict_mean_and_var(self, mean: Array, var: Array) -> tuple[Array, Array]:
        """``(mean, var + scale^2 df / (df - 2))``, NaN or inf for small df (see class); [...]."""
        _, (mean, var), (scale,) = _coerce((mean, var), (self.scale,))
        return self.conditional_mean(mean), var + scale**2 * self._noise_variance_factor()


_FACTORIES: dict[str, Any] = {
    "gaussian": Gaussian,
    "bernoulli": Bernoulli,
    "probit": lambda **kw: Bernoulli(link="probit", **kw),
    "logit": lambda **kw: Bernoulli(link="logit", **kw),
    "poisson": Poisson,
    "studentt": StudentT,
}


def likelihood_from_name(name: str, **kwargs: Any) -> Likelihood:
    """Build a likelihood by name (case-insensitive), passing ``kwargs`` to its constructor.

    Names: ``gaussian``, ``bernoulli`` (probit unless ``link=`` is given), ``probit``, ``logit``,
    ``poisson``, ``studentt``.

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    key = name.lower()
    if key not in _FACTORIES:
        raise ValueError(f"unknown likelihood {name!r}; valid names: {', '.join(_FACTORIES)}")
    return _FACTORIES[key](**kwargs)


def likelihood_with_noise(name: str, noise_variance: float | None, dtype: Any) -> Likelihood:
    """The likelihood ``name`` with its noise set from one number, as the command line gives it: the variance of a
    Gaussian, the squared scale of a Student-t; ignored (may be None) by the others. Hyperparameters get ``dtype``."""
    if name == "gaussian":
        return Gaussian(variance=np.asarray(noise_variance, dtype=dtype))
    if name == "studentt":
        return StudentT(scale=np.asarray(math.sqrt(noise_variance), dtype=dtype))
    return likelihood_from_name(name)
