"""Transformer building blocks: norms with float32 statistics, causal attention with RoPE, GELU MLP.

Base weights (embedding, attention, MLP, head) are declared with `base_param`: their init key is derived from an
explicit key and the weight's name, not from the Flax module path. Every residual variant, the scanned and the
unrolled stack, and Mix-LN's two scanned segments therefore draw bit-identical base weights for one seed
(DESIGN.md, "Paired initialization"); variants only rescale them (DeepNorm's beta).
"""
import zlib
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array


def _dtype(name: str):
  return {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[name]


def compute_dtype(cfg) -> Any:
  return _dtype(cfg.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Initializers. Shapes are the param shapes; `fan` says which axes are fan-in / fan-out for Xavier.


def matrix_init(cfg, fan_in: int, fan_out: int, residual_out: bool = False) -> Callable:
  """`model.init`: `xavier` (Xiong et al. 2020's setting, Glorot normal) or `gpt2` (normal 0.02, residual-output
  projections scaled by 1/sqrt(2L))."""
  if cfg.init == "xavier":
    std = (2.0 / (fan_in + fan_out)) ** 0.5
  else:  # gpt2
    std = 0.02 / ((2 * cfg.num_layers) ** 0.5 if residual_out else 1.0)
  return nn.initializers.normal(std)


def embed_init(cfg) -> Callable:
  # xavier: unit-variance token vectors, the Gaussian input of Xiong et al.'s Lemma 2 (fairseq's scaled embedding).
  return nn.initializers.normal(1.0 if cfg.init == "xavier" else 0.02)


def base_param(mod: nn.Module, name: str, init: Callable, shape, axes, key: Array, scale: float = 1.0):
  """A base weight whose init draws from fold_in(key, crc32(name)), independent of the module path."""
  def init_fn(_flax_rng, shape):
    w = init(jax.random.fold_in(key, zlib.crc32(name.encode())), shape, jnp.float32)
    return w * scale if scale != 1.0 else w
  return mod.param(name, nn.with_logical_partitioning(init_fn, axes), shape)


# ---------------------------------------------------------------------------------------------------------------


def _last(v: Array, ndim: int) -> Array:
  """A [D] vector shaped to broadcast over the last axis of an ndim array (explicit: rank promotion raises)."""
  return v.reshape((1,) * (ndim - 1) + v.shape)


class Norm(nn.Module):
  """LayerNorm or RMSNorm (`model.norm`) over the last axis. Statistics are always float32; the output is cast back
  to the input dtype."""
  kind: str = "layernorm"
  eps: float = 1e-5

  @nn.compact
  def __call__(self, x: Array) -> Array:
    d = x.shape[-1]
    x32 = x.astype(jnp.float32)
    scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("norm",)), (d,))
    if self.kind == "layernorm":
      bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("norm",)), (d,))
      mean = jnp.mean(x32, axis=-1, keepdims=True)
      var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
      y = (x32 - mean) * jax.lax.rsqrt(var + self.eps) * _last(scale, x.ndim) + _last(bias, x.ndim)
    else:
      ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
      y = x32 * jax.lax.rsqrt(ms + self.eps) * _last(scale, x.ndim)
    return y.astype(x.dtype)


def make_norm(cfg, name: str) -> Norm:
  return Norm(kind=cfg.norm, eps=cfg.norm_eps, name=name)


def rope(x_BTHK: Array, base: float) -> Array:
  """Rotary position embedding (Su et al. 2021), rotate-half form, computed in float32."""
  t, k = x_BTHK.shape[1], x_BTHK.shape[-1]
  inv = 1.0 / (base ** (jnp.arange(0, k, 2, dtype=jnp.float32) / k))
  ang_TK = jnp.arange(t, dtype=jnp.float32)[:, None] * inv[None, :]
  cos, sin = jnp.cos(ang_TK)[None, :, None, :], jnp.sin(ang_TK)[None, :, None, :]
  x = x_BTHK.astype(jnp.float32)
  x1, x2 = x[..., : k // 2], x[..., k // 2:]
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BTHK.dtype)


def query_blocks(t: int) -> list[tuple[int, int]]:
  """Query rows [lo, hi) of each block of the blocked causal attention: rows lo..hi-1 see keys 0..hi-1 only, so
  the all-masked upper-right part of the [T, T] scores is never computed (T = 128 in 4 blocks: 62% of the work).
  Below 128 rows one block: there XLA:CPU's per-kernel cost outweighs the saved work (docs/performance.md)."""
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
  """softmax(q k^T + causal mask) v for a pre-scaled q, in heads-major layout, by query blocks."""
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
  # The softmax backward in its closed form, dS = P * (dP - rowsum(dO * O)) (as in FlashAttention, Dao et al.
  # 2022): it keeps P, one [B, H, C, S] array per block, instead of autodiff's scores, mask, exponentials and sums.
  # dV and dK contract over the query axis t, the major axis of P and dS. Asked for as [.., K, S]
  # (A^T B with the small K as rows), XLA:CPU runs them 2x faster than as [.., S, K]; the transpose back is small.
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


def causal_attention(q_BTHK: Array, k_BTHK: Array, v_BTHK: Array, impl: str) -> Array:
  """softmax(q k^T / sqrt(K) + causal mask) v (Vaswani et al. 2017), softmax in float32.

  `dpa` is jax.nn.dot_product_attention (cuDNN flash attention on GPU). `einsum` runs it in heads-major
  [B, H, T, K] layout, by query blocks from T = 128 (`query_blocks`), with a closed-form backward (`_attend`),
  which XLA:CPU runs faster than
  dot_product_attention's [B, T, H, K] einsums and their autodiff (docs/performance.md). `auto` picks einsum on CPU and dpa elsewhere.
  Both compute the same function (tests/test_model.py).
  """
  if impl == "auto":
    impl = "einsum" if jax.default_backend() == "cpu" else "dpa"
  if impl == "dpa":
    return jax.nn.dot_product_attention(q_BTHK, k_BTHK, v_BTHK, is_causal=True)
  scale = q_BTHK.shape[-1] ** -0.5
  q, k, v = (jnp.swapaxes(a, 1, 2) for a in (q_BTHK * jnp.asarray(scale, q_BTHK.dtype), k_BTHK, v_BTHK))
  return jnp.swapaxes(_attend(q, k, v), 1, 2)


class Attention(nn.Module):
  """Causal multi-head self-attention with RoPE. q, k, v, o are [D, H, K]-shaped params (logical axes for
  sharding, each keyed by name for the paired init), applied as 2-D matmuls over the flattened tokens."""
  cfg: Any
  scales: Any = None  # {"q"|"k"|"v"|"o": factor}, a variant's init rescale

  @nn.compact
  def __call__(self, x_BTD: Array, key: Array) -> Array:
    cfg, dt = self.cfg, compute_dtype(self.cfg)
    b, t, d = x_BTD.shape
    h = cfg.num_heads
    k = d // h
    sc = dict(self.scales or {})
    x_ND = x_BTD.reshape(b * t, d)

    def project(name):
      w = base_param(self, name, matrix_init(cfg, d, d), (d, h, k), ("embed", "heads", "kv"), key, sc.get(name, 1.0))
      return (x_ND @ w.reshape(d, h * k).astype(dt)).reshape(b, t, h, k)

    # Three [N, D] x [D, HK] matmuls: faster on XLA:CPU, forward plus backward, than one fused [D, 3HK] matmul,
    # whose split costs pads and a transposing copy in the backward (docs/performance.md).
    q, kk, v = project("q"), project("k"), project("v")
    if cfg.pos == "rope":
      q, kk = rope(q, cfg.rope_base), rope(kk, cfg.rope_base)
    o_BTHK = causal_attention(q, kk, v, cfg.attention)
    wo = base_param(self, "o", matrix_init(cfg, d, d, residual_out=True), (h, k, d), ("heads", "kv", "embed"),
                    key, sc.get("o", 1.0))
    return (o_BTHK.reshape(b * t, h * k) @ wo.reshape(h * k, d).astype(dt)).reshape(b, t, d)


@jax.custom_vjp
def gelu(x: Array) -> Array:
  """GELU, tanh approximation (Hendrycks & Gimpel 2016). Its VJP keeps only x: autodiff of jax.nn.gelu keeps five
  [N, F] intermediates, which under nn.scan are stacked per layer and dominate the MLP's backward memory traffic."""
  return jax.nn.gelu(x, approximate=True)


def _gelu_fwd(x):
  return gelu(x), x


def _gelu_bwd(x, g):
  c, a = (2.0 / jnp.pi) ** 0.5, 0.044715
  x32 = x.astype(jnp.float32)
  th = jnp.tanh(c * (x32 + a * x32 ** 3))
  dx = 0.5 * (1.0 + th) + 0.5 * x32 * (1.0 - th * th) * c * (1.0 + 3.0 * a * x32 * x32)
  return ((g.astype(jnp.float32) * dx).astype(g.dtype),)


gelu.defvjp(_gelu_fwd, _gelu_bwd)


class MLP(nn.Module):
  """Two-layer GELU MLP (tanh approximation), no biases, over the flattened tokens."""
  cfg: Any
  scales: Any = None

  @nn.compact
  def __call__(self, x_BTD: Array, key: Array) -> Array:
    cfg, dt = self.cfg, compute_dtype(self.cfg)
    (b, t, d), f = x_BTD.shape, cfg.mlp_dim
    sc = dict(self.scales or {})
    wi = base_param(self, "wi", matrix_init(cfg, d, f), (d, f), ("embed", "mlp"), key, sc.get("wi", 1.0))
    wo = base_param(self, "wo", matrix_init(cfg, f, d, residual_out=True), (f, d), ("mlp", "embed"), key,
                    sc.get("wo", 1.0))
    # [N, D] x [D, F]: a rank-3 einsum's weight gradient contracts two axes, and XLA:CPU then transposes the
    # GELU backward into a strided copy that cost more than the matmuls (docs/performance.md).
    h_NF = gelu(x_BTD.reshape(b * t, d) @ wi.astype(dt))
    h_NF = nn.with_logical_constraint(h_NF.reshape(b, t, f), ("batch", "seq", "act_mlp")).reshape(b * t, f)
    return (h_NF @ wo.astype(dt)).reshape(b, t, d)
