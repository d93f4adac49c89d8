"""The layer rules of docs/architecture.md, checked on the source: which package may import which."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ppl_sparsegp"

ALLOWED = {
    # layer: the ppl_sparsegp modules it may import (prefixes)
    "core": ("ppl_sparsegp.core",),
    "backends": ("ppl_sparsegp.core", "ppl_sparsegp.backends"),
    "numpyro": (
        "ppl_sparsegp.core",
        "ppl_sparsegp.numpyro",
        "ppl_sparsegp.inducing.samplers",  # the host-side k-DPP draw behind DeterminantalZPrior.sample_from_candidates
        "ppl_sparsegp.validation",
        "ppl_sparsegp.infer.score_function",  # the baseline site that ScoreFunctionELBO reads, declared in guides
    ),
    "infer": (
        "ppl_sparsegp.core.ops",
        "ppl_sparsegp.core.sgmcmc",  # the SG-MCMC update rules, shared with the Pyro kernels
        "ppl_sparsegp.core.score_function_terms",  # a particle's terms of ScoreFunctionELBO, shared with the Pyro twin
        "ppl_sparsegp.infer",
        "ppl_sparsegp.results",
        "ppl_sparsegp.validation",
    ),
    "pyro": (
        "ppl_sparsegp.core",
        "ppl_sparsegp.pyro",
        "ppl_sparsegp.inducing.samplers",  # as the numpyro layer: DeterminantalZPrior.sample_from_candidates
        "ppl_sparsegp.validation",
    ),
}
PYRO_EXTRA_IMPORTS = {
    # modules of the pyro layer that run the twins (fit loop, chains, mixtures over draws, ArviZ output), and the
    # NumPyro side's engine-free pieces they reuse rather than restate; nn reads the NumPyro networks it twins
    "svi.py": ("ppl_sparsegp.infer.checkpoint", "ppl_sparsegp.infer.progress", "ppl_sparsegp.infer.svi"),
    "predict.py": ("ppl_sparsegp.data", "ppl_sparsegp.posterior.predict"),  # Standardizer, PosteriorPredictive
    "mcmc.py": ("ppl_sparsegp.infer.checkpoint", "ppl_sparsegp.infer.progress", "ppl_sparsegp.infer.mcmc"),
    "diagnostics.py": ("ppl_sparsegp.posterior.diagnostics", "ppl_sparsegp.infer.mcmc"),  # InferenceData, GP dims
    "nn.py": ("ppl_sparsegp.numpyro.nn",),  # encoder_twin: the equinox module's widths and activation
}
THIRD_PARTY_EXCEPTIONS = {
    # (layer, module): the forbidden packages it may import inside a function
    ("pyro", "nn.py"): ("jax", "equinox"),  # load_numpyro_weights, encoder_twin read the NumPyro twin's network
}
FORBIDDEN = {
    # layer: the ppl_sparsegp modules it must not import (the layers above it)
    "recipes": ("ppl_sparsegp.cli",),
    "posterior": ("ppl_sparsegp.recipes", "ppl_sparsegp.runs", "ppl_sparsegp.cli"),
    "runs": ("ppl_sparsegp.cli",),
}
MODELS = PACKAGE.parent / "models"
FORBIDDEN_THIRD_PARTY = {
    "core": ("jax", "jaxlib", "numpyro", "torch", "pyro", "flax", "equinox"),
    "pyro": ("jax", "jaxlib", "numpyro", "flax", "equinox"),
}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[: -node.level])
                base = f"{package}.{node.module}" if node.module else package
                names += [base] if node.module else [f"{base}.{alias.name}" for alias in node.names]
            else:
                names += [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def test_each_layer_imports_only_what_it_may():
    broken = []
    for layer, allowed in ALLOWED.items():
        for path in (PACKAGE / layer).rglob("*.py"):
            extra = PYRO_EXTRA_IMPORTS.get(path.name, ()) if layer == "pyro" else ()
            for name in _imports(path):
                if name.startswith("ppl_sparsegp") and not name.startswith((*allowed, *extra)):
                    broken.append(f"{path.relative_to(PACKAGE)} imports {name}")
                top = name.split(".")[0]
                excepted = THIRD_PARTY_EXCEPTIONS.get((layer, path.name), ())
                if top in FORBIDDEN_THIRD_PARTY.get(layer, ()) and top not in excepted:
                    broken.append(f"{path.relative_to(PACKAGE)} imports {name}")
    assert not broken, "\n".join(broken)


def test_recipes_and_models_do_not_import_the_layers_above_them():
    broken = []
    layers = [(PACKAGE / layer, names) for layer, names in FORBIDDEN.items()]
    for folder, names in [*layers, (MODELS, ("ppl_sparsegp.recipes", "ppl_sparsegp.cli"))]:
        for path in folder.rglob("*.py"):
            broken += [f"{path.name} imports {name}" for name in _imports(path) if name.startswith(names)]
    assert not broken, "\n".join(broken)


def test_the_pyro_twins_and_what_they_share_import_neither_jax_nor_numpyro():
    jax_side = ("jax", "jaxlib", "numpyro", "equinox", "flax")
    broken = []
    for path in [MODELS / "_shared.py", *(MODELS / "pyro").rglob("*.py")]:
        for name in _imports(path):
            if name.split(".")[0] in jax_side or ".numpyro" in name:
                broken.append(f"{path.relative_to(MODELS.parent)} imports {name}")
    assert not broken, "\n".join(broken)
