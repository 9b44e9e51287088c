"""The grid behind docs/results.md (`make results`): python -m resnorm.sweep configs/sweeps/results.py --root=DIR

FULL is report v4's design; resnorm/results/v4/grid.py turns it into named runs on both corpora (pystdlib, shakespeare)
and shrinks it for --quick and the test, chosen by $RESNORM_RESULTS_SIZE. Seeds are per block of runs, fixed before
the grid by the power table (resnorm/results/v4/design.py); a seed gives every variant the same base weights. Points
that already have a run record ($RESNORM_RESULTS_RECORDS, results/v4/) are left out.

The cost of v4's design, measured 2026-12-04 on the 2-core development CPU (Intel Xeon), one run of each kind, two
at a time as --jobs=2 runs them (wall seconds, start-up and compilation included; evals at 50% and 75% on the 32 KB
subset and at 100% on the 256 KB set):
  map (200 steps)   pre_norm 4 layers 19, 12 layers 30; post_norm 4 layers 15; hc 12 layers 46; mhc 12 layers 57
  depth (600)       post_norm 2 layers 16; pre_norm 16 layers 59        C3's regime (600): post_norm 4 layers ~16
  ablation (200)    bfloat16 12 layers 33                               long (2000): pre_norm 8 layers 64
  -> 436 runs, each costed at its kind's figure (the 8-layer depth runs at the 16-layer one, C7's 200-step twins at
     the 2000-step one: an upper bound): 245 run-minutes, about 122 minutes of wall time at --jobs=2, plus the 160
     init evaluations (C1, C2a) in the report's own process. Report v3's 672 runs took 4.3 hours.
Horizons the budget leaves out: C4 stops at 16 layers (v2's 24 and 48 at 600 steps would add about 35 minutes); C7
stops at 2000 steps; the map, C6, C8-C10 stay at 200 steps. Whether a part's runs reached its regime is tested from
the runs (resnorm/results/verdicts.py, TOST), and the report says so part by part. budget() below is v2's
steps x layers yardstick, kept for its test; on today's machine it underestimates by about 2x.
"""
from resnorm.results.v4 import design, grid

FULL = {
    "steps": 200,                      # every map run (Xiong-style 10% warmup = 20 steps)
    # seeds per block of runs, fixed before the grid by the power table (resnorm/results/v4/design.py); a recipe read by
    # several blocks runs the largest count; no data-dependent second stage
    "block_seeds": design.BLOCK_SEEDS,
    "variants": ("pre_norm", "post_norm", "hc", "mhc"),
    # Post-Norm at d 64 learns at 4 layers and stalls at the byte-unigram plateau from 6 layers up at lr >= 1e-3:
    # 4 and 12 sit either side of that edge. Which cells each variant runs is what its parts read: Post-Norm at 4
    # layers (C3; in v3 all 30 of its 12-layer map runs stalled, and no part reads them), Pre-Norm at both depths,
    # HC and mHC at 12 layers (C6, C10: where depth makes stability a question; at 4 layers every variant but
    # Post-Norm trained in every v3 cell)
    "map_depths": (4, 12),
    "map_variant_depths": {"post_norm": (4,), "hc": (12,), "mhc": (12,)},
    # lr 3e-4 left out: in v3 most of its runs stalled, every variant alike, under-trained in 200 steps (it says
    # nothing about stability); 1e-3 to 3e-2 is 1.5 decades
    "lrs": (1e-3, 3e-3, 1e-2, 3e-2),
    "warmup_fracs": (0.0, 0.1),
    "ref_lr": 3e-3, "ref_warmup_frac": 0.1,  # the reference recipe (C2, C4, C5, C6, C8-C10)
    # C4 (and C2b, C5) are about training outcomes: 3x the map's steps, where v2's 200 left the deep models
    # under-trained; depths doubling up to what the budget allows
    "depths": (2, 4, 8, 16),
    "horizon": 600,
    # C2b, C5: where both variants train (Post-Norm learns at 4 layers, stalls at 12): a stalled model's cosines
    # are a byte-frequency model's
    "pair_layers": 4,
    "init_depths": (4, 12, 24, 48, 96),      # C1, C2a (init only: one forward/backward per model)
    # C7: 8 layers, where Post-Norm stalls at lr >= 1e-3 but learns at 3e-4 (v2: its gap to Pre-Norm still closing
    # at 1000 steps), 10% warmup, 10x longer than the map; the 200-step runs of the same recipe give the gap to
    # compare with
    "long": {"layers": 8, "lr": 3e-4, "steps": 2000},
    # C3: the regime the probes found (docs/results_probes.md): at 4 layers and lr 1e-2, Post-Norm without warmup
    # falls to the plateau, and a warmup of 180 steps (30% of 600) rescues it; 20 or 60 steps do not.
    "c3": {"layers": 4, "lr": 1e-2, "steps": 600, "warmup_frac": 0.3},
    "bf16_tags": ("bf16", "bf16stats"),      # C9: bfloat16 with norm statistics in float32 / in bfloat16
    # evals at 50% and 75% of each run score every 8th row of the 256 KB eval set (32 KB spread over every
    # document), the last all of it and that subset again from the same sums (grid.overrides)
    "eval_subset_every": 8,
    "common": {},                             # config overrides for every run (quick/test shrink the model here)
    # printed in the report: what the budget left out (the docstring's arithmetic)
    "beyond_budget": "C4 at 24 and 48 layers (v2 ran them at 200 steps; at 600 steps they would add about 35 "
                     "minutes) and C7 beyond 2000 steps",
}

# Report v2's grid (pystdlib only) and its measured cost: the yardstick of budget()
V2 = {**FULL, "block_seeds": {b: 3 for b in design.BLOCK_SEEDS}, "lrs": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2),
      "map_variant_depths": {}, "depths": (2, 4, 6, 8, 12, 24, 48), "horizon": 200, "pair_layers": 12,
      "long": {"layers": 8, "lr": 3e-4, "steps": 1000}}
V2_RUNS, V2_RUN_MINUTES, V2_WALL_MINUTES, WALL_LIMIT_MINUTES = 312, 73, 41.5, 120


def step_layers(d, corpora=None) -> tuple[int, int]:
  """(runs, sum of steps x layers) of a design, over its corpora (or these)."""
  pts = [(r, s) for c, r, s in grid.points(d) if corpora is None or c in corpora]
  return len(pts), sum(r.steps * r.layers for r, _ in pts)


def budget(d) -> dict:
  """Run-minutes and wall minutes at --jobs=2 of a design, scaled from v2's measurement by steps x layers."""
  runs2, sl2 = step_layers(grid.design(V2, "full"), ("pystdlib",))
  assert runs2 == V2_RUNS, runs2  # the yardstick is the grid that was measured
  runs, sl = step_layers(d)
  run_minutes = V2_RUN_MINUTES * sl / sl2
  return {"runs": runs, "step_layers": sl, "run_minutes": run_minutes,
          "wall_minutes": run_minutes * V2_WALL_MINUTES / V2_RUN_MINUTES}


# --scale=tpu: the same claims over the :tpu configs (d 1024, 16 heads, MLP 4096, 1024 tokens, batch 256, bfloat16),
# with fewer cells where the budget requires (docstring of device_hours). Runs of 2000 steps (0.52e9 tokens each),
# one map depth (12 layers; C6, C8-C10 read it), 3 learning rates around the :tpu default 3e-4; the depth sweep at
# the map's horizon (its 12-layer runs are the map's); C7 at 4x the steps. At :tpu the base is already bfloat16, so
# C9's "bf16" arm repeats the reference run under its own name (6 runs, 2 v4-8 hours), kept so C9 reads the same
# tags at both scales.
TPU = {
    "steps": 2000,
    "block_seeds": {b: 3 for b in design.BLOCK_SEEDS},
    "map_depths": (12,), "map_variant_depths": {},
    "lrs": (1e-4, 3e-4, 1e-3),
    "warmup_fracs": (0.0, 0.1),
    "ref_lr": 3e-4, "ref_warmup_frac": 0.1,
    "depths": (6, 12, 24, 48), "horizon": 2000, "pair_layers": 12,
    "init_depths": (12, 24, 48, 96),
    "long": {"layers": 12, "lr": 3e-4, "steps": 8000},
    "c3": {"layers": 12, "lr": 1e-3, "steps": 2000, "warmup_frac": 0.3},
    "eval_subset_every": 1,
    "common": {},
    "beyond_budget": "a second map depth (48 layers: about 112 more v4-8 hours at 40% MFU), C4 at 96 layers (17 "
                     "more) and C7 beyond 8000 steps",
}
ASSUMED_MFU = 0.40  # until resnorm.bench measures one on the accelerator (docs/performance.md)
PEAK_FLOPS = {"v4-8": 4 * 275e12, "H100": 989e12}  # bf16 dense: 4 TPU v4 chips; one H100 SXM


def device_hours(d, device, mfu: float = ASSUMED_MFU, points=None) -> float:
  """Device-hours of a design's training runs: sum over its runs of training FLOPs (resnorm.model.flops' analytic count
  per token x batch x seq_len x steps) / (the device's bf16 peak x mfu). Left out: evals (5 a run, 32 batches of
  256 x 1024 tokens forward: about 1% of a 2000-step run), the diagnostics, compilation and remat's recomputation
  (whole-block remat adds one forward: x 4/3, which an MFU measured with remat on already absorbs).

  The --scale=tpu design (TPU above) at 40% MFU: 120 runs, 8.85e19 FLOPs, about 56 v4-8 hours (2.3 days on one
  v4-8) or 62 H100-hours (8 H100s: 8 hours). A second map depth at 48 layers (66 more runs, C8-C9 then at 48)
  would add about 112 v4-8 hours; C4 at 96 layers (6 runs) 17 more. The test recomputes these figures."""
  from resnorm.model import flops
  peak = PEAK_FLOPS[device] if isinstance(device, str) else float(device)  # a name of PEAK_FLOPS, or FLOP/s
  total = 0.0
  for c, r, s in (grid.points(d) if points is None else points):
    cfg = grid.config(d, c, grid.overrides(d, r, s, c))
    tokens = cfg.train.batch_size * cfg.data.seq_len * r.steps
    total += flops.train_flops_per_token(cfg.model, cfg.data.seq_len) * tokens
  return total / (peak * mfu) / 3600


def sweep(add):
  grid.add_points(add, grid.design(FULL, tpu=TPU))
