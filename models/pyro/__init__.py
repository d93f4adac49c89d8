"""Pyro models and guides, the twins of :mod:`ppl_sparsegp.models.numpyro` under the same module, class and site
names, one for every NumPyro model (``tests/pyro/test_twin_coverage.py`` fails on a missing one): ``gpr``, ``sgpr``,
``svgp``, ``sgpmc``, ``vgp``, ``gpmc``, ``bsgp``, ``deep_bsgp``, ``deep_svgp``, ``gplvm``, ``selective``,
``selective_deep``, ``selective_gplvm``, ``idsgp``, ``vae`` and ``sas_gplvm``; ``_base`` holds their base class and
:func:`~ppl_sparsegp.models.pyro._base.twin_of`. They compute with :mod:`ppl_sparsegp.core` on torch tensors
(``tests/parity`` checks them against the NumPyro models)."""
