"""Covariance functions written once against the Python array API: jax.numpy, torch and numpy.

A kernel is a small immutable object that holds its hyperparameters and maps inputs to a
covariance matrix::

    k = RBF(variance=1.0, lengthscale=[1.0, 2.0]) + Linear(variance=0.5)
    K = k(X)            # X [N, D]          -> K [N, N]
    Kxz = k(X, Z)       # X [N, D], Z [M, D] -> [N, M]
    kdiag = k.diag(X)   # X [N, D]          -> [N]

**Hyperparameters** are exposed as a flat dictionary, which is how the models turn a kernel into
random variables. Every entry is positive, so a model can give each one a positive prior (or
constraint) without knowing which kernel it is looking at::

    kernel = kernel_from_name("rbf+linear", input_dim=D)

    def model(X, y):
        values = {
            name: numpyro.sample(name, dist.LogNormal(0.0, 1.0).expand(np.shape(v)).to_event())
            for name, v in kernel.parameters().items()
        }
        K = kernel.with_parameters(values)(X)     # rebuilt from the sampled values on every call
        ...

Composite kernels prefix the keys of their parts with ``"k0."``, ``"k1."``...: the kernel above
has ``k0.variance``, ``k0.lengthscale`` and ``k1.variance``. ``a + b + c`` flattens to one ``Sum``
of three parts (keys ``k0.``, ``k1.``, ``k2.``); ``Sum([Sum([a, b]), c])`` built explicitly keeps
its nesting (``k0.k1.lengthscale``).

**Backends.** The namespace is the one of the inputs *and* the hyperparameters: a numpy ``X``
with jax hyperparameters (sampled values, tracers under ``jit``) is computed in jax.numpy, a numpy
``X`` with torch hyperparameters in torch; numpy is used only when everything is numpy or a
Python number. Mixing jax and torch raises. Computation happens in the floating dtype of the
inputs (``result_type(X, X2)``; integer inputs are promoted to the namespace's default floating
dtype) and hyperparameters are cast to it, so Python floats and numpy arrays are fine as values.

**Construction is cheap and pure**: positivity and shapes are checked for Python numbers, numpy arrays and
concrete jax arrays (a jax tracer has no values to check; torch tensors are not checked, since reading them would
synchronise a device on every step of an eager torch loop). The length of an ARD vector is checked against the
inputs' columns when the kernel is evaluated.

**Numerics.** Scaled squared distances are computed by the expansion ``|a|^2 + |b|^2 - 2 a.b`` on
inputs centred by their common mean (to limit cancellation), clipped at 0, and set exactly to 0
on the diagonal when ``X2`` is ``None``. The Matérn kernels take ``r = sqrt(max(r^2, tiny))`` so
that gradients at coincident points (``r = 0``) are finite. The periodic kernel uses a cosine/sine
feature expansion so that no ``[N, M, D]`` array is formed. The price of the expansion (O(N M)
memory instead of O(N M D)): between two *separate* arrays that share points (``K(Z, X)`` with
``Z`` drawn from ``X``) ``r^2`` at the shared points is rounding noise of order
``eps |x / ell|^2`` rather than 0. The smooth kernels do not notice (errors ~1e-14 in float64), but
Matérn-1/2, which moves like ``r`` near 0, is off there by about ``sqrt(eps) |x / ell|`` (1e-7 to
1e-6 in float64 for standardised inputs).

**Modules.** :mod:`~ppl_sparsegp.core.kernels.base` (the base class, the array-API helpers, sums and products),
:mod:`~ppl_sparsegp.core.kernels.stationary` (RBF, the Matérns, periodic, cosine),
:mod:`~ppl_sparsegp.core.kernels.linear`,
:mod:`~ppl_sparsegp.core.kernels.static` (white noise, constant) and :mod:`~ppl_sparsegp.core.kernels.by_name`
(:func:`kernel_from_name`).
"""

from ppl_sparsegp.core.kernels.base import Combination, Kernel, Product, Sum
from ppl_sparsegp.core.kernels.by_name import kernel_from_name
from ppl_sparsegp.core.kernels.linear import Linear
from ppl_sparsegp.core.kernels.static import Constant, White
from ppl_sparsegp.core.kernels.stationary import RBF, Cosine, Matern12, Matern32, Matern52, Periodic, Stationary

__all__ = [
    "Kernel",
    "Stationary",
    "RBF",
    "Matern12",
    "Matern32",
    "Matern52",
    "Linear",
    "Periodic",
    "White",
    "Constant",
    "Combination",
    "Cosine",
    "Sum",
    "Product",
    "kernel_from_name",
]
