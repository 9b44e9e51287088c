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


def _causal_softmax(q_BHTK: Array, k_BHSK: Array) -> Array:
  t = q_BHTK.shape[2]
  s_BHTS = jnp.einsum("bhtk,bhsk->bhts", q_BHTK, k_BHSK, preferred_element_type=jnp.float32)
  s_BHTS = jnp.where(jnp.tril(jnp.ones((t, t), bool))[None, None], s_BHTS, jnp.finfo(jnp.float32).min)
  return jax.nn.softmax(s_BHTS, axis=-1)


@jax.custom_vjp
def _attend(q_BHTK: Array, k_BHSK: Array, v_BHSK: Array) -> Array:
  """softmax(q k^T + causal mask) v for a pre-scaled q, in heads-major layout."""
  return _attend_fwd(q_BHTK, k_BHSK, v_BHSK)[0]


def _attend_fwd(q, k, v):
  p_BHTS = _causal_softmax(q, k)
  o = jnp.einsum("bhts,bhsk->bhtk", p_BHTS.astype(v.dtype), v)
  return o, (q, k, v, p_BHTS, o)


def _attend_bwd(res, do):
  # The softmax backward in its closed form, dS = P * (dP - rowsum(dO * O)) (as in FlashAttention, Dao et al.
  # 2022): it keeps one [B, H, T, T] array (P) instead of autodiff's scores, mask, exponentials and sums.
  # dV and dK contract over the query axis t, the major axis of P and dS. Asked for as [.., K, S]
  # (A^T B with the small K as rows), XLA:CPU runs them 2x faster than as [.., S, K]; the transpose back is small.
  q, k, v, p, o = res
  dt = v.dtype
  dv = jnp.swapaxes(jnp.einsum("bhtk,bhts->bhks", do, p.astype(dt)), -1, -2)
  dp = jnp.einsum("bhtk,bhsk->bhts", do, v, preferred_element_type=jnp.float32)
  rowsum = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1, keepdims=True)
  ds = (p * (dp - rowsum)).astype(dt)
  dk = jnp.swapaxes(jnp.einsum("bhtk,bhts->bhks", q, ds), -1, -2)
  return jnp.einsum("bhts,bhsk->bhtk", ds, k), dk, dv


_attend.defvjp(_attend_fwd, _attend_bwd)


def causal_attention(q_BTHK: Array, k_BTHK: Array, v_BTHK: Array, impl: str) -> Array:
  """softmax(q k^T / sqrt(K) + causal mask) v (Vaswani et al. 2017), softmax in float32.

  `dpa` is jax.nn.dot_product_attention (cuDNN flash attention on GPU). `einsum` runs it in heads-major
  [B, H, T, K] layout with a closed-form backward (`_attend`), which XLA:CPU runs faster than
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
