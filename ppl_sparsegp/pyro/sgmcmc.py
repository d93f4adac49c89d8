"""Stochastic-gradient MCMC kernels for Pyro: SGLD, SGHMC and the scale-adapted SGHMC used by BSGP, the twins of
:mod:`ppl_sparsegp.infer.sghmc` (same classes, arguments, defaults and update rules: :mod:`ppl_sparsegp.core.sgmcmc`).

The kernels subclass :class:`pyro.infer.mcmc.mcmc_kernel.MCMCKernel`, so ``pyro.infer.MCMC(kernel, num_samples=...,
warmup_steps=...)`` runs them and returns constrained draws. None of them has a Metropolis correction: they
simulate a discretised Langevin diffusion with noisy gradients.

**Gradients.** Every step evaluates the potential ``U`` (negative log joint in unconstrained space, Jacobians of the
support transforms included) and its gradient once, by torch autograd through a ``poutine.trace`` of the model with
the latent sites conditioned on ``z`` (Pyro's own ``initialize_model`` refuses subsampling plates, so the kernel
traces the model itself). A model that observes its data inside the ``"data"`` plate with a batch size
(:func:`ppl_sparsegp.pyro.sites.data_plate`, or ``pyro.plate("data", N, subsample_size=B)``) therefore sees a new
minibatch at every step (torch's generator draws it) and its data term is scaled by N/B, which makes ``∇U``
unbiased. The gradient at the proposed point is kept for the next step, so each step costs one gradient. With
``potential_fn=`` the user supplies ``U(z)`` on a dict of tensors; it may draw from torch's generator itself (the
NumPyro twin's ``stochastic_potential=True``: torch's randomness is global, so no key is passed).

**Non-finite values.** If the proposed ``z``, its potential or its gradient is NaN/inf, the step is rejected: the
chain keeps its last finite state (point estimates and their optimiser state included), the momentum is set to
zero, and :attr:`SGMCMCKernel.nonfinite` becomes True and stays True.

**Point estimates (Monte Carlo EM).** ``point_estimates=PointEstimates(("likelihood.variance",))`` names
``pyro.param`` sites of the model optimised alongside the chain instead of sampled (BSGP spec section 2.3). Their
unconstrained values ride in ``z`` (so ``MCMC.get_samples()`` records them, constrained, with every draw), the
dynamics leave them unchanged, and during warmup, after every ``every`` steps, the sampled part of ``z`` is pushed
into a window of the last ``window`` states and one optimiser step (``torch.optim.Adam``, lr 0.01, by default: the
same algorithm and defaults as the NumPyro twin's ``optax.adam(0.01)``) is taken on the point estimates with the
gradient of ``U`` at a state drawn uniformly from the window. After warmup they stay fixed. They are substituted
into the model, so the param store keeps the values it had. Sites named in ``held`` ride along at their start and
the optimiser never moves them (as the NumPyro twin's).

**State.** :attr:`SGMCMCKernel.state` is an :class:`SGMCMCState` with the NumPyro state's field names; an
``MCMC(..., hook_fn=...)`` receives the kernel after every step and can collect any of them.

References: Welling & Teh (2011), ICML; Chen, Fox & Guestrin (2014), ICML; Springenberg, Klein, Falkner & Hutter
(2016), NeurIPS; BSGP spec (``shared/specs/001_bsgp.md``) section 2.2.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import torch
from pyro import poutine
from pyro.infer.autoguide.initialization import InitMessenger, init_to_uniform
from pyro.infer.mcmc.mcmc_kernel import MCMCKernel
from pyro.poutine.subsample_messenger import _Subsample
from torch.distributions import biject_to, constraints

from ppl_sparsegp.core import sgmcmc as rules
from ppl_sparsegp.validation import check_count, check_point_estimates, check_positive_float

Array = Any
Tensors = dict[str, torch.Tensor]

__all__ = ["SGHMC", "SGLD", "AdaptState", "AdaptiveSGHMC", "PointEstimates", "SGMCMCKernel", "SGMCMCState"]


class AdaptState(NamedTuple):
    """Per-element moment estimates of :class:`AdaptiveSGHMC` on the scale of ``∇U``, each a dict like ``z``."""

    tau: Tensors  #: τ, the adaptive averaging window
    g_bar: Tensors  #: ḡ, running mean of the gradient
    v_hat: Tensors  #: v̂, running mean of the squared gradient; M̃⁻¹ = 1/(√v̂ + 1e-16)


@dataclass(frozen=True)
class PointEstimates:
    """Model ``param`` sites optimised alongside an SG-MCMC chain (Monte Carlo EM; see the module docstring).

    Attributes:
        sites: names of ``pyro.param`` sites of the model.
        optimizer: called with the list of unconstrained point-estimate tensors, returns a ``torch.optim``
            optimizer over them (default Adam, lr 0.01, as BSGP).
        every: warmup steps between optimiser steps (BSGP: 21).
        window: number of recent states (one per ``every`` steps) the optimiser's state is drawn from (BSGP: 64).
        held: sites among ``sites`` kept at their initial values: recorded with every draw, never optimised (at
            least one site must stay optimised).
    """

    sites: Sequence[str]
    optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] = field(
        default_factory=lambda: partial(torch.optim.Adam, lr=0.01)
    )
    every: int = 21
    window: int = 64
    held: Sequence[str] = ()

    def __post_init__(self) -> None:
        check_point_estimates(self.sites, self.every, self.window, self.held)


class SGMCMCState(NamedTuple):
    """The chain's state after the last step (field names as the NumPyro twin's ``SGMCMCState``)."""

    i: int  #: number of steps taken
    z: Tensors  #: unconstrained latent values (and point estimates)
    z_grad: Tensors  #: minibatch estimate of ∇U at ``z``, used by the next step
    momentum: Tensors | None  #: r (SGHMC) or the displacement p (AdaptiveSGHMC); None for SGLD
    potential_energy: torch.Tensor  #: minibatch estimate of U at ``z``
    nonfinite: bool  #: True once any proposal was NaN/inf (sticky)
    step_size: float  #: ε
    adapt_scale: float  #: geometric mean over all elements of the diagonal M⁻¹ the next step uses
    adapt_state: AdaptState | None  #: moment estimates (AdaptiveSGHMC only)


def _all_finite(*tensors: torch.Tensor) -> bool:
    return all(bool(torch.all(torch.isfinite(t))) for t in tensors)


def _same_position(a: Tensors, b: Tensors) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


class SGMCMCKernel(MCMCKernel):
    """Bookkeeping shared by the stochastic-gradient kernels: model → potential, setup, NaN guard, point estimates.

    Subclasses define the update rule through three hooks, as the NumPyro twin's: ``_init_dynamics(z)`` →
    (momentum, adapt_state), ``_update(z, momentum, grad, noise, adapt_state, adapting)`` → (z, momentum,
    adapt_state), and ``_adapt_scale(adapt_state)``. ``adapting`` is ``i < warmup_steps``.

    :param model: Pyro model; its continuous latent sites are sampled in unconstrained space. Exactly one of
        ``model`` and ``potential_fn`` must be given.
    :param potential_fn: ``U(z)`` on a dict of tensors; requires ``initial_params`` (``MCMC(..., initial_params=)``).
    :param step_size: ε > 0.
    :param init_strategy: per-site initialisation of the model's latent sites (Pyro's ``init_to_uniform`` by
        default, as for HMC).
    :param point_estimates: :class:`PointEstimates`, model ``param`` sites optimised alongside the chain.
    """

    def __init__(
        self,
        model: Callable | None = None,
        potential_fn: Callable[[Tensors], torch.Tensor] | None = None,
        *,
        step_size: float,
        init_strategy: Callable = init_to_uniform,
        point_estimates: PointEstimates | None = None,
    ) -> None:
        if (model is None) == (potential_fn is None):
            raise ValueError("model, potential_fn: exactly one of `model` and `potential_fn` must be given")
        if point_estimates is not None and not isinstance(point_estimates, PointEstimates):
            raise ValueError(f"point_estimates: expected a PointEstimates or None, got {point_estimates!r}")
        if point_estimates is not None and model is None:
            raise ValueError("point_estimates: optimising param sites needs a `model`")
        self.step_size = check_positive_float("step_size", step_size)
        self.model, self.potential_fn = model, potential_fn
        self.point_estimates = point_estimates
        self.transforms: dict[str, Any] | None = None  # constrained -> unconstrained, per site (as Pyro's HMC)
        self._init_strategy = init_strategy
        self._initial_params: Tensors | None = None
        self._sampled: tuple[str, ...] = ()
        self._points: tuple[str, ...] = ()
        self._args: tuple = ()
        self._kwargs: dict = {}
        self.nonfinite = False

    # ---- hooks -------------------------------------------------------------------------------------------------
    def _init_dynamics(self, z: Tensors) -> tuple[Tensors | None, AdaptState | None]:
        raise NotImplementedError

    def _update(
        self, z: Tensors, momentum: Tensors | None, grad: Tensors, noise: Tensors, adapt: AdaptState | None,
        adapting: bool,
    ) -> tuple[Tensors, Tensors | None, AdaptState | None]:  # fmt: skip
        raise NotImplementedError

    def _adapt_scale(self, adapt: AdaptState | None) -> float:
        raise NotImplementedError

    # ---- potential ---------------------------------------------------------------------------------------------
    def potential(self, z: Tensors) -> torch.Tensor:
        """U(z): the negative log joint at unconstrained ``z`` (one fresh minibatch), differentiable in ``z``."""
        if self.model is None:
            return self.potential_fn(z)
        values = {name: self.transforms[name].inv(z[name]) for name in (*self._sampled, *self._points)}
        sampled = {name: values[name] for name in self._sampled}
        points = {name: values[name] for name in self._points}
        model = poutine.substitute(poutine.condition(self.model, sampled), points)
        log_joint = poutine.trace(model).get_trace(*self._args, **self._kwargs).log_prob_sum()
        for name in self._sampled:
            log_joint = log_joint - self.transforms[name].log_abs_det_jacobian(values[name], z[name]).sum()
        return -log_joint

    def potential_and_grad(self, z: Tensors) -> tuple[torch.Tensor, Tensors]:
        """(U(z), ∇U(z)) by autograd, detached; a site U does not depend on gets a zero gradient."""
        z = {name: value.detach().requires_grad_(True) for name, value in z.items()}
        u = self.potential(z)
        grads = torch.autograd.grad(u, list(z.values()), allow_unused=True)
        grad = {name: torch.zeros_like(z[name]) if g is None else g for name, g in zip(z, grads, strict=True)}
        return u.detach(), grad

    # ---- set-up ------------------------------------------------------------------------------------------------
    @property
    def initial_params(self) -> Tensors | None:
        return self._initial_params

    @initial_params.setter
    def initial_params(self, params: Tensors) -> None:
        self._initial_params = params

    def setup(self, warmup_steps: int, *args: Any, **kwargs: Any) -> None:
        """Trace the model once (``init_strategy``) for its latent sites, their transforms and, without
        ``initial_params``, the starting point; then the potential, gradient and dynamics there.

        Raises:
            ValueError: a discrete latent site; a point estimate that is not a param site; ``potential_fn`` without
                ``initial_params``.
        """
        self._warmup_steps = check_count("warmup_steps", warmup_steps)
        self._args, self._kwargs = args, kwargs
        given = self._initial_params
        if self.model is None:
            if given is None:
                raise ValueError("initial_params: required with `potential_fn`")
            self.transforms, z = {}, {name: value.detach() for name, value in given.items()}
        else:
            z = self._setup_model(given)
        u, grad = self.potential_and_grad(z)
        momentum, adapt = self._init_dynamics(z)
        self._commit(0, z, grad, u, momentum, adapt)
        self.nonfinite = not _all_finite(u, *z.values(), *grad.values())
        self._setup_point_estimates(z)
        self._initial_params = z

    def _setup_model(self, given: Tensors | None) -> Tensors:
        with poutine.block():
            trace = poutine.trace(InitMessenger(self._init_strategy)(self.model)).get_trace(*self._args, **self._kwargs)
        self.transforms, z = {}, {}
        for name, site in trace.iter_stochastic_nodes():
            if isinstance(site["fn"], _Subsample):
                continue
            if site["fn"].has_enumerate_support:
                raise ValueError(f"model: SG-MCMC needs continuous latent sites; {name!r} is discrete")
            self.transforms[name] = biject_to(site["fn"].support).inv
            z[name] = self.transforms[name](site["value"]).detach()
        self._sampled = tuple(z)
        points = () if self.point_estimates is None else tuple(self.point_estimates.sites)
        for name in points:
            site = trace.nodes.get(name)
            if site is None or site["type"] != "param":
                found = sorted(k for k, v in trace.nodes.items() if v["type"] == "param")
                raise ValueError(f"point_estimates: {name!r} is not a param site of the model; its params: {found}")
            self.transforms[name] = biject_to(site["kwargs"].get("constraint", constraints.real)).inv
            z[name] = self.transforms[name](site["value"]).detach()
        self._points = points
        if given is not None:
            z.update({name: value.detach() for name, value in given.items()})
        return z

    def _setup_point_estimates(self, z: Tensors) -> None:
        if self.point_estimates is None:
            return
        held = self.point_estimates.held
        self._point_values = {name: z[name].clone().requires_grad_(name not in held) for name in self._points}
        self._optimizer = self.point_estimates.optimizer([v for v in self._point_values.values() if v.requires_grad])
        self._window: list[Tensors] = []
        self._filled = 0

    # ---- steps -------------------------------------------------------------------------------------------------
    def _commit(self, i: int, z, grad, u, momentum, adapt) -> None:
        self._i, self._z, self._grad, self._u, self._momentum, self._adapt = i, z, grad, u, momentum, adapt

    @property
    def state(self) -> SGMCMCState:
        """The chain's state after the last step."""
        return SGMCMCState(
            self._i, self._z, self._grad, self._momentum, self._u, self.nonfinite, self.step_size,
            self._adapt_scale(self._adapt), self._adapt,
        )  # fmt: skip

    @property
    def potential_energy(self) -> torch.Tensor:
        """The minibatch estimate of U at the chain's current position (what ``state.potential_energy`` holds)."""
        return self._u

    def sample(self, params: Tensors) -> Tensors:
        """One step from ``params`` (unconstrained; the kernel's last state unless the caller changed it: a position
        that differs from it, in any value, gets its potential and gradient recomputed)."""
        if params is not self._z and not _same_position(params, self._z):
            u, grad = self.potential_and_grad(params)
            self._commit(self._i, params, grad, u, self._momentum, self._adapt)
        noise = {name: torch.randn_like(value) for name, value in self._z.items()}
        adapting = self._i < self._warmup_steps
        z, momentum, adapt = self._update(self._z, self._momentum, self._grad, noise, self._adapt, adapting)
        saved = None
        if self.point_estimates is not None:
            z.update({name: self._z[name] for name in self._points})  # the dynamics leave them alone
            if momentum is not None:
                momentum.update({name: torch.zeros_like(momentum[name]) for name in self._points})
            saved = self._point_step(self._i + 1, z)
        u, grad = self.potential_and_grad(z)
        if _all_finite(u, *z.values(), *grad.values()):
            self._commit(self._i + 1, z, grad, u, momentum, adapt)
        else:
            self.nonfinite = True
            if saved is not None:
                self._restore_point_state(saved)
            zero = None if momentum is None else {name: torch.zeros_like(m) for name, m in momentum.items()}
            self._commit(self._i + 1, self._z, self._grad, self._u, zero, self._adapt)
        return self._z

    def _point_step(self, i: int, z: Tensors) -> tuple | None:
        """After step ``i`` (1-based) of warmup, every ``every`` steps: push the sampled part of ``z`` to the window,
        then one optimiser step on the point estimates with ∇U at a window state drawn uniformly; writes them into
        ``z`` and returns what :meth:`_restore_point_state` needs to undo it (None when no step was due)."""
        settings = self.point_estimates
        if i % settings.every != 0 or i > self._warmup_steps:
            return None
        saved = (
            copy.deepcopy(self._optimizer.state_dict()), list(self._window), self._filled,
            {name: value.detach().clone() for name, value in self._point_values.items()},
        )  # fmt: skip
        sampled = {name: z[name] for name in self._sampled}
        if len(self._window) < settings.window:
            self._window.append(sampled)
        else:
            self._window[self._filled % settings.window] = sampled
        self._filled += 1
        at = self._window[int(torch.randint(0, len(self._window), ()))]
        self._optimizer.zero_grad()
        self.potential({**at, **self._point_values}).backward()
        self._optimizer.step()
        z.update({name: value.detach().clone() for name, value in self._point_values.items()})
        return saved

    def _restore_point_state(self, saved: tuple) -> None:
        state, self._window, self._filled, values = saved
        self._optimizer.load_state_dict(state)
        with torch.no_grad():
            for name, value in values.items():
                self._point_values[name].copy_(value)

    # ---- reporting ---------------------------------------------------------------------------------------------
    def logging(self) -> dict[str, float | bool]:
        """The progress bar's summary: U, ε, the geometric mean of M⁻¹ and the non-finite flag."""
        return {
            "potential_energy": float(self._u),
            "step_size": self.step_size,
            "adapt_scale": self._adapt_scale(self._adapt),
            "nonfinite": self.nonfinite,
        }

    def diagnostics(self) -> dict[str, float | bool]:
        """What ``MCMC.diagnostics()`` reports per chain: the non-finite flag and the final M⁻¹ scale."""
        return {"nonfinite": self.nonfinite, "adapt_scale": self._adapt_scale(self._adapt)}


class SGLD(SGMCMCKernel):
    """Stochastic gradient Langevin dynamics (Welling & Teh 2011): ``z ← z − (ε/2) ∇U(z) + N(0, ε)``
    (:func:`ppl_sparsegp.core.sgmcmc.sgld_step`). With a constant ε the stationary law carries an O(ε) bias.
    ``momentum`` is None and ``adapt_scale`` is 1. See :class:`SGMCMCKernel` for the arguments."""

    def _init_dynamics(self, z: Tensors) -> tuple[None, None]:
        return None, None

    def _update(self, z, momentum, grad, noise, adapt, adapting):
        return {name: rules.sgld_step(z[name], grad[name], noise[name], self.step_size) for name in z}, None, None

    def _adapt_scale(self, adapt: None) -> float:
        return 1.0


class SGHMC(SGMCMCKernel):
    """Stochastic gradient HMC (Chen, Fox & Guestrin 2014) with B̂ = 0 and no Metropolis step::

        r ← r − ε ∇U(z) − ε C M⁻¹ r + N(0, 2εC),    z ← z + ε M⁻¹ r

    (:func:`ppl_sparsegp.core.sgmcmc.sghmc_step`; minibatch gradient noise is not corrected).

    :param friction: C > 0, with ε C / M ≤ 1.
    :param mass: scalar mass M > 0; ``adapt_scale`` is 1/M.
    :param options: ``init_strategy`` and ``point_estimates`` of :class:`SGMCMCKernel`.
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
        self.friction = check_positive_float("friction", friction)
        self.mass = check_positive_float("mass", mass)
        if step_size * friction / mass > 1:
            raise ValueError(f"friction: step_size * friction / mass must be <= 1, got {step_size * friction / mass}")

    def _init_dynamics(self, z: Tensors) -> tuple[Tensors, None]:
        return {name: torch.zeros_like(value) for name, value in z.items()}, None

    def _update(self, z, momentum, grad, noise, adapt, adapting):
        step = partial(rules.sghmc_step, step_size=self.step_size, friction=self.friction, inv_mass=1.0 / self.mass)
        moved = {name: step(z[name], momentum[name], grad[name], noise[name]) for name in z}
        return {name: zr[0] for name, zr in moved.items()}, {name: zr[1] for name, zr in moved.items()}, None

    def _adapt_scale(self, adapt: None) -> float:
        return 1.0 / self.mass


class AdaptiveSGHMC(SGMCMCKernel):
    """Scale-adapted SGHMC (Springenberg et al. 2016) as BSGP uses it; the twin of
    :class:`ppl_sparsegp.infer.sghmc.AdaptiveSGHMC`, whose docstring derives this form from the BSGP spec's.

    Every element of every latent carries (p, τ, ḡ, v̂), initialised to (0, 1, N, N²). With h = ε² M̃⁻¹(v̂)::

        p ← (1 − α) p − h ∇U(z) + N(0, 2αh),    z ← z + p

    (:func:`ppl_sparsegp.core.sgmcmc.adaptive_sghmc_step`), and during warmup only (``i < warmup_steps``) the moments
    move by :func:`ppl_sparsegp.core.sgmcmc.adapt_moments`; after warmup the preconditioner is frozen.

    :param step_size: ε (BSGP: 0.01).
    :param mdecay: α ∈ (0, 1], the momentum decay per step (BSGP: 0.05).
    :param num_data: N, only used for the initial moments (ḡ, v̂) = (N, N²).
    :param options: ``init_strategy`` and ``point_estimates`` of :class:`SGMCMCKernel`.

    ``adapt_scale`` is the geometric mean over all elements of M̃⁻¹.
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
        if isinstance(mdecay, bool) or not (isinstance(mdecay, int | float) and 0 < mdecay <= 1):
            raise ValueError(f"mdecay: expected a number in (0, 1], got {mdecay!r}")
        self.mdecay, self.num_data = float(mdecay), check_count("num_data", num_data, minimum=1)

    def _init_dynamics(self, z: Tensors) -> tuple[Tensors, AdaptState]:
        n = float(self.num_data)

        def full(value: float) -> Tensors:
            return {name: torch.full_like(x, value) for name, x in z.items()}

        return full(0.0), AdaptState(tau=full(1.0), g_bar=full(n), v_hat=full(n * n))

    def _update(self, z, p, grad, noise, adapt, adapting):
        step = partial(rules.adaptive_sghmc_step, step_size=self.step_size, mdecay=self.mdecay)
        moved = {name: step(z[name], p[name], grad[name], noise[name], adapt.v_hat[name]) for name in z}
        if adapting:
            new = {name: rules.adapt_moments(adapt.tau[name], adapt.g_bar[name], adapt.v_hat[name], grad[name])
                   for name in z}  # fmt: skip
            adapt = AdaptState(*({name: moments[k] for name, moments in new.items()} for k in range(3)))
        return {name: zp[0] for name, zp in moved.items()}, {name: zp[1] for name, zp in moved.items()}, adapt

    def _adapt_scale(self, adapt: AdaptState) -> float:
        v_hat = list(adapt.v_hat.values())
        log_inv_mass = sum(float(torch.sum(torch.log(rules.inverse_mass(v)))) for v in v_hat)
        return math.exp(log_inv_mass / sum(v.numel() for v in v_hat))
