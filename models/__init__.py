"""The models of ppl_sparsegp, one module per method, installed as ``ppl_sparsegp.models``.

``ppl_sparsegp.models.numpyro`` holds each method's NumPyro model and guide; a Pyro twin will sit beside it in
``ppl_sparsegp.models.pyro`` under the same module names.
"""
