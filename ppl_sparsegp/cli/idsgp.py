"""idsgp: IDSGP (Jafrasteh et al. 2022): a network gives each input its own inducing points and q(u); SVI with Adam.

:func:`ppl_sparsegp.recipes.idsgp.fit_idsgp` with the authors' UCI defaults (Matérn-3/2 ARD plus a learned white
term, M = 50 per input, one hidden layer of 50 sigmoid units, batch 100, Adam 0.01, 100 epochs); ``--dropout 0.5``
adds the authors' UCI launchers' dropout on the network's outputs in training steps. Writes params.npz
(the network's weights and the hyperparameters, standardised units, and the standardisation), fit.png and
results.json (metrics in original units, seconds per epoch of training, and the seconds of one prediction pass
over the evaluation set, compiling included); the SVI state is checkpointed to OUT/checkpoint.npz, from which the
same command (``--epochs`` may be raised) resumes. With ``--backend pyro`` the Pyro twin runs the same recipe
(:mod:`ppl_sparsegp.recipes.idsgp_pyro`, from the same initial weights, torch drawing the batches) and the NumPyro
model evaluates and stores the fit (:mod:`ppl_sparsegp.cli.pyro_backend`), so the outputs have the same form.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from ppl_sparsegp.cli import run as shared
from ppl_sparsegp.cli.svgp import CHECKPOINT, NOISE_VARIANCE, finish_svi
from ppl_sparsegp.numpyro.nn import ACTIVATIONS
from ppl_sparsegp.recipes.idsgp import IDSGPConfig, fit_idsgp
from ppl_sparsegp.runs.rebuild import idsgp_config

CONFIG = IDSGPConfig()
METHOD_DEFAULTS = {"noise_variance": NOISE_VARIANCE, "inducing": CONFIG.num_inducing}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    c = CONFIG
    shared.add_common_arguments(parser, "idsgp")
    shared.add_options(
        parser, ("noise_variance", "likelihood", "lr", "checkpoint_every", "backend"), lr=c.learning_rate
    )
    shared.add_options(parser, ("inducing",), " per input", inducing=c.num_inducing)
    shared.add_options(parser, ("batch_size",), batch_size=c.batch_size)
    group = parser.add_argument_group("IDSGP (idsgp only)")
    shared.add(group, "kernel", c.kernel, "ARD kernel by name (see svgp)")
    shared.add(group, "white", c.white_variance, "initial variance of the learned white term on K(Z(x), Z(x)) and "
               "k(x, x) (0: none)", type=float, metavar="V")  # fmt: skip
    shared.add(group, "hidden", list(c.hidden), "widths of the network's hidden layers", type=int, nargs="*")
    shared.add(group, "activation", c.activation, "the hidden layers' activation", choices=sorted(ACTIVATIONS))
    shared.add(group, "epochs", c.num_epochs, "epochs of ceil(N / batch) steps", type=int)
    shared.add(group, "dropout", c.dropout, "rate in [0, 1) of dropout on the network's outputs (Z, m, raw L) in "
               "training steps, off when predicting; the authors' UCI launchers use 0.5", type=float,
               metavar="RATE")  # fmt: skip


def _check(opts: dict[str, Any]) -> None:
    shared.check_options(opts, positive=("epochs",))
    if opts["white"] < 0:
        raise ValueError(f"--white must be >= 0 (0: no white term), got {opts['white']}")
    if not 0.0 <= opts["dropout"] < 1.0:
        raise ValueError(f"--dropout must be in [0, 1) (0: no dropout), got {opts['dropout']}")
    for width in opts["hidden"]:
        if width < 1:
            raise ValueError(f"--hidden: every width must be a positive integer, got {opts['hidden']}")


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    opts, d = shared.start(args, _check, NOISE_VARIANCE)
    checkpoint = opts["out"] / CHECKPOINT
    settings, counters = shared.checkpoints(opts, (d.X, d.y), [checkpoint], resumable=("epochs",))
    recipe = {"likelihood": d.likelihood, "checkpoint": str(checkpoint), "checkpoint_every": opts["checkpoint_every"],
              "progress": shared.progress(opts), "fingerprint": settings}  # fmt: skip
    if opts["backend"] == "pyro":
        from ppl_sparsegp.cli import pyro_backend

        fit, train_seconds = shared.timed(pyro_backend.fit_idsgp, d.X, d.y, idsgp_config(opts), opts, **recipe)
    else:
        fit, train_seconds = shared.timed(fit_idsgp, d.X, d.y, idsgp_config(opts), seed=opts["seed"], **recipe)
    per_epoch = {"epochs": opts["epochs"], "steps_per_epoch": fit.steps_per_epoch,
                 "train_seconds_per_epoch": fit.seconds_per_epoch}  # fmt: skip
    return finish_svi(opts, d, argv, fit.model, fit.svi, train_seconds, counters.get("step", 0), **per_epoch)
