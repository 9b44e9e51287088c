"""The peer-comparison shape of docs/performance.md: nanoGPT-like, d_model 128, 12 layers, 4 heads, MLP 512,
seq 128, batch 16, learned positions, float32, AdamW. For `python -m resnorm.bench --config=configs/peer.py
--residuals=pre_norm,hc,mhc` next to tools/peer_nanogpt.py (nanoGPT's own model.py, and its blocks in lucidrains'
HC and mHC); tools/peer_ab.sh alternates the two."""
from configs import base


def get_config(arg: str | None = None):
  c = base.get_config(arg)
  c.model.d_model, c.model.num_heads, c.model.mlp_dim, c.model.num_layers = 128, 4, 512, 12
  c.model.pos = "learned"
  c.data.seq_len, c.train.batch_size = 128, 16
  return c
