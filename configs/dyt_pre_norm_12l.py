"""pre_norm with DyT in place of every LayerNorm (model.norm=dyt: "Transformers without Normalization"), 12 layers."""
from configs import base

_experiment = base.experiment("pre_norm", 12)


def get_config(arg: str | None = None):
  c = _experiment(arg)
  c.model.norm = "dyt"
  return c
