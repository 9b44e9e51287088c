"""Manifold-Constrained Hyper-Connections (Xie et al., DeepSeek, arXiv 2512.24880 v2), Eq. 3 and 7-9.

    x' = RMSNorm(vec(x))                              over all n*C features, float32, no learned weight (absorbed
                                                      into phi, as in the fused form Eq. 14-19)
    H_pre  = sigmoid(a_pre  x' phi_pre  + b_pre)      [n]
    H_post = 2 sigmoid(a_post x' phi_post + b_post)   [n]
    H_res  = SinkhornKnopp(a_res mat(x' phi_res) + b_res)   [n, n], doubly stochastic
    x <- H_res x + H_post^T F(N(H_pre x))

Coefficients are computed in float32. Sinkhorn: M_0 = exp(logits), then column- and row-normalize
`model.mhc.sinkhorn_iters` times (paper: 20), rows last, so row sums are exact and column sums approximate.
a = `model.mhc.alpha_init` (Table 5: 0.01); b_post = 0.

The paper does not state how b and phi start (docs/variants.md section 3). `model.mhc.init` chooses:
- `identity` (default): b_res = `res_logit` * I, so H_res starts near the identity (diagonal
  e^r / (e^r + n - 1): 0.948 at r = 4, n = 4), the identity mapping the paper sets out to restore; b_pre =
  `pre_logit` * (2 e_{k mod n} - 1) (k the sublayer index), so sublayer k reads mostly stream k (H_pre 0.982 / 0.018
  at 4), as HC's one-hot A_m does; phi = 0. The public PyTorch implementations also start near the identity
  (lucidrains/hyper-connections: Sinkhorn(exp(I)); tokenbender/mHC: off-diagonal logits -8). With phi = 0 the model
  equals Pre-LN at init exactly (up to the norms' eps): the streams are identical copies, H_res rows sum to 1, and
  the block norm absorbs the scale of H_pre x.
- `uniform`: b = 0 and phi ~ normal(1/sqrt(nC)), as MaxText's `mhc.py`: H_res = J/n at init. While the streams are
  identical, the gradient on b_res cancels in the row normalization, H_res stays near J/n, and every sublayer
  replaces each stream by the streams' mean: the streams collapse into one (measured in docs/variants.md).
`stream_spread` in the diagnostics shows which of the two a run is in.
"""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.model import kernels
from resnorm.core.errors import check
from resnorm.model.residual.base import Variant, register, stream_spread

INITS = ("identity", "uniform")


# The roles of the coefficient params, shared by every variant on this machinery (mHC-lite, KromHC).
ROLES = {"phi": "readout", "b_pre": "vector", "b_post": "vector", "b_res": "vector", "a_pre": "vector",
         "a_post": "vector", "a_res": "vector"}


def one_hot_pre(mc, n: int, sub):
  """b_pre's identity init: +pre_logit for stream `sub` mod n, -pre_logit for the others."""
  return lambda _rng, shape: mc.pre_logit * (2.0 * jax.nn.one_hot(sub % n, n, dtype=jnp.float32) - 1.0)


def _inits(mc, n: int, d: int, sub):
  """(phi, b_pre, b_res) initializers for `model.mhc.init`."""
  if mc.init == "uniform":
    return nn.initializers.normal((n * d) ** -0.5), nn.initializers.zeros, nn.initializers.zeros
  b_pre = one_hot_pre(mc, n, sub)
  b_res = lambda _rng, shape: mc.res_logit * jnp.eye(n, dtype=jnp.float32)
  return nn.initializers.zeros, b_pre, b_res


class ManifoldHyperConnection(nn.Module):
  """mHC. mHC-lite (resnorm.model.residual.mhc_lite) subclasses it, replacing the H_res parameterization (the three
  methods below) and reading its own config section."""
  cfg: object
  section = "mhc"  # the config node model.<section> this variant reads

  def _res_shape(self, n: int) -> tuple:
    return (n, n)

  def _inits(self, mc, n: int, d: int, sub):
    return _inits(mc, n, d, sub)

  def _h_res(self, kern, mc, logits_BTr, b_res):
    """H_res [B,T,n,n] from a_res x' phi_res [B,T,n*n] and b_res: the Sinkhorn projection (Eq. 9)."""
    b, t, n = logits_BTr.shape[0], logits_BTr.shape[1], b_res.shape[0]
    return kern.sinkhorn(logits_BTr.reshape(b, t, n, n) + b_res[None, None], mc.sinkhorn_iters)

  @nn.compact
  def __call__(self, h_BTnD, branch, norm, layer, sub):
    mc, dt, kern = self.cfg[self.section], h_BTnD.dtype, kernels.get(self.cfg.kernels)
    b, t, n, d = h_BTnD.shape
    res_shape = self._res_shape(n)
    k = math.prod(res_shape) + 2 * n
    phi_init, b_pre_init, b_res_init = self._inits(mc, n, d, sub)
    phi = self.param("phi", nn.with_logical_partitioning(phi_init, ("embed", None)), (n * d, k))
    b_pre = self.param("b_pre", b_pre_init, (n,))
    b_post = self.param("b_post", nn.initializers.zeros, (n,))
    b_res = self.param("b_res", b_res_init, res_shape)
    a = [self.param(f"a_{name}", nn.initializers.constant(mc.alpha_init), ()) for name in ("pre", "post", "res")]

    x = h_BTnD.reshape(b, t, n * d).astype(jnp.float32)
    x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + mc.eps)
    proj_BTk = jnp.einsum("btf,fk->btk", x, phi)
    h_pre = jax.nn.sigmoid(a[0] * proj_BTk[..., :n] + b_pre[None, None])
    h_post = 2.0 * jax.nn.sigmoid(a[1] * proj_BTk[..., n:2 * n] + b_post[None, None])
    h_res = self._h_res(kern, mc, a[2] * proj_BTk[..., 2 * n:], b_res)

    # One pass over the streams for both reads: column 0 is H_pre, columns 1..n are H_res^T.
    mix_BTmD = kern.mix_streams(h_BTnD, jnp.concatenate([h_pre[..., None], jnp.swapaxes(h_res, -1, -2)], axis=-1))
    u_BTD = mix_BTmD[:, :, 0]
    y_BTD = branch(norm(u_BTD))
    out = mix_BTmD[:, :, 1:] + h_post.astype(dt)[..., None] * y_BTD[:, :, None]
    return out, {"u": u_BTD, "f": y_BTD, "mix": h_res, "spread": stream_spread(h_BTnD)}


def mhc_params_per_sublayer(cfg) -> int:
  n = cfg.mhc.n
  k = n * n + 2 * n
  return n * cfg.d_model * k + k + 3


def mhc_flops_per_sublayer(cfg) -> int:
  """Forward FLOPs per token: x' phi, H_pre x, H_res x, H_post^T y, and the Sinkhorn iterations."""
  n, d = cfg.mhc.n, cfg.d_model
  return 2 * n * d * (n * n + 2 * n) + 2 * n * d + 2 * n * n * d + 2 * n * d + 4 * n * n * cfg.mhc.sinkhorn_iters


def _check_mhc(cfg):
  check(cfg.mhc.n >= 1, f"model.mhc.n={cfg.mhc.n} must be >= 1")
  check(cfg.mhc.sinkhorn_iters >= 1, f"model.mhc.sinkhorn_iters={cfg.mhc.sinkhorn_iters} must be >= 1")
  check(cfg.mhc.init in INITS, f"model.mhc.init={cfg.mhc.init!r} is unknown; known: {', '.join(INITS)}")


register(Variant(
    "mhc", ManifoldHyperConnection, streams=lambda cfg: cfg.mhc.n, decay=("phi",),
    roles=ROLES,
    extra_params=lambda cfg: 2 * cfg.num_layers * mhc_params_per_sublayer(cfg),
    extra_flops=lambda cfg: 2 * cfg.num_layers * mhc_flops_per_sublayer(cfg), check=_check_mhc))
