"""Stochastic-gradient MCMC kernels for NumPyro: SGLD, SGHMC and the scale-adapted SGHMC used by BSGP.

The kernels are :class:`numpyro.infer.mcmc.MCMCKernel` subclasses, so ``numpyro.infer.MCMC`` (any
``chain_method``, ``thinning``, ``extra_fields``) and ``arviz.from_numpyro`` work as with NUTS. None of them has a
Metropolis correction: they simulate a discretised (underdamped) Langevin diffusion with noisy gradients.

**Gradients.** Every step evaluates the potential ``U`` (negative log joint in unconstrained space) and its
gradient once, with a fresh PRNG key: ``potential_energy(seed(model, key), model_args, model_kwargs, z)``. A model
that observes its data inside ``numpyro.plate("data", N, subsample_size=B)`` therefore sees a new minibatch at every
step and its likelihood term is scaled by ``N/B``, which makes ``∇U`` unbiased. The gradient is evaluated at the
proposed point and carried in the state (``z_grad``) to the next step, so each step costs one gradient.
With ``potential_fn=`` the user supplies ``U(z)`` directly, or ``U(z, key)`` with ``stochastic_potential=True``.

**Non-finite values.** If the proposed ``z``, its potential or its gradient is NaN/inf, the step is rejected: the
chain keeps its last finite state, the momentum is set to zero, and ``nonfinite`` becomes True and stays True
(sticky). Later steps keep trying from the last finite state; a runner can stop at the first flagged draw.

**Point estimates (Monte Carlo EM).** ``point_estimates=PointEstimates(("likelihood.variance",))`` names
``numpyro.param`` sites of the model that are optimised alongside the chain instead of sampled, as BSGP and
SGHMC-DGP do with the Gaussian noise (BSGP spec section 2.3, Havasi et al.'s "moving window MCEM"). Their
unconstrained values ride in ``z`` (so they are recorded with every draw), the dynamics leave them unchanged,
and during warmup, after every ``every`` steps, the sampled part of ``z`` is pushed into a window of the last
``window`` such states and one optimiser step (Adam, lr 0.01 by default) is taken on the point estimates with
the gradient of ``U`` at a state drawn uniformly from the window. After warmup they stay fixed, so the sampling
phase targets one fixed density. Sites named in ``held`` ride along at their start and the optimiser never moves them
(e.g. inducing inputs taken from a variational fit, held while θ and v are sampled: Hensman et al. 2015b).

**Multiple chains.** ``init`` accepts a batch of keys (one per chain), as :class:`numpyro.infer.HMC` does for
``chain_method="vectorized"``; ``sample`` then maps the one-chain step over the leading axis with the step count
unbatched (the chains step together), so the point-estimate update stays a branch taken every ``every`` steps,
not a select computed at every step; the vectorized chains take the same steps as the same chains run one after
another (``chain_method="sequential"``) up to floating-point rounding (the batched and unbatched programs order some
sums differently), which the dynamics can amplify: on BSGP (boston, M = 100) the states differ by 1e-16 after 100
updates and by O(1) after about 1000 (``benchmarks/bsgp_chains.py``), as any change of rounding would make them.

References: Welling & Teh (2011), *Bayesian learning via stochastic gradient Langevin dynamics*, ICML;
Chen, Fox & Guestrin (2014), *Stochastic gradient Hamiltonian Monte Carlo*, ICML; Springenberg, Klein, Falkner &
Hutter (2016), *Bayesian optimization with robust Bayesian neural networks*, NeurIPS; BSGP spec
(``shared/specs/001_bsgp.md``) section 2.2.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import random
from numpyro.distributions import biject_to, constraints
from numpyro.handlers import seed
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import initialize_model, potential_energy
from numpyro.util import identity, is_prng_key

from ppl_sparsegp.core import sgmcmc as rules
from ppl_sparsegp.validation import check_count, check_point_estimates, check_positive_float

Array = Any
PyTree = Any

__all__ = [
    "AdaptState",
    "AdaptiveSGHMC",
    "PointEstimateState",
    "PointEstimates",
    "SGHMC",
    "SGLD",
    "SGMCMCKernel",
    "SGMCMCState",
]


class AdaptState(NamedTuple):
    """Per-element moment estimates of :class:`AdaptiveSGHMC`, on the scale of ``∇U`` (same tree as ``z``)."""

    tau: PyTree  #: τ, the adaptive averaging window (r = 1/(τ+1) is the averaging weight)
    g_bar: PyTree  #: ḡ, running mean of the gradient
    v_hat: PyTree  #: v̂, running mean of the squared gradient; M⁻¹ = 1/(√v̂ + 1e-16)


@dataclass(frozen=True)
class PointEstimates:
    """Model ``param`` sites optimised alongside an SG-MCMC chain (Monte Carlo EM; see the module docstring).

    Attributes:
        sites: names of ``numpyro.param`` sites of the model.
        optimizer: an optax transformation of their unconstrained values (default Adam, lr 0.01, as BSGP).
        every: warmup steps between optimiser steps (BSGP: 21, one released "iteration").
        window: number of recent states (one per ``every`` steps) the optimiser's state is drawn from (BSGP: 64).
        held: sites among ``sites`` kept at their initial values: recorded with every draw, never optimised (at
            least one site must stay optimised).
    """

    sites: Sequence[str]
    optimizer: optax.GradientTransformation = field(default_factory=lambda: optax.adam(0.01))
    every: int = 21
    window: int = 64
    held: Sequence[str] = ()

    def __post_init__(self) -> None:
        check_point_estimates(self.sites, self.every, self.window, self.held)


class PointEstimateState(NamedTuple):
    """Optimiser state and window of recent states of :class:`PointEstimates`."""

    opt_state: PyTree  #: the optax state over the unconstrained point estimates
    window: PyTree  #: the sampled part of ``z`` at the last ``window`` pushes, leaves [window, ...]
    filled: Array  #: number of states pushed so far (int32); entry ``k`` holds push ``k mod window``


class SGMCMCState(NamedTuple):
    """State of a stochastic-gradient chain (every field can be collected with ``MCMC.run(extra_fields=...)``)."""

    i: Array  #: number of steps taken (int32)
    z: PyTree  #: unconstrained latent values (the ``sample_field``)
    z_grad: PyTree  #: minibatch estimate of ∇U at ``z``, used by the next step
    momentum: PyTree | None  #: r (SGHMC) or the displacement p (AdaptiveSGHMC); None for SGLD
    potential_energy: Array  #: minibatch estimate of U at ``z``
    nonfinite: Array  #: True once any proposal was NaN/inf (sticky)
    step_size: Array  #: ε
    adapt_scale: Array  #: geometric mean over all elements of the diagonal M⁻¹ the next step uses
    adapt_state: AdaptState | None  #: moment estimates (AdaptiveSGHMC only)
    point_state: PointEstimateState | None  #: optimiser state of the point estimates (None without them)
    rng_key: Array


def _normal_like(key: Array, tree: PyTree) -> PyTree:
    """Standard normal draws with the shapes and dtypes of ``tree``'s leaves (one subkey per leaf)."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = random.split(key, len(leaves))
    return treedef.unflatten(
        [random.normal(k, jnp.shape(x), jnp.result_type(x)) for k, x in zip(keys, leaves, strict=True)]
    )


def _unzip(tree_of_tuples: PyTree, like: PyTree, size: int = 2) -> tuple[PyTree, ...]:
    """A tree (shaped as ``like``) whose leaves are ``size``-tuples, as ``size`` trees."""
    treedef = jax.tree.structure(like)
    leaves = treedef.flatten_up_to(tree_of_tuples)
    return tuple(treedef.unflatten([leaf[k] for leaf in leaves]) for k in range(size))


def _all_finite(tree: PyTree) -> Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


class SGMCMCKernel(MCMCKernel):
    """Bookkeeping shared by the stochastic-gradient kernels: model → potential, init, postprocess, chains, NaN guard.

    Subclasses define the update rule through three hooks: ``_init_dynamics(z)`` → (momentum, adapt_state),
    ``_update(z, momentum, grad, noise, adapt_state, adapting)`` → (z, momentum, adapt_state), and
    ``_adapt_scale(adapt_state)`` (the ``adapt_scale`` summary of M⁻¹). ``adapting`` is ``i < num_warmup``.

    :param model: NumPyro model; latent sites are sampled in unconstrained space. Exactly one of ``model`` and
        ``potential_fn`` must be given.
    :param potential_fn: ``U(z)`` (or ``U(z, key)`` with ``stochastic_potential=True``) on a pytree ``z``; requires
        ``init_params`` at run time.
    :param step_size: ε > 0.
    :param init_strategy: per-site initialisation for model-based init (NumPyro's ``init_to_uniform`` by default,
        as for HMC).
    :param stochastic_potential: call ``potential_fn(z, key)`` with a fresh key every step.
    :param point_estimates: :class:`PointEstimates`, model ``param`` sites optimised alongside the chain (model only).
    """

    sample_field = "z"
    default_fields = ("z", "nonfinite")
    #: per-draw statistics that :func:`ppl_sparsegp.infer.mcmc.run_mcmc` keeps by default (ArviZ sample_stats)
    diagnostic_fields = ("step_size", "adapt_scale", "potential_energy")

    def __init__(
        self,
        model: Callable | None = None,
        potential_fn: Callable | None = None,
        *,
        step_size: float,
        init_strategy: Callable = init_to_uniform,
        stochastic_potential: bool = False,
        point_estimates: PointEstimates | None = None,
    ) -> None:
        if (model is None) == (potential_fn is None):
            raise ValueError("model, potential_fn: exactly one of `model` and `potential_fn` must be given")
        if stochastic_potential and potential_fn is None:
            raise ValueError("stochastic_potential: only applies to `potential_fn`")
        if point_estimates is not None and not isinstance(point_estimates, PointEstimates):
            raise ValueError(f"point_estimates: expected a PointEstimates or None, got {point_estimates!r}")
        if point_estimates is not None and model is None:
            raise ValueError("point_estimates: optimising param sites needs a `model`")
        check_positive_float("step_size", step_size)
        self.point_estimates = point_estimates
        self._param_transforms: dict[str, Any] = {}
        self._model, self._potential_fn = model, potential_fn
        self.step_size = float(step_size)
        self._init_strategy = init_strategy
        self._stochastic_potential = stochastic_potential
        self._postprocess_fn = None
        self._num_warmup = 0

    @property
    def model(self) -> Callable | None:
        return self._model

    # ---- hooks -------------------------------------------------------------------------------------------------
    def _init_dynamics(self, z: PyTree) -> tuple[PyTree | None, AdaptState | None]:
        raise NotImplementedError

    def _update(
        self, z: PyTree, momentum: PyTree, grad: PyTree, noise: PyTree, adapt: AdaptState | None, adapting: Array
    ) -> tuple[PyTree, PyTree, AdaptState | None]:
        raise NotImplementedError

    def _adapt_scale(self, adapt: AdaptState | None) -> Array:
        raise NotImplementedError

    # ---- bookkeeping -------------------------------------------------------------------------------------------
    def _potential(self, z: PyTree, key: Array, model_args: tuple, model_kwargs: dict) -> Array:
        if self._model is not None:
            # potential_energy substitutes param sites as given, so point estimates go in constrained
            z = {**z, **{name: t(z[name]) for name, t in self._param_transforms.items()}}
            return potential_energy(seed(self._model, key), model_args, model_kwargs, z)
        return self._potential_fn(z, key) if self._stochastic_potential else self._potential_fn(z)

    def _state(self, i, z, grad, momentum, u, nonfinite, adapt, point, key) -> SGMCMCState:
        dtype = jnp.result_type(*jax.tree.leaves(z))
        return SGMCMCState(
            i=i,
            z=z,
            z_grad=grad,
            momentum=momentum,
            potential_energy=u,
            nonfinite=nonfinite,
            step_size=jnp.asarray(self.step_size, dtype),
            adapt_scale=jnp.asarray(self._adapt_scale(adapt), dtype),
            adapt_state=adapt,
            point_state=point,
            rng_key=key,
        )

    def _init_one(self, z: PyTree, rng_key: Array, model_args: tuple, model_kwargs: dict) -> SGMCMCState:
        rng_key, key_u = random.split(rng_key)
        u, grad = jax.value_and_grad(self._potential)(z, key_u, model_args, model_kwargs)
        momentum, adapt = self._init_dynamics(z)
        nonfinite = ~_all_finite((z, u, grad))
        point = self._init_point_state(z)
        return self._state(jnp.zeros((), jnp.int32), z, grad, momentum, u, nonfinite, adapt, point, rng_key)

    def _split_point(self, z: PyTree) -> tuple[dict, dict, dict]:
        """(sampled part, optimised point estimates, held point estimates) of ``z``."""
        names, held = self._param_transforms, self.point_estimates.held if self.point_estimates else ()
        return (
            {k: v for k, v in z.items() if k not in names},
            {k: v for k, v in z.items() if k in names and k not in held},
            {k: v for k, v in z.items() if k in held},
        )

    def _init_point_state(self, z: PyTree) -> PointEstimateState | None:
        if self.point_estimates is None:
            return None
        sampled, point, _ = self._split_point(z)
        size = self.point_estimates.window
        window = jax.tree.map(lambda x: jnp.zeros((size, *jnp.shape(x)), jnp.result_type(x)), sampled)
        return PointEstimateState(self.point_estimates.optimizer.init(point), window, jnp.zeros((), jnp.int32))

    def _point_step(
        self, i: Array, z: PyTree, point_state: PointEstimateState, key: Array, model_args: tuple, model_kwargs: dict
    ) -> tuple[PyTree, PointEstimateState]:
        """After step ``i`` (1-based) of warmup, every ``every`` steps: push ``z`` to the window, then one optimiser
        step on the point estimates with ∇U at a window state drawn uniformly (a fresh minibatch key)."""
        settings = self.point_estimates
        sampled, point, held = self._split_point(z)

        def update(args):
            sampled, point, state = args
            slot = state.filled % settings.window
            window = jax.tree.map(lambda w, x: w.at[slot].set(x), state.window, sampled)
            filled = state.filled + 1
            key_pick, key_u = random.split(key)
            pick = random.randint(key_pick, (), 0, jnp.minimum(filled, settings.window))
            at = jax.tree.map(lambda w: w[pick], window)
            grad = jax.grad(lambda p: self._potential({**at, **held, **p}, key_u, model_args, model_kwargs))(point)
            updates, opt_state = settings.optimizer.update(grad, state.opt_state, point)
            return optax.apply_updates(point, updates), PointEstimateState(opt_state, window, filled)

        due = (i % settings.every == 0) & (i <= self._num_warmup)
        point, point_state = jax.lax.cond(due, update, lambda args: args[1:], (sampled, point, point_state))
        return {**sampled, **held, **point}, point_state

    def init(
        self,
        rng_key: Array,
        num_warmup: int,
        init_params: PyTree | None = None,
        model_args: tuple = (),
        model_kwargs: dict | None = None,
    ) -> SGMCMCState:
        """Initial state; a batch of keys (leading chain axis) gives a batch of states, one per chain.

        ``init_params`` are unconstrained values (as ``MCMC.run`` passes them), batched like the keys. With a model,
        ``initialize_model`` validates it, builds ``postprocess_fn`` and, without ``init_params``, draws them with
        ``init_strategy``. The model is replayed with a fixed seed there, so deterministic sites inside a
        subsampling plate are evaluated on one fixed minibatch.
        """
        model_kwargs = {} if model_kwargs is None else model_kwargs
        self._num_warmup = num_warmup
        batched = not is_prng_key(rng_key)
        if batched:
            rng_key, key_init = jnp.swapaxes(jax.vmap(random.split)(rng_key), 0, 1)
        else:
            rng_key, key_init = random.split(rng_key)
        if self._model is not None:

            def seeded(*args: Any, **kwargs: Any) -> Any:
                # Subsampling plates need a key outside the kernel's steps. Seeded at each call, not once here: a key
                # made while ``init`` is traced (run_mcmc compiles it) would leak into ``postprocess_fn``, which
                # replays the model for deterministic sites after the trace has ended.
                return seed(self._model, rng_seed=0)(*args, **kwargs)

            info = initialize_model(
                key_init,
                seeded,
                init_strategy=self._init_strategy,
                dynamic_args=True,
                model_args=model_args,
                model_kwargs=model_kwargs,
            )
            self._postprocess_fn = info.postprocess_fn
            if init_params is None:
                init_params = info.param_info.z
            init_params = self._with_point_estimates(init_params, info.model_trace, rng_key if batched else None)
        elif init_params is None:
            raise ValueError("init_params: required with `potential_fn`")

        def init_one(z, key):
            return self._init_one(z, key, model_args, model_kwargs)

        return jax.jit(jax.vmap(init_one) if batched else init_one)(init_params, rng_key)

    def _with_point_estimates(self, init_params: PyTree, model_trace: dict, batch_keys: Array | None) -> PyTree:
        """Record the point-estimate sites' transforms and add their unconstrained initial values to ``z``."""
        if self.point_estimates is None:
            return init_params
        init_params = dict(init_params)
        for name in self.point_estimates.sites:
            site = model_trace.get(name)
            if site is None or site["type"] != "param":
                found = sorted(k for k, v in model_trace.items() if v["type"] == "param")
                raise ValueError(f"point_estimates: {name!r} is not a param site of the model; its params: {found}")
            transform = biject_to(site["kwargs"].get("constraint", constraints.real))
            self._param_transforms[name] = transform
            if name not in init_params:
                value = transform.inv(site["value"])
                if batch_keys is not None:
                    value = jnp.broadcast_to(value, (batch_keys.shape[0], *jnp.shape(value)))
                init_params[name] = value
        return init_params

    def postprocess_fn(self, model_args: tuple, model_kwargs: dict) -> Callable:
        """Map unconstrained ``z`` to the model's supports and add deterministic sites (identity without a model)."""
        if self._postprocess_fn is None:
            return identity
        return self._postprocess_fn(*model_args, **model_kwargs)

    def sample(self, state: SGMCMCState, model_args: tuple, model_kwargs: dict) -> SGMCMCState:
        """One step (pure JAX); a batched state (vectorized chains) is mapped over its leading axis.

        Vectorized chains start together and take every step together, so they share the step count: it goes into
        the mapped step unbatched (chain 0's ``i``), and the point-estimate update due every ``every`` steps stays
        one ``lax.cond`` taken by all chains at once, each on its own window and optimiser state (a batched count
        would turn the cond into a select that computes the update at every step).
        """
        if jnp.ndim(state.i) > 0:
            return jax.vmap(self._sample_one, in_axes=(0, None, None, None))(
                state, state.i[0], model_args, model_kwargs
            )
        return self._sample_one(state, state.i, model_args, model_kwargs)

    def _sample_one(self, state: SGMCMCState, i: Array, model_args: tuple, model_kwargs: dict) -> SGMCMCState:
        """Step ``i`` -> ``i + 1`` of one chain (``i``: the steps taken, the chains' shared ``state.i``)."""
        rng_key, key_noise, key_u, key_point = random.split(state.rng_key, 4)
        noise = _normal_like(key_noise, state.z)
        adapting = i < self._num_warmup
        z, momentum, adapt = self._update(state.z, state.momentum, state.z_grad, noise, state.adapt_state, adapting)
        point = state.point_state
        if point is not None:
            z = {**z, **{name: state.z[name] for name in self._param_transforms}}  # the dynamics leave them alone
            if momentum is not None:
                momentum = {k: jnp.zeros_like(m) if k in self._param_transforms else m for k, m in momentum.items()}
            z, point = self._point_step(i + 1, z, point, key_point, model_args, model_kwargs)
        u, grad = jax.value_and_grad(self._potential)(z, key_u, model_args, model_kwargs)

        ok = _all_finite((z, u, grad))
        z, grad, u, adapt, point = jax.tree.map(
            lambda new, old: jnp.where(ok, new, old),
            (z, grad, u, adapt, point),
            (state.z, state.z_grad, state.potential_energy, state.adapt_state, state.point_state),
        )
        momentum = jax.tree.map(lambda m: jnp.where(ok, m, jnp.zeros_like(m)), momentum)
        return self._state(i + 1, z, grad, momentum, u, state.nonfinite | ~ok, adapt, point, rng_key)

    def get_diagnostics_str(self, state: SGMCMCState) -> str:
        text = f"U {float(state.potential_energy):.4g}, step {float(state.step_size):.2e}"
        text += f", M^-1 {float(state.adapt_scale):.2e}"
        return text + (", NONFINITE" if bool(state.nonfinite) else "")


class SGLD(SGMCMCKernel):
    """Stochastic gradient Langevin dynamics (Welling & Teh 2011)::

        z ← z − (ε/2) ∇U(z) + N(0, ε)

    Euler–Maruyama discretisation of the overdamped Langevin diffusion; ``∇U`` may be a minibatch estimate. With
    a constant ε the stationary law carries an O(ε) bias (no Metropolis correction). ``momentum`` is None and
    ``adapt_scale`` is 1. See :class:`SGMCMCKernel` for the common arguments.
    """

    def _init_dynamics(self, z: PyTree) -> tuple[None, None]:
        return None, None

    def _update(self, z, momentum, grad, noise, adapt, adapting):
        return jax.tree.map(partial(rules.sgld_step, step_size=self.step_size), z, grad, noise), None, None

    def _adapt_scale(self, adapt: None) -> float:
        return 1.0


class SGHMC(SGMCMCKernel):
    """Stochastic gradient HMC (Chen, Fox & Guestrin 2014) with B̂ = 0 and no Metropolis step, standard form::

        r ← r − ε ∇U(z) − ε C M⁻¹ r + N(0, 2εC)
        z ← z + ε M⁻¹ r

    (the momentum is updated first and the position moves with the new momentum). ``∇U`` may be a minibatch
    estimate; its noise is not corrected (B̂ = 0), so minibatches over-disperse the samples slightly. With
    ``v = ε M⁻¹ r``, η = ε² M⁻¹ and α = ε C M⁻¹ this is ``v ← (1−α) v − η ∇U + N(0, 2αη); z ← z + v``, the form
    :class:`AdaptiveSGHMC` uses.

    :param friction: C > 0, with ε C / M ≤ 1 (α = εC/M is the fraction of momentum lost per step).
    :param mass: scalar mass M > 0 (identity mass matrix scaled by M); ``adapt_scale`` is 1/M.
    :param options: ``init_strategy``, ``stochastic_potential`` and ``point_estimates`` of :class:`SGMCMCKernel`.
    """

    def __init__(
        self,
        model: Callable | None = None,
        potential_fn: Callable | None = None,
        *,
        step_size: float,
        friction: float = 1.0,
        mass: float = 1.0,
        **options: Any,
    ) -> None:
        super().__init__(model, potential_fn, step_size=step_size, **options)
        check_positive_float("friction", friction)
        check_positive_float("mass", mass)
        if step_size * friction / mass > 1:
            raise ValueError(f"friction: step_size * friction / mass must be <= 1, got {step_size * friction / mass}")
        self.friction, self.mass = float(friction), float(mass)

    def _init_dynamics(self, z: PyTree) -> tuple[PyTree, None]:
        return jax.tree.map(jnp.zeros_like, z), None

    def _update(self, z, momentum, grad, noise, adapt, adapting):
        step = partial(rules.sghmc_step, step_size=self.step_size, friction=self.friction, inv_mass=1.0 / self.mass)
        z, r = _unzip(jax.tree.map(step, z, momentum, grad, noise), z)
        return z, r, None

    def _adapt_scale(self, adapt: None) -> float:
        return 1.0 / self.mass


class AdaptiveSGHMC(SGMCMCKernel):
    """Scale-adapted SGHMC (Springenberg et al. 2016) exactly as used by BSGP (spec section 2.2).

    **Spec form.** With ĝ = ∇nll the gradient of the per-datapoint loss nll = U/N, every element of every latent
    carries (p, τ, ḡ, v̂), initialised to (0, 1, 1, 1). During warmup only (``i < num_warmup``), with all right-hand
    sides at their old values::

        r = 1/(τ+1);  ḡ ← (1−r) ḡ + r ĝ;  v̂ ← (1−r) v̂ + r ĝ²;  τ ← 1 + τ (1 − ḡ²/(v̂ + 1e-16))

    and at every step, with v̂ from before this step's update::

        M⁻¹ = 1/(√(v̂ + 1e-16) + 1e-16)
        p ← p − ε² M⁻¹ ĝ − α p + N(0, 2 (ε²/N) α M⁻¹)        (noise variance floored at 1e-16)
        θ ← θ + p

    **Form used here.** Write ĝ = ∇U/N. The same moments taken of ∇U are ḡ_U = N ḡ and v̂_U = N² v̂ (τ is
    unchanged: ḡ²/v̂ is scale free), so M⁻¹ = N M̃⁻¹ with M̃⁻¹ = 1/√v̂_U. Substituting, the N cancels::

        h = ε² M̃⁻¹,    p ← (1−α) p − h ∇U + N(0, 2αh),    θ ← θ + p

    The kernel therefore keeps its moments on the ∇U scale and needs N only for their initial values
    (ḡ_U, v̂_U) = (N, N²), i.e. the spec's (1, 1); its 1e-16 floors act on the ∇U scale, so they differ from the
    spec's only where |∇U| ≲ 1e-8·N. This discretises underdamped Langevin dynamics with stationary density
    ∝ exp(−U(θ) − p²/2h), the temperature-1 posterior, with a diagonal RMSprop-like preconditioner that is frozen
    after warmup (the moment estimates are constant while sampling). Minibatch gradient noise is not corrected
    (B̂ = 0), which over-disperses the samples somewhat.

    :param step_size: ε (BSGP: 0.01).
    :param mdecay: α ∈ (0, 1], the momentum decay (friction) per step (BSGP: 0.05).
    :param num_data: N, only used for the initial moments (see above); the default 1 starts from M̃⁻¹ = 1, which
        can make the first steps far too long when |∇U| is large.

    :param options: ``init_strategy``, ``stochastic_potential`` and ``point_estimates`` of :class:`SGMCMCKernel`.

    ``adapt_scale`` is the geometric mean over all elements of M̃⁻¹ = 1/(√v̂_U + 1e-16). See
    :func:`ppl_sparsegp.recipes.bsgp.bsgp_schedule` for the released settings.
    """

    def __init__(
        self,
        model: Callable | None = None,
        potential_fn: Callable | None = None,
        *,
        step_size: float = 0.01,
        mdecay: float = 0.05,
        num_data: int = 1,
        **options: Any,
    ) -> None:
        super().__init__(model, potential_fn, step_size=step_size, **options)
        if not (isinstance(mdecay, int | float) and 0 < mdecay <= 1):
            raise ValueError(f"mdecay: expected a number in (0, 1], got {mdecay!r}")
        self.mdecay, self.num_data = float(mdecay), check_count("num_data", num_data, minimum=1)

    def _init_dynamics(self, z: PyTree) -> tuple[PyTree, AdaptState]:
        n = float(self.num_data)
        full = lambda value: jax.tree.map(lambda x: jnp.full_like(x, value), z)  # noqa: E731
        return full(0.0), AdaptState(tau=full(1.0), g_bar=full(n), v_hat=full(n * n))

    def _update(self, z, p, grad, noise, adapt, adapting):
        step = partial(rules.adaptive_sghmc_step, step_size=self.step_size, mdecay=self.mdecay)
        z, p = _unzip(jax.tree.map(step, z, p, grad, noise, adapt.v_hat), z)
        adapted = AdaptState(*_unzip(jax.tree.map(rules.adapt_moments, *adapt, grad), z, 3))
        adapt = jax.tree.map(lambda new, old: jnp.where(adapting, new, old), adapted, adapt)
        return z, p, adapt

    def _adapt_scale(self, adapt: AdaptState) -> Array:
        leaves = jax.tree.leaves(adapt.v_hat)
        log_inv_mass = sum(jnp.sum(jnp.log(rules.inverse_mass(v))) for v in leaves)
        return jnp.exp(log_inv_mass / sum(jnp.size(v) for v in leaves))
