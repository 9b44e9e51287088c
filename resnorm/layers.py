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


class Attention(nn.Module):
  """Causal multi-head self-attention, projections as params + einsum (logical axes for sharding)."""
  cfg: Any
  scales: Any = None  # {"q"|"k"|"v"|"o": factor}, a variant's init rescale

  @nn.compact
  def __call__(self, x_BTD: Array, key: Array) -> Array:
    cfg, dt = self.cfg, compute_dtype(self.cfg)
    d, h = cfg.d_model, cfg.num_heads
    k = d // h
    sc = dict(self.scales or {})
    proj = {}
    for name in ("q", "k", "v"):
      w = base_param(self, name, matrix_init(cfg, d, d), (d, h, k), ("embed", "heads", "kv"), key,
                     sc.get(name, 1.0))
      proj[name] = jnp.einsum("btd,dhk->bthk", x_BTD, w.astype(dt))
    q, kk = proj["q"], proj["k"]
    if cfg.pos == "rope":
      q, kk = rope(q, cfg.rope_base), rope(kk, cfg.rope_base)
    o_BTHK = jax.nn.dot_product_attention(q, kk, proj["v"], is_causal=True)
    wo = base_param(self, "o", matrix_init(cfg, d, d, residual_out=True), (h, k, d), ("heads", "kv", "embed"),
                    key, sc.get("o", 1.0))
    return jnp.einsum("bthk,hkd->btd", o_BTHK, wo.astype(dt))


class MLP(nn.Module):
  """Two-layer GELU MLP (tanh approximation), no biases."""
  cfg: Any
  scales: Any = None

  @nn.compact
  def __call__(self, x_BTD: Array, key: Array) -> Array:
    cfg, dt = self.cfg, compute_dtype(self.cfg)
    d, f = cfg.d_model, cfg.mlp_dim
    sc = dict(self.scales or {})
    wi = base_param(self, "wi", matrix_init(cfg, d, f), (d, f), ("embed", "mlp"), key, sc.get("wi", 1.0))
    wo = base_param(self, "wo", matrix_init(cfg, f, d, residual_out=True), (f, d), ("mlp", "embed"), key,
                    sc.get("wo", 1.0))
    h_BTF = nn.gelu(jnp.einsum("btd,df->btf", x_BTD, wi.astype(dt)))
    h_BTF = nn.with_logical_constraint(h_BTF, ("batch", "seq", "act_mlp"))
    return jnp.einsum("btf,fd->btd", h_BTF, wo.astype(dt))
