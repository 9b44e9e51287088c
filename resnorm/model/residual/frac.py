"""Frac-Connections (Zhu et al. 2025, arXiv 2503.14125): Hyper-Connections on fractions of one hidden state.

HC widens the state to n copies of the stream (memory x n). Frac-Connections keep one d-wide state and split it
into m fractions of d/m features, H = h_BTmF (F = d/m, fraction i = features [iF, (i+1)F)), and learn HC's width
and depth connections between the fractions. Per sublayer:

    alpha = [A_m | A_r]            (m x 2m; dynamic adds s_a * tanh(norm(H) W_alpha), per fraction row)
    beta  = B                      (m; dynamic adds s_b * tanh(norm(H) W_beta))
    x_in  = concat_j (sum_i A_m[i, j] H_i)          the branch input, a whole d-vector
    Y     = split_m(F(N(x_in)))                     the branch output, back in fractions
    H'_j  = beta_j Y_j + sum_i A_r[i, j] H_i

norm(H) is the variant's `stream_norm` (model.norm, its statistics over each fraction's F features), W_alpha
[F, 2m] and W_beta [F] start at 0, s_a = s_b = `model.frac_hc.s_alpha`, `s_beta` (0.01 as HC). Init: A_m = A_r =
I, B = 1, so H' = H + F(N(H)) reassembled: Pre-Norm exactly. With m = 1 every matrix is 1 x 1 and the variant is
HC with n = 1, param for param (tested). lucidrains/hyper-connections' `num_fracs` orders its static matrix so
that its default init routes fractions unevenly (the branch input repeats fraction 0); resnorm keeps the paper's
identity-leaning init instead (docs/variants.md). Static matrices are not weight-decayed; the dynamic W are.
"""
import flax.linen as nn
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.norms import make_norm, num_params
from resnorm.model.residual.base import Variant, register, stream_spread


def _static_alpha_init(m):
  def init(_rng, shape):
    eye = jnp.eye(m, dtype=jnp.float32)
    return jnp.concatenate([eye, eye], axis=1)
  return init


class FracConnection(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, x_BTD, branch, norm, layer, sub):
    fc, dt = self.cfg.frac_hc, x_BTD.dtype
    m = fc.m
    b, t, d = x_BTD.shape
    f = d // m
    h_BTmF = x_BTD.reshape(b, t, m, f)
    alpha = self.param("static_alpha", _static_alpha_init(m), (m, 2 * m))
    beta = self.param("static_beta", nn.initializers.ones, (m,))
    if fc.dynamic:
      act = jnp.tanh if fc.tanh else (lambda z: z)
      hbar = make_norm(self.cfg, "stream_norm")(h_BTmF).astype(jnp.float32)
      w_alpha = self.param("w_alpha", nn.initializers.zeros, (f, 2 * m))
      w_beta = self.param("w_beta", nn.initializers.zeros, (f,))
      s_alpha = self.param("s_alpha", nn.initializers.constant(fc.s_alpha), ())
      s_beta = self.param("s_beta", nn.initializers.constant(fc.s_beta), ())
      # Both dynamic terms from one [B*T*m, F] x [F, 2m+1] matmul.
      w = jnp.concatenate([w_alpha, w_beta[:, None]], axis=1)
      dyn = act(hbar.reshape(-1, f) @ w).reshape(b, t, m, 2 * m + 1)
      alpha = alpha[None, None] + s_alpha * dyn[..., : 2 * m]                                      # [B,T,m,2m]
      beta = beta[None, None] + s_beta * dyn[..., 2 * m]                                           # [B,T,m]
      mix_BTkF = jnp.einsum("btif,btik->btkf", h_BTmF, alpha.astype(dt))
      beta_BTm1 = beta.astype(dt)[..., None]
    else:
      mix_BTkF = jnp.einsum("btif,ik->btkf", h_BTmF, alpha.astype(dt))
      beta_BTm1 = beta.astype(dt).reshape(1, 1, m, 1)
    x_in_BTD = mix_BTkF[:, :, :m].reshape(b, t, d)
    y_BTD = branch(norm(x_in_BTD))
    out_BTmF = mix_BTkF[:, :, m:] + beta_BTm1 * y_BTD.reshape(b, t, m, f)
    h_res = jnp.swapaxes(alpha[..., m:], -1, -2)                                                 # A_r^T
    h_res = jnp.broadcast_to(h_res.reshape((1,) * (4 - h_res.ndim) + h_res.shape), (b, t, m, m))
    return out_BTmF.reshape(b, t, d), {"u": x_in_BTD, "f": y_BTD, "mix": h_res, "spread": stream_spread(h_BTmF)}


def frac_params_per_sublayer(cfg) -> int:
  """Static: m x 2m + m; dynamic adds |stream norm| + F(2m+1) + 2 (F = d/m)."""
  m = cfg.frac_hc.m
  count = 2 * m * m + m
  if cfg.frac_hc.dynamic:
    count += num_params(cfg, cfg.d_model // m) + (cfg.d_model // m) * (2 * m + 1) + 2
  return count


def frac_flops_per_sublayer(cfg) -> int:
  """Forward FLOPs per token: the 2m-column mix of m fractions (2 m 2m F = 4 m d) and the beta write-back (2 d);
  dynamic adds norm(H) @ [W_a | W_b] (2 m F (2m+1) = 2 d (2m+1))."""
  m, d = cfg.frac_hc.m, cfg.d_model
  flops = 4 * m * d + 2 * d
  if cfg.frac_hc.dynamic:
    flops += 2 * d * (2 * m + 1)
  return flops


def _check(cfg):
  m = cfg.frac_hc.m
  check(m >= 1, f"model.frac_hc.m={m} must be >= 1")
  check(cfg.d_model % m == 0, f"model.frac_hc.m={m} must divide model.d_model={cfg.d_model}")


register(Variant(
    "frac_hc", FracConnection, decay=("w_alpha", "w_beta"),
    roles={"static_alpha": "vector", "static_beta": "vector", "s_alpha": "vector", "s_beta": "vector",
           "w_alpha": "readout", "w_beta": "readout"},
    extra_params=lambda cfg: 2 * cfg.num_layers * frac_params_per_sublayer(cfg),
    extra_flops=lambda cfg: 2 * cfg.num_layers * frac_flops_per_sublayer(cfg), check=_check))
