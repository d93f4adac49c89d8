"""Each method's model built from a run's options: by ``ppl-sparsegp fit`` from the initial values, and by
:func:`ppl_sparsegp.runs.load_run` from what the run stored (:data:`MODEL_FROM_RUN`), by the same code, so a
loaded run predicts with the model that was fitted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ppl_sparsegp.core import likelihoods
from ppl_sparsegp.models.numpyro.bsgp import BSGP, bsgp_kernel
from ppl_sparsegp.models.numpyro.deep_bsgp import DeepBSGP, deep_bsgp
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.idsgp import IDSGP, NETWORK_PARAMS
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.recipes.idsgp import IDSGPConfig, build_idsgp
from ppl_sparsegp.runs.store import StoredRun, nested_params

Rebuilt = tuple[Any, dict[str, Any]]
"""A fitted model and the parameters it predicts with (fixed values beside the draws of an MCMC run)."""


def latent_functions(likelihood: likelihoods.Likelihood, num_outputs: int) -> int:
    """The GP's latent functions: J for a multi-class likelihood of J classes, else one per output column."""
    return likelihood.latent_dim or num_outputs


def svgp_model(opts: Mapping[str, Any], parts: dict[str, Any], num_outputs: int, batch_size: int | None = None) -> SVGP:
    """The SVGP of options ``opts`` (``whiten``, ``q_diag``) from its ``kernel``, ``likelihood`` and ``Z``."""
    num_latent = latent_functions(parts["likelihood"], num_outputs)
    return SVGP(**parts, num_latent=num_latent, whiten=opts["whiten"], q_diag=opts["q_diag"], batch_size=batch_size)


def sgpmc_model(opts: Mapping[str, Any], parts: dict[str, Any], num_outputs: int) -> SGPMC:
    """The SGPMC of options ``opts`` (``prior``) from its ``kernel``, ``likelihood`` and ``Z``."""
    priors = default_priors(parts["kernel"], parts["likelihood"], opts["prior"])
    return SGPMC(**parts, priors=priors, num_latent=latent_functions(parts["likelihood"], num_outputs))


def idsgp_config(opts: Mapping[str, Any]) -> IDSGPConfig:
    """The IDSGP recipe's settings of the options ``opts``."""
    return IDSGPConfig(
        num_inducing=opts["inducing"], hidden=tuple(opts["hidden"]), activation=opts["activation"],
        kernel=opts["kernel"], white_variance=opts["white"] or None, learning_rate=opts["lr"],
        batch_size=opts["batch_size"] or IDSGPConfig.batch_size, num_epochs=opts["epochs"],
        dropout=opts.get("dropout", IDSGPConfig.dropout),  # runs stored before --dropout existed had none
    )  # fmt: skip


def bsgp_prediction_key(opts: Mapping[str, Any]) -> jax.Array:
    """The key of deep BSGP's inner-layer draws when it predicts (in the run and in a loaded run)."""
    return jax.random.fold_in(jax.random.PRNGKey(opts["seed"]), 1)


def _bsgp(opts: Mapping[str, Any], stored: StoredRun) -> tuple[BSGP | DeepBSGP, dict[str, Any]]:
    """BSGP (deep BSGP's inner means refitted to the reloaded training inputs, as the run fitted them); every value
    it predicts with is a draw."""
    options = {"z_prior": opts["z_prior"], "likelihood_term": opts["data_term"]}
    if opts["layers"] == 1:
        D, Z = stored.input_dim, stored.draws["Z"][0]
        return BSGP(bsgp_kernel(D), stored.likelihood(), Z=Z, num_latent=stored.num_outputs, **options), {}
    X, _ = stored.training()
    Z = stored.draws["layer0.Z"][0]
    return deep_bsgp(X, stored.num_outputs, stored.likelihood(), num_layers=opts["layers"], Z=Z, **options), {}


def _idsgp(opts: Mapping[str, Any], stored: StoredRun) -> tuple[IDSGP, dict[str, Any]]:
    """IDSGP, the network's weights rebuilt from params.npz."""
    N, D = int(stored.record["n_train"]), stored.input_dim
    model = build_idsgp(idsgp_config(opts), np.zeros((N, D), stored.dtype), stored.likelihood(), seed=opts["seed"])
    template = eqx.partition(model.network, eqx.is_inexact_array)[0]
    return model, nested_params(stored.arrays, {NETWORK_PARAMS: template})


def _selective(opts: Mapping[str, Any], stored: StoredRun) -> Rebuilt:
    """The pruned model: SGPR for the collapsed bound (it predicts from the reloaded training data), an unwhitened
    SVGP for the uncollapsed one."""
    if opts["bound"] == "collapsed":
        return SGPR(**stored.parts()), stored.arrays
    return SVGP(**stored.parts(), num_latent=stored.num_outputs, whiten=False), stored.arrays


MODEL_FROM_RUN: dict[str, Callable[[Mapping[str, Any], StoredRun], Rebuilt]] = {
    "svgp": lambda opts, stored: (svgp_model(opts, stored.parts(), stored.num_outputs), stored.arrays),
    "sgpr": lambda opts, stored: (SGPR(**stored.parts()), stored.arrays),
    "gpr": lambda opts, stored: (GPR(**stored.parts()), stored.arrays),
    "sgpmc": lambda opts, stored: (sgpmc_model(opts, stored.parts(), stored.num_outputs), stored.arrays),
    "bsgp": _bsgp,
    "selective": _selective,
    "idsgp": _idsgp,
}
"""method -> ``(options, stored run) -> (model, params)``: the fitted model of a saved run (gpr, sgpr and the
collapsed selective bound predict from the reloaded training data)."""
