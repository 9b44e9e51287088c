"""The 2025 answers against Pre-Norm (docs/variants.md, "DyT and Frac-Connections against Pre-Norm"): pre_norm,
frac_hc (m = 4) and DyT under Pre-Norm, 12 layers, each variant's :cpu config (200 steps, lr 1e-3), seeds 0-2, on
Python source and on Shakespeare. 18 runs, paired: a seed gives every variant the same base weights and data."""


def sweep(add):
  for corpus in ("pystdlib", "shakespeare"):
    for seed in (0, 1, 2):
      for name, config in (("pre_norm", "configs/pre_norm_12l.py"), ("frac_hc", "configs/frac_hc_12l.py"),
                           ("dyt_pre_norm", "configs/dyt_pre_norm_12l.py")):
        add(config=config, name=f"{name}-12l-{corpus}-s{seed}", **{"data.name": corpus, "seed": seed})
