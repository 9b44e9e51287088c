"""Issue 69's 2026 placements against Pre-Norm: Keel (and Post-Norm, the placement it revives), KromHC (and mHC, the
one it factorizes), Deep Delta Learning (the code's value and the paper's) and the speedrun's residual scalars
(nanochat's and modded-nanogpt's backout presets), 12 layers, each variant's :cpu config (200 steps, lr 1e-3), 5
paired seeds (0-4), on Python source and on Shakespeare. 90 runs; pre_norm's equal compare_2026's bit for bit. Not a
claim of the report: docs/variants.md gives each placement's paired difference."""

ARMS = (("pre_norm", "pre_norm", {}), ("post_norm", "post_norm", {}), ("keel", "keel", {}), ("mhc", "mhc", {}),
        ("kromhc", "kromhc", {}), ("ddl", "ddl", {}), ("ddl_paper", "ddl", {"model.ddl.v": "paper"}),
        ("resid_lambdas", "resid_lambdas", {}),
        ("resid_lambdas_backout", "resid_lambdas", {"model.resid_lambdas.preset": "backout"}))


def sweep(add):
  for corpus in ("pystdlib", "shakespeare"):
    for seed in range(5):
      for name, config, over in ARMS:
        add(config=f"configs/{config}_12l.py", name=f"{name}-12l-{corpus}-s{seed}",
            **{"data.name": corpus, "seed": seed, **over})
