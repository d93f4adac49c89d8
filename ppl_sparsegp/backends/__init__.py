"""Backend-specific implementations behind :mod:`ppl_sparsegp.core.ops`, imported by name on first use."""
