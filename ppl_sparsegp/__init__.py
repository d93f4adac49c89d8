"""ppl_sparsegp: sparse Gaussian processes as probabilistic programs (NumPyro first, Pyro on the same core).

``import ppl_sparsegp as psg`` gives the everyday API::

    ds, scaler = psg.standardize(psg.load_dataset("diabetes"))
    gp = psg.SVGP(kernel=psg.kernels.RBF(lengthscale=np.ones(10)), likelihood=psg.likelihoods.Gaussian(),
                  Z=psg.kmeans(ds.X_train, 64))
    res = psg.fit_svi(gp.model, gp.guide, ds.X_train, ds.y_train, optimizer=optax.adam(0.01), num_steps=2000)

Names are loaded on first use (PEP 562), so ``import ppl_sparsegp.core`` stays free of jax, numpyro and torch.
Importing the package takes reductions out of XLA:CPU's YNNPACK fusions, which give wrong float32 results in
jaxlib 0.10.2 (:mod:`ppl_sparsegp.backends.xla_flags`).
"""

from __future__ import annotations

import importlib
from typing import Any

from ppl_sparsegp.backends import xla_flags as _xla_flags

_xla_flags.apply()

_EXPORTS: dict[str, tuple[str, str | None]] = {
    # numerics (backend-neutral)
    "kernels": ("ppl_sparsegp.core.kernels", None),
    "likelihoods": ("ppl_sparsegp.core.likelihoods", None),
    # models
    "GPR": ("ppl_sparsegp.models.numpyro.gpr", "GPR"),
    "SGPR": ("ppl_sparsegp.models.numpyro.sgpr", "SGPR"),
    "SVGP": ("ppl_sparsegp.models.numpyro.svgp", "SVGP"),
    "SGPMC": ("ppl_sparsegp.models.numpyro.sgpmc", "SGPMC"),
    "VGP": ("ppl_sparsegp.models.numpyro.vgp", "VGP"),
    "GPMC": ("ppl_sparsegp.models.numpyro.gpmc", "GPMC"),
    "BSGP": ("ppl_sparsegp.models.numpyro.bsgp", "BSGP"),
    "DeepBSGP": ("ppl_sparsegp.models.numpyro.deep_bsgp", "DeepBSGP"),
    "DeepSVGP": ("ppl_sparsegp.models.numpyro.deep_svgp", "DeepSVGP"),
    "BayesianGPLVM": ("ppl_sparsegp.models.numpyro.gplvm", "BayesianGPLVM"),
    "CollapsedGPLVM": ("ppl_sparsegp.models.numpyro.gplvm", "CollapsedGPLVM"),
    "SelectiveSGPR": ("ppl_sparsegp.models.numpyro.selective", "SelectiveSGPR"),
    "SelectiveSVGP": ("ppl_sparsegp.models.numpyro.selective", "SelectiveSVGP"),
    "IDSGP": ("ppl_sparsegp.models.numpyro.idsgp", "IDSGP"),
    "SASGPLVM": ("ppl_sparsegp.models.numpyro.sas_gplvm", "SASGPLVM"),
    # multi-phase procedures from the papers
    "fit_sgpmc": ("ppl_sparsegp.recipes.sgpmc", "fit_sgpmc"),
    "fit_bsgp": ("ppl_sparsegp.recipes.bsgp", "fit_bsgp"),
    "fit_sghmc_dgp": ("ppl_sparsegp.recipes.sghmc_dgp", "fit_sghmc_dgp"),
    "fit_selective": ("ppl_sparsegp.recipes.selective", "fit_selective"),
    "fit_idsgp": ("ppl_sparsegp.recipes.idsgp", "fit_idsgp"),
    "fit_sas": ("ppl_sparsegp.recipes.sas_gplvm", "fit_sas"),
    # engines
    "fit_svi": ("ppl_sparsegp.infer.svi", "fit_svi"),
    "run_mcmc": ("ppl_sparsegp.infer.mcmc", "run_mcmc"),
    # data, initialisation, evaluation
    "load_dataset": ("ppl_sparsegp.data", "load_dataset"),
    "standardize": ("ppl_sparsegp.data", "standardize"),
    "kmeans": ("ppl_sparsegp.inducing.initialise", "kmeans"),
    "metrics": ("ppl_sparsegp.metrics", None),
    # after the engine
    "predict": ("ppl_sparsegp.posterior.predict", None),
    "diagnostics": ("ppl_sparsegp.posterior.diagnostics", None),
    "to_inference_data": ("ppl_sparsegp.posterior.diagnostics", "from_fit"),
    "load_run": ("ppl_sparsegp.runs.load", "load_run"),
    "compare_runs": ("ppl_sparsegp.runs.compare", "compare_runs"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ppl_sparsegp' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
