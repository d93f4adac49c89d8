"""Why ``ppl-sparsegp compare`` refuses IDSGP runs: PSIS-LOO over draws of each input's u against the test NLPD.

Run (from the repository root)::

    .venv/bin/python benchmarks/idsgp_loo.py

Fits, with the command line on diabetes split 0, ``svgp`` (M = 32, 3000 steps) and ``idsgp`` (50 epochs, the
recipe's other defaults), then computes for both the PSIS-LOO elpd of the predictive log-likelihood (log p(y_n | draw),
f_n integrated out: SVGP over 100 draws of q(u), IDSGP over 100 draws of every input's own q(u | x_n)) and sets it
beside each run's test NLPD from results.json. Writes ``benchmarks/results/idsgp_loo.json``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

import arviz as az
import jax

from ppl_sparsegp import results
from ppl_sparsegp.posterior import diagnostics
from ppl_sparsegp.runs import load_run

ROOT = Path(__file__).resolve().parent
FITS = {"svgp": ["--inducing", "32", "--steps", "3000"], "idsgp": ["--epochs", "50"]}


def main() -> None:
    jax.config.update("jax_enable_x64", True)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method, options in FITS.items():
            folder = Path(tmp) / method
            command = [
                sys.executable,
                "-m",
                "ppl_sparsegp.cli",
                "fit",
                method,
                *options,
                "--out",
                str(folder),
                "--quiet",
            ]
            subprocess.run(command, check=True)
            run = load_run(folder)
            X, y = run.stored.training()
            local = ("u",) if method == "idsgp" else ()
            model = replace(run.model, batch_size=None)  # every training input's u, as the CLI's posterior.nc
            idata = diagnostics.from_svi(model, run.params, X, y, num_draws=100, log_likelihood_of="predictive",
                                         local=local)  # fmt: skip
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                loo = az.loo(idata)
            record = json.loads((folder / "results.json").read_text())
            rows[method] = {"elpd_loo": float(loo["elpd_loo"]), "p_loo": float(loo["p_loo"]), "se": float(loo["se"]),
                            "test_nlpd": record["metrics"]["nlpd"], "test_rmse": record["metrics"]["rmse"],
                            "command": command[1:]}  # fmt: skip
            print(f"{method}: elpd_loo {rows[method]['elpd_loo']:.1f} (p_loo {rows[method]['p_loo']:.2f}), "
                  f"test NLPD {rows[method]['test_nlpd']:.3f}, test RMSE {rows[method]['test_rmse']:.2f}")  # fmt: skip
    output = ROOT / "results" / "idsgp_loo.json"
    results.write_json(output, {"benchmark": "idsgp_loo", "data": "embedded/diabetes split 0", "runs": rows,
                                **results.provenance()})  # fmt: skip
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
