"""Hyper-Connections (Zhu et al., ICLR 2025, arXiv 2409.19606), static (SHC) and dynamic (DHC).

The state is H = h_BTnD, n copies of the stream (expansion rate n = `model.hc.n`). Per sublayer (Alg. 2):

    alpha = [A_m | A_r]            (n x (n+1); DHC adds s_a * tanh(norm(H) W_alpha), Eq. 11-12)
    beta  = B                      (n; DHC adds s_b * tanh(norm(H) W_beta), Eq. 10)
    mix   = alpha^T H              -> h_0 = mix[0] (branch input), mix[1:] = A_r^T H (residual streams)
    H'    = beta^T F(N(h_0)) + A_r^T H

Paper init (Eq. 14): W = 0, B = 1, A_m = e_{k mod n} (k the sublayer index), A_r = I, s_a = s_b = 0.01, so the
model equals Pre-LN at init (streams identical, the final sum is n x the Pre-LN state, the final norm cancels n).
Static matrices are not weight-decayed; the dynamic W are. Flags: `model.hc.dynamic`, `model.hc.tanh`,
`model.hc.s_alpha`, `model.hc.s_beta`, and `model.hc.out_init_scale`: the paper's ambiguous "scale the std of the
output projections by sqrt(n)" (factor on attention `o` and MLP `wo` init; 1.0 = off, the default, which keeps the
exact Pre-LN equivalence).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.model import kernels
from resnorm.core.errors import check
from resnorm.model.norms import norm_project, num_params
from resnorm.model.residual.base import Variant, register, stream_spread


def _static_alpha_init(sub, n):
  def init(_rng, shape):
    a_m = jax.nn.one_hot(sub % n, n, dtype=jnp.float32)[:, None]
    return jnp.concatenate([a_m, jnp.eye(n, dtype=jnp.float32)], axis=1)
  return init


class HyperConnection(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, h_BTnD, branch, norm, layer, sub):
    hc, dt, kern = self.cfg.hc, h_BTnD.dtype, kernels.get(self.cfg.kernels)
    n, d = hc.n, h_BTnD.shape[-1]
    alpha = self.param("static_alpha", _static_alpha_init(sub, n), (n, n + 1))
    beta = self.param("static_beta", nn.initializers.ones, (n,))
    if hc.dynamic:
      act = jnp.tanh if hc.tanh else (lambda z: z)
      w_alpha = self.param("w_alpha", nn.with_logical_partitioning(nn.initializers.zeros, ("embed", None)),
                           (d, n + 1))
      w_beta = self.param("w_beta", nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)), (d,))
      s_alpha = self.param("s_alpha", nn.initializers.constant(hc.s_alpha), ())
      s_beta = self.param("s_beta", nn.initializers.constant(hc.s_beta), ())
      # Both dynamic terms from one norm(H) [B*T*n, D] x [D, n+2] projection.
      w = jnp.concatenate([w_alpha, w_beta[:, None]], axis=1)
      dyn = act(norm_project(self.cfg, "stream_norm", h_BTnD, w, kern))
      alpha = alpha[None, None] + s_alpha * dyn[..., : n + 1]                                      # [B,T,n,n+1]
      beta = beta[None, None] + s_beta * dyn[..., n + 1]                                           # [B,T,n]
      mix_BTmD = kern.mix_streams(h_BTnD, alpha)
      beta_BTn1 = beta.astype(dt)[..., None]
    else:
      mix_BTmD = jnp.einsum("btnd,nm->btmd", h_BTnD, alpha.astype(dt))
      beta_BTn1 = beta.astype(dt).reshape(1, 1, n, 1)
    h0_BTD, res_BTnD = mix_BTmD[:, :, 0], mix_BTmD[:, :, 1:]
    y_BTD = branch(norm(h0_BTD))
    out = res_BTnD + beta_BTn1 * y_BTD[:, :, None, :]
    a_r = alpha[..., 1:]
    h_res = jnp.swapaxes(a_r, -1, -2)
    h_res = jnp.broadcast_to(h_res.reshape((1,) * (4 - h_res.ndim) + h_res.shape), h_BTnD.shape[:2] + (n, n))  # H_res = A_r^T
    return out, {"u": h0_BTD, "f": y_BTD, "mix": h_res, "spread": stream_spread(h_BTnD)}


def hc_params_per_sublayer(cfg) -> int:
  """SHC: n(n+2); DHC adds |norm| + d(n+2) + 2 (the paper's count per module)."""
  n = cfg.hc.n
  count = n * (n + 2)
  if cfg.hc.dynamic:
    count += num_params(cfg, cfg.d_model) + cfg.d_model * (n + 2) + 2
  return count


def hc_flops_per_sublayer(cfg) -> int:
  """Forward FLOPs per token: the (n+1)-row mix and the beta-weighted write-back; DHC adds norm(H) @ [W_a | W_b]."""
  n, d = cfg.hc.n, cfg.d_model
  flops = 2 * n * (n + 1) * d + 2 * n * d
  if cfg.hc.dynamic:
    flops += 2 * n * d * (n + 2)
  return flops


def _hc_scales(cfg):
  s = cfg.hc.out_init_scale
  return {"o": s, "wo": s} if s != 1.0 else {}


def _check_hc(cfg):
  check(cfg.hc.n >= 1, f"model.hc.n={cfg.hc.n} must be >= 1")


register(Variant(
    "hc", HyperConnection, streams=lambda cfg: cfg.hc.n, init_scales=_hc_scales, decay=("w_alpha", "w_beta"),
    roles={"static_alpha": "vector", "static_beta": "vector", "s_alpha": "vector", "s_beta": "vector",
           "w_alpha": "readout", "w_beta": "readout"},
    extra_params=lambda cfg: 2 * cfg.num_layers * hc_params_per_sublayer(cfg),
    extra_flops=lambda cfg: 2 * cfg.num_layers * hc_flops_per_sublayer(cfg), check=_check_hc))
