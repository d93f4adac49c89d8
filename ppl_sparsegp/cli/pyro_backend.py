"""``--backend pyro``: the method's model as its Pyro twin (:mod:`ppl_sparsegp.models.pyro`, the same sites and
params), fitted by Pyro's engines in torch at ``--dtype``: gpr, sgpr and svgp by :func:`fit_svi`, sgpmc by
:func:`fit_sgpmc`.

The fit is Pyro's; what follows it is shared with ``--backend numpyro``: the fitted params carry the NumPyro model's
names and the twins agree to 1e-10 (``tests/parity``), so the run is evaluated, stored and loaded back through the
NumPyro model, and its outputs (results.json, params.npz, posterior.nc, the figure) have the same form. Imported only
for a Pyro run, so that NumPyro runs never load torch.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import numpy as np
import torch

from ppl_sparsegp.infer.svi import SVIResult
from ppl_sparsegp.models.pyro._base import twin_of
from ppl_sparsegp.pyro import svi as pyro_svi
from ppl_sparsegp.pyro.dtype import default_dtype
from ppl_sparsegp.recipes.sgpmc import SGPMCFit


def fit_svi(gp: Any, X: np.ndarray, y: np.ndarray, opts: dict[str, Any], **engine: Any) -> SVIResult:
    """Fit the Pyro twin of ``gp`` (a NumPyro model) to ``X`` [N, D], ``y`` by :func:`ppl_sparsegp.pyro.svi.fit_svi`
    with Adam at ``--lr`` from seed ``--seed`` (``engine``: its other arguments: steps, progress, checkpoint);
    returns its result with the params as numpy arrays."""
    with default_dtype(opts["dtype"]):
        twin = twin_of(gp)
        fit = pyro_svi.fit_svi(
            twin.model, twin.guide, X, y, optimizer=partial(torch.optim.Adam, lr=opts["lr"]), seed=opts["seed"],
            validate=twin.check_data, **engine,
        )  # fmt: skip
    return dataclasses.replace(fit, params={name: value.numpy() for name, value in fit.params.items()})


def fit_sgpmc(X: np.ndarray, y: np.ndarray, config: Any, opts: dict[str, Any], **recipe: Any) -> SGPMCFit:
    """SGPMC's recipe on the Pyro side (:func:`ppl_sparsegp.recipes.sgpmc_pyro.fit_sgpmc`) with the Pyro priors of
    ``--prior`` from seed ``--seed``; ``recipe``: its other arguments. Returns the fit with, as ``model``, the NumPyro
    SGPMC at the Pyro model's Z, fixed sites and values, which evaluates the draws."""
    from ppl_sparsegp.core import hyperparameters
    from ppl_sparsegp.models.numpyro import sgpmc as numpyro_sgpmc
    from ppl_sparsegp.models.pyro import sgpmc as pyro_sgpmc
    from ppl_sparsegp.recipes.sgpmc_pyro import fit_sgpmc as fit_by_pyro

    kernel, likelihood = recipe["kernel"], recipe["likelihood"]
    with default_dtype(opts["dtype"]):
        priors = pyro_sgpmc.default_priors(kernel, likelihood, opts["prior"])
        fit = fit_by_pyro(X, y, config, seed=opts["seed"], priors=priors, **recipe)
    values = {site: value.numpy() for site, value in fit.model.hyperparameter_sites().items()}
    fitted_kernel, fitted_likelihood = hyperparameters.rebuild(kernel, likelihood, values)
    evaluated = numpyro_sgpmc.SGPMC(
        fitted_kernel, fitted_likelihood, numpyro_sgpmc.default_priors(kernel, likelihood, opts["prior"]),
        fixed=fit.model.fixed, Z=fit.model.Z.numpy(), num_latent=fit.model.num_latent,
    )  # fmt: skip
    return dataclasses.replace(fit, model=evaluated)


def fit_bsgp(X: np.ndarray, y: np.ndarray, config: Any, opts: dict[str, Any], **recipe: Any) -> Any:
    """BSGP's recipe on the Pyro side (:func:`ppl_sparsegp.recipes.bsgp_pyro.fit_bsgp`, ``config`` a
    :class:`~ppl_sparsegp.recipes.bsgp.BSGPConfig`) at ``--dtype`` from seed ``--seed``; ``recipe``: its other
    arguments. Returns its :class:`~ppl_sparsegp.recipes.bsgp.BSGPFit`, whose ``model`` is the NumPyro twin of the
    sampled model, which evaluates the draws."""
    from ppl_sparsegp.recipes.bsgp_pyro import fit_bsgp as fit_by_pyro

    with default_dtype(opts["dtype"]):
        return fit_by_pyro(X, y, config, seed=opts["seed"], **recipe)
