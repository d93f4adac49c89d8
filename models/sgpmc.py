"""SGPMC: MCMC for variationally sparse GPs (Hensman et al. 2015; thesis ch. 5, §3.7 of the digest).

Target (thesis eq 5.26), sampled jointly over the whitened inducing outputs v and the hyperparameters θ::

    θ ~ p(θ)                       (a prior per sampled hyperparameter: Gamma or LogNormal, see default_priors)
    v ~ N(0, I) [P, M],  u = Lmm(θ) v
    H(v, θ) = log p(θ) + log N(v | 0, I) + Σ_n E_{p(f_n | u, θ)}[log p(y_n | f_n)]

The data term is the variational potential: the expectation of the log-likelihood under the *prior conditional*
p(f_n | u, θ) = N(a_n^T v, k_nn - a_n^T a_n), closed form or Gauss-Hermite per likelihood. Samples of this
density are draws of the KL-optimal free-form q*(u, θ); predictions mix p(f_* | u_s, θ_s) over draws s
(:mod:`ppl_sparsegp.posterior.predict`). Z is fixed (from a Gaussian fit, §5.5).

Its density equals that of :class:`models.svgp.SVGP` with ``data_term="sampled"``, ``whiten=True`` and
``learn_Z=False``, with the same site names (the sampled ``"u"`` holds v), so an SVGP fit initialises it. Every
hyperparameter is either sampled (named in ``priors``) or held fixed (named in ``fixed``): an MCMC engine would
otherwise keep a ``param`` at its initial value silently.

:func:`fit_sgpmc` is the thesis recipe in one call: fit SVGP (MAP for θ, Z from k-means, Z held fixed for
the first steps), fix Z, start θ at its point estimate and v at a draw of q(v), run NUTS.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax

from ppl_sparsegp.core import conditionals
from ppl_sparsegp.core.kernels import Kernel
from ppl_sparsegp.core.likelihoods import Likelihood
from ppl_sparsegp.infer.checkpoint import key_data, tree_sha256
from ppl_sparsegp.infer.mcmc import ENGINES, MCMCResult, init_from_svi, kernel_from_name, run_mcmc
from ppl_sparsegp.infer.svi import SVIResult, fit_svi
from ppl_sparsegp.numpyro import sites

from ._base import GPModel, check_sparse_settings, part_fingerprint
from .svgp import SVGP

Array = Any


@dataclass(eq=False)
class SGPMC(GPModel):
    """The SGPMC target as a NumPyro model; Z [M, D] fixed, v sampled at site ``"u"`` [P, M].

    Args (beyond :class:`models._base.GPModel`'s kernel, likelihood, priors, fixed; ``priors`` and ``fixed``
    together must cover every hyperparameter site):
        Z: the fixed inducing inputs [M, D].
        num_latent: P, latent functions sharing Z and the kernel (one per output column of y).
        batch_size: subsample B points per evaluation through the ``"data"`` plate (SG-MCMC engines only).
    """

    Z: Array = None
    num_latent: int = 1
    batch_size: int | None = None

    def __post_init__(self) -> None:
        check_sparse_settings(self.Z, num_latent=self.num_latent, batch_size=self.batch_size)
        super().__post_init__()
        free = set(self.hyperparameter_sites()) - set(self.priors) - set(self.fixed)
        if free:
            raise ValueError(
                f"priors: SGPMC samples its hyperparameters, so each needs a prior or must be named in `fixed`; "
                f"no prior for {sorted(free)}"
            )

    def parameter_names(self) -> set[str]:
        """The sites a ``params`` dict may name: the hyperparameters', ``"Z"`` and ``"u"``."""
        return super().parameter_names() | {"Z", "u"}

    @property
    def num_inducing(self) -> int:
        return int(np.shape(self.Z)[0])

    def model(self, X: Array, y: Array) -> None:
        """θ ~ p(θ), v ~ N(0, I), and the variational potential Σ_n E_{p(f_n | v, θ)}[log p(y_n | f_n)]
        (thesis eq 5.26), on a minibatch when ``batch_size`` is set."""
        self.check_data(X, y)
        if (1 if y.ndim == 1 else y.shape[1]) != self.num_latent:
            raise ValueError(f"y: expected {self.num_latent} output column(s) (num_latent)")
        kernel, likelihood = self.hyperparameters()
        Z = jnp.asarray(self.Z)
        v = sites.inducing_outputs(self.num_latent, self.num_inducing, None, Z.dtype)
        with sites.data_plate(y.shape[0], self.batch_size) as idx:
            Xb, Yb = sites.batch(X, y, idx)
            mean, var = conditionals.inducing_conditional(kernel, Z, Xb, v)
            numpyro.factor("y", jnp.sum(likelihood.variational_expectation(Yb, mean, var), axis=0))

    def guide(self, X: Array, y: Array) -> None:
        raise NotImplementedError("SGPMC is sampled by MCMC (see fit_sgpmc); its variational twin is SVGP")

    def variational_twin(self) -> SVGP:
        """The whitened SVGP with the same kernel, likelihood, priors and fixed Z: its data term with
        ``data_term="sampled"`` is this model's, and it predicts from a draw ``{"u": v, ...}`` the same way."""
        return SVGP(
            kernel=self.kernel,
            likelihood=self.likelihood,
            priors=self.priors,
            fixed=self.fixed,
            Z=self.Z,
            num_latent=self.num_latent,
            learn_Z=False,
            data_term="sampled",
        )

    def pointwise_log_likelihood(self, params: Mapping[str, Array], X: Array, y: Array) -> Array:
        """log φ(y_n | v, θ) of one draw per data point (the per-point factor of eq 5.26): [N] (or [N, P])."""
        return self.variational_twin().pointwise_log_likelihood(params, X, y)

    def predict_f(
        self,
        params: Mapping[str, Array],
        X_new: Array,
        *,
        full_cov: bool = False,
        X: Array | None = None,
        y: Array | None = None,
    ) -> tuple[Array, Array]:
        """p(f(X_new) | v, θ) of one draw: mean and variance [S] (or [S, P]; covariance with ``full_cov``).

        ``X`` and ``y`` (the training data that GPR and SGPR predict from) are accepted for a common signature
        and not used.
        """
        return self.variational_twin().predict_f(params, X_new, full_cov=full_cov)


def default_priors(
    kernel: Kernel, likelihood: Likelihood, family: Literal["gamma", "lognormal"] = "gamma"
) -> dict[str, dist.Distribution]:
    """A prior for every kernel and likelihood hyperparameter, shaped like its value.

    ``"gamma"``: Gamma(1.1, 1) (shape, rate), the thesis code's prior on lengthscales and variances (ch. 5,
    Image); ``"lognormal"``: LogNormal(0, 1).
    """
    if family not in ("gamma", "lognormal"):
        raise ValueError(f"family: expected 'gamma' or 'lognormal', got {family!r}")
    base = dist.Gamma(1.1, 1.0) if family == "gamma" else dist.LogNormal(0.0, 1.0)
    sites = {f"kernel.{k}": v for k, v in kernel.parameters().items()}
    sites.update({f"likelihood.{k}": v for k, v in likelihood.parameters().items()})
    return {site: base.expand(np.shape(v)).to_event(np.ndim(v)) for site, v in sites.items()}


def _prior_fingerprint(prior: dist.Distribution) -> str:
    """A prior for a checkpoint's fingerprint: its class chain, shapes and parameter values (a sha256), e.g.
    ``"Independent/ExpandedDistribution/Gamma [3] 1a2b..."``. Not the pytree structure, whose auxiliary data NumPyro
    orders differently from one process to the next."""
    names, base = [], prior
    while base is not None:
        names.append(type(base).__name__)
        inner = getattr(base, "base_dist", None)
        if inner is None:
            break
        base = inner
    values = {name: np.asarray(getattr(base, name)) for name in sorted(base.arg_constraints) if hasattr(base, name)}
    shape = [*prior.batch_shape, *prior.event_shape]
    return f"{'/'.join(names)} {shape} {tree_sha256(values)[:16]}"


@dataclass
class SGPMCFit:
    """What :func:`fit_sgpmc` returns: the Gaussian fit, the SGPMC model built from it, and the MCMC run.

    ``svi`` is the result of the last SVI phase, or None when ``svi_steps=0`` (the chains then start at the initial
    values of the kernel, the likelihood and q(v) = N(0, I) draws).
    """

    svgp: SVGP
    svi: SVIResult | None
    model: SGPMC
    mcmc: MCMCResult


def fit_sgpmc(
    X: Array,
    y: Array,
    *,
    kernel: Kernel,
    likelihood: Likelihood,
    Z: Array,
    key: Array,
    priors: Mapping[str, dist.Distribution] | None = None,
    num_latent: int = 1,
    svi_steps: int = 2000,
    fixed_z_steps: int = 200,
    learning_rate: float = 0.01,
    batch_size: int | None = None,
    num_warmup: int = 500,
    num_samples: int = 1000,
    num_chains: int = 1,
    thinning: int = 1,
    chain_method: str = "vectorized",
    engine: str = "nuts",
    engine_options: Mapping[str, Any] | None = None,
    chunk_size: int | None = None,
    checkpoint: str | None = None,
    progress: bool = False,
    fingerprint: Mapping[str, Any] | None = None,
) -> SGPMCFit:
    """The thesis recipe (§5.5): Gaussian fit, then NUTS on the free-form q*(v, θ) with Z fixed.

    1. SVGP with the same priors (MAP for θ) by Adam: ``fixed_z_steps`` steps with Z held at its initial value
       (e.g. k-means), then ``svi_steps - fixed_z_steps`` with Z free.
    2. Z fixed at the fit; sites without a prior fixed at their point estimates; θ starts at its MAP and v at a
       draw of q(v) (one per chain).
    3. NUTS (in place of the thesis' Bayesian-optimisation-tuned HMC; NUTS adapts step size and path length),
       or another ``engine`` of :func:`ppl_sparsegp.infer.mcmc.kernel_from_name` ("hmc", "sghmc", "sgld"; the
       SG-MCMC engines take minibatch gradients when ``batch_size`` is set).

    Args:
        X [N, D], y [N] or [N, P]: training data. kernel, likelihood: their initial values.
        Z: initial inducing inputs [M, D]. priors: default :func:`default_priors` (Gamma) on every site.
        key: JAX PRNG key. engine_options: passed to the kernel (NUTS default: ``max_tree_depth=8``).
        svi_steps: Adam steps of the Gaussian fit in all; 0 runs none (``SGPMCFit.svi`` is then None).
        checkpoint: the MCMC checkpoint (see :func:`run_mcmc`); the SVI fit is not checkpointed, it is repeated
            (deterministically) by a resumed call.
        fingerprint: the caller's settings, recorded in the checkpoint beside this function's own (the SVI
            settings, Z, the initial kernel and likelihood, the priors, the engine and its options) and
            ``run_mcmc``'s; a checkpoint that differs in any of them is refused.
        The rest: the SVI and MCMC settings (see :func:`run_mcmc`).
    """
    priors = default_priors(kernel, likelihood) if priors is None else dict(priors)
    if isinstance(svi_steps, bool) or not isinstance(svi_steps, int | np.integer) or svi_steps < 0:
        raise ValueError(f"svi_steps: expected a non-negative integer, got {svi_steps!r}")
    if not isinstance(fixed_z_steps, int) or not 0 <= fixed_z_steps <= svi_steps:
        raise ValueError(f"fixed_z_steps: expected an integer in [0, svi_steps={svi_steps}], got {fixed_z_steps!r}")
    if engine not in ENGINES:
        raise ValueError(f"engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    X, y = jnp.asarray(X), jnp.asarray(y)
    common = dict(kernel=kernel, likelihood=likelihood, priors=priors, num_latent=num_latent, batch_size=batch_size)
    svgp = SVGP(Z=Z, learn_Z=fixed_z_steps == 0, **common)
    fixed = [site for site in svgp.hyperparameter_sites() if site not in priors]
    model = SGPMC(Z=Z, fixed=fixed, **{**common, "batch_size": None})  # checks priors and Z before any fit
    model.check_data(X, y)
    svi_key, init_key, mcmc_key = jax.random.split(key, 3)
    own = {
        "sgpmc.svi_steps": int(svi_steps),
        "sgpmc.fixed_z_steps": fixed_z_steps,
        "sgpmc.learning_rate": learning_rate,
        "sgpmc.batch_size": batch_size,
        "sgpmc.num_latent": num_latent,
        "sgpmc.engine": engine,
        "sgpmc.engine_options": dict(engine_options or {}),
        "sgpmc.Z_sha256": tree_sha256(np.asarray(Z)),
        "sgpmc.kernel": part_fingerprint(kernel),
        "sgpmc.likelihood": part_fingerprint(likelihood),
        "sgpmc.priors": {site: _prior_fingerprint(prior) for site, prior in sorted(priors.items())},
        "sgpmc.key": key_data(key),
    }
    params: dict[str, Array] = {}
    svi = None
    for phase, (learn_Z, steps) in enumerate(((False, fixed_z_steps), (True, svi_steps - fixed_z_steps))):
        if steps == 0:
            continue
        svgp = SVGP(Z=params.get("Z", Z), learn_Z=learn_Z, **common)
        svi = fit_svi(
            svgp.model,
            svgp.guide,
            X,
            y,
            optimizer=optax.adam(learning_rate),
            num_steps=steps,
            key=jax.random.fold_in(svi_key, phase),
            init_params={k: v for k, v in params.items() if k != "Z"} or None,
            progress=progress,
            validate=svgp.check_data,
        )
        params.update(svi.params)
    fitted_kernel, fitted_likelihood = svgp.fitted(params)
    model = SGPMC(
        kernel=fitted_kernel,
        likelihood=fitted_likelihood,
        priors=priors,
        fixed=fixed,
        Z=params.get("Z", Z),
        num_latent=num_latent,
        batch_size=batch_size if engine in ("sghmc", "sgld") else None,
    )
    init = init_from_svi(model.model, svgp.guide, params, X, y, key=init_key, num_chains=num_chains)
    options = {"max_tree_depth": 8} if engine == "nuts" else {"num_data": int(X.shape[0])} if engine == "sghmc" else {}
    mcmc_kernel = kernel_from_name(engine, model.model, **{**options, **(engine_options or {})})
    mcmc = run_mcmc(
        mcmc_kernel,
        X,
        y,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        thinning=thinning,
        chain_method=chain_method,
        key=mcmc_key,
        init_params=init,
        chunk_size=chunk_size,
        checkpoint=checkpoint,
        progress=progress,
        fingerprint={**own, **dict(fingerprint or {})},
        validate=model.check_data,
    )
    return SGPMCFit(svgp=svgp, svi=svi, model=model, mcmc=mcmc)
