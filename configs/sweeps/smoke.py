"""Two tiny runs for tests: pre_norm and hc (configs/tiny.py), 4 steps, on the files given by RESNORM_SMOKE_DATA."""
import os

RUN = {"train.steps": 4, "train.warmup_steps": 1, "train.eval_every": 2, "train.ckpt_every": 2, "train.diag_every": 2}


def sweep(add):
  data = {"data.name": "text_files", "data.paths": os.environ["RESNORM_SMOKE_DATA"]} \
      if os.environ.get("RESNORM_SMOKE_DATA") else {}
  for residual in ("pre_norm", "hc"):
    add(config=f"configs/tiny.py:{residual}", name=f"smoke-{residual}", **{**RUN, **data})
