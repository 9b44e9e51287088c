"""Keel (Chen & Wei 2026, "Post-LayerNorm Is Back: Stable, ExpressivE, and Deep", arXiv 2601.19895 v2, Eq. 16):
Post-LN with a Highway-style skip, per sublayer (attention and MLP each):

    x <- LN_1(alpha x + F(LN_2(x)))        alpha = L, the number of sublayers (2 x model.num_layers)

LN_2 is the sublayer's own norm (the base weight Pre-Norm uses); LN_1 is Keel's `out_norm`. alpha weights the skip,
not the branch, and nothing makes the two sum to 1. No final norm: every sublayer already ends in LN_1.

The first sublayers (`model.keel.first`, the paper's Sec. 3 note on the first layers):
- v2 (arXiv v2): the first attention sublayer is Pre-LN, x + F(LN_2(x)) (no LN_1, alpha 1); the first MLP keeps LN_1
  with alpha 1.
- v1 (arXiv v1): both first sublayers are Pre-LN blocks (no LN_1, alpha 1).
- none: every sublayer is Keel's.
The LN_1 of a sublayer that skips it exists and gets no gradient, so every setting has the same param tree.
`model.keel.alpha` > 0 replaces L (the paper's footnote: a tunable alpha > 1 for small models).
"""
import flax.linen as nn
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.norms import make_norm, num_params
from resnorm.model.residual.base import Variant, depth_refusal, register

FIRST = {"v2": (1, 2), "v1": (2, 2), "none": (0, 0)}  # (sublayers without LN_1, sublayers with alpha 1)


def keel_alpha(cfg) -> float:
  return float(cfg.keel.alpha) if cfg.keel.alpha > 0 else 2.0 * cfg.num_layers


class Keel(nn.Module):
  """One sublayer of Keel (module docstring); `sub` is the traced sublayer index 2 * layer + {0, 1}."""
  cfg: object

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    plain, unit = FIRST[self.cfg.keel.first]
    y = branch(norm(x))
    alpha = jnp.where(sub < unit, 1.0, keel_alpha(self.cfg)).astype(x.dtype)
    out = make_norm(self.cfg, "out_norm")(alpha * x + y)
    return jnp.where(sub < plain, x + y, out), {"u": x, "f": y}


def _check(cfg):
  check(cfg.keel.first in FIRST, f"model.keel.first={cfg.keel.first!r} must be one of {', '.join(FIRST)}")
  check(cfg.keel.alpha >= 0, f"model.keel.alpha={cfg.keel.alpha} must be >= 0 (0: L, the number of sublayers)")
  check(cfg.init != "gpt2", "model.init='gpt2' scales residual outputs by 1/sqrt(2L), and Keel's alpha = L already "
        "weights the skip by depth; use model.init=xavier or normal (the paper's N(0, 0.02^2))")


register(Variant("keel", Keel, final_norm=False, check=_check,
                 extra_params=lambda cfg: 2 * cfg.num_layers * num_params(cfg, cfg.d_model),
                 refuses=depth_refusal("Keel's alpha = L weights the skip against the branch by depth, a depth "
                                       "parametrization of its own; a depth rule on top scales by depth twice")))
