"""Stochastic active sets for a GP decoder (Moreno-Muñoz, Feldager & Hauberg 2022, "Revisiting active sets for
Gaussian process decoders"; spec 004 §1.3-1.7).

A GP-LVM decoder maps latents Z [N, Q] to observations X [N, D] through D independent GPs sharing one kernel and
one Gaussian noise variance σ², so log p(X | Z) = Σ_d log N(X[:, d] | 0, K_NN + σ² I) (paper eq 2). By the chain
rule, and by Fong & Holmes' cross-validation identity averaged over splits (eq 4), it splits into the joint marginal
of an active set A and the predictive of the held-out points given A. Stochastic active sets (SAS) take the
held-out points as conditionally independent given X_A (the active-set approximation) and redraw A at every step::

    L̂ = log p(X_A | Z_A) + w Σ_{n ∈ R} log p(x_n | X_A, Z)                               (paper eq 6)

    log p(X_A | Z_A) = Σ_d log N(X_A[:, d] | 0, K_AA + σ² I)                               (paper eq 5)
    p(x_n | X_A, Z) = N(x_n | m_{n|A}, c_{n|A} I_D),  m_{n|A} = K_nA (K_AA + σ² I)⁻¹ X_A,
                      c_{n|A} = k_nn + σ² − K_nA (K_AA + σ² I)⁻¹ K_An                      (R&W eq 2.22)

in O(A³ + A² D + R A (A + D)) for R held-out points, whatever N. With one held-out point or none it is exact; with
more it is below log p(X | Z) in expectation over data drawn from the GP (Hadamard's inequality: the held-out
variances' log product exceeds the log determinant of their joint conditional covariance), not for every dataset
(tests/core/test_active_sets.py has a draw where the average over active sets is above it). The variance c_{n|A} is
one number per point, shared by its D outputs, and never falls below σ² (K_AA + σ² I dominates K_AA), which is the
floor applied here against round-off.

:func:`conditional_weight` gives w for a minibatch of B points of N, A of them active: ``"unbiased"``
(N − A)/(B − A), with which the minibatch estimate's expectation over batches and splits is the full-data SAS
objective E_{|A|=A}[log p(X_A) + Σ_{n∉A} log p(x_n | X_A)] (a random A-subset of a random B-subset is a random
A-subset of N; spec 004 §1.6); ``"batch"`` 1 (an estimate of log p(X_batch | Z_batch)); ``"repo"`` (B − A)/N, the
authors' released code, kept only to reproduce it.

Backend-neutral (numpy, jax, torch) through the array API and :mod:`ppl_sparsegp.core.ops`.
"""

from __future__ import annotations

import math
from typing import Any

from . import ops

Array = Any

WEIGHTS = ("unbiased", "batch", "repo")
"""The schemes of :func:`conditional_weight`."""


def inverse_factor(L: Array) -> Array:
    """L⁻¹ [A, A] of a lower Cholesky factor L [A, A], by one triangular solve against the identity.

    :func:`sas_terms` forms it once and applies it by matrix products: on jax's CPU backend the triangular solves
    of [A, R] and [A, D] right-hand sides and their gradients cost more than the products (benchmarks/README.md,
    "SAS-GP's step profiled")."""
    xp = ops.namespace(L)
    return ops.solve_triangular(L, xp.eye(L.shape[-1], dtype=L.dtype), lower=True)


def active_set_log_marginal(L: Array, X_A: Array, *, L_inv: Array | None = None) -> Array:
    """log p(X_A | Z_A) = Σ_d log N(X_A[:, d] | 0, K_AA + σ² I) (paper eq 5) from L = chol(K_AA + σ² I).

    Args:
        L: [A, A] lower Cholesky factor of K_AA + σ² I; X_A: [A, D] the active points' observations;
        L_inv: L⁻¹ [A, A] when already formed (:func:`inverse_factor`), else solved here.

    Returns:
        scalar: −(A D / 2) log 2π − D Σ log diag L − ½ ‖L⁻¹ X_A‖²_F.
    """
    xp = ops.namespace(L, X_A)
    A, D = X_A.shape
    W = _apply_inverse(L, L_inv, X_A)
    return -0.5 * A * D * math.log(2.0 * math.pi) - 0.5 * D * ops.logdet_from_cholesky(L) - 0.5 * xp.sum(W * W)


def held_out_predictive(
    L: Array, K_AR: Array, k_RR: Array, X_A: Array, noise_variance: Array, *, L_inv: Array | None = None
) -> tuple[Array, Array]:
    """The GP predictive of held-out points given the active set (R&W eq 2.22, with the noise).

    Args:
        L: [A, A] lower Cholesky factor of K_AA + σ² I; K_AR: k(Z_A, Z_R) [A, R]; k_RR: k(z_n, z_n) [R];
        X_A: [A, D]; noise_variance: scalar σ²; L_inv: L⁻¹ [A, A] when already formed (:func:`inverse_factor`),
        else solved here.

    Returns:
        mean m_{n|A} [R, D] and variance c_{n|A} [R] (shared by the D outputs, at least σ²).
    """
    xp = ops.namespace(L, K_AR, X_A)
    V = _apply_inverse(L, L_inv, K_AR)  # [A, R]
    W = _apply_inverse(L, L_inv, X_A)  # [A, D]
    mean = ops.matrix_transpose(V) @ W
    noise = xp.asarray(noise_variance, dtype=L.dtype)
    var = xp.maximum(k_RR + noise - xp.sum(V * V, axis=0), noise)
    return mean, var


def held_out_log_density(X_R: Array, mean: Array, var: Array) -> Array:
    """log N(x_n | m_n, c_n I_D) of each held-out point, summed over its D outputs.

    Args:
        X_R: [R, D]; mean: [R, D]; var: [R].

    Returns:
        [R]: −(D/2) log(2π c_n) − ‖x_n − m_n‖² / (2 c_n).
    """
    xp = ops.namespace(X_R, mean, var)
    D = X_R.shape[-1]
    residual = xp.sum((X_R - mean) ** 2, axis=-1)
    return -0.5 * D * (math.log(2.0 * math.pi) + xp.log(var)) - 0.5 * residual / var


def sas_terms(
    K_AA: Array, K_AR: Array, k_RR: Array, X_A: Array, X_R: Array, noise_variance: Array
) -> tuple[Array, Array]:
    """The two parts of the SAS estimate (paper eq 6): log p(X_A | Z_A) and log p(x_n | X_A, Z) of each held-out n.

    Args:
        K_AA: k(Z_A, Z_A) [A, A] (without the noise); K_AR: [A, R]; k_RR: [R]; X_A: [A, D]; X_R: [R, D];
        noise_variance: scalar σ².

    Returns:
        scalar log p(X_A | Z_A) and [R] held-out log densities.
    """
    xp = ops.namespace(K_AA, X_A)
    noise = xp.asarray(noise_variance, dtype=K_AA.dtype)
    L = ops.cholesky(K_AA + noise * xp.eye(K_AA.shape[-1], dtype=K_AA.dtype))
    L_inv = inverse_factor(L)
    mean, var = held_out_predictive(L, K_AR, k_RR, X_A, noise, L_inv=L_inv)
    return active_set_log_marginal(L, X_A, L_inv=L_inv), held_out_log_density(X_R, mean, var)


def _apply_inverse(L: Array, L_inv: Array | None, B: Array) -> Array:
    """L⁻¹ B: a matrix product with ``L_inv`` when given, else a triangular solve."""
    return ops.solve_triangular(L, B, lower=True) if L_inv is None else L_inv @ B


def sas_objective(
    K_AA: Array, K_AR: Array, k_RR: Array, X_A: Array, X_R: Array, noise_variance: Array, weight: float = 1.0
) -> Array:
    """L̂ = log p(X_A | Z_A) + w Σ_{n∈R} log p(x_n | X_A, Z) (paper eq 6; shapes as :func:`sas_terms`)."""
    xp = ops.namespace(K_AA, X_A)
    active, held_out = sas_terms(K_AA, K_AR, k_RR, X_A, X_R, noise_variance)
    return active + weight * xp.sum(held_out)


def conditional_weight(scheme: str, num_data: int, batch_size: int, num_active: int) -> float:
    """The weight w of the held-out sum for a batch of B of N points, A of them active (module docstring).

    Raises:
        ValueError: ``scheme`` is not one of :data:`WEIGHTS`, or not A < B <= N.
    """
    N, B, A = int(num_data), int(batch_size), int(num_active)
    if not 0 < A < B <= N:
        raise ValueError(f"active set: expected 0 < num_active < batch_size <= N, got A = {A}, B = {B}, N = {N}")
    weights = {"unbiased": (N - A) / (B - A), "batch": 1.0, "repo": (B - A) / N}
    if scheme not in weights:
        raise ValueError(f"weight: expected one of {', '.join(WEIGHTS)}, got {scheme!r}")
    return weights[scheme]
