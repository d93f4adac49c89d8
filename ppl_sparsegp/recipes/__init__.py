"""The papers' multi-phase procedures, one module per procedure, on the shared phase sequence of :mod:`.phases`.

* :mod:`.sgpmc`: SVGP fit (MAP), then MCMC on the free-form q*(v, θ) with Z fixed (thesis §5.5);
* :mod:`.bsgp`: BSGP's sampler schedule (Rossi et al. 2021), shallow or deep;
* :mod:`.sghmc_dgp`: BSGP's baseline SGHMC-GP (Havasi et al. 2018): v sampled, Z, θ and σ² by moving-window MCEM;
* :mod:`.selective`: probabilistic selection of inducing points (Uhrenholt et al. 2021) for sparse GPs, deep GPs
  and the GP-LVM.

Each recipe's settings and their defaults are one frozen config dataclass (``SGPMCConfig``, ``BSGPConfig``,
``SGHMCDGPConfig``, ``SelectiveConfig``, ...), checked when it is built, so a bad setting is refused before anything
is compiled. A recipe function takes the config, keyword overrides of its fields, or both.
"""
