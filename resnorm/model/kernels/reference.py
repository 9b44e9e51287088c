"""Reference forms of the model's hot spots: plain jnp, differentiated by autodiff.

This is what a GPU or TPU runs (`model.kernels=auto` off the CPU) and what a reader should read; `xla_cpu.py` holds
forms of the same functions tuned for XLA:CPU, each tested equal to the one here (tests/test_kernels.py).

Every kernel module exports the same seven functions:
- `project(x_BTD, w_DX)`: the projection x @ w over the last axis;
- `gelu(x)`: GELU, tanh approximation (Hendrycks & Gimpel 2016);
- `attention(q_BTHK, k_BTHK, v_BTHK)`: causal softmax(q k^T / sqrt(K)) v (Vaswani et al. 2017), softmax in float32;
- `mix_streams(h_BTnD, a_BTnM)`: per-token mixing of n residual streams, out[b,t,m] = sum_j a[b,t,j,m] h[b,t,j]
  (Hyper-Connections, mHC);
- `sinkhorn(logits, iters)`: Sinkhorn-Knopp projection of exp(logits) [..., n, n] towards the doubly-stochastic
  matrices, columns then rows, rows last (mHC Eq. 9, docs/variants.md section 3);
- `norm_project(x_RD, scale_D, bias_D, w_DK, eps)`: Norm(x) @ w, a LayerNorm (bias given) or RMSNorm (bias None)
  over D in float32 followed by a projection to a few features, as Hyper-Connections' dynamic weights (Eq. 10-11)
  read the streams;
- `slot_weighted(buf_SBTD, w_CSBT)`: out[c] = sum_s w[c, s] buf[s], float32 [C, B, T, D], the weighted reads of
  the depth store (resnorm.model.depth_store: Attention Residuals Eq. 4, MUDDFormer Eqs. 3-5, DenseFormer's DWA).
  Weights are slot-major, per token [C, S, B, T] or shared [C, S, 1, 1]. A custom VJP in both sets: the store's
  layer scan requires that a read keep nothing store-sized but the store itself.
"""
import jax
import jax.numpy as jnp

from resnorm.model import norms


def project(x_BTD: jax.Array, w_DX: jax.Array) -> jax.Array:
  return jnp.einsum("btd,dx->btx", x_BTD, w_DX)


def gelu(x: jax.Array) -> jax.Array:
  return jax.nn.gelu(x, approximate=True)


def attention(q_BTHK: jax.Array, k_BTHK: jax.Array, v_BTHK: jax.Array) -> jax.Array:
  # cuDNN flash attention on GPU where it applies, XLA elsewhere; the same function either way.
  return jax.nn.dot_product_attention(q_BTHK, k_BTHK, v_BTHK, is_causal=True)


def mix_streams(h_BTnD: jax.Array, a_BTnM: jax.Array) -> jax.Array:
  return jnp.einsum("btnd,btnm->btmd", h_BTnD, a_BTnM.astype(h_BTnD.dtype))


def sinkhorn(logits: jax.Array, iters: int) -> jax.Array:
  # m <- m / column sums, m <- m / row sums, `iters` times, on m = exp(logits). The first round runs in the log
  # domain (logsumexp): done on exp(logits) directly, a column whose logits all sit ~80 below the largest one sums
  # to a float32 zero (NaN gradient at 80, NaN forward at ~100; mHC's dynamic logits reach that at lr 3e-2). After
  # it every row sums to 1 and every column to at least 1/n, and each later division is by a sum in [1/n, n].
  l = logits - jax.nn.logsumexp(logits, axis=-2, keepdims=True)
  m = jnp.exp(l - jax.nn.logsumexp(l, axis=-1, keepdims=True))

  def step(_, m):
    m = m / jnp.sum(m, axis=-2, keepdims=True)     # columns
    return m / jnp.sum(m, axis=-1, keepdims=True)  # rows

  return jax.lax.fori_loop(0, iters - 1, step, m)


def norm_project(x_RD: jax.Array, scale_D: jax.Array, bias_D, w_DK: jax.Array, eps: float) -> jax.Array:
  bias = None if bias_D is None else bias_D[None]
  return norms.normalize(x_RD.astype(jnp.float32), scale_D[None], bias, eps) @ w_DK


def slot_weight_grad(d_w_CSBT: jax.Array, w_CSBT: jax.Array) -> jax.Array:
  """The weights' cotangent in their own shape: summed over tokens where the weights are shared ([C, S, 1, 1])."""
  if w_CSBT.shape[2:] != d_w_CSBT.shape[2:]:
    d_w_CSBT = jnp.sum(d_w_CSBT, axis=(2, 3), keepdims=True)
  return d_w_CSBT.astype(w_CSBT.dtype)


@jax.custom_vjp
def slot_weighted(buf_SBTD: jax.Array, w_CSBT: jax.Array) -> jax.Array:
  # broadcast multiplies summed over the major slot axis: the form the TPU compiler's memory plan kept smallest at
  # 96 layers (docs/scaling.md)
  v, w = buf_SBTD.astype(jnp.float32), w_CSBT.astype(jnp.float32)
  return jnp.stack([jnp.sum(w[c, ..., None] * v, axis=0) for c in range(w.shape[0])])


def _slot_weighted_fwd(buf_SBTD, w_CSBT):
  return slot_weighted(buf_SBTD, w_CSBT), (buf_SBTD, w_CSBT)


def _slot_weighted_bwd(res, ct_CBTD):
  buf_SBTD, w_CSBT = res
  v, w, ct = buf_SBTD.astype(jnp.float32), w_CSBT.astype(jnp.float32), ct_CBTD.astype(jnp.float32)
  d_buf = sum(w[c, ..., None] * ct[c][None] for c in range(w.shape[0]))
  d_w = jnp.stack([jnp.sum(v * ct[c][None], axis=-1) for c in range(w.shape[0])])
  return d_buf.astype(buf_SBTD.dtype), slot_weight_grad(d_w, w_CSBT)


slot_weighted.defvjp(_slot_weighted_fwd, _slot_weighted_bwd)
