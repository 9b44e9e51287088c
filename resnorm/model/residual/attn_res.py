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
S = 1, so both are this one module: the scan carry holds N + 1 slots [B, T, N+1, D] (slot 0 the embedding, slot
n + 1 block n's running sum), and a mask picks the slots a sublayer reads.

Init: w = 0 (Sec. 5: "all pseudo-query vectors must be initialized to zero"), so every weight is 1 / (number of
sources): h_l is the mean of the sources, Pre-Norm's sum divided by their count. Every reader of h_l (the
sublayer's norm, the final norm) is invariant to a positive rescaling up to its eps, so at init the model computes
Pre-Norm's function (up to eps; exactly as eps -> 0, tested), and `pre_norm -> attn_res` upcycling keeps it.

Memory: the carry is (N + 1) D values per token, and the scan's backward keeps the carry of every block: for Full
AttnRes L (2L + 1) D per token, quadratic in depth (the paper's own implementation keeps each output once, O(L D)).
The pseudo-queries are not weight-decayed (the paper does not say; they are gates, as HC's static weights).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from resnorm.core.errors import check
from resnorm.model.residual.base import Variant, register


def num_blocks(cfg) -> int:
  """N: 2L for Full AttnRes (one sublayer per block), model.attn_res.num_blocks for Block AttnRes."""
  return 2 * cfg.num_layers if cfg.residual == "attn_res" else cfg.attn_res.num_blocks


class DepthAttention(nn.Module):
  """h = sum_i softmax_i(w . RMSNorm(v_i)) v_i over the slots where `valid_S`; returns h and the weights [B,T,S]."""
  cfg: object

  @nn.compact
  def __call__(self, s_BTSD, valid_S):
    w_D = self.param("query", nn.initializers.zeros, (s_BTSD.shape[-1],))
    v = s_BTSD.astype(jnp.float32)
    k = v * jax.lax.rsqrt(jnp.mean(jnp.square(v), axis=-1, keepdims=True) + self.cfg.norm_eps)
    logits = jnp.where(valid_S[None, None], jnp.einsum("btsd,d->bts", k, w_D), -jnp.inf)
    a_BTS = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bts,btsd->btd", a_BTS, v).astype(s_BTSD.dtype), a_BTS


class AttnResSublayer(nn.Module):
  """Sublayer `sub` reads the slots of the blocks before its own (and its block's partial sum after the block's
  first sublayer), and adds its output to its block's slot."""
  cfg: object

  @nn.compact
  def __call__(self, s_BTSD, branch, norm, layer, sub):
    per = 2 * self.cfg.num_layers // num_blocks(self.cfg)          # S sublayers per block
    n, i = sub // per, sub % per                                    # block n (0-based), i-th sublayer in it
    j = jnp.arange(s_BTSD.shape[2])
    valid = (j <= n) | ((j == n + 1) & (i > 0))
    h_BTD, a_BTS = DepthAttention(self.cfg, name="depth")(s_BTSD, valid)
    f_BTD = branch(norm(h_BTD))
    slot = jax.lax.dynamic_index_in_dim(s_BTSD, n + 1, axis=2, keepdims=False)
    s_BTSD = jax.lax.dynamic_update_index_in_dim(s_BTSD, slot + f_BTD, n + 1, axis=2)
    return s_BTSD, {"u": h_BTD, "f": f_BTD, "depth": a_BTS}


def _start(cfg, x_BTD):
  b, t, d = x_BTD.shape
  return jnp.concatenate([x_BTD[:, :, None], jnp.zeros((b, t, num_blocks(cfg), d), x_BTD.dtype)], axis=2)


def _finish(cfg, s_BTSD):
  h_BTD, _ = DepthAttention(cfg, name="final_res")(s_BTSD, jnp.ones((s_BTSD.shape[2],), bool))
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
