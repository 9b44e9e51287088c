"""The grid behind docs/results.md (`make results`): python -m resnorm.sweep configs/sweeps/results.py --root=DIR

FULL is the design; resnorm/tools/grid.py turns it into named runs (and shrinks it for --quick and the test,
chosen by $RESNORM_RESULTS_SIZE). Every point has 3 seeds; a seed gives every variant the same base weights.

Where the time goes (CPU-seconds per run on the 2-core machine, measured 2026-12-01 with the compilation cache;
"cold" is a recipe's first seed, which compiles; the other two seeds load the compiled steps):
  4 layers, 200 steps: pre/post 9 cold, 6 cached; hc/mhc ~15 cold, ~9 cached
  12 layers, 200 steps: pre/post ~15 cold, ~10 cached; hc 33 cold (with diagnostics), 17.5 cached
  per step about 0.003 s x layers (pre/post), twice that for hc/mhc; fixed cost 4-12 s per run
Budget, 3 seeds (run-CPU-minutes):
  stability map  4 variants x {4, 12} layers x 5 lr x 2 warmup = 80 points, 240 runs        ~ 54
  C4 depths      pre/post at {2, 6, 8, 24, 48} (4 and 12 come from the map), 30 runs     ~  9
  C3 regime      pre/post x warmup {0, 30%}, 4 layers, 600 steps, 12 runs                ~  2.5
  C7 longer      pre/post, 4 layers, 1000 steps, 6 runs                                  ~  2
  C8, C9         Pre-Norm 12 layers x 2 lr: no final norm; bf16 with float32 / bf16 stats ~  6
  init (C1, C2)  pre/post x {4, 12, 24, 48, 96} layers, in-process                       ~  2
  total about 75 run-CPU-minutes -> about 40 minutes on 2 idle cores with --jobs=2 (runs are mostly one thread:
  the second job uses the second core); under 100 with the machine shared. Rerunning reuses finished runs.
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
    "evals": 4,                               # evals per run (eval curves of C3, C7-C9)
    "common": {},                             # config overrides for every run (quick/test shrink the model here)
}


def sweep(add):
  grid.add_points(add, grid.design(FULL))
