"""Pyro glue, the twin of :mod:`ppl_sparsegp.numpyro`: distributions, site helpers, the dtype rule and the
amortising networks (:mod:`ppl_sparsegp.pyro.nn`), on torch."""
