"""Issue 49's placements against Pre-Norm: Full and Block Attention Residuals and Derf (under Pre-Norm), 12 layers,
each variant's :cpu config (200 steps, lr 1e-3), 5 paired seeds (0-4), on Python source and on Shakespeare. 40 runs;
a seed gives every variant the same base weights and data order. Not a claim of the report: docs/variants.md gives
each placement's paired difference with its 95% interval."""


def sweep(add):
  for corpus in ("pystdlib", "shakespeare"):
    for seed in range(5):
      for name, config in (("pre_norm", "configs/pre_norm_12l.py"), ("attn_res", "configs/attn_res_12l.py"),
                           ("attn_res_block", "configs/attn_res_block_12l.py"),
                           ("derf_pre_norm", "configs/derf_pre_norm_12l.py")):
        add(config=config, name=f"{name}-12l-{corpus}-s{seed}", **{"data.name": corpus, "seed": seed})
