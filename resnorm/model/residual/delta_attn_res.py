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

On the depth store of AttnRes (resnorm.model.residual.attn_res): the same slots, phase 1 and phase 2, and the same
carry (the current block's partial sum). The stream is not carried: x_s is the sum of the completed slots plus the
partial sum, one more weighting in phase 1's pass over the store, so the backward keeps nothing per layer beyond
what AttnRes keeps (Full: not even the partial sum, which its single-sublayer blocks never read). Params: two
pseudo-queries per layer ([2, D], attention's then the MLP's).
"""
import flax.linen as nn
import jax.numpy as jnp

from resnorm.model.depth_store import Store, layer_widths
from resnorm.model.residual import attn_res
from resnorm.model.residual.base import Variant, register


class DeltaAttn(nn.Module):
  """The attention sublayer, 2l: phase 1 for both of layer l's queries and the stream's sum of completed slots in
  one pass; its read is phase 1's alone (a block's partial sum is never a source)."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    eps, dt = self.cfg.norm_eps, store.buf.dtype
    w_CD = self.param("query", nn.initializers.zeros, (2, store.buf.shape[-1]))
    n, i = attn_res.block_of(self.cfg, sub)
    stats = attn_res.depth_stats(store, w_CD, jnp.arange(store.num_slots) <= n, eps, with_sum=True)
    _, e_CSBT, l_CBT, o_CBTD = stats
    x_BTD = o_CBTD[2]
    if not (isinstance(i, int) and i == 0):        # Full (i = 0 always): no partial sum to add, none kept per layer
      x_BTD = x_BTD + jnp.where(i > 0, store.x, jnp.zeros_like(store.x)).astype(jnp.float32)
    first = sub == 0                              # no source before the first sublayer: h_0 = x_0
    read_BTD = jnp.where(first, 0.0, o_CBTD[0] / l_CBT[0][..., None])
    a_BTS = jnp.where(first, 0.0, jnp.moveaxis(e_CSBT[0] / l_CBT[0][None], 0, -1))
    h_BTD = (x_BTD + read_BTD).astype(dt)
    f_BTD = branch(norm(h_BTD))
    out = attn_res.join(self.cfg, store, sub, f_BTD).replace(pending=(stats, w_CD[1], n, x_BTD + f_BTD))
    return out, {"u": h_BTD, "f": f_BTD, "depth": a_BTS}


class DeltaMLP(nn.Module):
  """The MLP sublayer, 2l + 1: phase 2 adds the block attention completed when the MLP starts a new block (Full:
  always, attention's output)."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    stats, w_D, n_attn, x_BTD = store.pending
    _, i = attn_res.block_of(self.cfg, sub)
    read_BTD, a_BTS = attn_res.merge(stats, 1, store.x, i == 0, w_D, self.cfg.norm_eps, n_attn + 1)
    h_BTD = (x_BTD + read_BTD).astype(store.buf.dtype)
    f_BTD = branch(norm(h_BTD))
    return attn_res.join(self.cfg, store, sub, f_BTD), {"u": h_BTD, "f": f_BTD, "depth": a_BTS}


def _finish(cfg, store: Store):
  """The stream after the last sublayer: every slot's sum (the last block is complete)."""
  return store.weighted_shared(jnp.ones((store.num_slots,), jnp.float32)).astype(store.buf.dtype)


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


for _name in ("delta_attn_res", "delta_attn_res_block"):
  register(Variant(_name, (DeltaAttn, DeltaMLP), start=attn_res.start, finish=_finish, extra_params=_params,
                   roles={"query": "readout"}, extra_flops=_flops, check=attn_res.check_blocks, section="attn_res",
                   reach=attn_res.reach))
