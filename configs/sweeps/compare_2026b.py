"""Issue 49's other placements against Pre-Norm: LAuReL (RW + LR rank 16 + PA k 3; with resnorm's rw_scale 2, and
with the paper's bare softmax, rw_scale 1), value residual (learned lambda) and MUDDFormer, 12 layers, each
variant's :cpu config (200 steps, lr 1e-3), 5 paired seeds (0-4), on Python source and on Shakespeare. 50 runs;
pre_norm is rerun here (its numbers equal compare_2026's, bit for bit). Not a claim of the report: docs/variants.md
gives each placement's paired difference."""


def sweep(add):
  for corpus in ("pystdlib", "shakespeare"):
    for seed in range(5):
      for name, config, over in (("pre_norm", "pre_norm", {}), ("laurel", "laurel", {}),
                                 ("laurel_rw1", "laurel", {"model.laurel.rw_scale": 1.0}),
                                 ("value_residual", "value_residual", {}), ("mudd", "mudd", {})):
        add(config=f"configs/{config}_12l.py", name=f"{name}-12l-{corpus}-s{seed}",
            **{"data.name": corpus, "seed": seed, **over})
