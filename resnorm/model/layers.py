"""Transformer building blocks: initializers, causal attention with RoPE, the GELU MLP.

The hot spots (projections, attention, GELU) come from the kernel set `model.kernels` picks (resnorm.model.kernels): the
reference forms, or forms tuned for XLA:CPU that compute the same function. Norms are in resnorm.model.norms.

Base weights (embedding, attention, MLP, head) are declared with `base_param`: their init key is derived from an
explicit key and the weight's name, not from the Flax module path. Every residual variant, the scanned and the
unrolled stack, and Mix-LN's two scanned segments therefore draw bit-identical base weights for one seed
(docs/design.md, "Paired initialization"); variants only rescale them (DeepNorm's beta).
"""
import zlib
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.model import kernels, param

Array = jax.Array


def _dtype(name: str):
  return {"float32": jnp.float32, "bfloat16": jnp.bfloat16}[name]


def compute_dtype(cfg) -> Any:
  return _dtype(cfg.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Initializers. Shapes are the param shapes; `fan` says which axes are fan-in / fan-out for Xavier.


INITS = ("xavier", "gpt2", "normal")


def init_std(init: str, fan_in, fan_out, num_layers, residual_out: bool) -> float:
  """`model.init`: `xavier` (Xiong et al. 2020's setting, Glorot normal), `gpt2` (normal 0.02, residual-output
  projections scaled by 1/sqrt(2L), Radford et al. 2019) or `normal` (normal 0.02, no depth scaling: the init of the
  Mix-LN and LayerNorm-Scaling reference code)."""
  if init == "xavier":
    return (2.0 / (fan_in + fan_out)) ** 0.5
  if init == "gpt2":
    return 0.02 / ((2 * num_layers) ** 0.5 if residual_out else 1.0)
  return 0.02


def matrix_init(cfg, fan_in: int, fan_out: int, residual_out: bool = False, role: str = "hidden") -> Callable:
  """Normal with `init_std`. Under a parametrization other than `standard` (resnorm.model.param) the std is the
  standard one at the base shape (fans of the width scaled by 1/m_d, the base depth), times the role's factor:
  µP's hidden variance 1/m_d, no depth factor. `role` is `hidden` (both fans the width) or `unembed` (the head)."""
  sh = param.shape(cfg)
  if not sh.width:
    return nn.initializers.normal(init_std(cfg.init, fan_in, fan_out, cfg.num_layers, residual_out))
  _, base_layers, _ = param.base_shape(cfg)
  fan_out = fan_out / sh.m_d if role == "hidden" else fan_out
  std = init_std(cfg.init, fan_in / sh.m_d, fan_out, base_layers, residual_out)
  return nn.initializers.normal(std * sh.rule(role).init)


def embed_init(cfg) -> Callable:
  # xavier: unit-variance token vectors, the Gaussian input of Xiong et al.'s Lemma 2 (fairseq's scaled embedding).
  return nn.initializers.normal(1.0 if cfg.init == "xavier" else 0.02)


def rope(x_BTHK: Array, base: float, pos_T: Array) -> Array:
  """Rotary position embedding (Su et al. 2021, RoFormer), rotate-half form: dimension i of the first half pairs
  with dimension i of the second, rotated by angle t / base^(2i/K), t the token's absolute position. In float32."""
  k = x_BTHK.shape[-1]
  inv = 1.0 / (base ** (jnp.arange(0, k, 2, dtype=jnp.float32) / k))
  ang_TK = pos_T.astype(jnp.float32)[:, None] * inv[None, :]
  cos, sin = jnp.cos(ang_TK)[None, :, None, :], jnp.sin(ang_TK)[None, :, None, :]
  x = x_BTHK.astype(jnp.float32)
  x1, x2 = x[..., : k // 2], x[..., k // 2:]
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BTHK.dtype)


def base_param(mod: nn.Module, name: str, init: Callable, shape, axes, key: Array, scale: float = 1.0):
  """A base weight whose init draws from fold_in(key, crc32(name)), independent of the module path."""
  def init_fn(_flax_rng, shape):
    w = init(jax.random.fold_in(key, zlib.crc32(name.encode())), shape, jnp.float32)
    return w * scale if scale != 1.0 else w
  return mod.param(name, nn.with_logical_partitioning(init_fn, axes), shape)


def cached_attention(q_BTHK: Array, k_BSHK: Array, v_BSHK: Array, pos_T: Array) -> Array:
  """softmax(q k^T / sqrt(K)) v against a KV cache of S slots: query t (at position pos_T[t]) sees the slots
  0..pos_T[t]; later slots are masked. Softmax in float32."""
  scale = q_BTHK.shape[-1] ** -0.5
  scores = jnp.einsum("bthk,bshk->bhts", q_BTHK, k_BSHK, preferred_element_type=jnp.float32) * scale
  visible_TS = jnp.arange(k_BSHK.shape[1])[None, :] <= pos_T[:, None]
  p = jax.nn.softmax(jnp.where(visible_TS[None, None], scores, jnp.finfo(jnp.float32).min), axis=-1)
  return jnp.einsum("bhts,bshk->bthk", p.astype(v_BSHK.dtype), v_BSHK)


class Attention(nn.Module):
  """Causal multi-head self-attention with RoPE. q, k, v, o are [D, H, K]-shaped params (logical axes for
  sharding, each keyed by name for the paired init). With `cache_len`, keys and values go to a `cache` of that many
  positions and queries attend to it (decoding). `qkv`: a variant's hook on the projected q, k, v (module class,
  `(q, k, v, rope) -> (q, k, v)`, see resnorm.model.residual.base); without it, RoPE is applied to q and k.
  `value_fn`: a call's function on the projected values [B,T,H,K], before the hook (value residual's mix);
  `kv_BTD`: (keys' input, values' input) where they differ from the queries' (MUDDFormer's K and V streams)."""
  cfg: Any
  scales: Any = None  # {"q"|"k"|"v"|"o": factor}, a variant's init rescale
  cache_len: int = 0
  qkv: Any = None

  @nn.compact
  def __call__(self, x_BTD: Array, key: Array, pos_T: Array, value_fn=None, kv_BTD=None) -> Array:
    cfg, dt, kern = self.cfg, compute_dtype(self.cfg), kernels.get(self.cfg.kernels)
    b, t, d = x_BTD.shape
    h = cfg.num_heads
    k = d // h
    sc = dict(self.scales or {})

    def project(name, x):
      w = base_param(self, name, matrix_init(cfg, d, d), (d, h, k), ("embed", "heads", "kv"), key, sc.get(name, 1.0))
      return kern.project(x, w.reshape(d, h * k).astype(dt)).reshape(b, t, h, k)

    xk, xv = kv_BTD if kv_BTD is not None else (x_BTD, x_BTD)
    q, kk, v = project("q", x_BTD), project("k", xk), project("v", xv)
    if value_fn is not None:
      v = value_fn(v)
    rotate = (lambda x: rope(x, cfg.rope_base, pos_T)) if cfg.pos == "rope" else (lambda x: x)
    if self.qkv is None:
      q, kk = rotate(q), rotate(kk)
    else:
      q, kk, v = self.qkv(cfg, name="qkv")(q, kk, v, rotate)
    query = param.shape(cfg).query
    if query != 1.0:  # µP's 1/K attention (after the hook: a QK norm would undo it)
      q = q * jnp.asarray(query, q.dtype)
    if self.cache_len:
      shape = (b, self.cache_len, h, k)
      ck, cv = (self.variable("cache", name, jnp.zeros, shape, dt) for name in ("k", "v"))
      ck.value = jax.lax.dynamic_update_slice(ck.value, kk.astype(dt), (0, pos_T[0], 0, 0))
      cv.value = jax.lax.dynamic_update_slice(cv.value, v.astype(dt), (0, pos_T[0], 0, 0))
      o_BTHK = cached_attention(q, ck.value, cv.value, pos_T)
    else:
      o_BTHK = kern.attention(q, kk, v)
    wo = base_param(self, "o", matrix_init(cfg, d, d, residual_out=True), (h, k, d), ("heads", "kv", "embed"),
                    key, sc.get("o", 1.0))
    return kern.project(o_BTHK.reshape(b, t, h * k), wo.reshape(h * k, d).astype(dt))


class MLP(nn.Module):
  """Two-layer GELU MLP (tanh approximation), no biases. `hidden`: a variant's hook on the hidden pre-activation
  [B,T,F] (module class; nGPT's s_v)."""
  cfg: Any
  scales: Any = None
  hidden: Any = None

  @nn.compact
  def __call__(self, x_BTD: Array, key: Array) -> Array:
    cfg, dt, kern = self.cfg, compute_dtype(self.cfg), kernels.get(self.cfg.kernels)
    d, f = x_BTD.shape[-1], cfg.mlp_dim
    sc = dict(self.scales or {})
    wi = base_param(self, "wi", matrix_init(cfg, d, f), (d, f), ("embed", "mlp"), key, sc.get("wi", 1.0))
    wo = base_param(self, "wo", matrix_init(cfg, f, d, residual_out=True), (f, d), ("mlp", "embed"), key,
                    sc.get("wo", 1.0))
    pre_BTF = kern.project(x_BTD, wi.astype(dt))
    if self.hidden is not None:
      pre_BTF = self.hidden(cfg, name="hidden")(pre_BTF)
    h_BTF = nn.with_logical_constraint(kern.gelu(pre_BTF), ("batch", "seq", "act_mlp"))
    return kern.project(h_BTF, wo.astype(dt))
