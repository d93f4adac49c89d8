"""The engines' compiled steps never stall an accelerator (issue 26 §1).

For one model of each family: the step's jaxpr has no host callback and no ``while`` loop (NUTS's own tree
building is a data-dependent loop by design; for it only callbacks are ruled out); chunks run under
``jax.transfer_guard("disallow")`` (the engines guard every compiled call, so a run that finishes passed); and the
number of compilations does not grow with the number of chunks. Also: the jitter escalation that replaced the
in-program loop re-runs a non-finite chunk, and float32 fits match float64 ones at the stated tolerance.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from numpyro.infer import NUTS, SVI, Trace_ELBO, TraceMeanField_ELBO
from numpyro.infer.autoguide import AutoDelta

from ppl_sparsegp.core import ops
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian, RobustMax
from ppl_sparsegp.infer import hot_path
from ppl_sparsegp.infer.mcmc import run_mcmc
from ppl_sparsegp.infer.sghmc import SGLD, AdaptiveSGHMC
from ppl_sparsegp.infer.svi import NonFiniteLossError, fit_svi
from ppl_sparsegp.models.numpyro.bsgp import BSGP
from ppl_sparsegp.models.numpyro.deep_bsgp import DeepBSGP
from ppl_sparsegp.models.numpyro.deep_svgp import DeepSVGP
from ppl_sparsegp.models.numpyro.gplvm import BayesianGPLVM
from ppl_sparsegp.models.numpyro.gpmc import GPMC
from ppl_sparsegp.models.numpyro.gpr import GPR
from ppl_sparsegp.models.numpyro.idsgp import IDSGP
from ppl_sparsegp.models.numpyro.sas_gplvm import SASGPLVM
from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.models.numpyro.svgp import SVGP
from ppl_sparsegp.models.numpyro.vgp import VGP

RNG = np.random.default_rng(0)
N, D = 40, 2
X = RNG.uniform(-2.0, 2.0, (N, D))
Y = np.sin(X[:, 0]) + 0.1 * RNG.standard_normal(N)
CLASSES = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0).astype(int)
Z = X[:6]
OBSERVED = RNG.standard_normal((N, 5))  # GP-LVM observations


def _kernel() -> RBF:
    return RBF(1.0, np.ones(D))


def _svi_cases() -> dict[str, tuple[object, tuple]]:
    """Family -> (a model object with model and guide, the data it is fitted to)."""
    latent = dict(kernel=RBF(1.0, np.ones(2)), likelihood=Gaussian(0.1), num_latent=5)
    return {
        "gpr": (GPR(_kernel(), Gaussian(0.1)), (X, Y)),
        "sgpr": (SGPR(_kernel(), Gaussian(0.1), Z=Z), (X, Y)),
        "svgp_minibatch": (SVGP(_kernel(), Gaussian(0.1), Z=Z, batch_size=8), (X, Y)),
        "svgp_multiclass": (SVGP(_kernel(), RobustMax(3), Z=Z, num_latent=3), (X, CLASSES)),
        "vgp": (VGP(_kernel(), Gaussian(0.1)), (X, Y)),
        "deep_svgp": (
            DeepSVGP(Z=[Z, Z[:, :1]], widths=[1, 1], likelihood=Gaussian(0.1), mean_weights=[np.eye(2)[:, :1]]),
            (X, Y),
        ),
        "gplvm": (BayesianGPLVM(**latent, Z=RNG.standard_normal((6, 2)), X_init=OBSERVED[:, :2]), (OBSERVED,)),
        "idsgp": (IDSGP(_kernel(), Gaussian(0.1), input_dim=D, num_inducing=4, hidden=(8,), batch_size=8), (X, Y)),
        "sas_gplvm": (
            SASGPLVM(RBF(1.0, np.ones(2)), Gaussian(0.1), data_dim=5, num_active=10, batch_size=20, hidden=(8,)),
            (OBSERVED,),
        ),
    }


SVI_CASES = _svi_cases()
SLOW = {"deep_svgp", "gplvm", "idsgp", "deep_bsgp_sghmc", "gpmc_nuts"}
"""Families whose check runs in ``make test-slow`` (20-130 s each on 2 busy cores): their engines and programs are
of the same kinds as the default run's."""


def _families(cases: dict) -> list:
    return [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in sorted(cases)]


def _mcmc_cases() -> dict[str, tuple[Callable, tuple]]:
    """Family -> (a function making the kernel, the data)."""
    kernel, likelihood = _kernel(), Gaussian(0.1)
    priors = default_priors(kernel, likelihood)
    bsgp = BSGP(_kernel(), Gaussian(0.1), Z=Z, batch_size=8)
    deep = DeepBSGP(Z=[Z, Z[:, :1]], widths=[1, 1], likelihood=Gaussian(0.1), mean_weights=[np.eye(2)[:, :1]])
    return {
        "sgpmc_nuts": (lambda: NUTS(SGPMC(kernel, likelihood, Z=Z, priors=priors).model, max_tree_depth=3), (X, Y)),
        "gpmc_nuts": (lambda: NUTS(GPMC(_kernel(), Gaussian(0.1), priors=priors).model, max_tree_depth=3), (X, Y)),
        "bsgp_sghmc": (lambda: AdaptiveSGHMC(bsgp.model, num_data=N), (X, Y)),
        "deep_bsgp_sghmc": (lambda: AdaptiveSGHMC(deep.model, num_data=N), (X, Y)),
    }


MCMC_CASES = _mcmc_cases()


def _primitives(jaxpr: jax.extend.core.ClosedJaxpr) -> set[str]:
    """Names of every primitive in ``jaxpr``, sub-jaxprs (scan, cond, pjit, custom rules...) included."""
    names: set[str] = set()

    def walk(inner) -> None:
        for eqn in inner.eqns:
            names.add(eqn.primitive.name)
            for param in eqn.params.values():
                for sub in param if isinstance(param, list | tuple) else (param,):
                    if hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):
                        walk(sub.jaxpr)
                    elif hasattr(sub, "eqns"):
                        walk(sub)

    walk(jaxpr.jaxpr)
    return names


def _has_callback(names: set[str]) -> bool:
    return any("callback" in name for name in names)


class _CompileCounter:
    """The number of XLA backend compilations so far in this process (jax's compile-duration event)."""

    def __init__(self) -> None:
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._on_event)

    def _on_event(self, event: str, duration: float, **_: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.count += 1


COMPILES = _CompileCounter()


def _no_compiles_after_the_second(counts: list[int]) -> None:
    """``counts``: the compile counter after each chunk. The first chunks compile the programs (and the first
    callback whatever it runs eagerly); from the second on, no chunk compiles anything."""
    assert len(counts) >= 4 and counts[-1] == counts[1], counts


@pytest.mark.parametrize("family", _families(SVI_CASES))
def test_svi_step_has_no_callback_or_while_and_chunks_neither_transfer_nor_recompile(family):
    gp, data = SVI_CASES[family]
    svi = SVI(gp.model, gp.guide, optax.adam(0.01), TraceMeanField_ELBO())
    data = jax.device_put(data)
    state = jax.jit(svi.init)(jax.random.PRNGKey(0), *data)
    names = _primitives(jax.make_jaxpr(svi.update)(state, *data))
    assert not _has_callback(names) and "while" not in names, sorted(names)

    counts = []
    result = fit_svi(gp.model, gp.guide, *data, optimizer=optax.adam(0.01), num_steps=12, steps_per_dispatch=3,
                     callback=lambda *_: counts.append(COMPILES.count), progress=False)  # fmt: skip
    assert result.steps_run == 12 and np.all(np.isfinite(result.losses))
    _no_compiles_after_the_second(counts)


@pytest.mark.parametrize("family", _families(MCMC_CASES))
@pytest.mark.slow
def test_mcmc_step_has_no_callback_and_chunks_neither_transfer_nor_recompile(family):
    make, data = MCMC_CASES[family]
    kernel = make()
    data = jax.device_put(data)
    state = jax.jit(lambda k: kernel.init(k, 5, None, data, {}))(jax.random.PRNGKey(0))
    names = _primitives(jax.make_jaxpr(lambda s: kernel.sample(s, data, {}))(state))
    assert not _has_callback(names), sorted(names)
    if not isinstance(kernel, NUTS):  # the SG-MCMC step is straight-line code
        assert "while" not in names, sorted(names)

    counts = []
    result = run_mcmc(make(), *data, num_warmup=4, num_samples=8, chunk_size=2, key=jax.random.PRNGKey(1),
                      callback=lambda _: counts.append(COMPILES.count), progress=False)  # fmt: skip
    assert result.num_draws == 8
    _no_compiles_after_the_second(counts[1:])  # counts[0]: after the warmup, before the sampling program


def test_the_hot_loop_refuses_an_implicit_transfer():
    """The guard is real: a compiled call handed a numpy array (a host-to-device copy) fails under it."""
    compiled = jax.jit(lambda x: x + 1).lower(np.zeros(3)).compile()
    assert np.all(hot_path.call_guarded(compiled, jax.device_put(np.zeros(3))) == 1)
    with pytest.raises(Exception, match="[Dd]isallowed"):
        hot_path.call_guarded(compiled, np.zeros(3))


def _near_singular_model():
    """s ~ point estimate; a factor through the Cholesky of s (ones(4, 4) - 5e-8 I), which fails at the float64
    base jitter (1e-8 relative) and works at the first escalation step (1e-7)."""
    s = numpyro.param("s", 1.0, constraint=dist.constraints.positive)
    A = s * (jnp.ones((4, 4)) - 5e-8 * jnp.eye(4))
    L = ops.cholesky(A)
    numpyro.factor("through_cholesky", -jnp.sum(jnp.log(jnp.diagonal(L))) - 0.5 * (s - 2.0) ** 2)


def _no_guide():
    pass


def test_a_chunk_broken_by_a_factorisation_is_rerun_with_the_jitter_escalated():
    """The chunk is run again at the first escalation step that works, with a JitterWarning, and the run equals
    one given that jitter from the start."""
    options = dict(optimizer=optax.adam(0.05), num_steps=20, steps_per_dispatch=10, progress=False)
    with pytest.warns(ops.JitterWarning, match="raised 1e\\+01-fold") as record:
        escalated = fit_svi(_near_singular_model, _no_guide, **options)
    assert len(record) == 1  # the step is kept: the second chunk needs no warning
    with ops.relative_jitter(1e-7):
        reference = fit_svi(_near_singular_model, _no_guide, **options)
    np.testing.assert_array_equal(escalated.losses, reference.losses)


def test_a_loss_that_no_jitter_mends_raises_after_one_retry():
    """A diverging fit (not a factorisation) is retried once, at the largest step, then NonFiniteLossError."""

    def exploding():
        a = numpyro.param("a", 1.0)
        numpyro.factor("grows", jnp.exp(jnp.exp(a)))

    with pytest.raises(NonFiniteLossError, match="not the cause"):
        fit_svi(exploding, _no_guide, optimizer=optax.sgd(10.0), num_steps=30, steps_per_dispatch=10, progress=False)


def _sgld_model():
    x = numpyro.sample("x", dist.Normal(0.0, 1.0))
    A = (1.0 + x**2) * (jnp.ones((4, 4)) - 5e-8 * jnp.eye(4))
    numpyro.factor("through_cholesky", jnp.sum(jnp.log(jnp.diagonal(ops.cholesky(A)))))


def test_sgmcmc_pieces_broken_by_a_factorisation_are_rerun_with_the_jitter_escalated():
    with pytest.warns(ops.JitterWarning, match="raised 1e\\+01-fold"):
        result = run_mcmc(SGLD(_sgld_model, step_size=1e-3), num_warmup=10, num_samples=20, chunk_size=10,
                          key=jax.random.PRNGKey(0), progress=False)  # fmt: skip
    assert np.all(np.isfinite(result.samples["x"])) and not np.any(result.extra_fields["nonfinite"])


def test_matmul_precision_reaches_the_compiled_program_and_bad_values_are_refused_first():
    def dot(a):
        return a @ a

    with hot_path.precision_scope("highest"):
        text = jax.jit(dot).lower(jnp.ones((3, 3), jnp.float32)).as_text()
    assert "HIGHEST" in text
    with pytest.raises(ValueError, match="matmul_precision: expected one of highest, high, default"):
        fit_svi(_near_singular_model, _no_guide, optimizer=optax.adam(0.1), num_steps=1, matmul_precision="tf32")


FLOAT32_FIT = """
import json, sys
import jax
import numpy as np
import optax
from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.sgpr import SGPR

X, Y = (np.asarray(a, np.float32) for a in json.loads(sys.argv[1]))
gp = SGPR(RBF(1.0, np.ones(2)), Gaussian(0.1), Z=X[:6])
result = fit_svi(gp.model, gp.guide, X, Y, optimizer=optax.adam(0.01), num_steps=50, progress=False)
print(json.dumps([str(result.params["kernel.lengthscale"].dtype), result.losses.tolist()]))
"""


@pytest.mark.slow
def test_float32_fit_matches_float64_to_the_stated_tolerance():
    """SGPR on 40 points, 50 Adam steps: the float32 losses (x64 off, in a fresh interpreter) are within
    FLOAT32_TOLERANCE of float64 ones given the same jitter (float32's base, 1e-5). On a GPU the default
    "highest" matmul precision keeps it so; CPUs compute float32 products in full whatever the setting."""
    import json
    import subprocess
    import sys

    data = json.dumps([X.tolist(), Y.tolist()])
    out = subprocess.run([sys.executable, "-c", FLOAT32_FIT, data], capture_output=True, text=True, check=True)
    dtype, f32 = json.loads(out.stdout.strip().splitlines()[-1])
    assert dtype == "float32"
    gp = SGPR(_kernel(), Gaussian(0.1), Z=Z)
    with ops.relative_jitter(ops.JITTER["float32"]):
        f64 = fit_svi(gp.model, gp.guide, X, Y, optimizer=optax.adam(0.01), num_steps=50, progress=False)
    np.testing.assert_allclose(f32, f64.losses, rtol=hot_path.FLOAT32_TOLERANCE)


def test_autoguide_models_run_the_guarded_loop_too():
    """A user's own model and autoguide (not a library model) through the same loop."""

    def model(x, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(w * x, 0.1), obs=y)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = fit_svi(model, AutoDelta(model), X[:, 0], Y, optimizer=optax.adam(0.1), num_steps=40,
                         steps_per_dispatch=10, loss=Trace_ELBO(), progress=False)  # fmt: skip
    assert np.isfinite(result.losses[-1])


def test_prediction_paths_escalate_once_and_keep_the_step():
    """EscalatingJit (the prediction paths' jit): the first call, broken by a factorisation, is re-run at the first
    step that works with one warning; later calls use that step directly. A result whose non-finite entries are
    the function's own is returned as it is, and not retried again."""
    singular = jnp.ones((4, 4)) - 5e-8 * jnp.eye(4)

    def log_det(scale):
        return jnp.sum(jnp.log(jnp.diagonal(ops.cholesky(scale * singular))))

    wrapped = hot_path.EscalatingJit(log_det, "the test")
    with pytest.warns(ops.JitterWarning, match="raised 1e\\+01-fold"):
        first = wrapped(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = wrapped(2.0)
    assert np.isfinite(first) and np.isfinite(second) and wrapped.escalation.step == 1
    own = hot_path.EscalatingJit(lambda x: jnp.log(x), "the test")
    assert np.isneginf(own(0.0)) and own.futile and np.isneginf(own(0.0))
    outer = hot_path.EscalatingJit(lambda scale: wrapped(scale) + 1.0, "the outer test")  # nested: one program
    with pytest.warns(ops.JitterWarning, match="raised 1e\\+01-fold"):
        assert np.isclose(outer(1.0), first + 1.0)
