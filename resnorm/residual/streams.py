"""Per-token mixing of the n residual streams, shared by Hyper-Connections and mHC.

    out[b, t, m] = sum_j a[b, t, j, m] * h[b, t, j]        (h_BTnD, a_BTnM -> out_BTMD)

This is einsum("btnd,btnm->btmd"): a batched matmul of (n x M) by (n x D) per token. XLA:CPU runs such a dot,
batched over every token with contractions of size n = 4, as a naive loop: 3.7-4.0 ms forward at the peer shape
(B 16, T 128, n 4, D 128), 45 ms per step per sublayer kind. Written as n broadcast multiply-adds it is one fused
elementwise pass, 0.3 ms. The VJP keeps that form for dh (n x M multiply-adds) and leaves only da, a reduction
over D, to a batched dot (docs/performance.md).
"""
import jax
import jax.numpy as jnp


def _weighted_sum(w, x_BTkD, k_axis):
  """sum_k w[.., k, ..] x[b, t, k] -> [B, T, M, D], as k broadcast multiply-adds; `k_axis` (2 or 3) is the axis
  of the [B, T, ., .] weights that k indexes, the other one is M."""
  terms = [jax.lax.index_in_dim(w, k, k_axis, keepdims=False)[..., None] * x_BTkD[:, :, k, None, :]
           for k in range(x_BTkD.shape[2])]
  return sum(terms[1:], terms[0])


@jax.custom_vjp
def mix_streams(h_BTnD: jax.Array, a_BTnM: jax.Array) -> jax.Array:
  """einsum("btnd,btnm->btmd", h, a) in the same dtype as h, computed as n multiply-adds."""
  return _weighted_sum(a_BTnM.astype(h_BTnD.dtype), h_BTnD, k_axis=2)


def _mix_fwd(h, a):
  return mix_streams(h, a), (h, a)


def _mix_bwd(res, g_BTMD):
  h, a = res
  dh = _weighted_sum(a.astype(g_BTMD.dtype), g_BTMD, k_axis=3)  # sum_m a[.., n, m] g[.., m]
  da = jnp.einsum("btnd,btmd->btnm", h, g_BTMD, preferred_element_type=jnp.float32)
  return dh.astype(h.dtype), da.astype(a.dtype)


mix_streams.defvjp(_mix_fwd, _mix_bwd)
