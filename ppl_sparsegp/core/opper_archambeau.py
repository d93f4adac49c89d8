"""The Opper-Archambeau Gaussian over the latent values at every training input (Opper and Archambeau 2009; thesis
§2.2.3, digest §3.9): 2N parameters per latent function instead of a full covariance's N(N+1)/2.

With K = K(X, X) = L Lᵀ [N, N] and, per latent function p, parameters α_p [N] and λ_p [N]::

    q(f_p) = N(K α_p, (K⁻¹ + diag λ_p²)⁻¹)

which, in the whitened coordinates v = L⁻¹ f of the models (prior N(0, I)), is::

    q(v_p) = N(Lᵀ α_p, C_p⁻¹),    C_p = I + Lᵀ diag(λ_p²) L.

That is a Gaussian over v in the form the conditionals and KLs of the sparse models take (mean [P, N], lower
square root [P, N, N]), so predictions and KL[q(v) || N(0, I)] = ½ Σ_p [tr C_p⁻¹ + α_pᵀ K α_p - N + log det C_p]
are :func:`ppl_sparsegp.core.conditionals.conditional` and :func:`ppl_sparsegp.core.kl.kl_qu_pu` with Z = X; the
marginals of q(f) at the training inputs themselves, f = L v, are :func:`marginals`, without a solve. For a
Gaussian likelihood of noise σ² the optimum is α = (K + σ² I)⁻¹ y, λ = 1/σ: the exact posterior.

Backend-neutral (jax, torch, numpy) through the array API and :mod:`ppl_sparsegp.core.ops`.
"""

from __future__ import annotations

from typing import Any

from . import ops

Array = Any


def whitened_q(L: Array, alpha: Array, lam: Array) -> tuple[Array, Array]:
    """q(v) of the parameters ``alpha``, ``lam`` [P, N] given the factor ``L`` [N, N] of K (module docstring).

    C_p has eigenvalues >= 1, so it is factorised without jitter. Its inverse's lower square root comes from the
    Cholesky factor F of J C J (J reverses the order of rows): C = U Uᵀ with U = J F J upper triangular, so
    C⁻¹ = R Rᵀ with R = U⁻ᵀ = J F⁻ᵀ J, lower triangular.

    Returns:
        (q_mu [P, N] with rows (Lᵀ α_p)ᵀ, q_sqrt [P, N, N] lower triangular with q_sqrt q_sqrtᵀ = C⁻¹).
    """
    xp = ops.namespace(L, alpha, lam)
    G = lam[:, :, None] * L  # diag(λ_p) L, [P, N, N]
    eye = ops.eye_like(L)
    C = ops.matrix_transpose(G) @ G + eye
    F = ops.cholesky(xp.flip(C, axis=(-2, -1)), jitter=0.0)
    F_inv_T = ops.solve_triangular(F, xp.broadcast_to(eye, C.shape), lower=True, transpose=True)
    return alpha @ L, xp.flip(F_inv_T, axis=(-2, -1))


def marginals(L: Array, q_mu: Array, q_sqrt: Array | None) -> tuple[Array, Array]:
    """The marginals q(f_pn) at the training inputs of f_p = L v_p with v_p ~ N(m_p, R_p R_pᵀ) (VGP's data term; a
    draw of v when ``q_sqrt`` is None).

    Args:
        L: the factor of K(X, X) [N, N].
        q_mu: m [P, N].
        q_sqrt: R [P, N, N] lower triangular, or None (a point mass at ``q_mu``).

    Returns:
        (mean [P, N] with rows (L m_p)ᵀ, variance [P, N] = diag(L R_p R_pᵀ Lᵀ); zeros for a point mass).
    """
    xp = ops.namespace(L, q_mu)
    mean = q_mu @ ops.matrix_transpose(L)
    if q_sqrt is None:
        return mean, xp.zeros_like(mean)
    return mean, xp.sum(xp.square(L @ q_sqrt), axis=-1)
