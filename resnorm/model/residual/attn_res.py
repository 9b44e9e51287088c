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
S = 1, so both are this one module, on a depth store (resnorm.model.depth_store): slot 0 the embedding, slot n + 1
block n's summary, each written once it is complete (Block: rewritten after each of its sublayers, read only by
later blocks); the running partial sum of the current block rides the carry as the store's `x`.

Init: w = 0 (Sec. 5: "all pseudo-query vectors must be initialized to zero"), so every weight is 1 / (number of
sources): h_l is the mean of the sources, Pre-Norm's sum divided by their count. Every reader of h_l (the
sublayer's norm, the final norm) is invariant to a positive rescaling up to its eps when it is LayerNorm or RMSNorm,
so under those norms the model computes Pre-Norm's function at init (up to eps; exactly as eps -> 0, tested), and
`pre_norm -> attn_res` upcycling keeps it. Under DyT or Derf (elementwise, not scale-invariant) it does not: the
mean is not the sum.

Memory per token: the store, (N + 1) D values (Full: (2L + 1) D), kept once by the backward, plus each
sublayer's own activations; the per-sublayer depth weights are (N + 2) values. Each sublayer computes its logits
and weighted sum over all N + 1 slots (the ones it does not read at weight 0): 7 (N + 1) D FLOPs per token.
The pseudo-queries are not weight-decayed (the paper does not say; they are gates, as HC's static weights).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.depth_store import Store, rms_logit
from resnorm.model.residual.base import Variant, register


def num_blocks(cfg) -> int:
  """N: 2L for Full AttnRes (one sublayer per block), model.attn_res.num_blocks for Block AttnRes."""
  return 2 * cfg.num_layers if cfg.residual == "attn_res" else cfg.attn_res.num_blocks


class DepthAttention(nn.Module):
  """h = sum_i softmax_i(w . RMSNorm(v_i)) v_i over the store's slots where `valid_S` and, where `use_partial`,
  the block's partial sum; returns h and the weights [B, T, S] (the partial's at slot `partial_slot`)."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, valid_S, partial_slot=None, use_partial=False):
    eps, dt = self.cfg.norm_eps, store.buf.dtype
    w_D = self.param("query", nn.initializers.zeros, (store.buf.shape[-1],))
    z_SBT = jnp.where(valid_S[:, None, None], store.rms_logits(w_D, eps), -jnp.inf)
    if partial_slot is None:
      a_SBT = jax.nn.softmax(z_SBT, axis=0)
      return store.weighted(a_SBT[None])[0].astype(dt), jnp.moveaxis(a_SBT, 0, -1)
    p_BTD = store.x
    z_p = jnp.where(use_partial, rms_logit(p_BTD[None], w_D, eps), -jnp.inf)             # [1, B, T]
    a = jax.nn.softmax(jnp.concatenate([z_SBT, z_p], axis=0), axis=0)
    a_SBT, a_p = a[:-1], a[-1]
    h_BTD = store.weighted(a_SBT[None])[0] + a_p[..., None] * p_BTD.astype(jnp.float32)
    a_BTS = jnp.moveaxis(a_SBT, 0, -1) + a_p[..., None] * (jnp.arange(store.num_slots) == partial_slot)[None, None]
    return h_BTD.astype(dt), a_BTS


class AttnResSublayer(nn.Module):
  """Sublayer `sub` reads the summaries of the blocks before its own (and its block's partial sum after the block's
  first sublayer), adds its output to the partial sum and writes that to its block's slot."""
  cfg: object

  @nn.compact
  def __call__(self, store: Store, branch, norm, layer, sub):
    per = 2 * self.cfg.num_layers // num_blocks(self.cfg)          # S sublayers per block
    n, i = sub // per, sub % per                                    # block n (0-based), i-th sublayer in it
    valid = jnp.arange(store.num_slots) <= n
    h_BTD, a_BTS = DepthAttention(self.cfg, name="depth")(store, valid, n + 1, i > 0)
    f_BTD = branch(norm(h_BTD))
    p_BTD = jnp.where(i > 0, store.x, jnp.zeros_like(store.x)) + f_BTD
    return store.with_x(p_BTD).write(n + 1, p_BTD), {"u": h_BTD, "f": f_BTD, "depth": a_BTS}


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  buf = jnp.concatenate([x_BTD[None], jnp.zeros((num_blocks(cfg), b, t, d), x_BTD.dtype)], axis=0)
  return Store(x=jnp.zeros_like(x_BTD), buf=buf, kernels=cfg.kernels)


def _finish(cfg, store: Store):
  h_BTD, _ = DepthAttention(cfg, name="final_res")(store, jnp.ones((store.num_slots,), bool))
  return h_BTD


def _params(cfg) -> int:
  return (2 * cfg.num_layers + 1) * cfg.d_model


def _flops(cfg) -> int:
  """Per token, forward: each of the 2L sublayers and the head's aggregation run over all N + 1 slots (the masked
  ones too): the key RMS (3 D), the logits (2 D) and the weighted sum (2 D) per slot."""
  return (2 * cfg.num_layers + 1) * (num_blocks(cfg) + 1) * 7 * cfg.d_model


def _check(cfg):
  if cfg.residual == "attn_res_block":
    nb, subs = cfg.attn_res.num_blocks, 2 * cfg.num_layers
    check(isinstance(nb, int) and 1 <= nb <= subs and subs % nb == 0,
          f"model.attn_res.num_blocks={nb} must divide the {subs} sublayers of model.num_layers={cfg.num_layers} "
          "(2 per layer) into equal blocks")


for _name in ("attn_res", "attn_res_block"):
  register(Variant(_name, AttnResSublayer, start=_start, finish=_finish, extra_params=_params,
                   extra_flops=_flops, check=_check, section="attn_res"))
