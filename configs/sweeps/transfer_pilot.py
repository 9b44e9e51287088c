"""The transfer study's pilot (resnorm/results/transfer/design.py reads its results): Pre-Norm under `standard` at
the study's recipe (d 32, 4 heads, MLP 128, 8 x 64 tokens a step, 200 steps, 20 warmup, cosine, eval on 16384 bytes,
no remat): 12 layers at k = 2..9 of design.lr (sqrt(2) steps), seeds 0 and 1; 96 layers at k = -2..8 in steps of
2, seed 0.
Where the optimum lies at each depth (the grid's center) and how far one seed's optimum scatters (the power table).
Its runs are in docs/figures/transfer/transfer_pilot.json with the shorter recipes tried first. Not a record of the
study."""

RECIPE = {"model.d_model": 32, "model.num_heads": 4, "model.mlp_dim": 128, "data.seq_len": 64,
          "train.batch_size": 8, "train.steps": 200, "train.warmup_steps": 20, "train.eval_every": 200,
          "train.ckpt_every": 200, "data.eval_bytes": 16384, "model.remat": "none"}
KS = {(12, 0): range(2, 10), (12, 1): range(2, 10), (96, 0): (-2, 0, 2, 4, 6, 8)}


def sweep(add):
  for (layers, seed), ks in KS.items():
    for k in ks:
      add(config=f"configs/pre_norm_{layers}l.py", name=f"pre_norm-{layers}l-k{k:+d}-s{seed}".replace("+", ""),
          **RECIPE, **{"train.lr": 1e-3 * 2 ** (k / 2), "seed": seed})
