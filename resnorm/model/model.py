"""Decoder-only byte LM: embedding -> stream expansion -> nn.scan over blocks -> reduce -> final norm -> head.

The residual variant (resnorm.model.residual) decides everything about the connection; this file never branches on it.
Blocks run under `nn.scan` with params stacked on a leading `layers` axis (compile time flat in depth), or as an
unrolled Python loop (`model.scan_layers=False`) computing the same function. Mix-LN-like variants give several
scanned segments.
"""
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.model import param, residual
from resnorm.model.depth_store import Store, chunk_widths, layer_scan
from resnorm.model.group_scan import group_scan
from resnorm.model.layers import MLP, Attention, base_param, compute_dtype, embed_init, matrix_init
from resnorm.model.norms import make_norm

REMAT_POLICIES = {
    "full": None,  # save nothing: recompute the whole block in the backward pass
    # the depth store's weighted reads (`depth_read`) are contractions over the slots like the dots this policy
    # keeps; recomputing one re-reads the whole store
    "dots": jax.checkpoint_policies.save_from_both_policies(jax.checkpoint_policies.dots_saveable,
                                                            jax.checkpoint_policies.save_only_these_names("depth_read")),
    "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "save_nothing": jax.checkpoint_policies.nothing_saveable,
}


class Block(nn.Module):
  """One Transformer block: the variant's sublayer piece wraps attention, then the MLP. `pos_T` holds the tokens'
  absolute positions; with `cache_len` attention keeps a KV cache (decoding)."""
  cfg: Any
  sublayer: Any
  scales: Any
  collect: bool = False
  cache_len: int = 0

  @nn.compact
  def __call__(self, state, layer, key, pos_T):
    cfg = self.cfg
    variant = residual.get(cfg.residual)
    key = jax.random.fold_in(key, layer)
    taps = []
    classes = residual.sublayer_classes(self.sublayer)
    # A variant whose params are per block (ReZero with one shared gate) wraps both sublayers with one instance.
    shared = classes[0](cfg, name="block_res") if variant.block_shared(cfg) else None
    attn = Attention(cfg, self.scales, self.cache_len, getattr(classes[0], "attn_qkv", None), name="attn")
    mlp = MLP(cfg, self.scales, getattr(classes[1], "mlp_hidden", None), name="mlp")
    mult = param.shape(cfg).branch  # CompleteP's m_L^-alpha on every sublayer's output, whatever the placement
    for j, (kind, f) in enumerate((("attn", lambda h, **kw: attn(h, key, pos_T, **kw)),
                                   ("mlp", lambda h: mlp(h, key)))):
      branch = lambda h, f=f, **kw: f(nn.with_logical_constraint(h, ("batch", "seq", "act_embed")), **kw)
      if mult != 1.0:
        branch = lambda h, b=branch, **kw: b(h, **kw) * jnp.asarray(mult, h.dtype)
      res = shared or classes[j](cfg, name=f"{kind}_res")
      state, t = res(state, branch, make_norm(cfg, f"{kind}_norm"), layer, 2 * layer + j)
      taps.append(t)
    if variant.after_block is not None:
      state = variant.after_block(cfg, name="after_block")(state, layer)
    if isinstance(state, Store):
      state = state.flush()
      state = state.replace(x=jax.tree.map(lambda a: nn.with_logical_constraint(a, _state_axes(a)), state.x),
                            buf=nn.with_logical_constraint(state.buf, (None, "batch", "seq", "act_embed")))
    else:
      state = nn.with_logical_constraint(state, _state_axes(state))
    if not self.collect:
      return state, None
    return state, jax.tree.map(lambda a, b: jnp.stack([a, b]), *taps)  # [2, ...] (attn, mlp)


def _state_axes(a):
  return ("batch", "seq", "act_embed") if a.ndim == 3 else ("batch", "seq", "streams", "act_embed")


def _block_class(cfg, decode: bool):
  if cfg.remat == "none" or decode:
    return Block
  return nn.remat(Block, policy=REMAT_POLICIES[cfg.remat], prevent_cse=not cfg.scan_layers)


class LM(nn.Module):
  """Causal LM over bytes. Returns (logits_BTV float32, taps); taps is None unless `collect`, else a dict of
  [S, ...] arrays over the S = 2L sublayers in depth order (see resnorm.model.residual.base), and `embed`, the
  embedding [B,T,D] the state starts from.

  Decoding (`cache_len` > 0): a `cache` collection holds the next position and every attention layer's keys and
  values (stacked on the `layers` axis under nn.scan, like the params). Each call appends its T tokens at the cached
  position, so a prefill of the prompt followed by one-token calls computes what the full forward computes."""
  cfg: Any
  collect: bool = False
  cache_len: int = 0

  @nn.compact
  def __call__(self, tokens_BT):
    cfg, dt = self.cfg, compute_dtype(self.cfg)
    variant = residual.get(cfg.residual)
    key = self.make_rng("params") if self.is_initializing() else jax.random.key(0)
    emb_VD = base_param(self, "embed", embed_init(cfg), (cfg.vocab_size, cfg.d_model), ("vocab", "embed"), key)
    x_BTD = jnp.take(emb_VD, tokens_BT, axis=0).astype(dt)
    pos_T = jnp.arange(tokens_BT.shape[1], dtype=jnp.int32)
    if self.cache_len:
      index = self.variable("cache", "index", lambda: jnp.zeros((), jnp.int32))
      pos_T = pos_T + index.value
      index.value = index.value + tokens_BT.shape[1]
    if cfg.pos == "learned":
      pos = base_param(self, "pos_embed", nn.initializers.normal(0.02), (cfg.max_len, cfg.d_model),
                       (None, "embed"), key)
      x_BTD = x_BTD + jnp.take(pos, pos_T, axis=0)[None].astype(dt)
    n = variant.streams(cfg)
    if variant.start is not None:
      state = variant.start(cfg, x_BTD)
    else:
      state = jnp.repeat(x_BTD[:, :, None, :], n, axis=2) if n else x_BTD
    block, scales = _block_class(cfg, self.cache_len > 0), variant.init_scales(cfg)
    all_taps, offset = [], 0
    for name, length, sublayer in variant.layer_segments(cfg):
      layers = jnp.arange(offset, offset + length, dtype=jnp.int32)
      if cfg.scan_layers and isinstance(state, Store) and not (self.is_initializing() or self.cache_len):
        # a depth store: the same blocks and params, with the store kept once by the backward (depth_store)
        mod = block(cfg, sublayer, scales, self.collect, 0, parent=None)
        body = lambda p, s, layer, consts: mod.apply({"params": p}, s, layer, *consts)
        x_of = partial(variant.x_from_store, cfg) if variant.x_from_store else None
        # runs over growing prefixes of the store; diagnostics keep one run, so every layer's taps have one shape
        widths = (chunk_widths(length, offset, partial(variant.reach, cfg), cfg.depth_chunks)
                  if variant.reach is not None and not self.collect else None)
        state, taps = layer_scan(body, self.variables["params"][name], state, layers, (key, pos_T), x_of, widths)
      elif cfg.scan_layers and cfg.remat_group > 1 and not (self.is_initializing() or self.cache_len or self.collect):
        # the carry kept once per group of layers, the groups recomputed in the backward (group_scan)
        mod = block(cfg, sublayer, scales, self.collect, 0, parent=None)
        body = lambda p, s, layer: mod.apply({"params": p}, s, layer, key, pos_T)
        state, taps = group_scan(body, self.variables["params"][name], state, layers, cfg.remat_group)
      elif cfg.scan_layers:
        stack = nn.scan(block, variable_axes={"params": 0, "cache": 0}, split_rngs={"params": True},
                        in_axes=(0, nn.broadcast, nn.broadcast), length=length,
                        metadata_params={nn.PARTITION_NAME: "layers"})
        state, taps = stack(cfg, sublayer, scales, self.collect, self.cache_len, name=name)(state, layers, key,
                                                                                              pos_T)
      else:
        per_layer = []
        for i in range(length):
          state, t = block(cfg, sublayer, scales, self.collect, self.cache_len, name=f"{name}_{i}")(
              state, layers[i], key, pos_T)
          per_layer.append(t)
        taps = jax.tree.map(lambda *a: jnp.stack(a), *per_layer) if self.collect else None
      all_taps.append(taps)
      offset += length
    if variant.finish is not None:
      y_BTD = variant.finish(cfg, state)
    else:
      y_BTD = jnp.sum(state, axis=2) if n else state
    if variant.final_norm and cfg.final_norm:
      y_BTD = make_norm(cfg, "final_norm")(y_BTD)
    out_mult = param.shape(cfg).logits
    if out_mult != 1.0:  # µP's output multiplier 1/m_d, on the head's input as the reference code applies it
      y_BTD = y_BTD * jnp.asarray(out_mult, y_BTD.dtype)
    if cfg.tie_embed:
      logits = jnp.einsum("btd,vd->btv", y_BTD, emb_VD.astype(dt))
    else:
      head = base_param(self, "head", matrix_init(cfg, cfg.d_model, cfg.vocab_size, role="unembed"),
                        (cfg.d_model, cfg.vocab_size),
                        ("embed", "vocab"), key)
      logits = jnp.einsum("btd,dv->btv", y_BTD, head.astype(dt))
    if variant.logit_scale is not None:
      logits = variant.logit_scale(cfg, name="logit_scale")(logits)
    logits = nn.with_logical_constraint(logits, ("batch", "seq", "act_vocab")).astype(jnp.float32)
    if not self.collect:
      return logits, None
    # [L, 2, ...] per segment -> [2L, ...] in depth order
    taps = jax.tree.map(lambda *a: jnp.concatenate(a).reshape((-1,) + a[0].shape[2:]), *all_taps)
    return logits, {**taps, "embed": x_BTD}  # the embedding: source 0 of the depth-mixing matrix
