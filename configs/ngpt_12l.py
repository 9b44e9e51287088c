"""ngpt, 12 layers, with the paper's optimizer settings: no weight decay, no warmup (2410.01131; the matrices are
renormalized after every step, resnorm.step.optim.unit_norm). """
from configs import base

_experiment = base.experiment("ngpt", 12, cpu_warmup=0, tpu_warmup=0)


def get_config(arg=None):
  c = _experiment(arg)
  c.train.weight_decay = 0.0
  return c
