"""LayerNorm and RMSNorm over the last axis, with float32 statistics by default.

`model.norm_stats_dtype`: `float32` (default) computes mean, variance and the normalization in float32 whatever
the compute dtype, and casts the output back; `compute` keeps them in the compute dtype (an ablation: what bfloat16
norm statistics do to training).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array


def last_axis(v: Array, ndim: int) -> Array:
  """A [D] vector shaped to broadcast over the last axis of an ndim array (explicit: rank promotion raises)."""
  return v.reshape((1,) * (ndim - 1) + v.shape)


class Norm(nn.Module):
  """`kind` layernorm (Ba et al. 2016) or rmsnorm (Zhang & Sennrich 2019); `stats_float32` as above."""
  kind: str = "layernorm"
  eps: float = 1e-5
  stats_float32: bool = True

  @nn.compact
  def __call__(self, x: Array) -> Array:
    d = x.shape[-1]
    xs = x.astype(jnp.float32) if self.stats_float32 else x
    scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("norm",)), (d,))
    scale = last_axis(scale, x.ndim).astype(xs.dtype)
    if self.kind == "layernorm":
      bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("norm",)), (d,))
      mean = jnp.mean(xs, axis=-1, keepdims=True)
      var = jnp.mean(jnp.square(xs - mean), axis=-1, keepdims=True)
      y = (xs - mean) * jax.lax.rsqrt(var + self.eps) * scale + last_axis(bias, x.ndim).astype(xs.dtype)
    else:
      ms = jnp.mean(jnp.square(xs), axis=-1, keepdims=True)
      y = xs * jax.lax.rsqrt(ms + self.eps) * scale
    return y.astype(x.dtype)


def make_norm(cfg, name: str) -> Norm:
  return Norm(kind=cfg.norm, eps=cfg.norm_eps, stats_float32=cfg.norm_stats_dtype == "float32", name=name)
