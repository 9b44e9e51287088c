"""Issue 49's second pair of placements against Pre-Norm: LAuReL (RW + LR rank 16 + PA k 3; with resnorm's
rw_scale 2, and with the paper's bare softmax, rw_scale 1) and value residual (learned lambda), 12 layers, each
variant's :cpu config (200 steps, lr 1e-3), 5 paired seeds (0-4), on Python source and on Shakespeare. 40 runs;
pre_norm is rerun here, so the pairs come from one commit (its numbers must equal compare_2026's). Not a claim of
the report: docs/variants.md gives each placement's paired difference."""


def sweep(add):
  for corpus in ("pystdlib", "shakespeare"):
    for seed in range(5):
      for name, config, over in (("pre_norm", "pre_norm", {}), ("laurel", "laurel", {}),
                                 ("laurel_rw1", "laurel", {"model.laurel.rw_scale": 1.0}),
                                 ("value_residual", "value_residual", {})):
        add(config=f"configs/{config}_12l.py", name=f"{name}-12l-{corpus}-s{seed}",
            **{"data.name": corpus, "seed": seed, **over})
