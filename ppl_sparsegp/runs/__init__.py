"""Run folders: what ``ppl-sparsegp fit`` writes, read back as a model that predicts, and compared.

A run folder is data only: results.json (the method, every option, the metrics), params.npz (a fit by SVI: the
fitted parameters in standardised units and the standardisation) and posterior.nc (ArviZ InferenceData: the draws
of an MCMC run, or draws of an SVI fit's q(u), with the standardisation and fixed inputs in ``constant_data``).

- :mod:`.store`: the arrays' layout in those files, both ways (a network's weights flattened and rebuilt, the
  standardisation), results.json read and checked, posterior.nc of an SVI fit.
- :mod:`.rebuild`: each method's model built from its options, once for the fit and once for a loaded run.
- :mod:`.load`: :func:`load_run`, a folder back to a fitted model predicting in original units, in chunks.
- :mod:`.compare`: :func:`compare_runs`, runs on the same data ranked by PSIS-LOO.
"""

from ppl_sparsegp.runs.compare import compare_runs
from ppl_sparsegp.runs.load import Run, load_run

__all__ = ["Run", "compare_runs", "load_run"]
