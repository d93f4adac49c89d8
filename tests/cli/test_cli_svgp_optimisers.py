"""``fit svgp --optimizer adam|lbfgs|natgrad --natgrad-step GAMMA --freeze-steps K``: each optimiser lowers the loss,
holds the kernel and likelihood hyperparameters at their initial values for K steps and resumes from its checkpoint to
the steps of an uninterrupted run; a checkpoint of another optimiser is refused naming ``--optimizer``; one natural
step of size 1 with the Gaussian likelihood on the full batch reaches SGPR's collapsed bound; bad values, L-BFGS on
minibatches, natural gradients for robust-max and the optimisers the Pyro backend lacks are refused naming the flag,
before anything compiles; ``--help`` documents the flags. Tiny data (64 training points in 2-D, M = 6), a few steps."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli_outputs import QUIET

from ppl_sparsegp.cli import main
from ppl_sparsegp.cli import svgp as cli_svgp
from ppl_sparsegp.infer import checkpoint
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.sgpr import SGPR

INITIAL = {"kernel.variance": 1.5, "kernel.lengthscale": 0.8, "likelihood.variance": 0.3}
BASE = ("--inducing", "6", "--lr", "0.05", "--kernel-variance", "1.5", "--lengthscale", "0.8",
        "--checkpoint-every", "3")  # fmt: skip
SMALL = (*BASE, "--noise-variance", "0.3")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An .npz of 80 noisy points of a smooth function of 2 inputs (64 train after the CLI's 80/20 split)."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-2, 2, (80, 2))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] ** 2 + 0.1 * rng.standard_normal(80)
    path = tmp_path_factory.mktemp("data") / "tiny.npz"
    np.savez(path, X=X, y=y)
    return str(path)


def _fit(folder, data: str, *options: str) -> dict:
    assert main(["fit", "svgp", "--data", data, *SMALL, *options, "--out", str(folder), *QUIET]) == 0
    return json.loads((folder / "results.json").read_text())


def _params(folder) -> dict[str, np.ndarray]:
    with np.load(folder / "params.npz", allow_pickle=False) as stored:
        return {name: stored[name] for name in stored.files}


def _losses(folder) -> np.ndarray:
    return checkpoint.read(folder / cli_svgp.CHECKPOINT).arrays["losses"]


@pytest.fixture
def engine_calls(monkeypatch) -> list[dict]:
    """What the command passes to :func:`ppl_sparsegp.infer.svi.fit_svi`, one dict per fit (``gp``, ``X``, ``y`` and
    the engine's keyword arguments); the fit itself runs unchanged."""
    calls, real = [], cli_svgp.fit_svi

    def recorded(model, guide, X, y, **engine):
        calls.append({"gp": model.__self__, "X": X, "y": y, **engine})
        return real(model, guide, X, y, **engine)

    monkeypatch.setattr(cli_svgp, "fit_svi", recorded)
    return calls


SLOW_HERE = {"adam", "lbfgs", "natgrad"}
"""Optimisers whose run of the test below goes to the slow step (a minute each on 2 loaded cores): Adam fits in
most command-line tests, fit_svi's L-BFGS and freeze have their own tests in tests/infer, and the natural step
its one-step test below."""


@pytest.mark.parametrize(
    "optimizer", [pytest.param(o, marks=pytest.mark.slow) if o in SLOW_HERE else o for o in cli_svgp.OPTIMIZERS]
)
def test_each_optimiser_freezes_the_hyperparameters_lowers_the_loss_and_resumes(optimizer, tiny, tmp_path, capsys,
                                                                                engine_calls):  # fmt: skip
    run, out = ("--optimizer", optimizer, "--freeze-steps", "3"), tmp_path / "run"
    frozen = _fit(out, tiny, *run, "--steps", "3")
    held = _params(out)
    for name, value in INITIAL.items():  # held for the first 3 steps: every step so far
        np.testing.assert_allclose(held[name], value, rtol=1e-12, err_msg=name)
    assert frozen["optimizer"]["name"] == optimizer and frozen["optimizer"]["freeze_steps"] == 3
    assert frozen["optimizer"]["frozen"] == sorted(INITIAL) and frozen["options"]["optimizer"] == optimizer

    resumed = _fit(out, tiny, *run, "--steps", "6")
    assert resumed["resumed_from_step"] == 3 and resumed["steps"] == 6
    moved = _params(out)
    for name, value in INITIAL.items():  # thawed after step 3
        assert not np.allclose(moved[name], value, rtol=1e-6), name
    losses = _losses(out)
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0] - 1.0, losses

    # the same six steps without a checkpoint, in one dispatch: the resumed run took them
    call = {k: v for k, v in engine_calls[0].items() if k not in ("checkpoint", "num_steps")}
    gp, X, y = call.pop("gp"), call.pop("X"), call.pop("y")
    uninterrupted = fit_svi(gp.model, gp.guide, X, y, num_steps=6, **call)
    np.testing.assert_allclose(losses, uninterrupted.losses, rtol=1e-9)

    other = next(o for o in cli_svgp.OPTIMIZERS if o != optimizer)
    capsys.readouterr()
    argv = ["fit", "svgp", "--data", tiny, *SMALL, "--optimizer", other, "--freeze-steps", "3", "--steps", "6"]
    assert main([*argv, "--out", str(out), *QUIET]) == 2
    assert f"--optimizer {optimizer!r} -> {other!r}" in capsys.readouterr().err


@pytest.mark.slow
def test_one_natural_step_of_size_one_reaches_the_collapsed_sgpr_bound(tiny, tmp_path, engine_calls):
    """The loss of the first step is the negative ELBO once q(u) has taken its natural step (Adam moves Z and the
    hyperparameters after it): with the Gaussian likelihood and the full batch, minus Titsias' bound at the initial
    hyperparameters and Z, and q(u) is SGPR's optimal q*(u) there."""
    record = _fit(tmp_path / "run", tiny, "--optimizer", "natgrad", "--natgrad-step", "1", "--steps", "1",
                  "--freeze-steps", "1")  # fmt: skip
    gp, X, y = (engine_calls[0][k] for k in ("gp", "X", "y"))
    sgpr = SGPR(gp.kernel, gp.likelihood, Z=gp.Z)
    assert record["optimizer"]["natgrad_step"] == 1.0 and engine_calls[0]["natural_gradient"].step_size == 1.0
    np.testing.assert_allclose(record["final_loss"], -float(sgpr.elbo({}, X, y)), rtol=1e-9)
    q_mu, q_sqrt = sgpr.optimal_qu({}, X, y, whiten=True)
    fitted = _params(tmp_path / "run")
    np.testing.assert_allclose(fitted["u_loc"], q_mu, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fitted["u_scale_tril"], q_sqrt, rtol=1e-7, atol=1e-9)
    prior = {"u_loc": np.zeros((1, 6)), "u_scale_tril": np.eye(6)[None]}
    assert record["final_loss"] < -float(gp.elbo(prior, X, y)) - 10.0  # q(u) left the prior: far below its loss


REFUSED = {
    "lbfgs on minibatches": (("--optimizer", "lbfgs", "--batch-size", "16"), ("--batch-size 16", "lbfgs")),
    "natgrad for robust-max": (("--optimizer", "natgrad", "--data", "digits"), ("--optimizer natgrad", "robustmax")),
    "a natural step without natgrad": (("--natgrad-step", "0.5"), ("--natgrad-step", "adam")),
    "a zero natural step": (("--optimizer", "natgrad", "--natgrad-step", "0"), ("--natgrad-step", "(0, 1]")),
    "a natural step above 1": (("--optimizer", "natgrad", "--natgrad-step", "1.5"), ("--natgrad-step", "(0, 1]")),
    "a NaN natural step": (("--optimizer", "natgrad", "--natgrad-step", "nan"), ("--natgrad-step", "(0, 1]")),
    "a negative freeze": (("--freeze-steps", "-1"), ("--freeze-steps",)),
    "pyro with lbfgs": (("--optimizer", "lbfgs", "--backend", "pyro"), ("--backend pyro", "--optimizer lbfgs")),
    "pyro with natgrad": (("--optimizer", "natgrad", "--backend", "pyro"), ("--backend pyro", "--optimizer natgrad")),
    "pyro with a freeze": (("--freeze-steps", "2", "--backend", "pyro"), ("--backend pyro", "--freeze-steps 2")),
    "an unknown optimiser": (("--optimizer", "sgd"), ("--optimizer", "invalid choice")),
    "an unknown positive transform": (("--positive-transform", "log"), ("--positive-transform", "invalid choice")),
}


@pytest.mark.parametrize("case", REFUSED)
def test_bad_optimiser_options_are_refused_by_name_before_anything_compiles(case, tiny, tmp_path, monkeypatch,
                                                                             capsys):  # fmt: skip
    def compiled(*args, **kwargs):
        raise AssertionError("the refusal came after the fit started")

    monkeypatch.setattr(cli_svgp, "fit_svi", compiled)
    monkeypatch.setattr(cli_svgp.initialise, "by_name", compiled)
    options, words = REFUSED[case]
    data = BASE if "--data" in options else ("--data", tiny, *SMALL)  # digits: no noise variance
    assert main(["fit", "svgp", *data, *options, "--out", str(tmp_path / "run"), *QUIET]) == 2
    err = capsys.readouterr().err
    assert all(word in err for word in words), err
    assert not (tmp_path / "run").exists()


def test_help_documents_the_optimiser_flags(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per flag: no word broken at a hyphen
    assert main(["fit", "svgp", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in ("--optimizer {adam,lbfgs,natgrad}", "full-batch L-BFGS", "no --batch-size", "--natgrad-step GAMMA",
                  "in (0, 1]", "a smaller step averages the minibatches' noise",
                  "default: 1 for gaussian, 0.1 for the other likelihoods", "--freeze-steps K",
                  "kernel and likelihood hyperparameters", "default: 0, no freeze", "not for robustmax"):  # fmt: skip
        assert words in text, words


@pytest.mark.parametrize("backend", ["numpyro", "pyro"])
def test_the_positive_transform_reaches_the_engine_and_its_checkpoint(backend, tiny, tmp_path, capsys):
    """``--positive-transform softplus``: the fit's first Adam step moves softplus⁻¹ of each hyperparameter by the
    learning rate (through exp it would move its log; the lengthscales have no gradient yet, q(u) being the prior),
    and a resume through exp is refused naming the flag."""
    out, run = tmp_path / "run", ("--positive-transform", "softplus", "--backend", backend, "--steps", "1")
    record = _fit(out, tiny, *run)
    assert record["options"]["positive_transform"] == "softplus"
    fitted = _params(out)
    for name in ("kernel.variance", "likelihood.variance"):
        moved = np.log(np.expm1(fitted[name])) - np.log(np.expm1(INITIAL[name]))
        np.testing.assert_allclose(abs(moved), 0.05, rtol=1e-4, err_msg=name)
    capsys.readouterr()
    argv = ["fit", "svgp", "--data", tiny, *SMALL, "--backend", backend, "--steps", "2", "--out", str(out)]
    assert main([*argv, *QUIET]) == 2
    assert "--positive-transform 'softplus' -> 'exp'" in capsys.readouterr().err
