"""SelectiveDeepSVGP: per-layer λ unbiased against enumeration, pruning, joint redraws, bad input, end to end."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.distributions.kl import kl_divergence

from ppl_sparsegp.core.likelihoods import Gaussian
from ppl_sparsegp.infer.score_function import BASELINE_SITE, ScoreFunctionELBO
from ppl_sparsegp.models.numpyro.deep_svgp import DeepSVGP
from ppl_sparsegp.models.numpyro.selective_deep import SelectiveDeepSVGP
from ppl_sparsegp.numpyro.subset_prior import IndependentInclusion
from ppl_sparsegp.recipes.phases import sample_joint_subset
from ppl_sparsegp.recipes.selective import fit_selective_deep

K = 3


def selective_problem(rng, **options):
    X = rng.normal(size=(12, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=12)
    deep = DeepSVGP(
        Z=[X[:K], X[K : 2 * K]],
        widths=[2, 1],
        likelihood=Gaussian(0.05),
        mean_weights=[None],
        add_input=True,
        whiten=False,
        num_samples=1,
    )
    model = SelectiveDeepSVGP(deep, **options)
    rng_q, params = np.random.default_rng(1), {}
    for i, P in enumerate((2, 1)):
        params[f"layer{i}.u_loc"] = jnp.asarray(rng_q.normal(size=(P, K)))
        params[f"layer{i}.u_scale_tril"] = jnp.asarray(np.tril(0.2 * rng_q.normal(size=(P, K, K))) + np.eye(K))
    return model, params, X, y


@pytest.mark.slow
def test_per_layer_score_function_gradient_is_unbiased_against_enumeration(rng):
    """2 layers × 3 candidates = 64 joint subsets. L(s) of a deep GP is itself random (propagated draws); the
    enumeration averages it over the same keys that the estimator's particles see in expectation."""
    model, params, X, y = selective_problem(rng, alpha=[0.4, 0.1])
    probs = [jnp.array([0.3, 0.6, 0.8]), jnp.array([0.5, 0.2, 0.7])]
    masks = np.array(list(itertools.product([0.0, 1.0], repeat=2 * K)))
    keys = jax.random.split(jax.random.PRNGKey(7), 64)

    def mean_bound(m):
        return jnp.mean(jax.vmap(lambda k: model.subset_bound(params, X, y, [m[:K], m[K:]], k))(keys))

    bounds = jax.jit(jax.vmap(mean_bound))(jnp.asarray(masks))
    priors = model.inclusion_priors()

    def objective(p0, p1):
        log_q = IndependentInclusion(p0).log_prob(masks[:, :K]) + IndependentInclusion(p1).log_prob(masks[:, K:])
        kl = kl_divergence(IndependentInclusion(p0), priors[0]) + kl_divergence(IndependentInclusion(p1), priors[1])
        return jnp.sum(jnp.exp(log_q) * bounds) - kl

    exact = jax.grad(objective, argnums=(0, 1))(*probs)
    elbo = ScoreFunctionELBO(num_particles=2000, pathwise=False)
    zero = jnp.zeros(())

    def loss(p0, p1, key):
        values = params | {"layer0.inclusion_probs": p0, "layer1.inclusion_probs": p1}
        values[BASELINE_SITE] = {"total": zero, "weight": zero}
        return elbo.loss_with_mutable_state(key, values, model.model, model.guide, X, y)["loss"]

    batches = jax.random.split(jax.random.PRNGKey(0), 8)
    grads = jax.jit(jax.vmap(jax.grad(loss, argnums=(0, 1)), in_axes=(None, None, 0)))(*probs, batches)
    for e, g in zip(exact, grads, strict=True):
        estimates = -np.asarray(g)  # [8, K]: 8 independent estimates, 2000 joint draws each
        standard_error = estimates.std(axis=0, ddof=1) / np.sqrt(len(estimates))
        assert np.all(np.abs(estimates.mean(axis=0) - np.asarray(e)) < 4 * standard_error + 0.05)
        assert np.all(standard_error < 2.0)  # precise enough to catch a bias of a few nats per unit λ
    assert np.max(np.abs(np.concatenate(exact))) > 3.0  # the test is not vacuous


def test_alpha_per_output_and_the_priors(rng):
    model, params, X, y = selective_problem(rng, alpha=0.1, alpha_per_output=True)
    assert model.alphas == [0.2, 0.1]
    assert [p.num_candidates for p in model.inclusion_priors()] == [K, K]
    assert len(model.kl_selection(params)) == 2


@pytest.mark.slow
def test_prune_restricts_every_layer_to_its_marginal(rng):
    model, params, X, y = selective_problem(rng)
    masks = [np.array([1.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0])]
    pruned, sub = model.prune(params, masks)
    assert type(pruned) is DeepSVGP and pruned.num_inducing == [2, 1]
    assert sub["layer0.u_scale_tril"].shape == (2, 2, 2) and sub["layer1.u_loc"].shape == (1, 1)
    assert not any(k.endswith("inclusion_probs") or k == BASELINE_SITE for k in sub)
    key = jax.random.PRNGKey(2)
    masked = jax.jit(model.subset_bound)(params, X, y, masks, key)
    np.testing.assert_allclose(jax.jit(pruned.elbo)(sub, X, y, key), masked, rtol=1e-9)
    with pytest.raises(ValueError, match="masks\\[1\\]"):
        model.prune(params, [masks[0], np.zeros(K)])
    with pytest.raises(ValueError, match="masks"):
        model.prune(params, masks[:1])


def test_a_joint_draw_with_an_empty_layer_is_redrawn_then_refused():
    masks = sample_joint_subset([np.array([0.5, 0.5]), np.array([1e-12, 0.9])], jax.random.PRNGKey(0))
    assert masks[1].tolist() == [0.0, 1.0] and masks[0].any()
    with pytest.raises(ValueError, match="lower alpha"):
        sample_joint_subset([np.array([0.9]), np.full(4, 1e-12)], jax.random.PRNGKey(0))


X_OK = np.linspace(0, 1, 20)[:, None]
Y_OK = np.sin(X_OK[:, 0])


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ({"num_layers": 0}, "num_layers"),
        ({"candidates": 25}, "candidates"),
        ({"candidates": [X_OK[:3]]}, "candidates"),
        ({"candidates": X_OK[:3]}, "candidates"),
        ({"alpha": -0.1}, "alpha"),
        ({"alpha": [0.1, 0.1, 0.1]}, "alpha"),
        ({"alpha_per_output": "yes"}, "alpha_per_output"),
        ({"initial_inclusion": 1.0}, "initial_inclusion"),
        ({"selection": "both"}, "selection"),
        ({"init": "grid"}, "init"),
        ({"inner_mean": "affine"}, "inner_mean"),
        ({"pre_steps": -1}, "pre_steps"),
        ({"selection_steps": 0}, "selection_steps"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"selection_learning_rate": -1.0}, "selection_learning_rate"),
        ({"batch_size": 0}, "batch_size"),
        ({"selection_batch_size": 2.5}, "selection_batch_size"),
        ({"num_particles": 0}, "num_particles"),
        ({"num_samples": 0}, "num_samples"),
        ({"likelihood": "gaussian"}, "likelihood"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
    ],
)
def test_bad_settings_are_refused_before_any_fit(overrides, name):
    with pytest.raises(ValueError, match=name):
        fit_selective_deep(X_OK, Y_OK, **{"candidates": 5, "pre_steps": 1, "selection_steps": 1, **overrides})


def test_a_file_as_checkpoint_folder_is_refused(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("")
    with pytest.raises(ValueError, match="checkpoint_dir"):
        fit_selective_deep(X_OK, Y_OK, candidates=5, checkpoint_dir=taken)


def test_bad_data_and_whitening_are_refused():
    with pytest.raises(ValueError):
        fit_selective_deep(np.full((5, 1), np.nan), np.ones(5), candidates=2)
    with pytest.raises(ValueError, match="whiten"):
        SelectiveDeepSVGP(DeepSVGP(Z=[X_OK[:3]], widths=[1], likelihood=Gaussian(), whiten=True))


@pytest.mark.slow
def test_fit_keeps_fewer_points_under_a_stronger_prior(rng):
    X = rng.uniform(-3, 3, size=(300, 1))
    y = np.sign(np.sin(2 * X[:, 0])) + 0.05 * rng.normal(size=300)
    # 1000 pre-training steps: after 500 the square wave's fit (training RMSE < 0.5 below) depends on the machine
    schedule = {"candidates": 20, "pre_steps": 1000, "selection_steps": 200, "post_steps": 100, "batch_size": 100}
    weak = fit_selective_deep(X, y, alpha=1e-3, **schedule, key=1)
    strong = fit_selective_deep(
        X, y, alpha=[20.0, 20.0], init_params=weak.pretrained_params, **schedule | {"pre_steps": 0}, key=1
    )
    # α = 20 per point leaves about nothing; α = 1e-3 keeps what the data term asks for (8-20 of 40, by machine)
    assert sum(strong.expected_counts) < 2 and sum(strong.expected_counts) < 0.25 * sum(weak.expected_counts)
    assert sum(strong.selected_counts) < sum(weak.selected_counts)
    assert all(c >= 1 for c in strong.selected_counts)
    assert weak.model.num_inducing == weak.selected_counts
    assert set(weak.losses) == {"pre", "selection", "post"} and weak.losses["selection"].shape == (200,)
    mean, _ = weak.model.predict_y(weak.params, X, key=jax.random.PRNGKey(0), num_samples=4)
    assert np.sqrt(np.mean((np.asarray(mean) - y) ** 2)) < 0.5


@pytest.mark.slow
def test_a_resumed_deep_fit_equals_an_uninterrupted_one(rng, tmp_path):
    """A longer selection resumes from the stored phase checkpoints and ends where a fit that never stopped ends."""
    X = rng.uniform(-3, 3, size=(60, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=60)
    settings = {"candidates": 8, "alpha": 0.5, "pre_steps": 20, "post_steps": 10, "checkpoint_every": 5, "key": 3}
    straight = fit_selective_deep(X, y, selection_steps=15, **settings)
    fit_selective_deep(X, y, selection_steps=5, checkpoint_dir=tmp_path, **settings)
    assert {p.name for p in tmp_path.iterdir()} == {f"selective_{p}.npz" for p in ("pre", "selection", "post")}
    resumed = fit_selective_deep(X, y, selection_steps=15, checkpoint_dir=tmp_path, **settings)
    for phase in ("pre", "selection", "post"):
        np.testing.assert_array_equal(resumed.losses[phase], straight.losses[phase])
    for got, expected in zip(resumed.masks, straight.masks, strict=True):
        np.testing.assert_array_equal(got, expected)
    for name, value in straight.params.items():
        np.testing.assert_array_equal(resumed.params[name], value)
