"""Reference forms of the model's hot spots: plain jnp, differentiated by autodiff.

This is what a GPU or TPU runs (`model.kernels=auto` off the CPU) and what a reader should read; `xla_cpu.py` holds
forms of the same functions tuned for XLA:CPU, each tested equal to the one here (tests/test_kernels.py).

Every kernel module exports the same six functions:
- `project(x_BTD, w_DX)`: the projection x @ w over the last axis;
- `gelu(x)`: GELU, tanh approximation (Hendrycks & Gimpel 2016);
- `attention(q_BTHK, k_BTHK, v_BTHK)`: causal softmax(q k^T / sqrt(K)) v (Vaswani et al. 2017), softmax in float32;
- `mix_streams(h_BTnD, a_BTnM)`: per-token mixing of n residual streams, out[b,t,m] = sum_j a[b,t,j,m] h[b,t,j]
  (Hyper-Connections, mHC);
- `sinkhorn(logits, iters)`: Sinkhorn-Knopp projection of exp(logits) [..., n, n] towards the doubly-stochastic
  matrices, columns then rows, rows last (mHC Eq. 9, docs/variants.md section 3);
- `norm_project(x_RD, scale_D, bias_D, w_DK, eps)`: Norm(x) @ w, a LayerNorm (bias given) or RMSNorm (bias None)
  over D in float32 followed by a projection to a few features, as Hyper-Connections' dynamic weights (Eq. 10-11)
  read the streams.
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
