"""The same seven functions as `reference.py`, in forms XLA:CPU runs faster (`model.kernels=xla_cpu`, the `auto`
choice on the CPU). Each equals its reference in value and gradient (tests/test_kernels.py); why each form is
faster, with the measurements, is in docs/performance.md.

- `project`: a 2-D [N, D] x [D, X] matmul over the flattened tokens (a rank-3 einsum's weight gradient contracts
  two axes, and XLA:CPU then transposes what feeds it into a strided copy).
- `gelu`: a custom VJP that keeps only its input (autodiff of jax.nn.gelu keeps five [N, F] intermediates, which
  nn.scan stacks per layer).
- `attention`: heads-major [B, H, T, K] layout, causal by query blocks from T = 128 (the all-masked upper-right of
  the scores is never computed), and a closed-form backward.
- `mix_streams`: n broadcast multiply-adds instead of a batched matmul with a contraction of size n, which XLA:CPU
  runs as a naive loop; the VJP keeps that form for dh.
- `sinkhorn`: iterates in an [n, n, ...] layout with the sums as explicit adds.
- `norm_project`: a closed-form backward that keeps only the per-row statistics and never forms the normalized
  rows' gradient: with K (a few) output features, the two row means of the norm's backward are K-term dot products
  of small arrays.
- `slot_weighted`: the sum over slots unrolled into one elementwise sum, and each slot's weight gradient a reduce
  over its own features (XLA:CPU runs a reduce over the major slot axis 10-20x slower, and in the backward it fused
  the reduce's producers into every slot's term).
"""
import functools

import jax
import jax.numpy as jnp

from resnorm.model.kernels import reference

Array = jax.Array


def project(x_BTD: Array, w_DX: Array) -> Array:
  return (x_BTD.reshape(-1, x_BTD.shape[-1]) @ w_DX).reshape(x_BTD.shape[:-1] + (w_DX.shape[-1],))


# ---- GELU ----------------------------------------------------------------------------------------------------


@jax.custom_vjp
def gelu(x: Array) -> Array:
  return reference.gelu(x)


def _gelu_fwd(x):
  return gelu(x), x


def _gelu_bwd(x, g):
  c, a = (2.0 / jnp.pi) ** 0.5, 0.044715
  x32 = x.astype(jnp.float32)
  th = jnp.tanh(c * (x32 + a * x32 ** 3))
  dx = 0.5 * (1.0 + th) + 0.5 * x32 * (1.0 - th * th) * c * (1.0 + 3.0 * a * x32 * x32)
  return ((g.astype(jnp.float32) * dx).astype(g.dtype),)


gelu.defvjp(_gelu_fwd, _gelu_bwd)


# ---- causal attention by query blocks --------------------------------------------------------------------------


def query_blocks(t: int) -> list[tuple[int, int]]:
  """Query rows [lo, hi) of each block: rows lo..hi-1 see keys 0..hi-1 only. One block below 128 rows, where the
  extra kernels cost more than the skipped work saves."""
  nb = min(8, t // 32) if t >= 128 else 1
  c = -(-t // nb)
  return [(lo, min(lo + c, t)) for lo in range(0, t, c)]


def _causal_softmax(q_BHCK: Array, k_BHSK: Array, lo: int) -> Array:
  """Softmax over the keys of query rows lo.. (C of them) against S = lo + C keys, the later ones masked."""
  c, s = q_BHCK.shape[2], k_BHSK.shape[2]
  scores = jnp.einsum("bhtk,bhsk->bhts", q_BHCK, k_BHSK, preferred_element_type=jnp.float32)
  causal = jnp.arange(s)[None, :] <= jnp.arange(lo, lo + c)[:, None]
  return jax.nn.softmax(jnp.where(causal[None, None], scores, jnp.finfo(jnp.float32).min), axis=-1)


@jax.custom_vjp
def _attend(q_BHTK: Array, k_BHSK: Array, v_BHSK: Array) -> Array:
  """softmax(q k^T + causal mask) v for a pre-scaled q, heads-major, by query blocks."""
  return _attend_fwd(q_BHTK, k_BHSK, v_BHSK)[0]


def _attend_fwd(q, k, v):
  ps, outs = [], []
  for lo, hi in query_blocks(q.shape[2]):
    p_BHCS = _causal_softmax(q[:, :, lo:hi], k[:, :, :hi], lo)
    outs.append(jnp.einsum("bhts,bhsk->bhtk", p_BHCS.astype(v.dtype), v[:, :, :hi]))
    ps.append(p_BHCS)
  o = outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=2)
  return o, (q, k, v, tuple(ps), o)


def _attend_bwd(res, do):
  # The softmax backward in closed form, dS = P * (dP - rowsum(dO * O)) (FlashAttention, Dao et al. 2022): it keeps
  # P, one [B, H, C, S] array per block, instead of autodiff's scores, mask, exponentials and sums. dV and dK
  # contract over the query axis, the major axis of P and dS; asked for as [.., K, S] and transposed back.
  q, k, v, ps, o = res
  dt = v.dtype
  rowsum = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1, keepdims=True)
  t = q.shape[2]
  dqs, dk, dv = [], None, None
  for (lo, hi), p in zip(query_blocks(t), ps):
    do_c, q_c = do[:, :, lo:hi], q[:, :, lo:hi]
    dp = jnp.einsum("bhtk,bhsk->bhts", do_c, v[:, :, :hi], preferred_element_type=jnp.float32)
    ds = (p * (dp - rowsum[:, :, lo:hi])).astype(dt)
    dqs.append(jnp.einsum("bhts,bhsk->bhtk", ds, k[:, :, :hi]))
    dk = _add_keys(dk, jnp.swapaxes(jnp.einsum("bhtk,bhts->bhks", q_c, ds), -1, -2), t)
    dv = _add_keys(dv, jnp.swapaxes(jnp.einsum("bhtk,bhts->bhks", do_c, p.astype(dt)), -1, -2), t)
  return (dqs[0] if len(dqs) == 1 else jnp.concatenate(dqs, axis=2)), dk, dv


def _add_keys(acc, x_BHSK, t):
  """acc + x, x covering the first S of t keys."""
  if x_BHSK.shape[2] < t:
    x_BHSK = jnp.pad(x_BHSK, ((0, 0), (0, 0), (0, t - x_BHSK.shape[2]), (0, 0)))
  return x_BHSK if acc is None else acc + x_BHSK


_attend.defvjp(_attend_fwd, _attend_bwd)


def attention(q_BTHK: Array, k_BTHK: Array, v_BTHK: Array) -> Array:
  scale = q_BTHK.shape[-1] ** -0.5
  q, k, v = (jnp.swapaxes(a, 1, 2) for a in (q_BTHK * jnp.asarray(scale, q_BTHK.dtype), k_BTHK, v_BTHK))
  return jnp.swapaxes(_attend(q, k, v), 1, 2)


# ---- stream mixing -----------------------------------------------------------------------------------------------


def _weighted_sum(w, x_BTkD, k_axis):
  """sum_k w[.., k, ..] x[b, t, k] -> [B, T, M, D], as k broadcast multiply-adds; `k_axis` (2 or 3) is the axis
  of the [B, T, ., .] weights that k indexes, the other one is M."""
  terms = [jax.lax.index_in_dim(w, k, k_axis, keepdims=False)[..., None] * x_BTkD[:, :, k, None, :]
           for k in range(x_BTkD.shape[2])]
  return sum(terms[1:], terms[0])


@jax.custom_vjp
def mix_streams(h_BTnD: Array, a_BTnM: Array) -> Array:
  return _weighted_sum(a_BTnM.astype(h_BTnD.dtype), h_BTnD, k_axis=2)


def _mix_fwd(h, a):
  return mix_streams(h, a), (h, a)


def _mix_bwd(res, g_BTMD):
  h, a = res
  dh = _weighted_sum(a.astype(g_BTMD.dtype), g_BTMD, k_axis=3)  # sum_m a[.., n, m] g[.., m]
  da = jnp.einsum("btnd,btmd->btnm", h, g_BTMD, preferred_element_type=jnp.float32)
  return dh.astype(h.dtype), da.astype(a.dtype)


mix_streams.defvjp(_mix_fwd, _mix_bwd)


# ---- Sinkhorn ----------------------------------------------------------------------------------------------------


def _sum_leading(m: Array, axis: int) -> Array:
  """Sum over a short leading axis as explicit adds: one fused elementwise pass on XLA:CPU."""
  parts = [jax.lax.index_in_dim(m, i, axis, keepdims=True) for i in range(m.shape[axis])]
  return sum(parts[1:], parts[0])


def _lse_leading(l: Array, axis: int) -> Array:
  """logsumexp over a short leading axis as explicit elementwise ops (see _sum_leading); the max is a constant to
  the gradient, as in jax.nn.logsumexp."""
  parts = [jax.lax.index_in_dim(l, i, axis, keepdims=True) for i in range(l.shape[axis])]
  mx = parts[0]
  for p in parts[1:]:
    mx = jnp.maximum(mx, p)
  mx = jax.lax.stop_gradient(mx)
  return mx + jnp.log(sum((jnp.exp(p - mx) for p in parts[1:]), jnp.exp(parts[0] - mx)))


def sinkhorn(logits: Array, iters: int) -> Array:
  """The reference's Sinkhorn (first round in the log domain) in an [n, n, ...] layout: reductions over short
  leading axes."""
  l_nn = jnp.moveaxis(logits, (-2, -1), (0, 1))
  l_nn = l_nn - _lse_leading(l_nn, 0)
  m = jnp.exp(l_nn - _lse_leading(l_nn, 1))

  def step(_, m):
    m = m / _sum_leading(m, 0)     # columns
    return m / _sum_leading(m, 1)  # rows

  return jnp.moveaxis(jax.lax.fori_loop(0, iters - 1, step, m), (0, 1), (-2, -1))


# ---- Norm(x) @ w with few outputs ----------------------------------------------------------------------------------


def _stats(x, centered: bool, eps: float):
  mean = jnp.mean(x, axis=-1, keepdims=True) if centered else jnp.zeros(x.shape[:-1] + (1,), x.dtype)
  return mean, jax.lax.rsqrt(jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True) + eps)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _norm_project(x_RD, scale_D, bias_D, w_DK, centered, eps):
  return _norm_project_fwd(x_RD, scale_D, bias_D, w_DK, centered, eps)[0]


def _norm_project_fwd(x, scale, bias, w, centered, eps):
  mean, r = _stats(x, centered, eps)
  z = ((x - mean) * r * scale[None] + bias[None]) @ w
  return z, (x, scale, bias, w, mean, r, z)


def _norm_project_bwd(centered, eps, res, gz_RK):
  # xhat = (x - mean) r, z = (xhat * scale + bias) @ w. With ws = scale * w, the gradient reaching xhat is
  # gz ws^T, so the norm's two row means are mean_D(gz ws^T) = gz mean_D(ws) and mean_D(xhat * gz ws^T) =
  # gz . (z - bias w) / D: dx = r (gz ws^T - [c1] - xhat c2), with no [R, D] intermediate but the result.
  x, scale, bias, w, mean, r, z = res
  d = x.shape[-1]
  ws_DK = scale[:, None] * w
  c2 = jnp.sum(gz_RK * (z - (bias @ w)[None]), axis=-1, keepdims=True) / d
  c1 = gz_RK @ jnp.mean(ws_DK, axis=0)[:, None] if centered else 0.0
  dx = r * (gz_RK @ ws_DK.T - c1) - (x - mean) * (r * r * c2)
  m_DK = ((x - mean) * r).T @ gz_RK                          # xhat^T gz
  colsum_K = jnp.sum(gz_RK, axis=0)
  dw = scale[:, None] * m_DK + bias[:, None] * colsum_K[None]
  return dx, jnp.sum(w * m_DK, axis=1), (w @ colsum_K) if centered else jnp.zeros_like(bias), dw


_norm_project.defvjp(_norm_project_fwd, _norm_project_bwd)


def norm_project(x_RD: Array, scale_D: Array, bias_D, w_DK: Array, eps: float) -> Array:
  x = x_RD.astype(jnp.float32)
  bias = jnp.zeros_like(scale_D) if bias_D is None else bias_D
  return _norm_project(x, scale_D, bias, w_DK, bias_D is not None, eps)


def _slot_sum(buf_SBTD: Array, w_SBT: Array) -> Array:
  out = w_SBT[0, ..., None] * buf_SBTD[0].astype(jnp.float32)
  for s in range(1, buf_SBTD.shape[0]):
    out = out + w_SBT[s, ..., None] * buf_SBTD[s].astype(jnp.float32)
  return out


@jax.custom_vjp
def slot_weighted(buf_SBTD: Array, w_CSBT: Array) -> Array:
  w = w_CSBT.astype(jnp.float32)
  return jnp.stack([_slot_sum(buf_SBTD, w[c]) for c in range(w.shape[0])])


def _slot_weighted_fwd(buf_SBTD, w_CSBT):
  return slot_weighted(buf_SBTD, w_CSBT), (buf_SBTD, w_CSBT)


def _slot_weighted_bwd(res, ct_CBTD):
  buf_SBTD, w_CSBT = res
  ct, w = ct_CBTD.astype(jnp.float32), w_CSBT.astype(jnp.float32)
  d_buf = sum(w[c, ..., None] * ct[c][None] for c in range(w.shape[0]))
  d_w = jnp.stack([jnp.stack([jnp.sum(buf_SBTD[s].astype(jnp.float32) * ct[c], axis=-1)
                              for s in range(buf_SBTD.shape[0])]) for c in range(w.shape[0])])   # [C, S, B, T]
  return d_buf.astype(buf_SBTD.dtype), reference.slot_weight_grad(d_w, w_CSBT)


slot_weighted.defvjp(_slot_weighted_fwd, _slot_weighted_bwd)
