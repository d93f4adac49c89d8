"""Initial values of a selective model: an initial λ is accepted by fit_svi's checks, used, and checked itself."""

import numpy as np
import optax
import pytest

from ppl_sparsegp.core.kernels import RBF
from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.score_function import ScoreFunctionELBO
from ppl_sparsegp.infer.svi import fit_svi
from ppl_sparsegp.models.numpyro.selective import INCLUSION_PARAM, SelectiveSGPR
from ppl_sparsegp.models.numpyro.sgpr import SGPR
from ppl_sparsegp.recipes.phases import selection_optimizer


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 5, size=(20, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=20)
    gp = SGPR(kernel=RBF(1.0, np.ones(1)), likelihood=Gaussian(0.1), Z=np.linspace(0, 5, 5)[:, None])
    return X, y, SelectiveSGPR(gp, alpha=0.1)


def fit(model, X, y, init_params):
    return fit_svi(
        model.model, model.guide, X, y, optimizer=selection_optimizer(optax.set_to_zero(), 1e-12), num_steps=2,
        loss=ScoreFunctionELBO(2, pathwise=False), init_params=init_params, progress=False,
        validate=model.check_data,
    )  # fmt: skip


def test_an_initial_inclusion_is_accepted_and_used(problem):
    X, y, model = problem
    probs = np.array([0.9, 0.1, 0.5, 0.3, 0.7])
    result = fit(model, X, y, {INCLUSION_PARAM: probs, "kernel.variance": np.array(2.0)})
    np.testing.assert_allclose(np.asarray(result.params[INCLUSION_PARAM]), probs, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(result.params["kernel.variance"]), 2.0, rtol=1e-9)


@pytest.mark.parametrize(
    "init_params, message",
    [
        ({INCLUSION_PARAM: np.array([0.5, 0.5, 1.0, 0.5, 0.5])}, r"init_params\['inclusion_probs'\].*\(0, 1\)"),
        ({INCLUSION_PARAM: np.full(4, 0.5)}, r"init_params\['inclusion_probs'\].*5 probabilities.*shape \(4,\)"),
        ({"inclusion_prob": np.full(5, 0.5)}, r"init_params: unknown key\(s\) \['inclusion_prob'\]"),
        ({"kernel.variance": np.array(-1.0)}, "RBF.variance must be positive"),
    ],
)
def test_bad_initial_values_are_refused_naming_them(problem, init_params, message):
    X, y, model = problem
    with pytest.raises(ValueError, match=message):
        model.check_data(X, y, init_params=init_params)


@pytest.mark.parametrize("probs", [np.full(5, 1.0), np.full(4, 0.5), np.array([0.2, 0.2, -0.1, 0.5, 0.5])])
def test_the_pyro_twins_check_of_an_initial_inclusion_refuses_as_numpyros(probs):
    """SubsetSelection.check_initial on both sides: the same refusal, for a torch tensor too."""
    import torch

    from ppl_sparsegp.models.pyro._base import twin_of

    gp = SGPR(kernel=RBF(1.0, np.ones(1)), likelihood=Gaussian(0.1), Z=np.linspace(0, 5, 5)[:, None])
    numpyro_side = SelectiveSGPR(gp, alpha=0.1)
    pyro_side = twin_of(numpyro_side)
    for selection, value in ((numpyro_side.selection, probs), (pyro_side.selection, torch.as_tensor(probs))):
        with pytest.raises(ValueError, match=r"init_params\['inclusion_probs'\]: expected 5 probabilities in \(0, 1\)"):
            selection.check_initial({INCLUSION_PARAM: value})
    pyro_side.selection.check_initial({INCLUSION_PARAM: torch.full((5,), 0.5, requires_grad=True)})
