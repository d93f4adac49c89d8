"""The naming of hyperparameter sites, shared by the NumPyro and the Pyro models (the same names on both).

Every kernel and likelihood hyperparameter is one site named ``"<prefix>kernel.<name>"`` or
``"<prefix>likelihood.<name>"`` after the keys of ``Kernel.parameters()`` / ``Likelihood.parameters()`` (e.g.
``"kernel.lengthscale"``, ``"kernel.k0.variance"``, ``"likelihood.variance"``). This module maps a kernel and a
likelihood to those sites and back; which kind of site each becomes (param, sample, constant) is the PPL's
``sites`` module's business.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .kernels import Kernel
from .likelihoods import Likelihood

Array = Any


def site_values(kernel: Kernel, likelihood: Likelihood | None, prefix: str = "") -> dict[str, Any]:
    """Site name -> the stored value (a number or an array of any backend, any shape) of every kernel and
    likelihood hyperparameter."""
    sites = {f"{prefix}kernel.{k}": v for k, v in kernel.parameters().items()}
    if likelihood is not None:
        sites.update({f"{prefix}likelihood.{k}": v for k, v in likelihood.parameters().items()})
    return sites


def rebuild(
    kernel: Kernel, likelihood: Likelihood | None, values: Mapping[str, Array], prefix: str = ""
) -> tuple[Kernel, Likelihood | None]:
    """Kernel and likelihood with the hyperparameters in ``values`` (keyed by site name) replaced."""
    k = {s.removeprefix(f"{prefix}kernel."): v for s, v in values.items() if s.startswith(f"{prefix}kernel.")}
    lik = {s.removeprefix(f"{prefix}likelihood."): v for s, v in values.items() if s.startswith(f"{prefix}likelihood.")}
    return kernel.with_parameters(k), (None if likelihood is None else likelihood.with_parameters(lik))


def check_choices(names: Collection[str], priors: Collection[str], fixed: Collection[str]) -> None:
    """The sites named in ``priors`` and in ``fixed`` are among the hyperparameter site ``names`` and in one of the
    two at most.

    Raises:
        ValueError: naming ``priors`` or ``fixed`` and the offending sites.
    """
    names = set(names)
    for arg, given in (("priors", set(priors)), ("fixed", set(fixed))):
        unknown = given - names
        if unknown:
            raise ValueError(
                f"{arg} names unknown hyperparameter sites {sorted(unknown)}; expected some of {sorted(names)}"
            )
    both = set(priors) & set(fixed)
    if both:
        raise ValueError(f"sites {sorted(both)} are in both `priors` and `fixed`; choose one")
