"""Report v5's pilot ladder (resnorm/results/v5/design.py): Pre-Norm alone at the ladder's widths, seed 0, both
corpora, each width at the design's tokens per param. It gives the slope of loss against compute at this scale,
from which the design's multiplier parts get their per-seed sd. 8 runs; not records of the report."""
from resnorm.results.v5 import design as v5


def sweep(add):
  for corpus in v5.CORPORA:
    for d in v5.LADDER_D:
      steps = v5.steps(d)
      add(config="configs/pre_norm_12l.py", name=f"pre_norm-d{d}-{corpus}-s0",
          **{"data.name": corpus, "seed": 0, "model.d_model": d, "model.num_heads": d // v5.HEAD_DIM,
             "model.mlp_dim": 4 * d, "train.steps": steps, "train.warmup_steps": max(1, steps // 10)})
