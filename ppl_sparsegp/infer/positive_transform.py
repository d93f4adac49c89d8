"""How a fit keeps its positive params on the real line: through exp, NumPyro's ``constraints.positive`` (the
default), or through softplus, as GPflow, GPyTorch and GPJax keep theirs (:class:`SoftplusPositive`;
:func:`ppl_sparsegp.infer.svi.with_positive_transform` chooses).

Adam moves an unconstrained value by up to about its learning rate a step whatever the size of the gradient, so a
direction the objective barely sees drifts. Through exp, a drift of lr a step multiplies the value by e^lr a step;
through softplus, x = log(1 + e^r), it adds at most lr. The MNIST robust-max SVGP (the likelihood is nearly
scale-free in the whitened parametrisation) drifted its kernel variance by about lr a step in log space, reached
e^83 after 20,000 steps and overflowed float32 in Kmm's Cholesky (σ² M > 3.4e38; benchmarks/README.md, "The MNIST
collapse explained"). Near zero softplus(r) ≈ e^r, so small values (a noise variance) move about as through exp.
"""

from __future__ import annotations

from typing import Any

from numpyro.distributions import constraints
from numpyro.primitives import Messenger


class SoftplusPositive(Messenger):
    """Every ``numpyro.param`` of ``fn`` declared with ``constraints.positive`` lives on the real line through
    softplus (``constraints.softplus_positive``) instead of exp; other params are left as they are. Wrap both the
    model and the guide: ``SVI(SoftplusPositive(model), SoftplusPositive(guide), ...)``."""

    def process_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "param" and msg["kwargs"].get("constraint") is constraints.positive:
            msg["kwargs"] = {**msg["kwargs"], "constraint": constraints.softplus_positive}
