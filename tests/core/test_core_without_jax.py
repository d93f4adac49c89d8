"""ppl_sparsegp.core must work with jax, numpyro and torch unavailable (ARCHITECTURE: the core is array-API only).

The check runs in a fresh interpreter, where those modules are blocked before anything is imported, and evaluates
kernels, a conditional, a KL, a bound, the point-process densities and the SAS estimate on numpy arrays against
direct formulas.
"""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys
    for name in ("jax", "jaxlib", "numpyro", "torch", "pyro", "flax", "equinox"):
        sys.modules[name] = None

    import numpy as np
    from ppl_sparsegp.core import active_sets, bounds, conditionals, kernels, kl, likelihoods, ops, point_processes

    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(7, 2)), rng.normal(size=(3, 2))
    k = kernels.RBF(variance=1.3, lengthscale=np.array([0.7, 1.1]))
    K = k(Z, X)
    d2 = (((Z[:, None, :] - X[None, :, :]) / np.array([0.7, 1.1])) ** 2).sum(-1)
    np.testing.assert_allclose(K, 1.3 * np.exp(-0.5 * d2), rtol=1e-12)

    q_mu, q_sqrt = rng.normal(size=(1, 3)), np.tril(rng.normal(size=(1, 3, 3))) + 2 * np.eye(3)
    Lmm = ops.cholesky(k(Z))
    mean, var = conditionals.conditional(K, Lmm, k.diag(X), q_mu, q_sqrt)
    A = np.linalg.solve(Lmm, K)
    np.testing.assert_allclose(mean, q_mu @ A, rtol=1e-10)
    S = q_sqrt[0] @ q_sqrt[0].T
    np.testing.assert_allclose(var[0], 1.3 - (A * A).sum(0) + np.einsum("mn,mk,kn->n", A, S, A), rtol=1e-10)

    expected_kl = 0.5 * (np.trace(S) + q_mu[0] @ q_mu[0] - 3 - np.linalg.slogdet(S)[1])
    np.testing.assert_allclose(kl.kl_qu_pu(q_mu, q_sqrt), expected_kl, rtol=1e-10)

    y = rng.normal(size=7)
    exact = bounds.gaussian_log_marginal(k(X), y, 0.1)
    C = k(X) + 0.1 * np.eye(7)
    direct = -0.5 * (y @ np.linalg.solve(C, y) + np.linalg.slogdet(C)[1] + 7 * np.log(2 * np.pi))
    np.testing.assert_allclose(exact, direct, rtol=1e-6)  # the relative jitter 1e-8 of ops.cholesky

    lik = likelihoods.Bernoulli()
    assert np.all(np.isfinite(lik.variational_expectation(np.ones(7), mean[0], var[0])))

    probs = np.array([0.2, 0.5, 0.9])
    alpha = np.asarray(0.3)
    log_sizes, log_c = point_processes.subset_size_log_probs(3, alpha)
    np.testing.assert_allclose(np.exp(log_sizes).sum(), 1.0, rtol=1e-12)
    masks = np.array([[i >> b & 1 for b in range(3)] for i in range(8)], dtype=float)
    log_p = point_processes.subset_prior_log_prob(masks, alpha, log_c)
    np.testing.assert_allclose(np.exp(log_p).sum(), 1.0, rtol=1e-12)
    log_q = point_processes.inclusion_log_prob(probs, masks)
    brute_kl = np.sum(np.exp(log_q) * (log_q - log_p))
    np.testing.assert_allclose(point_processes.kl_inclusion_subset_prior(probs, alpha, log_c), brute_kl, rtol=1e-10)
    np.testing.assert_allclose(point_processes.dpp_log_density(k(Z)), np.linalg.slogdet(k(Z))[1], rtol=1e-6)
    assert point_processes.strauss_pair_count(np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]]), 0.5) == 1.0

    Y = rng.normal(size=(7, 4))  # a GP-LVM decoder's observations at latents X: with one held-out point, SAS is exact
    sas = active_sets.sas_objective(k(X[:6]), k(X[:6], X[6:]), k.diag(X[6:]), Y[:6], Y[6:], 0.1)
    np.testing.assert_allclose(sas, bounds.gaussian_log_marginal(k(X), Y, 0.1), rtol=1e-6)
    print("core without jax: ok")
    """
)


def test_core_runs_on_numpy_with_jax_numpyro_and_torch_blocked():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "core without jax: ok" in done.stdout
