"""Likelihoods by name, as the command line and configs give them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ppl_sparsegp.core.likelihoods.base import Likelihood
from ppl_sparsegp.core.likelihoods.multiclass import RobustMax, Softmax
from ppl_sparsegp.core.likelihoods.scalar import Bernoulli, Beta, Exponential, Gamma, Gaussian, Poisson, StudentT

_FACTORIES: dict[str, Any] = {
    "gaussian": Gaussian,
    "bernoulli": Bernoulli,
    "probit": lambda **kw: Bernoulli(link="probit", **kw),
    "logit": lambda **kw: Bernoulli(link="logit", **kw),
    "poisson": Poisson,
    "studentt": StudentT,
    "exponential": Exponential,
    "gamma": Gamma,
    "beta": Beta,
    "robustmax": RobustMax,
    "softmax": Softmax,
}
MULTICLASS = ("robustmax", "softmax")
"""The names of the likelihoods of a class label from J latent functions (``num_classes=`` required)."""


def likelihood_from_name(name: str, **kwargs: Any) -> Likelihood:
    """Build a likelihood by name (case-insensitive), passing ``kwargs`` to its constructor.

    Names: ``gaussian``, ``bernoulli`` (probit unless ``link=`` is given), ``probit``, ``logit``, ``poisson``,
    ``studentt``, ``exponential``, ``gamma``, ``beta``, and the multi-class ``robustmax`` and ``softmax``
    (``num_classes=J``, 2 when not given).

    Raises:
        ValueError: an unknown name (the message lists the valid ones).
    """
    key = name.lower()
    if key not in _FACTORIES:
        raise ValueError(f"unknown likelihood {name!r}; valid names: {', '.join(_FACTORIES)}")
    return _FACTORIES[key](**kwargs)


def likelihood_with_noise(name: str, noise_variance: float | None, dtype: Any, num_classes: int = 2) -> Likelihood:
    """The likelihood ``name`` with its noise set from one number, as the command line gives it: the variance of a
    Gaussian, the squared scale of a Student-t; ignored (may be None) by the others. Hyperparameters get ``dtype``;
    a multi-class likelihood gets ``num_classes``."""
    if name == "gaussian":
        return Gaussian(variance=np.asarray(noise_variance, dtype=dtype))
    if name == "studentt":
        return StudentT(scale=np.asarray(math.sqrt(noise_variance), dtype=dtype))
    if name.lower() in MULTICLASS:
        return likelihood_from_name(name, num_classes=num_classes)
    return likelihood_from_name(name)
