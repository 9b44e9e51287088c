"""The later placements beside Pre- and Post-Norm: 12 layers, each variant's own :cpu config (200 steps); the 2025
answers too: Frac-Connections, and DyT (norm-free) under Pre- and Post-Norm."""


def sweep(add):
  for residual in ("pre_norm", "post_norm", "admin", "resi_dual", "hybrid_norm", "denseformer", "ngpt", "mhc_lite",
                   "frac_hc"):
    add(config=f"configs/{residual}_12l.py", name=f"{residual}-12l")
  add(config="configs/dyt_pre_norm_12l.py", name="dyt_pre_norm-12l")
  add(config="configs/dyt_pre_norm_12l.py", name="dyt_post_norm-12l", **{"model.residual": "post_norm"})
