"""Two tiny runs for tests: pre_norm and hc at 2 layers, 4 steps, on the files given by RESNORM_SMOKE_DATA."""
import os

TINY = {"model.num_layers": 2, "model.d_model": 32, "model.num_heads": 2, "model.mlp_dim": 64, "data.seq_len": 16,
        "train.batch_size": 4, "data.eval_batches": 2, "train.steps": 4, "train.warmup_steps": 1,
        "train.log_every": 1, "train.eval_every": 2, "train.ckpt_every": 2, "train.diag_every": 2}


def sweep(add):
  data = {"data.name": "text_files", "data.paths": os.environ["RESNORM_SMOKE_DATA"]} \
      if os.environ.get("RESNORM_SMOKE_DATA") else {}
  for residual in ("pre_norm", "hc"):
    add(config="configs/pre_norm_12l.py", name=f"smoke-{residual}", **{"model.residual": residual, **TINY, **data})
