"""The sweep behind docs/results.md: 4 variants x lr {3e-4, 1e-3, 3e-3} x warmup {0, 10%} at 24 layers."""

STEPS = 150


def sweep(add):
  for residual in ("pre_norm", "post_norm", "hc", "mhc"):
    for lr in (3e-4, 1e-3, 3e-3):
      for warmup in (0, STEPS // 10):
        add(config="configs/pre_norm_24l.py", name=f"{residual}-lr{lr:g}-wu{warmup}",
            **{"model.residual": residual, "train.lr": lr, "train.warmup_steps": warmup, "train.steps": STEPS,
               "train.eval_every": 50, "train.ckpt_every": 150, "train.diag_every": 50})
