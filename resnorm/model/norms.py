"""The norm kinds, over the last axis: LayerNorm, RMSNorm, and DyT and Derf (norm-free stand-ins), float32 by default.

`model.norm_stats_dtype`: `float32` (default) computes mean, variance and the normalization in float32 whatever
the compute dtype, and casts the output back; `compute` keeps them in the compute dtype (an ablation: what bfloat16
norm statistics do to training). DyT has no statistics; the same setting picks the dtype of its tanh.

DyT, "Transformers without Normalization" (Zhu, Chen, He, LeCun, Liu, CVPR 2025, arXiv 2503.10622), Eq. 1:
DyT(x) = gamma * tanh(alpha * x) + beta, alpha one learnable scalar, gamma (init 1) and beta (init 0) per channel.
The authors' LLaMA recipe (facebookresearch/DyT, other_tasks/LLaMA) drops beta and gives alpha three inits: the
attention-side DyT, the FFN-side one and the final one before the head (`model.dyt.alpha_attn`, `alpha_ffn`,
`alpha_final`). A norm's side is read off its name: attention-side for `attn_norm` and the QKV norms, final for
`final_norm`, FFN-side ("the other locations") for the rest.

Derf, "Stronger Normalization-Free Transformers" (Chen, Lu, Zhu, Sun, Liu, arXiv 2512.10938; zlab-princeton/Derf):
Derf(x) = gamma * erf(alpha * x + s) + beta, alpha and the shift s learnable scalars (init alpha0 by side as DyT's,
`model.derf.alpha_*`, and 0), gamma (1) and beta (0) per channel; beta is kept, as in every form of the authors'
code. Sides, float32 and the exemption from weight decay are DyT's.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array


def last_axis(v: Array, ndim: int) -> Array:
  """A [D] vector shaped to broadcast over the last axis of an ndim array (explicit: rank promotion raises)."""
  return v.reshape((1,) * (ndim - 1) + v.shape)


def normalize(x: Array, scale: Array, bias: Array | None, eps: float) -> Array:
  """LayerNorm of x over its last axis when `bias` is given, else RMSNorm; scale and bias broadcast against x."""
  if bias is None:
    return x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + eps) * scale
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + eps) * scale + bias


def _norm_params(module: nn.Module, kind: str, d: int):
  """A Norm's parameters, declared on `module`: scale (ones), and for layernorm bias (zeros; else None)."""
  scale = module.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("norm",)), (d,))
  if kind != "layernorm":
    return scale, None
  return scale, module.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("norm",)), (d,))


class Norm(nn.Module):
  """`kind` layernorm (Ba et al. 2016) or rmsnorm (Zhang & Sennrich 2019); `stats_float32` as above."""
  kind: str = "layernorm"
  eps: float = 1e-5
  stats_float32: bool = True

  @nn.compact
  def __call__(self, x: Array) -> Array:
    xs = x.astype(jnp.float32) if self.stats_float32 else x
    scale, bias = _norm_params(self, self.kind, x.shape[-1])
    cast = lambda v: last_axis(v, x.ndim).astype(xs.dtype)
    return normalize(xs, cast(scale), None if bias is None else cast(bias), self.eps).astype(x.dtype)


def _gamma_beta(module: nn.Module, y: Array, bias: bool) -> Array:
  """gamma * y (+ beta) for the elementwise norms, gamma (ones) and beta (zeros) per channel, declared on `module`."""
  d = y.shape[-1]
  scale = module.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("norm",)), (d,))
  y = y * last_axis(scale, y.ndim).astype(y.dtype)
  if bias:
    y = y + last_axis(module.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("norm",)), (d,)),
                      y.ndim).astype(y.dtype)
  return y


class DyT(nn.Module):
  """gamma * tanh(alpha * x) [+ beta]: elementwise, so it needs no statistic over the features."""
  alpha_init: float = 0.5
  bias: bool = False
  float32: bool = True

  @nn.compact
  def __call__(self, x: Array) -> Array:
    xs = x.astype(jnp.float32) if self.float32 else x
    alpha = self.param("alpha", nn.initializers.constant(self.alpha_init), ()).astype(xs.dtype)
    return _gamma_beta(self, jnp.tanh(alpha * xs), self.bias).astype(x.dtype)


class Derf(nn.Module):
  """gamma * erf(alpha * x + s) + beta (arXiv 2512.10938): DyT's elementwise form with erf and a learned shift."""
  alpha_init: float = 1.0
  shift_init: float = 0.0
  bias: bool = True
  float32: bool = True

  @nn.compact
  def __call__(self, x: Array) -> Array:
    xs = x.astype(jnp.float32) if self.float32 else x
    alpha = self.param("alpha", nn.initializers.constant(self.alpha_init), ()).astype(xs.dtype)
    shift = self.param("shift", nn.initializers.constant(self.shift_init), ()).astype(xs.dtype)
    return _gamma_beta(self, jax.scipy.special.erf(alpha * xs + shift), self.bias).astype(x.dtype)


ELEMENTWISE = ("dyt", "derf")  # the norm kinds with a learned alpha and no statistic over the features


def dyt_side(name: str | None) -> str:
  """attn | final | ffn: which of the recipe's alpha inits a norm of this name takes."""
  name = name or ""
  if name.startswith(("attn", "q_", "k_", "v_", "qkv")):
    return "attn"
  return "final" if name.startswith("final") else "ffn"


def make_norm(cfg, name: str | None) -> nn.Module:
  if cfg.norm == "dyt":
    return DyT(alpha_init=cfg.dyt[f"alpha_{dyt_side(name)}"], bias=cfg.dyt.bias,
               float32=cfg.norm_stats_dtype == "float32", name=name)
  if cfg.norm == "derf":
    return Derf(alpha_init=cfg.derf[f"alpha_{dyt_side(name)}"], shift_init=cfg.derf.shift, bias=cfg.derf.bias,
                float32=cfg.norm_stats_dtype == "float32", name=name)
  return Norm(kind=cfg.norm, eps=cfg.norm_eps, stats_float32=cfg.norm_stats_dtype == "float32", name=name)


def num_params(cfg, width: int) -> int:
  """Params of one norm over `width` features: LayerNorm scale and bias, RMSNorm scale, DyT scale (+ bias) + alpha,
  Derf scale (+ bias) + alpha + shift."""
  if cfg.norm == "dyt":
    return width * (2 if cfg.dyt.bias else 1) + 1
  if cfg.norm == "derf":
    return width * (2 if cfg.derf.bias else 1) + 2
  return width * (2 if cfg.norm == "layernorm" else 1)


class _NormParams(nn.Module):
  """Only a Norm's parameters (the same names, shapes and inits), for a kernel that applies the norm itself."""
  kind: str

  @nn.compact
  def __call__(self, d: int):
    return _norm_params(self, self.kind, d)


def norm_project(cfg, name: str, x: Array, w_DK: Array, kern) -> Array:
  """make_norm(cfg, name)(x) @ w_DK in float32, for a projection to a few features (Hyper-Connections' dynamic
  weights): with a LayerNorm or RMSNorm whose statistics are float32, the kernel set's `norm_project` (the norm's
  parameters under the same name, so checkpoints are the same); otherwise the norm module, then the matmul."""
  d, k = x.shape[-1], w_DK.shape[-1]
  if cfg.norm in ("layernorm", "rmsnorm") and cfg.norm_stats_dtype == "float32":
    scale, bias = _NormParams(kind=cfg.norm, name=name)(d)
    z = kern.norm_project(x.reshape(-1, d), scale, bias, w_DK, cfg.norm_eps)
  else:
    z = make_norm(cfg, name)(x).astype(jnp.float32).reshape(-1, d) @ w_DK
  return z.reshape(x.shape[:-1] + (k,))
