"""The numerical core, written once against the Python array API: jax.numpy, torch and numpy alike.

Nothing here imports jax, numpyro, torch or pyro (a test imports this package with them blocked); jax and torch
arrays are handled through :mod:`ppl_sparsegp.backends`, loaded by name when such an array arrives.

* :mod:`~ppl_sparsegp.core.ops` — the jitter policy, Cholesky, triangular solves, special functions, quadrature;
* :mod:`~ppl_sparsegp.core.kernels` — covariance functions and their algebra;
* :mod:`~ppl_sparsegp.core.conditionals` — q(f) from q(u), for shared or per-input inducing inputs;
* :mod:`~ppl_sparsegp.core.kl`, :mod:`~ppl_sparsegp.core.bounds` — Gaussian KLs; collapsed bound, exact GP;
* :mod:`~ppl_sparsegp.core.opper_archambeau` — the non-sparse q(f) of VGP in whitened coordinates;
* :mod:`~ppl_sparsegp.core.likelihoods` — log p(y | f), variational expectations, predictive densities;
* :mod:`~ppl_sparsegp.core.masking`, :mod:`~ppl_sparsegp.core.point_processes` — masked factors for subset
  selection; subset prior, Strauss and DPP densities, the inclusion KL.
"""

from . import bounds, conditionals, kernels, kl, likelihoods, masking, opper_archambeau, ops, point_processes

__all__ = [
    "bounds",
    "conditionals",
    "kernels",
    "kl",
    "likelihoods",
    "masking",
    "opper_archambeau",
    "ops",
    "point_processes",
]
