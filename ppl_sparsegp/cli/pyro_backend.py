"""``--backend pyro``: the method's model as its Pyro twin (:mod:`ppl_sparsegp.models.pyro`, the same sites and
params), fitted by Pyro's engines in torch at ``--dtype``: gpr, sgpr and svgp by :func:`fit_svi`, and the recipes'
Pyro twins for the others (:func:`fit_sgpmc`, :func:`fit_bsgp`, :func:`fit_selective`, :func:`fit_idsgp`,
:func:`fit_sas`).

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
from ppl_sparsegp.recipes.epochs import EpochFit
from ppl_sparsegp.recipes.selective import SelectiveFit
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


def numpyro_params(params: dict[str, Any], networks: dict[str, tuple[torch.nn.Module, Any]]) -> dict[str, Any]:
    """A Pyro fit's ``params`` under the NumPyro twin's names: each network ``name`` -> (its torch module, the NumPyro
    model's equinox module) has its ``"<name>.<parameter>"`` tensors become the weights pytree at ``"<name>$params"``
    (:func:`ppl_sparsegp.pyro.nn.numpyro_weights`); every other param is a numpy array."""
    import equinox as eqx

    from ppl_sparsegp.pyro import nn

    converted = {k: v.numpy() for k, v in params.items() if k.split(".", 1)[0] not in networks}
    for name, (module, template) in networks.items():
        weights = eqx.partition(template, eqx.is_inexact_array)[0]
        converted[f"{name}$params"] = nn.numpyro_weights(module, weights, params, name)
    return converted


def _evaluated_by_numpyro(fit: EpochFit, model: Any, network: str) -> EpochFit:
    """A Pyro model's ``fit`` with, as ``model``, the NumPyro twin ``model`` and, as params, the fit's under NumPyro's
    names (:func:`numpyro_params`); ``network``: the attribute of both models holding the network, and its name."""
    networks = {network: (getattr(fit.model, network), getattr(model, network))}
    return dataclasses.replace(
        fit, model=model, svi=dataclasses.replace(fit.svi, params=numpyro_params(fit.params, networks))
    )


def fit_idsgp(X: np.ndarray, y: np.ndarray, config: Any, opts: dict[str, Any], **recipe: Any) -> EpochFit:
    """IDSGP's recipe on the Pyro side (:func:`ppl_sparsegp.recipes.idsgp_pyro.fit_idsgp`) from seed ``--seed`` at
    ``--dtype``; ``recipe``: its other arguments (``likelihood``, checkpoint, progress). Returns the
    :class:`~ppl_sparsegp.recipes.epochs.EpochFit` with, as ``model``, the NumPyro IDSGP of the same settings, which
    evaluates and stores the fit (:func:`_evaluated_by_numpyro`)."""
    from ppl_sparsegp.models.numpyro.idsgp import NETWORK
    from ppl_sparsegp.recipes.idsgp import build_idsgp
    from ppl_sparsegp.recipes.idsgp_pyro import fit_idsgp as fit_by_pyro

    with default_dtype(opts["dtype"]):
        fit = fit_by_pyro(X, y, config, seed=opts["seed"], **recipe)
    return _evaluated_by_numpyro(fit, build_idsgp(config, X, recipe["likelihood"], opts["seed"]), NETWORK)


def fit_sas(Y: np.ndarray, config: Any, opts: dict[str, Any], **recipe: Any) -> EpochFit:
    """SAS-GP's recipe on the Pyro side (:func:`ppl_sparsegp.recipes.sas_gplvm_pyro.fit_sas`) from seed ``--seed``
    at ``--dtype``; ``recipe``: its other arguments (checkpoint, progress). Returns the
    :class:`~ppl_sparsegp.recipes.epochs.EpochFit` with, as ``model``, the NumPyro SASGPLVM of the same settings,
    which :func:`~ppl_sparsegp.recipes.sas_gplvm.evaluate_sas` evaluates (:func:`_evaluated_by_numpyro`)."""
    from ppl_sparsegp.models.numpyro.sas_gplvm import ENCODER
    from ppl_sparsegp.recipes.sas_gplvm import build_sas
    from ppl_sparsegp.recipes.sas_gplvm_pyro import fit_sas as fit_by_pyro

    with default_dtype(opts["dtype"]):
        fit = fit_by_pyro(Y, config, seed=opts["seed"], **recipe)
    return _evaluated_by_numpyro(fit, build_sas(config, Y, opts["seed"]), ENCODER)


def fit_bsgp(X: np.ndarray, y: np.ndarray, config: Any, opts: dict[str, Any], **recipe: Any) -> Any:
    """BSGP's recipe on the Pyro side (:func:`ppl_sparsegp.recipes.bsgp_pyro.fit_bsgp`, ``config`` a
    :class:`~ppl_sparsegp.recipes.bsgp.BSGPConfig`) at ``--dtype`` from seed ``--seed``; ``recipe``: its other
    arguments. Returns its :class:`~ppl_sparsegp.recipes.bsgp.BSGPFit`, whose ``model`` is the NumPyro twin of the
    sampled model, which evaluates the draws."""
    from ppl_sparsegp.recipes.bsgp_pyro import fit_bsgp as fit_by_pyro

    with default_dtype(opts["dtype"]):
        return fit_by_pyro(X, y, config, seed=opts["seed"], **recipe)


def fit_selective(X: np.ndarray, y: np.ndarray, config: Any, opts: dict[str, Any], **recipe: Any) -> SelectiveFit:
    """Selective's recipe on the Pyro side (:func:`ppl_sparsegp.recipes.selective_pyro.fit_selective`) on X [N, D],
    y [N] from seed ``--seed`` at ``--dtype``; ``recipe``: its other arguments (``likelihood``, ``kernel``,
    checkpoints, progress, overrides of ``config``). Returns the
    :class:`~ppl_sparsegp.recipes.selective.SelectiveFit` with every param a numpy array and, as ``selective`` and
    ``model``, the NumPyro selective model over the same candidates
    (:func:`~ppl_sparsegp.recipes.selective.build_selective`) and its pruning to the drawn subset, which evaluate and
    store the fit; the selection's params leave out the running sums of the Pyro ``ScoreFunctionELBO``'s baseline
    (:data:`ppl_sparsegp.models.pyro.selective.SCORE_FUNCTION_BASELINE`), which the NumPyro model does not take as
    params."""
    from ppl_sparsegp.models.pyro.selective import SCORE_FUNCTION_BASELINE
    from ppl_sparsegp.recipes.selective import build_selective
    from ppl_sparsegp.recipes.selective_pyro import fit_selective as fit_by_pyro

    with default_dtype(opts["dtype"]):
        fit = fit_by_pyro(X, y, config, seed=opts["seed"], **recipe)
    selective_params = {k: v.numpy() for k, v in fit.selective_params.items() if k not in SCORE_FUNCTION_BASELINE}
    parts = {"likelihood": recipe["likelihood"], "kernel": recipe["kernel"]}
    _, selective = build_selective(X, y, config, **parts, key=opts["seed"])
    pruned, _ = selective.prune(selective_params, fit.mask)
    params = {name: value.numpy() for name, value in fit.params.items()}
    return dataclasses.replace(fit, model=pruned, params=params, selective=selective, selective_params=selective_params)
