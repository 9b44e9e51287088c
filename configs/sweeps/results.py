"""The grid behind docs/results.md (`make results`): python -m resnorm.sweep configs/sweeps/results.py --root=DIR

FULL is the design; resnorm/results/grid.py turns it into named runs on both corpora (pystdlib, shakespeare) and
shrinks it for --quick and the test, chosen by $RESNORM_RESULTS_SIZE. Every point has 3 seeds (the recipes of C6a-b,
C8 and C9 have 6); a seed gives every variant the same base weights.

Where the time goes (report v2, measured 2026-11-30 on the 2-core machine, user + sys; the machine was shared):
  pre_norm  4 layers, 200 steps, diagnostics:  15.4 s cold,  6.1 cached; 12 layers: 14.5 cold, 10.5 cached
  hc       12 layers, 200 steps, diagnostics:  33.4 cold, 17.5 cached;  mhc: 19.9 cached;  bfloat16: 1.5x
  -> per step about 0.0029 s x layers (pre/post; 2.1x that for hc/mhc), plus 6-7 s cold or 3.5 s cached per run.
  The whole v2 grid, 312 runs on pystdlib alone, took 73 run-minutes: 41.5 minutes of wall time at --jobs=2.
Budget of v3 (budget() below; the test checks it): v2's 73 run-minutes scaled by the sum of steps x layers over
the runs, the issue's rule. Per corpus, steps x layers (thousands):
  stability map  4 variants x {4, 12} layers x 5 lr x 2 warmup x 200 steps, 3 seeds          384
  C4 depths      pre/post at {2, 4, 8, 16} layers, 600 steps (C2b and C5 read the 4-layer pair)  108
  C7 longer      pre/post, 8 layers, 2000 steps and its 200-step twin                          106
  C8, C9         Pre-Norm 12 layers x 2 lr: no final norm; bf16 with float32 / bf16 stats      43
  more seeds     seeds 3-5 of C6a-b's, C8's and C9's recipes (12 layers, 200 steps)            72
  C3 regime      pre/post x warmup {0, 30%}, 4 layers, 600 steps                               29
  -> 1483 thousand over both corpora, 672 runs: 175 run-minutes, 99 minutes at --jobs=2 (v2's 41.5/73 wall per
     run-minute). The rule leaves out the per-run start (about 3.5 s cached): 360 more runs than v2 add about 21
     run-minutes, 12 minutes of wall time: about 111 minutes in all, inside the 120. Rerunning reuses finished runs
     (v2's pystdlib runs of the map, C3, C7's 200-step twin and C8-C9's first 3 seeds keep their names).
Measured the next evening (2026-12-01) on the same machine, idle: a 12-layer Pre-Norm run's 200 steps take 23.6 s
two at a time (118 ms a step, 3.4x this yardstick's 35 ms; v2's own code: 26.6 s, so the machine slowed, not the
code), and the grid's first 66 runs project it at about 300 minutes at --jobs=2 (docs/sweeps.md). The estimate
above holds at v2's speed only: the first full run took about 4.3 hours of wall time (2026-12-01/02, docs/sweeps.md).
Horizons the budget could not reach: C4 stops at 16 layers (v2's 24 and 48 would need 600 steps x 72 layers x 12
runs, 520 thousand more: another 35 minutes); C7 stops at 2000 steps; the map, C6, C8-C10 stay at 200 steps. Whether
a part's runs reached its regime is read from the runs (claims.py), and the report says so part by part.
"""
from resnorm.results import grid

FULL = {
    "steps": 200,                      # every map run (Xiong-style 10% warmup = 20 steps)
    "seeds": (0, 1, 2),
    "more_seeds": (3, 4),              # for the recipes of parts within 3 SE of zero after seeds 0-2 (grid.seeded)
    "variants": ("pre_norm", "post_norm", "hc", "mhc"),
    # Post-Norm at d 64 learns at 4 layers and stalls at the byte-unigram plateau from 6 layers up at lr >= 1e-3
    # (at 3e-4 it learns slowly at 8 and 12 layers): 4 and 12 sit either side of that edge.
    "map_depths": (4, 12),
    "lrs": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2),   # 2 decades
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
    # C3: the regime the probes found (docs/results_notes.md): at 4 layers and lr 1e-2, Post-Norm without warmup
    # falls to the plateau, and a warmup of 180 steps (30% of 600) rescues it; 20 or 60 steps do not.
    "c3": {"layers": 4, "lr": 1e-2, "steps": 600, "warmup_frac": 0.3},
    "bf16_tags": ("bf16", "bf16stats"),      # C9: bfloat16 with norm statistics in float32 / in bfloat16
    "evals": 4,                               # evals per run (and diagnostics, where read): at 25, 50, 75 and 100% of
                                              # the steps; a part's statistic must settle over the last three
    "common": {},                             # config overrides for every run (quick/test shrink the model here)
    # printed in the report: what the budget left out (the docstring's arithmetic)
    "beyond_budget": "C4 at 24 and 48 layers (v2 ran them at 200 steps; at 600 steps they would add about 35 "
                     "minutes) and C7 beyond 2000 steps",
}

# Report v2's grid (pystdlib only) and its measured cost: the yardstick of budget()
V2 = {**FULL, "more_seeds": (), "depths": (2, 4, 6, 8, 12, 24, 48), "horizon": 200, "pair_layers": 12,
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
    "seeds": (0, 1, 2), "more_seeds": (),
    "map_depths": (12,),
    "lrs": (1e-4, 3e-4, 1e-3),
    "warmup_fracs": (0.0, 0.1),
    "ref_lr": 3e-4, "ref_warmup_frac": 0.1,
    "depths": (6, 12, 24, 48), "horizon": 2000, "pair_layers": 12,
    "init_depths": (12, 24, 48, 96),
    "long": {"layers": 12, "lr": 3e-4, "steps": 8000},
    "c3": {"layers": 12, "lr": 1e-3, "steps": 2000, "warmup_frac": 0.3},
    "evals": 5,
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
