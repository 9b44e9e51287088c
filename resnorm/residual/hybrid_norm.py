"""HybridNorm (Zhuo et al. 2025, arXiv 2503.04598; code BryceZhuo/HybridNorm): QKV normalization inside attention
and Post-Norm on the FFN, per block

    Y  = X + Attn(N_q(X W_q), N_k(X W_k), N_v(X W_v))      no pre-norm on attention
    X' = N(Y) + FFN(N(Y))                                  the FFN's residual starts after its norm

then a final norm before the head. N_q, N_k, N_v (params `attn/qkv/{q,k,v}_norm`) normalize each projection over
all its H*K features before RoPE, as the authors' OLMo-based code (`use_{query,key,value}_norm`) does; N is the MLP
sublayer's own norm and the attention sublayer's own norm is unused.

HybridNorm* (`model.hybrid_norm.first_pre_norm`, the authors' `norm_pos_special_config` for block 0): the first
block is Pre-Norm in both sublayers, Y = X + Attn_QKV(N(X)) (QKV norms kept), X' = Y + FFN(N(Y)); it is a
separate one-layer scanned segment `blocks_first`, the others are `blocks`.
"""
import flax.linen as nn

from resnorm.norms import make_norm
from resnorm.residual.base import Variant, register
from resnorm.residual.classic import PreNorm


class QKVNorm(nn.Module):
  """The attention hook (resnorm.residual.base): N(q), N(k), N(v) over H*K features, then RoPE on q and k."""
  cfg: object

  @nn.compact
  def __call__(self, q, k, v, rope):
    def nrm(name, x):
      b, t, h, kd = x.shape
      return make_norm(self.cfg, name)(x.reshape(b, t, h * kd)).reshape(x.shape)
    return rope(nrm("q_norm", q)), rope(nrm("k_norm", k)), nrm("v_norm", v)


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
  """Three QKV norms per block, minus the unused attention norm (kept by HybridNorm*'s first block)."""
  size = cfg.d_model * (2 if cfg.norm == "layernorm" else 1)
  return 2 * cfg.num_layers * size + (size if cfg.hybrid_norm.first_pre_norm else 0)


register(Variant("hybrid_norm", (HybridAttention, HybridFFN), segments=_segments, extra_params=_extra_params))
