"""Analytic parameter count and FLOPs per token (XLA's cost_analysis is wrong under scan and remat).

Training FLOPs per token = 3 x forward (backward = 2 x forward). Forward per token: 2 x every matmul weight
(attention q, k, v, o; MLP; the head; not the embedding gather) + attention scores and values, 2 * 2 * T * D per
layer (full T x T, the PaLM convention; causal masking is not subtracted) + the variant's own terms (HC/mHC mixing).
"""
from resnorm.model import residual
from resnorm.model.norms import num_params


def _norm_size(m) -> int:
  return num_params(m, m.d_model)


def param_count(m) -> int:
  v = residual.get(m.residual)
  d, f, L = m.d_model, m.mlp_dim, m.num_layers
  count = m.vocab_size * d
  count += 0 if m.tie_embed else d * m.vocab_size
  count += m.max_len * d if m.pos == "learned" else 0
  count += L * (4 * d * d + 2 * d * f)
  count += 2 * L * _norm_size(m) if v.block_norms else 0
  count += _norm_size(m) if v.final_norm else 0
  return count + v.extra_params(m)


def forward_flops_per_token(m, seq_len: int) -> int:
  d, f, L = m.d_model, m.mlp_dim, m.num_layers
  matmul = L * (4 * d * d + 2 * d * f) + d * m.vocab_size
  attention = L * 2 * 2 * seq_len * d
  return 2 * matmul + attention + residual.get(m.residual).extra_flops(m)


def train_flops_per_token(m, seq_len: int) -> int:
  return 3 * forward_flops_per_token(m, seq_len)
