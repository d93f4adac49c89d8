"""Pyro glue, the twin of :mod:`ppl_sparsegp.numpyro`: distributions, site helpers and the dtype rule, on torch."""
