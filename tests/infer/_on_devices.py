"""Run by tests/infer/test_sharding.py in a subprocess whose XLA_FLAGS force several host devices (they must be set
before jax is imported): ``python _on_devices.py CASE OUT.npz``. Each case writes its numbers to OUT.npz."""

import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from numpyro.infer import TraceMeanField_ELBO

from ppl_sparsegp.core import kernels, likelihoods
from ppl_sparsegp.infer.sharding import DataParallel
from ppl_sparsegp.models.numpyro.svgp import SVGP

jax.config.update("jax_enable_x64", True)


def svgp_problem(n: int = 2000, batch_size: int = 64) -> tuple[SVGP, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 2))
    y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.1 * rng.standard_normal(n)
    kernel = kernels.RBF(variance=1.0, lengthscale=np.ones(2))
    gp = SVGP(kernel=kernel, likelihood=likelihoods.Gaussian(0.1), Z=X[:: n // 16].copy(), batch_size=batch_size)
    return gp, X, y


def elbo_and_gradient(devices: int | None) -> dict[str, np.ndarray]:
    """The minibatch loss and its gradient at the initial params, for one key, on ``devices`` devices."""
    from numpyro.infer import SVI

    gp, X, y = svgp_problem()
    parallel = DataParallel.create(devices)
    svi = SVI(parallel.wrap(gp.model), parallel.wrap(gp.guide), optax.sgd(0.0), TraceMeanField_ELBO())
    X, y = parallel.put((jnp.asarray(X), jnp.asarray(y)))
    state = parallel.put(jax.jit(svi.init)(jax.random.PRNGKey(1), X, y))
    params = svi.get_params(state)  # q(u) moved off its initial N(0, I), where the gradient in Z is zero
    params["u_loc"] = jnp.asarray(np.random.default_rng(1).standard_normal(np.shape(params["u_loc"])))

    def loss(p, key):
        return svi.loss.loss(key, p, svi.model, svi.guide, X, y)

    value, grad = jax.jit(jax.value_and_grad(loss))(params, jax.random.PRNGKey(7))
    out = {"loss": np.asarray(value)}
    out.update({f"grad/{k}": np.asarray(v) for k, v in grad.items()})
    return out


def svi_steps(devices: int | None, optimizer: str) -> dict[str, np.ndarray]:
    from ppl_sparsegp.infer.svi import fit_svi

    gp, X, y = svgp_problem()
    opt = {"sgd": optax.sgd(1e-5, momentum=0.9), "adam": optax.adam(0.01)}[optimizer]
    res = fit_svi(
        gp.model, gp.guide, X, y, optimizer=opt, num_steps=100, key=3, progress=False, steps_per_dispatch=50,
        devices=devices,
    )  # fmt: skip
    out = {"losses": res.losses}
    out.update({f"params/{k}": np.asarray(v) for k, v in res.params.items()})
    return out


def resumed(devices: int | None) -> dict[str, np.ndarray]:
    """One device: 100 Adam steps. Several: 50 steps on one device, checkpointed, then resumed to 100 on them."""
    import tempfile
    from pathlib import Path

    from ppl_sparsegp.infer.svi import fit_svi

    gp, X, y = svgp_problem()
    kw = dict(optimizer=optax.adam(0.01), key=3, progress=False, steps_per_dispatch=25, checkpoint_every=25)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoint.npz"
        if devices is not None:
            fit_svi(gp.model, gp.guide, X, y, num_steps=50, checkpoint=path, **kw)
        res = fit_svi(gp.model, gp.guide, X, y, num_steps=100, checkpoint=path, devices=devices, **kw)
    out = {"losses": res.losses, "resumed_from": np.asarray(res.resumed_from)}
    out.update({f"params/{k}": np.asarray(v) for k, v in res.params.items()})
    return out


def sghmc_draws(devices: int | str | None, kernel_name: str = "AdaptiveSGHMC") -> dict[str, np.ndarray]:
    """50 warmup steps and 50 draws of SGPMC (N = 1000, B = 64, M = 10) by BSGP's adaptive SGHMC or by SGHMC
    (``kernel_name``)."""
    from ppl_sparsegp.infer import sghmc
    from ppl_sparsegp.infer.mcmc import run_mcmc
    from ppl_sparsegp.models.numpyro.sgpmc import SGPMC, default_priors

    _, X, y = svgp_problem(n=1000)
    kernel = kernels.RBF(variance=1.0, lengthscale=np.ones(2))
    likelihood = likelihoods.Gaussian(0.1)
    priors = default_priors(kernel, likelihood)
    gp = SGPMC(kernel=kernel, likelihood=likelihood, Z=X[::100].copy(), batch_size=64, priors=priors)
    if kernel_name == "AdaptiveSGHMC":
        kernel = sghmc.AdaptiveSGHMC(gp.model, step_size=0.01, num_data=X.shape[0])
    else:
        kernel = sghmc.SGHMC(gp.model, step_size=1e-3)
    res = run_mcmc(kernel, X, y, num_warmup=50, num_samples=50, key=jax.random.PRNGKey(5), progress=False,
                   devices=devices)  # fmt: skip
    return {f"samples/{k}": v for k, v in res.samples.items()}


def nuts_chains(devices: int | str | None, kernel_name: str = "NUTS", **run_options: Any) -> dict[str, np.ndarray]:
    """Four chains of NUTS (or HMC with 10 leapfrog steps of 0.1, a fixed path) on a normal model with unknown mean
    and scale: 100 warmup steps and 100 draws each; ``run_options`` go to ``run_mcmc`` (chunks, checkpoint)."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import HMC, NUTS

    from ppl_sparsegp.infer.mcmc import run_mcmc

    y = np.random.default_rng(2).normal(1.0, 2.0, 30)

    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
        sigma = numpyro.sample("sigma", dist.HalfNormal(5.0))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mu, sigma), obs=y)

    kernel = NUTS(model) if kernel_name == "NUTS" else HMC(model, step_size=0.1, num_steps=10, adapt_step_size=False)
    res = run_mcmc(kernel, y, num_warmup=100, num_samples=100, num_chains=4, key=jax.random.PRNGKey(0),
                   progress=False, devices=devices, **run_options)  # fmt: skip
    out = {f"samples/{k}": v for k, v in res.samples.items()}
    out["sharding"] = np.asarray(str(jax.tree.leaves(res.last_state)[0].sharding))
    return out


def refusals(devices: int | None) -> dict[str, np.ndarray]:
    """The messages of the refusals that need several devices: a minibatch or a chain count the devices cannot
    split (none with one device)."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import NUTS

    from ppl_sparsegp.infer.mcmc import run_mcmc
    from ppl_sparsegp.infer.svi import fit_svi

    if devices is None:
        return {}
    gp, X, y = svgp_problem(n=200, batch_size=50)
    messages = {}
    try:
        fit_svi(gp.model, gp.guide, X, y, optimizer=optax.adam(0.01), num_steps=1, progress=False, devices=devices)
    except ValueError as err:
        messages["svi"] = str(err)

    def model():
        numpyro.sample("mu", dist.Normal(0.0, 1.0))

    try:
        run_mcmc(NUTS(model), num_warmup=1, num_samples=1, num_chains=3, key=jax.random.PRNGKey(0), devices=devices)
    except ValueError as err:
        messages["nuts"] = str(err)
    return {k: np.asarray(v) for k, v in messages.items()}


def streamed(devices: int | None) -> dict[str, np.ndarray]:
    """SVGP fitted for 200 steps on minibatches of 64 rows streamed from .npy files (num_data = N); more steps than
    the engine dispatches before the first finishes (unless it waits, a CPU mesh deadlocked within 100)."""
    import dataclasses
    import tempfile
    from pathlib import Path

    from ppl_sparsegp.infer.sharding import data_mesh
    from ppl_sparsegp.infer.streaming import NpyBatches, fit_streamed

    gp, X, y = svgp_problem()
    gp = dataclasses.replace(gp, batch_size=None, num_data=X.shape[0])
    with tempfile.TemporaryDirectory() as folder:
        np.save(Path(folder) / "X.npy", X)
        np.save(Path(folder) / "y.npy", y)
        batches = NpyBatches(Path(folder) / "X.npy", Path(folder) / "y.npy", 64, seed=4, mesh=data_mesh(devices))
        fit = fit_streamed(gp.model, gp.guide, batches, optimizer=optax.adam(0.01), num_steps=200, key=2)
    serial = np.asarray(DataParallel(batches.mesh).serial)
    return {"serial": serial, "losses": fit.losses, **{f"params/{k}": np.asarray(v) for k, v in fit.params.items()}}


def streamed_sghmc(devices: int | None) -> dict[str, np.ndarray]:
    """BSGP's adaptive SGHMC over minibatches of 64 rows streamed from .npy files: 30 warmup steps, 20 draws of a
    Bayesian linear regression whose data term is scaled by N/B."""
    import tempfile
    from pathlib import Path

    import numpyro
    import numpyro.distributions as dist

    from ppl_sparsegp.infer.sghmc import AdaptiveSGHMC
    from ppl_sparsegp.infer.sharding import data_mesh
    from ppl_sparsegp.infer.streaming import NpyBatches, sample_streamed

    _, X, y = svgp_problem()
    N = X.shape[0]

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([X.shape[1]]).to_event(1))
        with numpyro.handlers.scale(scale=N / y.shape[0]), numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(X @ w, 0.5), obs=y)

    with tempfile.TemporaryDirectory() as folder:
        np.save(Path(folder) / "X.npy", X)
        np.save(Path(folder) / "y.npy", y)
        batches = NpyBatches(Path(folder) / "X.npy", Path(folder) / "y.npy", 64, seed=4, mesh=data_mesh(devices))
        kernel = AdaptiveSGHMC(model, step_size=0.01, num_data=N)
        result = sample_streamed(kernel, batches, num_warmup=30, num_samples=20, key=jax.random.PRNGKey(3))
    return {"samples/w": result.samples["w"], "potential": result.extra_fields["potential_energy"]}


CASES = {
    "resumed": resumed,
    "streamed": streamed,
    "streamed_sghmc": streamed_sghmc,
    "refusals": refusals,
    "elbo": elbo_and_gradient,
    "sgd": lambda d: svi_steps(d, "sgd"),
    "adam": lambda d: svi_steps(d, "adam"),
    "sghmc": sghmc_draws,
    "nuts": nuts_chains,
}

if __name__ == "__main__":
    case, path = sys.argv[1], sys.argv[2]
    single, sharded = CASES[case](None), CASES[case](jax.device_count())
    np.savez(path, **{f"single/{k}": v for k, v in single.items()}, **{f"sharded/{k}": v for k, v in sharded.items()})
