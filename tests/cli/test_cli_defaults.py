"""Every default of ``fit`` comes from where it is written once: the recipe's config (sgpmc, bsgp, selective), the
model (svgp's whiten and q_diag) or :class:`ppl_sparsegp.cli.run.Defaults`; parsed, never restated."""

from __future__ import annotations

import dataclasses

from ppl_sparsegp.cli import bsgp, selective, sgpmc, svgp
from ppl_sparsegp.cli.__main__ import build_parser
from ppl_sparsegp.cli.run import DEFAULTS
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.recipes.bsgp import BSGPConfig
from ppl_sparsegp.recipes.selective import SelectiveConfig
from ppl_sparsegp.recipes.sgpmc import SGPMCConfig


def parsed(method: str, tmp_path) -> dict:
    return dict(vars(build_parser().parse_args(["fit", method, "--out", str(tmp_path)])))


def test_svgp_defaults_are_the_models_and_the_shared_ones(tmp_path):
    opts = parsed("svgp", tmp_path)
    model = {f.name: f.default for f in dataclasses.fields(SVGP)}
    assert (opts["whiten"], opts["q_diag"]) == (model["whiten"], model["q_diag"])
    for name in ("data", "split", "seed", "dtype", "kernel", "kernel_variance", "lengthscale", "inducing", "init"):
        assert opts[name] == getattr(DEFAULTS, name), name
    assert (opts["steps"], opts["lr"], opts["checkpoint_every"]) == (
        DEFAULTS.steps,
        DEFAULTS.lr,
        DEFAULTS.checkpoint_every,
    )
    assert svgp.NOISE_VARIANCE == DEFAULTS.noise_variance


def test_sgpmc_defaults_are_its_recipe_config(tmp_path):
    opts, config = parsed("sgpmc", tmp_path), sgpmc.CONFIG
    assert dataclasses.replace(config, num_chains=SGPMCConfig().num_chains) == SGPMCConfig()  # two chains, else equal
    pairs = {"steps": "svi_steps", "lr": "learning_rate", "engine": "engine", "warmup": "num_warmup",
             "samples": "num_samples", "chains": "num_chains", "thinning": "thinning", "chunk": "chunk_size",
             "batch_size": "batch_size"}  # fmt: skip
    for option, field in pairs.items():
        assert opts[option] == getattr(config, field), option


def test_bsgp_defaults_are_its_recipe_config(tmp_path):
    opts, config = parsed("bsgp", tmp_path), BSGPConfig()
    pairs = {"layers": "num_layers", "inducing": "num_inducing", "z_prior": "z_prior", "data_term": "likelihood_term",
             "engine": "engine", "chains": "num_chains"}  # fmt: skip
    for option, field in pairs.items():
        assert opts[option] == getattr(config, field), option
    engines = {
        "sghmc": {
            "iterations": "num_iterations",
            "kept": "num_kept",
            "thinning": "sghmc_thinning",
            "step_size": "step_size",
            "batch_size": "batch_size",
        },
        "nuts": {"warmup": "nuts_warmup", "samples": "nuts_samples", "thinning": "nuts_thinning"},
    }
    for engine, fields in engines.items():
        filled = {**opts, "engine": engine}
        bsgp._check(filled)  # fills in the engine's own options
        for option, field in fields.items():
            assert filled[option] == getattr(config, field), (engine, option)
    assert bsgp.NOISE_VARIANCE == config.noise_variance


def test_selective_defaults_are_its_recipe_config(tmp_path):
    opts, config = parsed("selective", tmp_path), SelectiveConfig()
    for option, (field, *_) in selective.OPTIONS.items():
        assert opts[option] == getattr(config, field), option
    assert (opts["init"], opts["lr"], opts["checkpoint_every"]) == (
        config.init,
        config.learning_rate,
        config.checkpoint_every,
    )
    assert opts["batch_size"] == config.batch_size and selective.NOISE_VARIANCE == config.noise_variance
