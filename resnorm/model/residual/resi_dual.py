"""ResiDual (Xie et al. 2023, arXiv 2304.14802): a Post-LN stream and an un-normalized dual stream, per sublayer

    x_{k+1} = N(x_k + F_k(x_k))          (Post-LN: the sublayer's own norm)
    d_{k+1} = d_k + F_k(x_k)             (the dual stream accumulates every sublayer output, un-normalized)

and at the end y = x_N + N_d(d_N) -> head (N_d: the param `dual_norm`; no other final norm). Both streams start at
the embedding (the authors' code, microsoft/ResiDual: `res = x * res_input_norm_scale`, scale 1).

State: the two streams stacked, [B,T,2,D] (index 0: x, 1: d), so the scan carry stays one array (sharded like the
multi-stream state of HC) and decoding needs nothing new. The dual stream's norm uses `model.norm_eps` (the
authors' code: 1e-7).
"""
import flax.linen as nn
import jax.numpy as jnp

from resnorm.model.norms import make_norm, num_params
from resnorm.model.residual.base import Variant, register


class ResiDual(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, s_BT2D, branch, norm, layer, sub):
    x, d = s_BT2D[:, :, 0], s_BT2D[:, :, 1]
    y = branch(x)
    return jnp.stack([norm(x + y), d + y], axis=2), {"u": x, "f": y}


def _start(cfg, x_BTD):
  return jnp.stack([x_BTD, x_BTD], axis=2)


def _finish(cfg, s_BT2D):
  return s_BT2D[:, :, 0] + make_norm(cfg, "dual_norm")(s_BT2D[:, :, 1])


register(Variant("resi_dual", ResiDual, final_norm=False, start=_start, finish=_finish, roles={"dual_norm": "final"},
                 extra_params=lambda cfg: num_params(cfg, cfg.d_model)))
