"""Issue 49's second pair of placements against Pre-Norm: LAuReL (RW + LR rank 16 + PA k 3) and value residual
(learned lambda), 12 layers, each variant's :cpu config (200 steps, lr 1e-3), 5 paired seeds (0-4), on Python source
and on Shakespeare. 30 runs; pre_norm is rerun here, so the pairs come from one commit (its numbers must equal
compare_2026's). Not a claim of the report: docs/variants.md gives each placement's paired difference."""


def sweep(add):
  for corpus in ("pystdlib", "shakespeare"):
    for seed in range(5):
      for name in ("pre_norm", "laurel", "value_residual"):
        add(config=f"configs/{name}_12l.py", name=f"{name}-12l-{corpus}-s{seed}", **{"data.name": corpus, "seed": seed})
