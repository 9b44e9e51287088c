"""Depth scaling: the four main variants at 12 to 96 layers, default :cpu training."""


def sweep(add):
  for residual in ("pre_norm", "post_norm", "hc", "mhc"):
    for layers in (12, 24, 48, 96):
      add(config=f"configs/{residual}_{layers}l.py", name=f"{residual}-{layers}l")
