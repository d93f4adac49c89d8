"""Pyro models and guides, the twins of :mod:`ppl_sparsegp.models.numpyro` under the same module and site names:
``gpr``, ``sgpr``, ``svgp``, ``sgpmc``; ``_base`` holds their base class. They compute with
:mod:`ppl_sparsegp.core` on torch tensors (``tests/parity`` checks them against the NumPyro models)."""
