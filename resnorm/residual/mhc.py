"""Manifold-Constrained Hyper-Connections (Xie et al., DeepSeek, arXiv 2512.24880 v2), Eq. 3 and 7-9.

    x' = RMSNorm(vec(x))                              over all n*C features, float32, no learned weight (absorbed
                                                      into phi, as in the fused form Eq. 14-19)
    H_pre  = sigmoid(a_pre  x' phi_pre  + b_pre)      [n]
    H_post = 2 sigmoid(a_post x' phi_post + b_post)   [n]
    H_res  = SinkhornKnopp(a_res mat(x' phi_res) + b_res)   [n, n], doubly stochastic
    x <- H_res x + H_post^T F(N(H_pre x))

Coefficients are computed in float32. Sinkhorn: M_0 = exp(logits), then column- and row-normalize
`model.mhc.sinkhorn_iters` times (paper: 20), rows last, so row sums are exact and column sums approximate.
Init (Table 5 / MaxText `mhc.py`): a = `model.mhc.alpha_init` (0.01), b = 0 (plus `model.mhc.b_res_diag` * I on
b_res). The paper does not state how phi and b are initialized; `model.mhc.sym_break` chooses how the n identical
streams are told apart: `random_phi` (phi ~ normal(1/sqrt(nC)), as MaxText) or `onehot` (phi = 0,
b_pre = e_{k mod n}, as HC). With a = 0 the model equals Pre-LN up to the norms' eps.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.errors import check
from resnorm.residual.base import Variant, register
from resnorm.residual.streams import mix_streams


def _sum_leading(m: jax.Array, axis: int) -> jax.Array:
  """Sum over a short leading axis as explicit adds: on XLA:CPU one fused elementwise pass, where a reduce over a
  trailing axis of size n becomes a library call per Sinkhorn iteration."""
  parts = [jax.lax.index_in_dim(m, i, axis, keepdims=True) for i in range(m.shape[axis])]
  return sum(parts[1:], parts[0])


def sinkhorn(logits: jax.Array, iters: int) -> jax.Array:
  """Projects exp(logits) [..., n, n] towards the doubly-stochastic matrices; the last step normalizes rows."""
  # Iterates in an [n, n, ...] layout (3x faster forward plus backward on XLA:CPU than over the trailing axes).
  l_nn = jnp.moveaxis(logits, (-2, -1), (0, 1))
  # The shift only guards exp against overflow and cancels in the normalization; without stop_gradient, the
  # gradient of max over tied entries came back NaN (measured: mHC at lr 1e-2, second step).
  m = jnp.exp(l_nn - jax.lax.stop_gradient(jnp.max(l_nn, axis=(0, 1), keepdims=True)))

  def step(_, m):
    m = m / _sum_leading(m, 0)     # columns
    return m / _sum_leading(m, 1)  # rows

  return jnp.moveaxis(jax.lax.fori_loop(0, iters, step, m), (0, 1), (-2, -1))


class ManifoldHyperConnection(nn.Module):
  cfg: object

  @nn.compact
  def __call__(self, h_BTnD, branch, norm, layer, sub):
    mc, dt = self.cfg.mhc, h_BTnD.dtype
    b, t, n, d = h_BTnD.shape
    k = n * n + 2 * n
    if mc.sym_break == "random_phi":
      phi_init = nn.initializers.normal((n * d) ** -0.5)
      b_pre_init = nn.initializers.zeros
    else:
      phi_init = nn.initializers.zeros
      b_pre_init = lambda _rng, shape: jax.nn.one_hot(sub % n, n, dtype=jnp.float32)
    phi = self.param("phi", nn.with_logical_partitioning(phi_init, ("embed", None)), (n * d, k))
    b_pre = self.param("b_pre", b_pre_init, (n,))
    b_post = self.param("b_post", nn.initializers.zeros, (n,))
    b_res = self.param("b_res", lambda _rng, shape: mc.b_res_diag * jnp.eye(n, dtype=jnp.float32), (n, n))
    a = [self.param(f"a_{name}", nn.initializers.constant(mc.alpha_init), ()) for name in ("pre", "post", "res")]

    x = h_BTnD.reshape(b, t, n * d).astype(jnp.float32)
    x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + mc.eps)
    proj_BTk = jnp.einsum("btf,fk->btk", x, phi)
    h_pre = jax.nn.sigmoid(a[0] * proj_BTk[..., :n] + b_pre[None, None])
    h_post = 2.0 * jax.nn.sigmoid(a[1] * proj_BTk[..., n:2 * n] + b_post[None, None])
    h_res = sinkhorn(a[2] * proj_BTk[..., 2 * n:].reshape(b, t, n, n) + b_res[None, None], mc.sinkhorn_iters)

    # One pass over the streams for both reads: column 0 is H_pre, columns 1..n are H_res^T.
    mix_BTmD = mix_streams(h_BTnD, jnp.concatenate([h_pre[..., None], jnp.swapaxes(h_res, -1, -2)], axis=-1))
    u_BTD = mix_BTmD[:, :, 0]
    y_BTD = branch(norm(u_BTD))
    out = mix_BTmD[:, :, 1:] + h_post.astype(dt)[..., None] * y_BTD[:, :, None]
    return out, {"u": u_BTD, "f": y_BTD, "mix": h_res}


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
  check(cfg.mhc.sym_break in ("random_phi", "onehot"),
        f"model.mhc.sym_break={cfg.mhc.sym_break!r} is unknown; known: onehot, random_phi")


register(Variant(
    "mhc", ManifoldHyperConnection, streams=lambda cfg: cfg.mhc.n, decay=("phi",),
    extra_params=lambda cfg: 2 * cfg.num_layers * mhc_params_per_sublayer(cfg),
    extra_flops=lambda cfg: 2 * cfg.num_layers * mhc_flops_per_sublayer(cfg), check=_check_mhc,
    doc="x <- H_res x + H_post^T F(N(H_pre x)); H_res doubly stochastic (Sinkhorn)"))
