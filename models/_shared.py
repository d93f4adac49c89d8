"""What the NumPyro models (``models/numpyro``) and their Pyro twins (``models/pyro``) share, written once and free of
jax and torch: the jitter scope and eager argument checks around every public method (:func:`scoped_methods`), and
the checks and layout helpers the models call before and after any computation, and the numpy-only helpers of both
(:func:`base_fields`, :func:`pca_latents`, the deep GPs' :func:`checked_layers`, :func:`layer_parameter_names`,
:func:`linear_mean_weights`, :func:`deep_svgp_layers`, :func:`rbf_ard`, :func:`check_deep_settings`).

:func:`scoped_methods` wraps each public method a model class defines (every function not starting with ``_``) so
that it runs inside :func:`ppl_sparsegp.core.ops.model_jitter` of the model's ``jitter`` field, with pandas
arguments as numpy arrays, and after the eager checks of the outermost call: ``X_new`` and ``y_new`` finite and the
keys of a ``params`` dict among the model's ``parameter_names()`` (see ``models/numpyro/_base.py``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from ppl_sparsegp import validation
from ppl_sparsegp.core import ops
from ppl_sparsegp.core.kernels import RBF, Kernel
from ppl_sparsegp.core.likelihoods import Likelihood

Array = Any


_IN_ENTRY: contextvars.ContextVar[bool] = contextvars.ContextVar("in_model_method", default=False)


def _check_arguments(model: Any, arguments: Mapping[str, Any]) -> None:
    """The eager checks of a public method's arguments (module docstring)."""
    params = arguments.get("params")
    if isinstance(params, Mapping) and hasattr(model, "parameter_names"):
        validation.check_keys("params", params, model.parameter_names())
    if arguments.get("X_new") is not None:
        validation.check_inputs(arguments["X_new"], x_name="X_new")
    if arguments.get("y_new") is not None:
        validation.check_finite("y_new", arguments["y_new"])


def _entry(method: Callable) -> Callable:
    """``method`` in its model's jitter scope, with the eager checks of the outermost call (module docstring)."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def entry(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _IN_ENTRY.get():
            args, kwargs = validation.as_arrays(args, kwargs)
            try:
                arguments = signature.bind(self, *args, **kwargs).arguments
            except TypeError:  # the call below raises Python's own message (e.g. an unexpected keyword argument)
                arguments = {}
            _check_arguments(self, arguments)
        token = _IN_ENTRY.set(True)
        try:
            with ops.model_jitter(self.jitter):
                return method(self, *args, **kwargs)
        finally:
            _IN_ENTRY.reset(token)

    entry.__ppl_sparsegp_entry__ = True
    return entry


def _wrap_public_methods(cls: type) -> None:
    for name, method in list(vars(cls).items()):  # plain functions: static and class methods have no model
        if not name.startswith("_") and inspect.isfunction(method) and not hasattr(method, "__ppl_sparsegp_entry__"):
            setattr(cls, name, _entry(method))


def scoped_methods(cls: type) -> type:
    """Class decorator: wrap the public methods that ``cls`` defines (module docstring), and have every subclass of
    ``cls`` wrap those it defines when it is created (an ``__init_subclass__``). The class declares the field
    ``jitter: float | None = field(default=None, kw_only=True)`` and checks it with :func:`checked_jitter`."""
    _wrap_public_methods(cls)

    def __init_subclass__(subclass: type, **kwargs: Any) -> None:
        super(cls, subclass).__init_subclass__(**kwargs)
        _wrap_public_methods(subclass)

    cls.__init_subclass__ = classmethod(__init_subclass__)
    return cls


def checked_jitter(jitter: Any) -> float | None:
    """A model's ``jitter`` field: None (the dtype's :data:`ppl_sparsegp.core.ops.JITTER`) or a finite number >= 0
    as a float, else ValueError naming ``jitter``."""
    return None if jitter is None else ops.check_jitter(jitter)


def check_latent_functions(model: Any, likelihood: Likelihood) -> None:
    """A multi-class ``likelihood`` of J classes goes only to a model that takes one (its class attribute
    ``multiclass``) and has ``num_latent`` = J latent functions.

    Raises:
        ValueError: naming ``likelihood`` or ``num_latent``.
    """
    J, name = likelihood.latent_dim, type(likelihood).__name__
    if J is None:
        return
    if not getattr(model, "multiclass", False):
        raise ValueError(
            f"likelihood: {type(model).__name__} takes an elementwise likelihood; the multi-class {name} needs SVGP "
            "or SGPMC"
        )
    if model.num_latent != J:
        raise ValueError(f"num_latent: the {name} likelihood of {J} classes needs num_latent = {J}, got "
                         f"{model.num_latent}")  # fmt: skip


def check_every_hyperparameter_sampled(model: Any) -> None:
    """A model sampled by MCMC (SGPMC, GPMC) has a prior for, or fixes, every hyperparameter: an MCMC engine would
    otherwise keep a ``param`` at its initial value silently.

    Raises:
        ValueError: naming ``priors`` and the sites without one.
    """
    free = set(model.hyperparameter_sites()) - set(model.priors) - set(model.fixed)
    if free:
        raise ValueError(
            f"priors: {type(model).__name__} samples its hyperparameters, so each needs a prior or must be named in "
            f"`fixed`; no prior for {sorted(free)}"
        )


def check_output_columns(y: Array | None, num_latent: int, likelihood: Likelihood | None = None) -> None:
    """y [N] or [N, P] has P = ``num_latent`` columns (None: nothing to check, the model draws y); with a
    multi-class ``likelihood``, y [N] holds one label per point.

    Raises:
        ValueError: naming ``y`` and ``num_latent``.
    """
    P = None if y is None else 1 if y.ndim == 1 else y.shape[1]
    if likelihood is not None and likelihood.latent_dim is not None:
        if y is not None and y.ndim != 1:
            raise ValueError(f"y: expected one class label per point, shape [N], got shape {tuple(y.shape)}")
        return
    if P not in (None, num_latent):
        raise ValueError(f"y: expected {num_latent} output column(s) (num_latent), got {P}")


def check_sparse_settings(Z: Array, **counts: int | None) -> None:
    """Eager checks shared by the sparse models: inducing inputs ``Z`` [M, D] given and finite, and each of
    ``counts`` (e.g. ``num_latent``, ``batch_size``) None or a positive integer.

    Raises:
        ValueError: naming the argument and what was expected.
    """
    if Z is None:
        raise ValueError("Z: expected inducing inputs of shape [M, D], got None")
    validation.check_inputs(validation.as_array(Z), x_name="Z")
    for name, value in counts.items():
        validation.check_count(name, value, minimum=1, optional=True)


def as_output_columns(mean: Array, var: Array, single_output: bool) -> tuple[Array, Array]:
    """[P, S] core layout -> [S] (one output) or [S, P]; full covariances [P, S, S] -> [S, S] or kept."""
    if var.ndim == 3:
        return (mean[0], var[0]) if single_output else (mean.T, var)
    return (mean[0], var[0]) if single_output else (mean.T, var.T)


def leading_output_axis(site: str, value_shape: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether ``params[site]`` of ``value_shape``, a parameter of q(u) or a draw of u, needs the leading output axis
    added to take its site's ``shape``, [P, M] (``u_loc``, ``u_scale``, ``u``) or [P, M, M] (``u_scale_tril``):
    with one output (P = 1) the axis may be left out ([M], [M, M]).

    Raises:
        ValueError: another shape, naming ``params[site]`` and the expected one.
    """
    if shape[0] == 1 and value_shape == shape[1:]:
        return True
    if value_shape != shape:
        one = f" (or {list(shape[1:])} for one output)" if shape[0] == 1 else ""
        layout = "[P, M]" if len(shape) == 2 else "[P, M, M]"
        raise ValueError(f"params['{site}']: expected shape {layout} = {list(shape)}{one}, got {list(value_shape)}")
    return False


def base_fields(obj: Any, cls: type) -> dict[str, Any]:
    """The values of ``obj``'s fields that the dataclass ``cls`` takes in ``__init__`` (to build a ``cls`` that
    ``obj`` is made of, e.g. the SVGP at given inputs inside a Bayesian GP-LVM, or SGPMC's variational twin)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(cls) if f.init}


def pca_latents(Y: Array, latent_dim: int) -> np.ndarray:
    """PCA initialisation of the latent means: the top ``latent_dim`` principal scores of Y, unit variance each.

    Args:
        Y: observations [N, D]; latent_dim: Q with 1 <= Q <= min(N, D).

    Returns:
        [N, Q]: (Y − mean) V_Q / std, V_Q the leading right singular vectors, each column scaled to unit variance
        (the scale of the prior N(0, I)).
    """
    Y = np.asarray(Y)
    validation.check_inputs(Y, x_name="Y")
    if (
        isinstance(latent_dim, bool)
        or not isinstance(latent_dim, int | np.integer)
        or not (1 <= latent_dim <= min(Y.shape))
    ):
        raise ValueError(f"latent_dim: expected an integer in [1, min(N, D) = {min(Y.shape)}], got {latent_dim!r}")
    centred = Y - Y.mean(axis=0)
    _, _, Vt = np.linalg.svd(centred, full_matrices=False)
    scores = centred @ Vt[:latent_dim].T
    return scores / np.maximum(scores.std(axis=0), np.finfo(Y.dtype).tiny)


# ---- BSGP (shallow and deep), shared by models/numpyro/bsgp.py, deep_bsgp.py and their Pyro twins ----------------

LIKELIHOOD_TERMS = ("log_expected", "expected_log")
"""BSGP's data terms ℓ_n: log E[p(y|f)] (the released code, Table 6) or E[log p(y|f)] (the paper's Eq. 6)."""


def bsgp_kernel(input_dim: int) -> RBF:
    """The released code's initial kernel: RBF-ARD with λ_d = √D for every dimension and σ_k² = 0.1 (spec §1.5)."""
    if not isinstance(input_dim, int) or input_dim < 1:
        raise ValueError(f"input_dim: expected a positive integer, got {input_dim!r}")
    return RBF(variance=0.1, lengthscale=np.full(input_dim, math.sqrt(input_dim)))


def data_log_likelihood(likelihood: Likelihood, likelihood_term: str, Y: Array, mean: Array, var: Array) -> Array:
    """ℓ_n per point for f_n ~ N(mean, var): ``"log_expected"`` log E[p(y|f)] or ``"expected_log"`` E[log p(y|f)].

    Shapes: Y, mean, var [P, B] -> [P, B]. The terms are evaluated with the outputs on the last axis ([B, P], the
    layout of predictions), so a likelihood parameter of shape [P] (one Gaussian noise variance per output column,
    the released code's ``Gaussian(np.var(Y, 0))``; ``BSGPConfig.noise_per_output``) applies to its own output.
    """
    Y, mean, var = (ops.matrix_transpose(a) for a in (Y, mean, var))
    if likelihood_term == "log_expected":
        return ops.matrix_transpose(likelihood.log_predictive_density(Y, mean, var))
    return ops.matrix_transpose(likelihood.variational_expectation(Y, mean, var))


def check_likelihood_term(likelihood_term: str) -> None:
    if likelihood_term not in LIKELIHOOD_TERMS:
        raise ValueError(f"likelihood_term: expected one of {LIKELIHOOD_TERMS}, got {likelihood_term!r}")


def checked_optimised(optimised: Any, kernel_sites: Collection[str], priors: Collection[str],
                      fixed: Collection[str]) -> tuple[str, ...]:  # fmt: skip
    """BSGP's ``optimised`` sites (both twins): a sequence of distinct names among ``"Z"`` and ``kernel_sites``, none
    of which has a prior in ``priors`` or is ``fixed``. Returned as a tuple.

    Raises:
        ValueError: naming ``optimised`` and the offending entry.
    """
    if isinstance(optimised, str) or not all(isinstance(s, str) for s in optimised):
        raise ValueError(f"optimised: expected a sequence of site names, got {optimised!r}")
    names = tuple(optimised)
    allowed = ("Z", *sorted(kernel_sites))
    for site in names:
        if site not in allowed:
            raise ValueError(f"optimised: {site!r} is not one of the sites BSGP can point-estimate {allowed}")
        if site in priors or site in fixed:
            raise ValueError(f"optimised: {site!r} also has a prior or is fixed; a site is one of the three")
    if len(set(names)) != len(names):
        raise ValueError(f"optimised: names a site twice: {names!r}")
    return names


# ---- deep GPs (DeepSVGP, DeepBSGP and their Pyro twins) ------------------------------------------------------------


def checked_layers(
    Z: Sequence[Array],
    widths: Sequence[int],
    mean_weights: Sequence[Array | None],
    kernels: Sequence[Kernel] | None,
    default_kernel: Callable[[int], Kernel],
    *,
    zero_mean_allowed: bool,
    as_float: Callable[[Array], Array],
) -> tuple[list[Array], list[int], list[Array | None], list[Kernel]]:
    """The layers of a deep GP (DeepSVGP, DeepBSGP and their twins), checked before anything compiles.

    ``Z``: a list of L arrays [M_ℓ, D_ℓ], finite, cast by ``as_float`` (to JAX's or torch's default float dtype),
    with D_{ℓ+1} = ``widths[ℓ]``;
    ``widths``: L positive integers D_1..D_L; ``mean_weights``: L − 1 matrices W^ℓ [D_ℓ, D_{ℓ+1}] for the inner
    layers (None, a zero mean, where ``zero_mean_allowed``); ``kernels``: L kernels, ``default_kernel(D_ℓ)`` for
    every layer when None. Returns the four as lists.

    Raises:
        ValueError: naming the argument (and the layer) and what was expected.
    """
    if getattr(Z, "ndim", None) is not None or not Z:
        raise ValueError("Z: expected a list with one array of inducing inputs [M_ℓ, D_ℓ] per layer")
    Z = [as_float(np.asarray(validation.as_array(z))) for z in Z]
    for i, z in enumerate(Z):
        validation.check_inputs(z, x_name=f"Z[{i}]")
    L, dims = len(Z), [int(z.shape[1]) for z in Z]
    if len(widths) != L or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
        raise ValueError(f"widths: expected {L} positive integers (one per layer), got {widths!r}")
    widths = [int(w) for w in widths]
    for i in range(1, L):
        if dims[i] != widths[i - 1]:
            raise ValueError(f"Z[{i}]: expected {widths[i - 1]} columns (the width of layer {i - 1})")
    mean_weights = list(mean_weights)
    if len(mean_weights) != L - 1:
        raise ValueError(f"mean_weights: expected {L - 1} entries (inner layers), got {len(mean_weights)}")
    for i, W in enumerate(mean_weights):
        if not (W is None and zero_mean_allowed) and np.shape(W) != (dims[i], widths[i]):
            expected = "None or shape" if zero_mean_allowed else "shape"
            raise ValueError(f"mean_weights[{i}]: expected {expected} {(dims[i], widths[i])}")
    kernels = [default_kernel(d) for d in dims] if kernels is None else list(kernels)
    if len(kernels) != L:
        raise ValueError(f"kernels: expected {L} kernels (one per layer), got {len(kernels)}")
    return Z, widths, mean_weights, kernels


def layer_parameter_names(likelihood: Likelihood, kernels: Sequence[Kernel], layer_sites: Sequence[str]) -> set[str]:
    """The sites a deep GP's (DeepSVGP, DeepBSGP) ``params`` dict may name: ``"likelihood.<name>"`` and per layer ℓ
    ``"layer<ℓ>.kernel.<name>"`` of ``kernels[ℓ]`` and ``"layer<ℓ>.<site>"`` for each of ``layer_sites`` (e.g.
    ``"Z"``, ``"u"``)."""
    return {f"likelihood.{n}" for n in likelihood.parameters()} | {
        f"layer{i}.{name}"
        for i, kernel in enumerate(kernels)
        for name in (*(f"kernel.{n}" for n in kernel.parameters()), *layer_sites)
    }


def linear_mean_weights(X: Array, input_dim: int, output_dim: int) -> np.ndarray:
    """W [D_in, D_out] of an inner layer's fixed mean F W: identity if D_in = D_out, the top D_out right-singular
    vectors of X [N, D_in] if D_out < D_in, [I, 0] (zero padding) if D_out > D_in."""
    if input_dim == output_dim:
        return np.eye(input_dim)
    if output_dim < input_dim:
        _, _, Vt = np.linalg.svd(np.asarray(X), full_matrices=False)
        return Vt[:output_dim].T
    return np.concatenate([np.eye(input_dim), np.zeros((input_dim, output_dim - input_dim))], axis=1)


def deep_svgp_layers(
    X: Array,
    num_outputs: int,
    *,
    Z: Array | Sequence[Array],
    num_layers: int = 2,
    add_input: bool = False,
    inner_mean: Literal["linear", "zero"] = "linear",
    inner_kernel_variance: float = 0.1,
) -> dict[str, Any]:
    """The layers of the deep GP that ``deep_svgp`` (NumPyro's and Pyro's) builds: width D = X.shape[1] on its inner
    layers, RBF-ARD kernels (lengthscales 1; variance 1 on the last layer and ``inner_kernel_variance`` on inner
    ones, as the released code's layer-wise start), as the DeepSVGP fields ``Z``, ``widths``, ``kernels``,
    ``mean_weights`` and ``add_input``.

    Args:
        X: training inputs [N, D] (for the linear mean, :func:`linear_mean_weights`).
        num_outputs: P.
        Z: inducing inputs in the space of X: one array [M, D] for every layer, or one [M_ℓ, D] per layer. Layer
            ℓ's are mapped along the initial mean path (inner q(u) ≈ 0): H^{ℓ+1} = H^ℓ W^ℓ (+ Z with ``add_input``).
        num_layers: L >= 1.
        add_input: X added to the input of every later layer (the paper's kin8nm set-up).
        inner_mean: ``"linear"`` (W^ℓ = identity) or ``"zero"`` on inner layers.
    """
    validation.check_count("num_layers", num_layers, minimum=1)
    validation.check_count("num_outputs", num_outputs, minimum=1)
    if inner_mean not in ("linear", "zero"):
        raise ValueError(f"inner_mean: expected 'linear' or 'zero', got {inner_mean!r}")
    D = int(np.shape(X)[1])
    Zs = [np.asarray(Z)] * num_layers if getattr(Z, "ndim", None) is not None else [np.asarray(z) for z in Z]
    if len(Zs) != num_layers:
        raise ValueError(f"Z: expected one array or {num_layers} arrays (one per layer), got {len(Zs)}")
    W = linear_mean_weights(X, D, D) if inner_mean == "linear" else None
    mapped = []
    for i, z in enumerate(Zs):
        validation.check_same_dim(z, X, z_name=f"Z[{i}]")
        H = z
        for _ in range(i if W is not None or add_input else 0):  # zero mean, no input: keep z (not all at 0)
            H = (0.0 if W is None else H @ W) + (z if add_input else 0.0)
        mapped.append(H)
    kernels = [
        RBF(variance=1.0 if i == num_layers - 1 else inner_kernel_variance, lengthscale=np.ones(D))
        for i in range(num_layers)
    ]
    widths = [D] * (num_layers - 1) + [num_outputs]
    return {"Z": mapped, "widths": widths, "kernels": kernels, "mean_weights": [W] * (num_layers - 1),
            "add_input": add_input}  # fmt: skip


def rbf_ard(input_dim: int) -> RBF:
    """The default kernel of a deep GP layer with ``input_dim`` inputs: RBF-ARD, variance 1, lengthscales 1."""
    return RBF(variance=1.0, lengthscale=np.ones(input_dim))


def check_deep_settings(model: Any) -> None:
    """The eager checks of a DeepSVGP's settings (NumPyro's and Pyro's), after :func:`checked_layers`:
    ``add_input`` only with inner widths equal to D, ``add_input``, ``whiten`` and ``sum_outputs`` booleans,
    ``num_samples`` a positive integer, ``batch_size`` and ``num_data`` None or positive integers and not both,
    ``inner_scale`` a positive number.

    Raises:
        ValueError: naming the setting and what was expected.
    """
    if model.add_input and any(w != model.input_dims[0] for w in model.widths[:-1]):
        raise ValueError(f"add_input: needs every inner width equal to D = {model.input_dims[0]}")
    for name in ("add_input", "whiten", "sum_outputs"):
        if not isinstance(getattr(model, name), bool):
            raise ValueError(f"{name}: expected True or False, got {getattr(model, name)!r}")
    validation.check_count("num_samples", model.num_samples, minimum=1)
    validation.check_count("batch_size", model.batch_size, minimum=1, optional=True)
    validation.check_count("num_data", model.num_data, minimum=1, optional=True)
    if model.batch_size is not None and model.num_data is not None:
        raise ValueError("batch_size and num_data: give one (plate subsampling or external minibatches)")
    s = model.inner_scale
    if isinstance(s, bool) or not isinstance(s, int | float) or not (0 < s < math.inf):
        raise ValueError(f"inner_scale: expected a positive number, got {s!r}")


def deep_bsgp_layout(
    X: Array, num_outputs: int, *, num_layers: int, Z: Array, hidden_width: int | None = None
) -> dict[str, list]:
    """The deep BSGP paper's architecture for X [N, D] and Z [M, D] (k-means on X): ``num_layers`` layers, inner
    width ``hidden_width`` (default D), Z for the first layer and Z W for the others, linear means from
    :func:`linear_mean_weights` on inner layers. Returns the ``Z``, ``widths`` and ``mean_weights`` of a DeepBSGP."""
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"num_layers: expected a positive integer, got {num_layers!r}")
    X = np.asarray(X)
    D = int(X.shape[1])
    width = D if hidden_width is None else hidden_width
    widths = [width] * (num_layers - 1) + [num_outputs]
    dims = [D] + widths[:-1]
    weights = [linear_mean_weights(X, dims[i], dims[i + 1]) for i in range(num_layers - 1)]
    Zs = [np.asarray(Z)]
    for W in weights:
        Zs.append(Zs[-1] @ W)
    return {"Z": Zs, "widths": widths, "mean_weights": weights}


POSTERIOR_FACTOR = ("posterior.cholesky", "posterior.projected_y")
"""Keys under which a GPR's ``with_posterior_factor`` adds the training data's factor to a params dict."""


def no_pointwise_terms(model: Any) -> NotImplementedError:
    """The error of ``pointwise_log_likelihood`` for a model whose data term does not factorise over data points."""
    return NotImplementedError(
        f"{type(model).__name__}: its data term does not factorise over data points given the sampled "
        "variables, so it has no pointwise log-likelihood; use SVGP or SGPMC for az.loo / az.waic"
    )


def check_alpha(value: Any) -> float:
    """The prior strength α of a selective model's subset prior: a finite number >= 0."""
    ok = isinstance(value, int | float | np.floating) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and value >= 0):
        raise ValueError(f"alpha: expected a finite number >= 0 (the prior strength), got {value!r}")
    return float(value)


def check_initial_inclusion(value: Any) -> float:
    """λ₀, a selective model's initial inclusion probability: a probability in (0, 1)."""
    ok = isinstance(value, int | float | np.floating) and not isinstance(value, bool)
    if not (ok and 0.0 < value < 1.0):
        raise ValueError(f"initial_inclusion: expected a probability in (0, 1), got {value!r}")
    return float(value)


def check_initial_probabilities(init_params: Mapping[str, Any], name: str, num_candidates: int) -> None:
    """Refuse an initial λ ``init_params[name]`` (numpy, jax or torch) that is not K = ``num_candidates``
    probabilities in (0, 1); nothing to check when ``name`` is absent."""
    if name not in init_params:
        return
    value = init_params[name]
    probs = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value, dtype=float)
    if probs.shape != (num_candidates,) or not np.all((probs > 0) & (probs < 1)):
        span = f", from {probs.min()} to {probs.max()}" if probs.size else ""
        raise ValueError(
            f"init_params[{name!r}]: expected {num_candidates} probabilities in (0, 1), one per candidate, got shape "
            f"{probs.shape}{span}"
        )


def selected_indices(mask: Array, num_candidates: int, name: str = "mask") -> np.ndarray:
    """Indices of the candidates in a concrete inclusion mask [K] (numpy, jax or torch).

    Raises:
        ValueError: naming ``name`` when the mask is not a 0/1 array of shape [K] or selects no candidate.
    """
    m = np.asarray(mask)
    if m.shape != (num_candidates,) or not np.all((m == 0) | (m == 1)):
        raise ValueError(f"{name}: expected a 0/1 array of shape ({num_candidates},), got {m!r}")
    index = np.flatnonzero(m)
    if index.size == 0:
        raise ValueError(f"{name}: selects no candidate; a pruned model needs at least one inducing point")
    return index
