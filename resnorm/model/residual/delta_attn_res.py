"""Delta Attention Residuals (Luo, Cai, Hu, arXiv 2605.18855): AttnRes's depth attention added to the Pre-Norm
stream instead of replacing it ("additive routing").

Delta AttnRes (`delta_attn_res`), sublayer s (attention and MLP each count; s = 0 .. 2L-1), over the sources of Full
AttnRes, v_0 = the embedding and v_i = f_{i-1} (the deltas h_{i} - h_{i-1} of the stream):

    x_s   = v_0 + sum_{i<s} f_i                                   (the Pre-Norm stream, kept)
    h_s   = x_s + sum_{i<=s} softmax_i( w_s . RMSNorm(v_i) ) v_i  (s >= 1; h_0 = x_0: no source before the first)
    f_s   = F_s(N_s(h_s)),  and the head reads N_final(x_2L)     (no depth attention at the head)

Delta Block (`delta_attn_res_block`): the same sum over Block AttnRes's completed summaries (b_0 = the embedding,
b_k = the sum of block k-1's sublayer outputs; N = `model.attn_res.num_blocks` blocks of 2L / N sublayers), never
over the current block's partial sum, which the stream already holds.

Init: w = 0 (the paper and its blog; the authors' code draws N(0, 0.02^2) as every nn.Linear). Then Full's read is
the mean of its sources, x_s / (s + 1), so h_s = x_s (s + 2) / (s + 1): a positive rescaling, which the sublayer's
LayerNorm or RMSNorm cancels up to its eps, so Delta AttnRes starts as Pre-Norm (tested as eps -> 0). Delta Block's
read, the mean of the completed summaries, leaves out the current block's partial sum: it is not Pre-Norm at init.

Paper and code (docs/variants.md, "Delta Attention Residuals"): the code's block form appends `partial - blocks[-1]`
at a block boundary, which is the block's delta only at the second boundary (from the third on it adds the
embedding back); this implementation uses the block's sum of outputs (its commented-out code's delta). The code
appends a completed block between the next layer's attention and MLP, so a block's first attention does not read
the block just completed; here every sublayer reads every block completed before it, as Block AttnRes does. The
keys' RMSNorm has no gain here (w . (g * k) = (w * g) . k, as in AttnRes).

On the depth store of AttnRes (resnorm.model.residual.attn_res): the same slots, phase 1 and phase 2. The stream's
value x_s is the sum of the completed slots (plus Block's partial sum, which rides the carry), one more weighting in
phase 1's pass over the store. With blocks of one sublayer (Full) the carry is the stream c instead, which carries
the stream's gradient (`_stream`): the sum of slots' own cotangent would be store-sized at every sublayer, and the
backward recomputes c from the final store (`_x_from_store`), so it keeps nothing per layer beyond what AttnRes
keeps. Params: two pseudo-queries per layer ([2, D], attention's then the MLP's).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.model.depth_store import Store, layer_widths
from resnorm.model.residual import attn_res
from resnorm.model.residual.base import Variant, register


def _single(cfg) -> bool:
  """Blocks of one sublayer (Full, or Block at N = 2L): the carry is the stream c, not a block's partial sum."""
  return 2 * cfg.num_layers // attn_res.num_blocks(cfg) == 1


def _stream(c_BTD, x_sum_BTD):
  """The stream (float32): its value the store's sum of slots x_sum_BTD, its gradient through the carried stream c
  (c - c = 0 exactly). The sum's own cotangent would reach every slot of the store at every sublayer, one
  store-sized array per layer in the backward; c's flows back along the carry. The value never depends on c, so
  the backward may recompute c from the final store (`_x_from_store`) and the forward it replays is the same."""
  c = c_BTD.astype(jnp.float32)
  return jax.lax.stop_gradient(x_sum_BTD) + (c - jax.lax.stop_gradient(c))


class DeltaAttn(nn.Module):
  """The attention sublayer, 2l: phase 1 for both of layer l's queries and the stream's sum of completed slots in
  one pass; its read is phase 1's alone (a block's partial sum is never a source)."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    eps, dt = self.cfg.norm_eps, store.buf.dtype
    w_CD = self.param("query", nn.initializers.zeros, (2, store.buf.shape[-1]))
    n, i = attn_res.block_of(self.cfg, sub)
    full = _single(self.cfg)                      # store.x is the stream c, not a partial sum
    valid_S = jnp.arange(store.num_slots) <= n
    stats = attn_res.depth_stats(store, w_CD, valid_S, eps, with_sum=True)
    _, e_CSBT, l_CBT, o_CBTD = stats
    if full:
      x_BTD = _stream(store.x, o_CBTD[2])
    else:
      x_BTD = o_CBTD[2] + jnp.where(i > 0, store.x, jnp.zeros_like(store.x)).astype(jnp.float32)
    first = sub == 0                              # no source before the first sublayer: h_0 = x_0
    read_BTD = jnp.where(first, 0.0, o_CBTD[0] / l_CBT[0][..., None])
    a_BTS = jnp.where(first, 0.0, jnp.moveaxis(e_CSBT[0] / l_CBT[0][None], 0, -1))
    h_BTD = (x_BTD + read_BTD).astype(dt)
    f_BTD = branch(norm(h_BTD))
    out = _join(self.cfg, store, sub, f_BTD).replace(pending=(stats, w_CD[1], n, x_BTD + f_BTD, f_BTD))
    return out, {"u": h_BTD, "f": f_BTD, "depth": a_BTS}


class DeltaMLP(nn.Module):
  """The MLP sublayer, 2l + 1: phase 2 adds the block attention completed when the MLP starts a new block (Full:
  always, attention's output)."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    stats, w_D, n_attn, x_BTD, f_attn_BTD = store.pending
    _, i = attn_res.block_of(self.cfg, sub)
    # the source phase 1 missed: attention's output (Full), or its block's partial sum after it (Block)
    p_BTD = f_attn_BTD if _single(self.cfg) else store.x
    read_BTD, a_BTS = attn_res.merge(stats, 1, p_BTD, i == 0, w_D, self.cfg.norm_eps, n_attn + 1)
    h_BTD = (x_BTD + read_BTD).astype(store.buf.dtype)
    f_BTD = branch(norm(h_BTD))
    return _join(self.cfg, store, sub, f_BTD), {"u": h_BTD, "f": f_BTD, "depth": a_BTS}


def _join(cfg, store: Store, sub, f_BTD) -> Store:
  """The sublayer's output written to its slot; the carry adds it to the stream c (blocks of one sublayer) or to
  the block's partial sum (attn_res.join)."""
  if _single(cfg):
    return store.with_x(store.x + f_BTD.astype(store.buf.dtype)).write(attn_res.block_of(cfg, sub)[0] + 1, f_BTD)
  return attn_res.join(cfg, store, sub, f_BTD)


def _start(cfg, x_BTD):
  """AttnRes's store; with blocks of one sublayer the carry is the stream, c_0 = the embedding (else the block's
  partial sum, 0)."""
  store = attn_res.start(cfg, x_BTD)
  return store.with_x(x_BTD) if _single(cfg) else store


def _finish(cfg, store: Store):
  """The stream after the last sublayer: every slot's sum (the last block is complete)."""
  x_BTD = store.weighted_shared(jnp.ones((store.num_slots,), jnp.float32))
  return (_stream(store.x, x_BTD) if _single(cfg) else x_BTD).astype(store.buf.dtype)


def _x_from_store(cfg, params, buf_SBTD, l):
  """Full's carried stream c at layer l's start, the sum of slots 0 .. 2l, from the final store (only its
  cotangent matters: its value enters the forward as c - c = 0)."""
  keep_S = (jnp.arange(buf_SBTD.shape[0]) <= 2 * l).astype(jnp.float32)
  return Store(x=None, buf=buf_SBTD, kernels=cfg.kernels).weighted_shared(keep_S).astype(buf_SBTD.dtype)


def _params(cfg) -> int:
  return 2 * cfg.num_layers * cfg.d_model


def _flops(cfg) -> int:
  """Per token, forward, as computed: per layer phase 1 over the slots of its run (layer_widths) for both queries
  and the stream's sum (the key RMS once, 3 D; two logits and three weighted sums, 2 D each); per layer the
  attention's read (its division, D; the add to the stream, D; the stream's add of f, D), the MLP's phase 2 (9 D)
  and its add (D); the head's sum over every slot (2 D per slot)."""
  d = cfg.d_model
  return 13 * sum(layer_widths(cfg, attn_res.reach)) * d + cfg.num_layers * 13 * d + \
      2 * (attn_res.num_blocks(cfg) + 1) * d


# Full's backward recomputes c per layer; Block's carry (the partial sum at N < 2L) is kept
for _name, _x_of in (("delta_attn_res", _x_from_store), ("delta_attn_res_block", None)):
  register(Variant(_name, (DeltaAttn, DeltaMLP), start=_start, finish=_finish, extra_params=_params,
                   roles={"query": "readout"}, extra_flops=_flops, check=attn_res.check_blocks, section="attn_res",
                   reach=attn_res.reach, x_from_store=_x_of))
