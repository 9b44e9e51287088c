"""The later placements beside Pre- and Post-Norm: 12 layers, each variant's own :cpu config (200 steps)."""


def sweep(add):
  for residual in ("pre_norm", "post_norm", "admin", "resi_dual", "hybrid_norm", "denseformer", "ngpt", "mhc_lite"):
    add(config=f"configs/{residual}_12l.py", name=f"{residual}-12l")
