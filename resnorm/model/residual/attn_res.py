"""Attention Residuals (Kimi Team, arXiv 2603.15031, Sec. 3): each sublayer's input is a softmax attention over
depth, a learned weighting of the embedding and the earlier sublayers' outputs, in place of their unit-weight sum.

Full AttnRes (`attn_res`), sublayer l (attention and MLP each count; l = 0 .. 2L-1), sources v_0 = the embedding
and v_i = f_{i-1}, the output of sublayer i-1:

    alpha_{i->l} = softmax_i( w_l . RMSNorm(v_i) )   over i = 0 .. l          (Eqs. 2-3: phi(q, k) = exp(q . k))
    h_l          = sum_i alpha_{i->l} v_i                                       (Eq. 4)
    f_l          = F_l(N_l(h_l))                                                (the sublayer's own Pre-Norm norm)

w_l a learned pseudo-query [D] per sublayer (not input-dependent), keys RMSNorm(v_i) without a gain (a gain g is
redundant: w . (g * k) = (w * g) . k), values the raw outputs; one weight per source and token over the whole
D-vector, no temperature. The head reads one more such attention over all sources (its own w, `final_res`), then
the final norm (Sec. 3.2: "the final output layer aggregates all N block representations").

Block AttnRes (`attn_res_block`, Sec. 3.2): the 2L sublayers form N = `model.attn_res.num_blocks` blocks of
S = 2L / N; a block's summary b_n is the sum of its sublayers' outputs, b_0 the embedding. Sublayer i of block n
attends over b_0 .. b_{n-1} and, from its second sublayer on, the partial sum of block n. Full AttnRes is the case
S = 1, so both are these modules, on a depth store (resnorm.model.depth_store): slot 0 the embedding, slot n + 1
block n's summary, each written once it is complete (Block: rewritten after each of its sublayers, read only by
later blocks); the running partial sum of the current block rides the carry as the store's `x`.

Two phases (Sec. 3.2), per scanned step (a layer's two sublayers; the paper batches a whole block's): phase 1 takes
both sublayers' pseudo-queries against the summaries complete at the layer's start in one pass over the store, and
returns the softmax statistics (max, sum of exponentials, unnormalized sum); phase 2 merges, per sublayer, the one
source not in phase 1 by online softmax: attention's block partial sum, and for the MLP the partial sum after
attention, which is either its block's partial sum or the summary of the block attention completed (the same
vector at the same slot). Equal to one softmax over all of a sublayer's sources (tested against the carry form and
a float64 transcription). The layer's two pseudo-queries are one [2, D] param of the attention sublayer.

Init: w = 0 (Sec. 5: "all pseudo-query vectors must be initialized to zero"), so every weight is 1 / (number of
sources): h_l is the mean of the sources, Pre-Norm's sum divided by their count. Every reader of h_l (the
sublayer's norm, the final norm) is invariant to a positive rescaling up to its eps when it is LayerNorm or RMSNorm,
so under those norms the model computes Pre-Norm's function at init (up to eps; exactly as eps -> 0, tested), and
`pre_norm -> attn_res` upcycling keeps it. Under DyT or Derf (elementwise, not scale-invariant) it does not: the
mean is not the sum.

Memory per token: the store, (N + 1) D values (Full: (2L + 1) D), kept once by the backward, plus each
sublayer's own activations and per layer phase 1's weights, 2 P values. Phase 1 computes over the P slots of the
layer's run of `model.depth_chunks` (the store's prefix that run's last layer reaches; those not yet written at
weight 0): the key norm once and two logits and two sums per slot, 11 P D FLOPs per token per layer, against
14 P D for two separate softmaxes.
The pseudo-queries are not weight-decayed (the paper does not say; they are gates, as HC's static weights).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.depth_store import Store, layer_widths, rms_logit
from resnorm.model.residual.base import Variant, register


# the placements whose blocks are single sublayers (N = 2L); the others read model.attn_res.num_blocks
FULL = ("attn_res", "delta_attn_res")


def num_blocks(cfg) -> int:
  """N: 2L for Full AttnRes (one sublayer per block), model.attn_res.num_blocks for Block AttnRes."""
  return 2 * cfg.num_layers if cfg.residual in FULL else cfg.attn_res.num_blocks


def depth_stats(store: Store, w_CD, valid_S, eps, with_sum=False):
  """Phase 1 (Sec. 3.2's two-phase computation), C pseudo-queries against the store's slots where `valid_S`, in one
  pass over the store for the logits (each key normalized once) and one for the sums: the softmax statistics
  m [C, B, T] (the largest logit, no gradient), e = exp(z - m) [C, S, B, T] (0 where not valid), l = sum_s e, and
  the unnormalized sums o = sum_s e v_s [C, B, T, D] float32; `with_sum`: o has one more row, C, the plain sum of
  the valid slots, in the same pass."""
  z_CSBT = jnp.where(valid_S[None, :, None, None], store.rms_logits(w_CD, eps), -jnp.inf)
  m_CBT = jax.lax.stop_gradient(jnp.max(z_CSBT, axis=1))
  e_CSBT = jnp.exp(z_CSBT - m_CBT[:, None])
  w_CSBT = e_CSBT
  if with_sum:
    ones_1SBT = jnp.broadcast_to(valid_S.astype(jnp.float32)[None, :, None, None], (1,) + e_CSBT.shape[1:])
    w_CSBT = jnp.concatenate([e_CSBT, ones_1SBT])
  return m_CBT, e_CSBT, jnp.sum(e_CSBT, axis=1), store.weighted(w_CSBT)


def merge(stats, c, p_BTD, use, w_D, eps, partial_slot):
  """Phase 2: query c's attention over phase 1's slots and one more source p (the block's partial sum, or the
  summary its block completed in this step) where `use`, merged by online softmax:
  h = (a o_c + b p) / (a l_c + b), a = exp(m_c - m'), b = exp(z_p - m'), m' = max(m_c, z_p). Returns h and the
  weights [B, T, S] (p's at `partial_slot`). `use` False as a Python bool (Full's attention): phase 1's softmax
  alone, with p never read (so the backward keeps no p)."""
  m_CBT, e_CSBT, l_CBT, o_CBTD = stats
  if use is False:
    return o_CBTD[c] / l_CBT[c][..., None], jnp.moveaxis(e_CSBT[c] / l_CBT[c][None], 0, -1)
  z_p = jnp.where(use, rms_logit(p_BTD[None], w_D[None], eps)[0, 0], -jnp.inf)          # [B, T]
  m = jax.lax.stop_gradient(jnp.maximum(m_CBT[c], z_p))
  a, b = jnp.exp(m_CBT[c] - m), jnp.exp(z_p - m)
  den = a * l_CBT[c] + b
  h_BTD = (a[..., None] * o_CBTD[c] + b[..., None] * p_BTD.astype(jnp.float32)) / den[..., None]
  a_BTS = jnp.moveaxis(e_CSBT[c] * (a / den)[None], 0, -1)
  a_BTS = a_BTS + (b / den)[..., None] * (jnp.arange(e_CSBT.shape[1]) == partial_slot)[None, None]
  return h_BTD, a_BTS


def block_of(cfg, sub):
  """(block n, 0-based; the sublayer's place i in it). Blocks of one sublayer (Full) give i = 0 as a Python int: a
  block's partial sum is then never read, and no per-layer carry of it is kept for the backward."""
  per = 2 * cfg.num_layers // num_blocks(cfg)                     # S sublayers per block
  return (sub, 0) if per == 1 else (sub // per, sub % per)


def join(cfg, store: Store, sub, f_BTD) -> Store:
  """Sublayer `sub`'s output joins its block's partial sum (the block's first sublayer starts it), written to the
  block's slot."""
  n, i = block_of(cfg, sub)
  p_BTD = f_BTD if isinstance(i, int) and i == 0 else jnp.where(i > 0, store.x, jnp.zeros_like(store.x)) + f_BTD
  return store.with_x(p_BTD).write(n + 1, p_BTD)


class AttnResAttn(nn.Module):
  """The attention sublayer, 2l: phase 1 for both of layer l's sublayers at once (their pseudo-queries against the
  summaries complete at the layer's start, slots 0..n), then its own phase 2 with its block's partial sum (from its
  block's second sublayer on). Its output joins the partial sum, written to its block's slot."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    eps, dt = self.cfg.norm_eps, store.buf.dtype
    w_CD = self.param("query", nn.initializers.zeros, (2, store.buf.shape[-1]))   # attention's, the MLP's
    n, i = block_of(self.cfg, sub)
    stats = depth_stats(store, w_CD, jnp.arange(store.num_slots) <= n, eps)
    h, a_BTS = merge(stats, 0, store.x, i > 0, w_CD[0], eps, n + 1)
    h_BTD = h.astype(dt)
    f_BTD = branch(norm(h_BTD))
    out = join(self.cfg, store, sub, f_BTD).replace(pending=(stats, w_CD[1], n))
    return out, {"u": h_BTD, "f": f_BTD, "depth": a_BTS}


class AttnResMLP(nn.Module):
  """The MLP sublayer, 2l + 1: its phase 1 came with the attention sublayer's; phase 2 adds the one source written
  since, the partial sum after attention (its block's partial sum, or the summary of the block attention
  completed: the same vector, at slot n + 1 either way)."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    stats, w_D, n_attn = store.pending
    h, a_BTS = merge(stats, 1, store.x, True, w_D, self.cfg.norm_eps, n_attn + 1)
    h_BTD = h.astype(store.buf.dtype)
    f_BTD = branch(norm(h_BTD))
    return join(self.cfg, store, sub, f_BTD), {"u": h_BTD, "f": f_BTD, "depth": a_BTS}   # flush drops `pending`


class FinalAttention(nn.Module):
  """The head's own depth attention over every slot (its own pseudo-query)."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store):
    w_D = self.param("query", nn.initializers.zeros, (store.buf.shape[-1],))
    _, _, l_CBT, o_CBTD = depth_stats(store, w_D[None], jnp.ones((store.num_slots,), bool), self.cfg.norm_eps)
    return (o_CBTD[0] / l_CBT[0][..., None]).astype(store.buf.dtype)


def reach(cfg, l):
  """Layer l's MLP sublayer (2l + 1) writes its block's slot, the highest slot layers 0..l touch."""
  return block_of(cfg, 2 * l + 1)[0] + 2


def start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  buf = jnp.concatenate([x_BTD[None], jnp.zeros((num_blocks(cfg), b, t, d), x_BTD.dtype)], axis=0)
  return Store(x=jnp.zeros_like(x_BTD), buf=buf, kernels=cfg.kernels)


def _finish(cfg, store: Store):
  return FinalAttention(cfg, name="final_res")(store)


def _params(cfg) -> int:
  return (2 * cfg.num_layers + 1) * cfg.d_model


def _flops(cfg) -> int:
  """Per token, forward, as computed: per layer phase 1 over the slots of its run (layer_widths; the ones not yet
  written at weight 0) for both sublayers' queries (the key RMS once, 3 D; two logits and two weighted sums, 2 D
  each); per sublayer phase 2 on one more source (its RMS and logit, 5 D; the merge, 4 D); the head's attention
  over all N + 1 slots (7 D per slot)."""
  d, slots = cfg.d_model, num_blocks(cfg) + 1
  return 11 * sum(layer_widths(cfg, reach)) * d + cfg.num_layers * 2 * 9 * d + 7 * slots * d


def check_blocks(cfg):
  if cfg.residual not in FULL:
    nb, subs = cfg.attn_res.num_blocks, 2 * cfg.num_layers
    check(isinstance(nb, int) and 1 <= nb <= subs and subs % nb == 0,
          f"model.attn_res.num_blocks={nb} must divide the {subs} sublayers of model.num_layers={cfg.num_layers} "
          "(2 per layer) into equal blocks")


for _name in ("attn_res", "attn_res_block"):
  register(Variant(_name, (AttnResAttn, AttnResMLP), start=start, finish=_finish, extra_params=_params,
                   roles={"query": "readout", "final_res/query": "final_readout"}, extra_flops=_flops,
                   check=check_blocks, section="attn_res", reach=reach))
