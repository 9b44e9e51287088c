"""The parametrization axis's smoke lr sweep: Pre-Norm at 12 and 48 layers (d 64, the :cpu 200 steps), 5 learning
rates at sqrt(2) steps around 3e-3, 2 seeds, under `standard` and `completep` (base shape: 12 layers at d 64). How far
the best lr moves from 12 to 48 layers under each, in sqrt(2) steps (docs/transfer.md). A smoke test, not a study."""

LRS = tuple(3e-3 * 2 ** (k / 2) for k in range(-2, 3))


def sweep(add):
  for param in ("standard", "completep"):
    for layers in (12, 48):
      for k, lr in enumerate(LRS):
        for seed in (0, 1):
          add(config=f"configs/pre_norm_{layers}l.py", name=f"{param}-{layers}l-lr{k - 2:+d}-s{seed}",
              **{"model.param": param, "model.param_base.num_layers": 12, "train.lr": lr, "seed": seed})
