"""The interface every residual variant implements, and the registry that holds them.

A variant is one `Variant` record (docs/design.md, "Variants are pure pieces with one interface"):

- `sublayer`: a Flax module class, instantiated once per sublayer (attention and MLP each), called as
  `sublayer(cfg)(state, branch, norm, layer, sub) -> (state, taps)`, where
    * `state` is the scan carry: `x_BTD`, or `h_BTnD` for multi-stream variants;
    * `branch(h_BTD) -> y_BTD` is the sublayer F (attention or MLP) with its base weights; attention's also takes
      `value_fn=`, a function on its projected values [B,T,H,K] (value residual's mix with the first layer's), and
      `kv_BTD=(keys' input, values' input)` where those differ from the queries' input (MUDDFormer);
    * `norm(h_BTD)` is the sublayer's own norm (a base weight; a variant may skip it or add its own);
    * `layer` (block index, 0-based) and `sub` (sublayer index 2*layer + {0: attn, 1: mlp}) are traced ints;
    * `taps` is a dict of what diagnostics read: `u` (the branch input before the sublayer's own norm), `f` (F's
      output) and, for multi-stream variants, `mix` (the per-token residual mixing H_res, [B,T,n,n], acting on the
      stream axis from the left: H_out = H_res @ H + ...).
- `streams(cfg)`: 0 for a `[B,T,D]` state; n for `[B,T,n,D]` (the embedding repeated n times, summed at the end).
- `final_norm`: whether the reduced state goes through a final norm before the head (`model.final_norm=False`
  drops it, an ablation).
- `block_shared(cfg)`: whether one instance of `sublayer` wraps both sublayers of a block (params per block).
- `block_norms`: whether the sublayers call their `norm` (ReZero does not; used by the param count).
- `segments(cfg)`: `((name, num_layers, sublayer), ...)`, scanned one after another (Mix-LN: two). `sublayer` (here
  and in the `sublayer` field) is one class for both sublayers, or a pair `(attn_class, mlp_class)` (HybridNorm).
  A sublayer class may name hooks as class attributes: `attn_qkv` (a module class `(cfg)`, called inside attention
  as `(q_BTHK, k, v, rope) -> (q, k, v)`, where `rope(x)` applies the rotary embedding: QKV norms, nGPT's
  normalized q, k) and `mlp_hidden` (a module class `(cfg)` on the MLP's hidden pre-activation [B,T,F]).
- `start(cfg, x_BTD) -> state`, `finish(cfg, state) -> y_BTD`: how the state is made from the embedding and how it
  becomes the head's input (None: the `streams` rule above). Called inside the LM's compact call, so `finish` may
  create params (ResiDual's norm of the dual stream).
- `after_block`: a module class `(cfg)` called as `(state, layer) -> state` after each block (DenseFormer's DWA).
- `x_from_store(cfg, params, buf_SBTD, l)`: for a depth-store placement whose stream is a read of the store, block
  l's input `x` from the segment's stacked params and the final buffer; the backward recomputes it rather than
  keeping it per block (resnorm.model.depth_store.layer_scan).
- `reach(cfg, l)`: for a depth-store placement, the number of leading slots blocks 0..l read or write (a Python
  int). The scanned step runs the blocks in `model.depth_chunks` runs, each over the prefix of the store its last
  block reaches (resnorm.model.depth_store.chunk_widths), so no block computes over the whole store.
- `logit_scale`: a module class `(cfg)` applied to the logits [B,T,V] (nGPT's s_z).
- `init_params(cfg, params, rng, seq_len, layers) -> params`: applied by `resnorm.step.step.init_state` to the unboxed
  params after `LM.init` (Admin's profiling pass, nGPT's unit-norm weights); a pure function of its inputs.
  `layers` is resnorm.model.layers, passed in because config validation imports this registry, which must not import
  the model.
- `unit_norm`: ((weight name, axis), ...): weights kept at unit L2 norm along that axis (negative, so stacked and
  per-layer layouts agree) by an optimizer transform after every step (nGPT; `resnorm.step.optim.unit_norm`).
- `init_scales(cfg)`: factors on base initializers by weight name (DeepNorm's beta); the random draws are the same.
- `decay`: names of the variant's own params that get weight decay (all others are exempt).
- `extra_params(cfg)`, `extra_flops(cfg)`: the variant's own parameters (whole model) and forward FLOPs per token.
- `check(cfg)`: raises `InputError` for invalid variant settings.
- `roles`: the parametrization role (resnorm.model.param.ROLES) of each of the variant's own params, keyed by the
  param's name, `module/name` or a module's name; base weights and norm params have theirs from resnorm.model.param.
- `refuses`: {parametrization: why} for the `model.param` values this variant does not compose with (config
  validation refuses them in one line with the reason).
- `section`: the `model.<section>` config node holding its settings, where it is not the variant's name (Block
  AttnRes reads `model.attn_res`); a checkpoint's settings there must match the config's.
"""
import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp

from resnorm.core.errors import InputError
from resnorm.model.param import DEPTH_ALPHA


def _none(cfg):
  return 0


def _no_scales(cfg):
  return {}


def _no_check(cfg):
  return None


def _false(cfg):
  return False


def stream_spread(h_BTnD: jax.Array) -> jax.Array:
  """[B, T]: mean over the n streams of ||h_k - mean_k h|| / ||mean_k h||. 0 when the streams are copies of one
  another (a multi-stream variant that has collapsed to a single stream)."""
  h = h_BTnD.astype(jnp.float32)
  mean = jnp.mean(h, axis=2, keepdims=True)
  dev = jnp.linalg.norm(h - mean, axis=-1)
  return jnp.mean(dev, axis=-1) / jnp.maximum(jnp.linalg.norm(mean[:, :, 0], axis=-1), 1e-12)


@dataclasses.dataclass(frozen=True)
class Variant:
  name: str
  sublayer: Any
  final_norm: bool = True
  block_norms: bool = True
  streams: Callable = _none
  segments: Callable | None = None
  init_scales: Callable = _no_scales
  decay: tuple = ()
  extra_params: Callable = _none
  extra_flops: Callable = _none
  check: Callable = _no_check
  block_shared: Callable = _false
  start: Callable | None = None
  finish: Callable | None = None
  after_block: Any = None
  x_from_store: Callable | None = None
  reach: Callable | None = None
  logit_scale: Any = None
  init_params: Callable | None = None
  unit_norm: tuple = ()  # ((weight name, axis), ...)
  section: str | None = None
  roles: dict = dataclasses.field(default_factory=dict)
  refuses: dict = dataclasses.field(default_factory=dict)

  def layer_segments(self, cfg):
    if self.segments is not None:
      return tuple(s for s in self.segments(cfg) if s[1] > 0)
    return (("blocks", cfg.num_layers, self.sublayer),)


def sublayer_classes(sublayer) -> tuple:
  """(attn_class, mlp_class) of a segment's `sublayer` entry (one class, or a pair)."""
  return tuple(sublayer) if isinstance(sublayer, (tuple, list)) else (sublayer, sublayer)


def unit_normalize(params, axes: dict):
  """Every leaf whose name is in `axes` divided by its L2 norm along `axes[name]` (nGPT's normalization); other
  leaves unchanged. Works on nested dicts of arrays (stacked or not: the axes count from the end)."""
  def norm(path, w):
    name = getattr(path[-1], "key", None)
    if name not in axes:
      return w
    w32 = w.astype(jnp.float32)
    return (w32 / jnp.linalg.norm(w32, axis=axes[name], keepdims=True)).astype(w.dtype)
  return jax.tree_util.tree_map_with_path(norm, params)


def depth_refusal(why: str) -> dict:
  """`Variant.refuses` for a variant that scales by depth itself: every parametrization with a depth rule."""
  return {name: why for name in DEPTH_ALPHA}


REGISTRY: dict[str, Variant] = {}


def register(variant: Variant, *aliases: str) -> Variant:
  for name in (variant.name, *aliases):
    REGISTRY[name] = variant
  return variant


def get(name: str) -> Variant:
  if name not in REGISTRY:
    raise InputError(f"model.residual={name!r} is unknown; known: {', '.join(sorted(REGISTRY))}")
  return REGISTRY[name]
