"""The grid behind docs/results.md (`make results`): python -m resnorm.sweep configs/sweeps/results.py --root=DIR

FULL is the design; resnorm/tools/grid.py turns it into named runs (and shrinks it for --quick and the test,
chosen by $RESNORM_RESULTS_SIZE). Every point has 3 seeds; a seed gives every variant the same base weights.

Where the time goes: CPU-seconds per run, measured 2026-11-30 on the 2-core machine (user + sys; the machine was
shared, so wall times were 2-5x these). "cold" is a recipe's first seed, which compiles; its other seeds load the
compiled steps from the compilation cache (seed-major order, resnorm.tools.grid.add_points):
  pre_norm  4 layers, 200 steps, diagnostics:  15.4 cold,  6.1 cached
  pre_norm 12 layers, 200 steps:               14.5 cold, 10.5 cached;  bfloat16: 22.5 cold
  hc       12 layers, 200 steps, diagnostics:  33.4 cold, 17.5 cached;  mhc: 19.9 cached
  post_norm 4 layers: 10.4 at 300 steps, 14.5 at 600;  8 layers, 1000 steps: 31.5;  12 layers, 600 steps: 28
  -> per step about 0.0029 s x layers (pre/post; 2.1x that for hc/mhc), plus 6-7 s cold or 3.5 s cached per run
     (diagnostics add about 5 s cold, 1 s cached; bfloat16 costs 1.5x on this CPU).
Budget, 3 seeds (run-CPU-minutes, from that model):
  stability map  4 variants x {4, 12} layers x 5 lr x 2 warmup = 80 recipes, 240 runs     ~ 50
  C4 depths      pre/post at {2, 6, 8, 24, 48} (4 and 12 come from the map), 30 runs     ~  9
  C7 longer      pre/post, 8 layers, 1000 steps and its 200-step twin, 12 runs           ~  4
  C8, C9         Pre-Norm 12 layers x 2 lr: no final norm; bf16 with float32 / bf16 stats ~  5
  C3 regime      pre/post x warmup {0, 30%}, 4 layers, 600 steps, 12 runs                ~  2.5
  init (C1, C2)  pre/post x {4, 12, 24, 48, 96} layers x 3 seeds, in-process             ~  2
  total about 73 run-CPU-minutes (312 runs) -> about 40 minutes with --jobs=2 on 2 idle cores (a run keeps about
  one core busy); 100 minutes leaves room for a machine shared at about 2x. Rerunning reuses finished runs.
"""
from resnorm.tools import grid

FULL = {
    "steps": 200,                      # every map run (Xiong-style 10% warmup = 20 steps)
    "seeds": (0, 1, 2),
    "variants": ("pre_norm", "post_norm", "hc", "mhc"),
    # Post-Norm at d 64 learns at 4 layers and stalls at the byte-unigram plateau from 6 layers up at lr >= 1e-3
    # (at 3e-4 it learns slowly at 8 and 12 layers): 4 and 12 sit either side of that edge.
    "map_depths": (4, 12),
    "lrs": (3e-4, 1e-3, 3e-3, 1e-2, 3e-2),   # 2 decades
    "warmup_fracs": (0.0, 0.1),
    "ref_lr": 3e-3, "ref_warmup_frac": 0.1,  # the reference recipe (C2, C4, C5, C6, C8-C10)
    "depths": (2, 4, 6, 8, 12, 24, 48),      # C4, at the reference recipe
    "init_depths": (4, 12, 24, 48, 96),      # C1, C2 (init only: one forward/backward per model)
    # C7: 8 layers, where Post-Norm stalls at lr >= 1e-3 but learns at 3e-4 (probe: 2.71 after 1000 steps), 10%
    # warmup, 5x longer than the map; the 200-step runs of the same recipe give the gap to compare with
    "long": {"layers": 8, "lr": 3e-4, "steps": 1000},
    # C3: the regime the probes found (docs/results_notes.md): at 4 layers and lr 1e-2, Post-Norm without warmup
    # falls to the plateau, and a warmup of 180 steps (30% of 600) rescues it; 20 or 60 steps do not.
    "c3": {"layers": 4, "lr": 1e-2, "steps": 600, "warmup_frac": 0.3},
    "bf16_tags": ("bf16", "bf16stats"),      # C9: bfloat16 with norm statistics in float32 / in bfloat16
    "evals": 4,                               # evals per run (eval curves of C3, C7-C9)
    "common": {},                             # config overrides for every run (quick/test shrink the model here)
}


def sweep(add):
  grid.add_points(add, grid.design(FULL))
