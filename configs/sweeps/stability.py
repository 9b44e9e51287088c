"""Stability map: variant x depth x lr x warmup (Xiong et al.'s question: who needs warmup, at which lr)."""

STEPS = 200


def sweep(add):
  for residual in ("pre_norm", "post_norm", "hc", "mhc"):
    for layers in (12, 48):
      for lr in (3e-4, 1e-3, 3e-3):
        for warmup in (0, STEPS // 10):
          add(config=f"configs/pre_norm_{layers}l.py", name=f"{residual}-{layers}l-lr{lr:g}-wu{warmup}",
              **{"model.residual": residual, "train.lr": lr, "train.warmup_steps": warmup, "train.steps": STEPS})
