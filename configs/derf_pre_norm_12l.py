"""pre_norm with Derf in place of every LayerNorm (model.norm=derf: "Stronger Normalization-Free Transformers",
arXiv 2512.10938), 12 layers."""
from configs import base

_experiment = base.experiment("pre_norm", 12)


def get_config(arg: str | None = None):
  c = _experiment(arg)
  c.model.norm = "derf"
  return c
