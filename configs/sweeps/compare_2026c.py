"""The 2026 placements beside Pre-Norm, Post-Norm and their nearest relatives, at 12 and 48 layers: Keel (beside
Post-Norm and DeepNorm), KromHC (beside mHC), Deep Delta Learning (the code's value and the paper's), the speedrun's
residual scalars (nanochat's and modded-nanogpt's backout presets) and Delta AttnRes, Full and Block (beside Full
and Block AttnRes). Each variant's :cpu config (d 64, 200 steps, lr 1e-3, warmup 20) with model.num_layers set,
3 paired seeds (0-2), Python source. 84 runs. A smoke comparison, not a claim: docs/variants.md gives the table."""

ARMS = (("pre_norm", "pre_norm", {}), ("post_norm", "post_norm", {}),
        ("deepnorm", "pre_norm", {"model.residual": "deepnorm"}),   # no deepnorm config file: pre_norm's, switched
        ("keel", "keel", {}), ("mhc", "mhc", {}), ("kromhc", "kromhc", {}),
        ("ddl", "ddl", {}), ("ddl_paper", "ddl", {"model.ddl.v": "paper"}),
        ("resid_lambdas", "resid_lambdas", {}),
        ("resid_lambdas_backout", "resid_lambdas", {"model.resid_lambdas.preset": "backout"}),
        ("attn_res", "attn_res", {}), ("delta_attn_res", "delta_attn_res", {}),
        ("attn_res_block", "attn_res_block", {}), ("delta_attn_res_block", "delta_attn_res_block", {}))
DEPTHS = (12, 48)
SEEDS = 3


def sweep(add):
  for seed in range(SEEDS):
    for layers in DEPTHS:
      for name, config, over in ARMS:
        add(config=f"configs/{config}_12l.py", name=f"{name}-{layers}l-s{seed}",
            **{"data.name": "pystdlib", "seed": seed, "model.num_layers": layers, **over})
