"""Reference forms of the model's hot spots: plain jnp, differentiated by autodiff.

This is what a GPU or TPU runs (`model.kernels=auto` off the CPU) and what a reader should read; `xla_cpu.py` holds
forms of the same functions tuned for XLA:CPU, each tested equal to the one here (tests/test_kernels.py).

Every kernel module exports the same five functions:
- `project(x_BTD, w_DX)`: the projection x @ w over the last axis;
- `gelu(x)`: GELU, tanh approximation (Hendrycks & Gimpel 2016);
- `attention(q_BTHK, k_BTHK, v_BTHK)`: causal softmax(q k^T / sqrt(K)) v (Vaswani et al. 2017), softmax in float32;
- `mix_streams(h_BTnD, a_BTnM)`: per-token mixing of n residual streams, out[b,t,m] = sum_j a[b,t,j,m] h[b,t,j]
  (Hyper-Connections, mHC);
- `sinkhorn(logits, iters)`: Sinkhorn-Knopp projection of exp(logits) [..., n, n] towards the doubly-stochastic
  matrices, columns then rows, rows last (mHC Eq. 9, docs/variants.md section 3).
"""
import jax
import jax.numpy as jnp


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
  # The shift guards exp against overflow and cancels in the normalization. Without stop_gradient, the gradient
  # of a max over tied entries comes back NaN.
  m = jnp.exp(logits - jax.lax.stop_gradient(jnp.max(logits, axis=(-2, -1), keepdims=True)))

  def step(_, m):
    m = m / jnp.sum(m, axis=-2, keepdims=True)     # columns
    return m / jnp.sum(m, axis=-1, keepdims=True)  # rows

  return jax.lax.fori_loop(0, iters, step, m)
