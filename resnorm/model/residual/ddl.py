"""Deep Delta Learning (Zhang et al. 2026, arXiv 2601.00417; code yifanzhang-pro/deep-delta-learning at 2b55f25,
`model/DDL-vdim1-gpt-mha-rope.py`), the scalar-value form (d_v = 1), per sublayer on a Pre-Norm stream:

    c = N(x),  h = F(c),  k = h / sqrt(||h||^2 + eps^2)          (the branch output, unit length; eps 1e-5)
    beta = 2 sigmoid(w_beta . c + b_beta)                        (a gate in (0, 2) per token)
    x <- x + beta k (v - k^T x)                                  (Eq. 2.2: a rank-1 delta on the stream)

beta = 1 replaces the stream's component along k by v; beta = 2 reflects it; beta -> 0 leaves x as it is. The value
v (`model.ddl.v`):
- `code` (default): v = 4 sigmoid(w_v . x + b_v), from the raw stream, with a bias: the authors' code, which ran the
  paper's results.
- `paper`: v = w_v . c, a linear map of the normed input without a bias (Sec. 3, App. A.1).
Init, the authors' code: w_beta and w_v N(0, (0.5 / sqrt(D))^2) (their `init_gpt_weights`), b_v U(-1/sqrt(D),
1/sqrt(D)) (PyTorch's Linear bias), b_beta = logit(beta_init / 2) with `model.ddl.beta_init` 1 (their config; the
class default is 0, a closed gate). beta_init = 0 makes b_beta -inf: every block leaves the stream as it is, and
the model is its embedding through the final norm and the head (tested); no gradient reaches a closed gate.
Final norm as Pre-Norm's. The expanded-state form (d_v > 1, a compressed state) is not built.
"""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.residual.base import Variant, register

EPS = 1e-5
VALUES = ("code", "paper")


class DDL(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, x_BTD, branch, norm, layer, sub):
    cfg, d = self.cfg, self.cfg.d_model
    c_BTD = norm(x_BTD)
    h_BTD = branch(c_BTD)
    w_init = nn.initializers.normal(0.5 / math.sqrt(d))
    b0 = cfg.ddl.beta_init / 2.0
    w_beta = self.param("w_beta", w_init, (d,))
    b_beta = self.param("b_beta", nn.initializers.constant(math.log(b0 / (1 - b0)) if b0 > 0 else -math.inf), ())
    w_v = self.param("w_v", w_init, (d,))
    x32, c32, h32 = (a.astype(jnp.float32) for a in (x_BTD, c_BTD, h_BTD))
    k_BTD = h32 * jax.lax.rsqrt(jnp.sum(h32 * h32, axis=-1, keepdims=True) + EPS * EPS)
    beta_BT = 2.0 * jax.nn.sigmoid(c32 @ w_beta + b_beta)
    if cfg.ddl.v == "code":
      bound = 1.0 / math.sqrt(d)
      b_v = self.param("b_v", lambda rng, shape: jax.random.uniform(rng, shape, jnp.float32, -bound, bound), ())
      v_BT = 4.0 * jax.nn.sigmoid(x32 @ w_v + b_v)
    else:
      v_BT = c32 @ w_v
    delta_BT = v_BT - jnp.sum(k_BTD * x32, axis=-1)
    out = x32 + (beta_BT * delta_BT)[..., None] * k_BTD
    return out.astype(x_BTD.dtype), {"u": x_BTD, "f": h_BTD, "ddl_beta": jnp.mean(beta_BT)}


def _check(cfg):
  check(cfg.ddl.v in VALUES, f"model.ddl.v={cfg.ddl.v!r} is unknown; known: {', '.join(VALUES)}")
  check(0.0 <= cfg.ddl.beta_init < 2.0, f"model.ddl.beta_init={cfg.ddl.beta_init} must be in [0, 2) (the gate "
        "2 sigmoid(.) at init; 0: closed)")


register(Variant("ddl", DDL, check=_check,
                 roles={"w_beta": "readout", "b_beta": "vector", "w_v": "readout", "b_v": "vector"},
                 extra_params=lambda cfg: 2 * cfg.num_layers * (2 * cfg.d_model + 1 + (cfg.ddl.v == "code")),
                 extra_flops=lambda cfg: 2 * cfg.num_layers * 8 * cfg.d_model))
