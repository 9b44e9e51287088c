"""The tiny model the tests, the smoke sweep and the multi-device script share: 2 layers, d 32, 6 steps of batch
4 x 16 tokens. `get_config("RESIDUAL")` picks the variant (default pre_norm)."""
from configs import base


def get_config(arg: str | None = None):
  c = base.get_config("cpu")
  c.model.residual = arg or "pre_norm"
  c.model.num_layers = 2
  c.model.d_model, c.model.num_heads, c.model.mlp_dim = 32, 2, 64
  c.model.attn_res.num_blocks = 2  # divides the 2-8 sublayers of the tests' 1-4 layers
  c.model.laurel.rank = 4
  c.model.remat = "none"  # compiles faster; remat == no remat is its own test
  c.data.seq_len, c.train.batch_size, c.data.eval_batches = 16, 4, 2
  c.data.eval_set, c.data.eval_batch_size = "head", 0  # 2 batches of 4 rows: the tests' evals take milliseconds
  c.train.steps, c.train.warmup_steps = 6, 2
  c.train.log_every, c.train.eval_every, c.train.ckpt_every, c.train.diag_every = 1, 3, 3, 0
  return c
