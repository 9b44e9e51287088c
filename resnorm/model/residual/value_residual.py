"""Value residual learning (Zhou et al., arXiv 2410.17897, ACL 2025; "ResFormer"), on Pre-Norm blocks: every
attention layer n >= 2 (1-based) mixes its values with the first layer's,

    V_n' = lambda_n V_1 + (1 - lambda_n) V_n,      V_n = N(x_n) W^V_n,  V_1 = the first layer's values

before attention; the stream and the MLPs are Pre-Norm's. ResFormer's form (the paper's Sec. 3.3, "U_n = 1/2 A_n
(V_n + V_1)"; the authors' Llama code) is lambda = 1/2 fixed (`model.value_residual.learned=False`); the default is
modded-nanogpt's, one learned lambda per layer starting at `model.value_residual.lambda_init` (1/2). The paper's
later "Learnable" form learns two free weights (lambda_1, lambda_2); the single convex weight here is its constrained
case. The mix acts on the values after their projection (no RoPE on values), so a KV cache holds the mixed values,
as in the authors' code. Layer 1's lambda exists (stacked params) but is unused: its gradient is zero.

lambda_init = 0 is Pre-Norm exactly at init (tested), and `pre_norm -> value_residual` upcycling is refused at the
default 1/2. lambda is a gate and is not weight-decayed (modded-nanogpt puts its scalars in Adam without decay).

The carry is [B, T, 2, D]: slot 0 the stream, slot 1 the first layer's values V_1 (H heads x K = D, flattened).
"""
import flax.linen as nn
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.residual.base import Variant, register


class ValueResidualAttn(nn.Module):
  """x <- x + Attn(N(x)) with the values mixed with V_1; layer 0 stores its values as V_1."""
  cfg: object

  @nn.compact
  def __call__(self, s_BT2D, branch, norm, layer, sub):
    vc = self.cfg.value_residual
    x_BTD, v1_BTD = s_BT2D[:, :, 0], s_BT2D[:, :, 1]
    if vc.learned:
      lam = self.param("lambda", nn.initializers.constant(vc.lambda_init), ())
    else:
      lam = jnp.asarray(vc.lambda_init, jnp.float32)
    first = layer == 0
    out = {}

    def value_fn(v_BTHK):
      v_BTD = v_BTHK.reshape(v1_BTD.shape)
      l = lam.astype(v_BTD.dtype)
      out["v1"] = jnp.where(first, v_BTD, v1_BTD)
      return jnp.where(first, v_BTD, l * v1_BTD + (1 - l) * v_BTD).reshape(v_BTHK.shape)

    y_BTD = branch(norm(x_BTD), value_fn=value_fn)
    lam_tap = jnp.where(first, jnp.nan, lam).astype(jnp.float32)
    return jnp.stack([x_BTD + y_BTD, out["v1"]], axis=2), {"u": x_BTD, "f": y_BTD, "value_lambda": lam_tap}


class ValueResidualMLP(nn.Module):
  """x <- x + MLP(N(x)); V_1 passes on."""
  cfg: object

  @nn.compact
  def __call__(self, s_BT2D, branch, norm, layer, sub):
    x_BTD = s_BT2D[:, :, 0]
    y_BTD = branch(norm(x_BTD))
    return s_BT2D.at[:, :, 0].set(x_BTD + y_BTD), {"u": x_BTD, "f": y_BTD, "value_lambda": jnp.float32(jnp.nan)}


def _start(cfg, x_BTD):
  return jnp.stack([x_BTD, jnp.zeros_like(x_BTD)], axis=2)


def _finish(cfg, s_BT2D):
  return s_BT2D[:, :, 0]


def _check(cfg):
  vc = cfg.value_residual
  check(isinstance(vc.lambda_init, (int, float)) and 0.0 <= vc.lambda_init <= 1.0,
        f"model.value_residual.lambda_init={vc.lambda_init} must be in [0, 1] (the weight on the first layer's "
        "values)")


register(Variant("value_residual", (ValueResidualAttn, ValueResidualMLP), start=_start, finish=_finish,
                 roles={"lambda": "vector"},
                 extra_params=lambda cfg: cfg.num_layers if cfg.value_residual.learned else 0,
                 extra_flops=lambda cfg: 3 * cfg.num_layers * cfg.d_model, check=_check))
