"""HybridNorm (Zhuo et al. 2025, arXiv 2503.04598; code BryceZhuo/HybridNorm): QKV normalization inside attention
and Post-Norm on the FFN, per block

    Y  = X + Attn(N_q(X W_q), N_k(X W_k), N_v(X W_v))      no pre-norm on attention
    X' = N(Y) + FFN(N(Y))                                  the FFN's residual starts after its norm

then a final norm before the head. N_q, N_k, N_v (params `attn/qkv/{q,k,v}_norm`) act before RoPE. With
`model.hybrid_norm.qkv_norm=head` (the default) each normalizes every head's K features on its own, with one affine
of size K shared by the heads: the authors' OLMo-based code (`dense_model/olmo/model.py`, `use_{query,key,value}_norm`)
builds q_norm, k_norm, v_norm with size d_model // n_heads and applies them to the [B, heads, T, head_dim] tensors.
`qkv_norm=all` normalizes each projection over all its H*K features with an affine of size H*K (resnorm's form before
2026-12-01; at the init of configs/hybrid_norm_12l.py:cpu the two forms' logits differ by up to 1.3, mean 0.27,
against a logit std of 0.58). N is the MLP sublayer's own norm and the attention sublayer's own norm is unused.

HybridNorm* (`model.hybrid_norm.first_pre_norm`, the authors' `norm_pos_special_config` for block 0): the first
block is Pre-Norm in both sublayers, Y = X + Attn_QKV(N(X)) (QKV norms kept), X' = Y + FFN(N(Y)); it is a
separate one-layer scanned segment `blocks_first`, the others are `blocks`.
"""
import flax.linen as nn

from resnorm.core.errors import check
from resnorm.model.norms import make_norm, num_params
from resnorm.model.residual.base import Variant, register
from resnorm.model.residual.classic import PreNorm


QKV_NORMS = ("head", "all")


class QKVNorm(nn.Module):
  """The attention hook (resnorm.model.residual.base): N(q), N(k), N(v) per head (over K, `qkv_norm=head`) or over all
  H*K features (`all`), then RoPE on q and k."""
  cfg: object

  @nn.compact
  def __call__(self, q_BTHK, k_BTHK, v_BTHK, rope):
    def nrm(name, x):
      if self.cfg.hybrid_norm.qkv_norm == "head":
        return make_norm(self.cfg, name)(x)  # the last axis is K: one affine of size K for every head
      b, t, h, kd = x.shape
      return make_norm(self.cfg, name)(x.reshape(b, t, h * kd)).reshape(x.shape)
    return rope(nrm("q_norm", q_BTHK)), rope(nrm("k_norm", k_BTHK)), nrm("v_norm", v_BTHK)


class HybridAttention(nn.Module):
  """Y = X + Attn_QKV(X)."""
  cfg: object
  attn_qkv = QKVNorm

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    y = branch(x)
    return x + y, {"u": x, "f": y}


class HybridFFN(nn.Module):
  """X' = N(Y) + FFN(N(Y))."""
  cfg: object

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    h = norm(x)
    y = branch(h)
    return h + y, {"u": x, "f": y}


class FirstAttention(nn.Module):
  """HybridNorm*'s first block: Y = X + Attn_QKV(N(X))."""
  cfg: object
  attn_qkv = QKVNorm

  @nn.compact
  def __call__(self, x, branch, norm, layer, sub):
    y = branch(norm(x))
    return x + y, {"u": x, "f": y}


def _segments(cfg):
  if not cfg.hybrid_norm.first_pre_norm:
    return (("blocks", cfg.num_layers, (HybridAttention, HybridFFN)),)
  return (("blocks_first", 1, (FirstAttention, PreNorm)), ("blocks", cfg.num_layers - 1, (HybridAttention, HybridFFN)))


def _extra_params(cfg):
  """Three QKV norms per block (K or H*K features each), minus the unused attention norm (kept by HybridNorm*'s
  first block)."""
  qkv = cfg.d_model // cfg.num_heads if cfg.hybrid_norm.qkv_norm == "head" else cfg.d_model
  size = num_params(cfg, cfg.d_model)
  return cfg.num_layers * (3 * num_params(cfg, qkv) - size) + (size if cfg.hybrid_norm.first_pre_norm else 0)


def _check(cfg):
  q = cfg.hybrid_norm.qkv_norm
  check(q in QKV_NORMS, f"model.hybrid_norm.qkv_norm={q!r} is unknown; known: {', '.join(QKV_NORMS)}")


register(Variant("hybrid_norm", (HybridAttention, HybridFFN), segments=_segments, extra_params=_extra_params,
                 check=_check))
