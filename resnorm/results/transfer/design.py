"""The learning-rate transfer study's design, declared before any run of its grid: can a placement be tuned at 12
layers (or at width 32) and run at 96 layers (or width 128), under the standard parametrization and under
CompleteP (or µP)? Its rules (RULES) are part of the design, as its constants are.

The recipe. Every run is the :cpu model at width WIDTH (heads of HEAD_DIM, MLP 4d) on one corpus (CORPUS: the budget
holds one; Python source, the corpus of report v5's ladder), SEQ x BATCH tokens a step for STEPS steps (WARMUP of
them linear warmup, then the :cpu cosine to 1/10), one eval at the end on EVAL_BYTES of the stratified eval set.
Only the learning rate, the depth (or width), the placement and the parametrization vary; a seed gives every run its
base weights and data order. Under completep (and mup) the base shape is BASE_DEPTH layers at width BASE_WIDTH: at
that shape every parametrization is the standard one exactly (tests/test_param.py), so a cell at the base shape is
run once, under `standard`, and read for each parametrization.

The axes. DEPTH_ARMS x DEPTH_PARAMS at DEPTHS (Keel is refused under completep: its alpha = L is a depth
parametrization of its own; it runs under standard only). The width axis: WIDTH_ARMS x WIDTH_PARAMS at WIDTHS, at
BASE_DEPTH layers.

The learning-rate grid. lr = LR_REF 2^(k/2), k an integer (sqrt(2) steps). A cell (arm, parametrization, depth,
width) starts at BASE_POINTS steps around its center (center(): the pilot's Pre-Norm optimum at 12 layers; under
standard on the depth axis moved toward the pilot's 96-layer optimum in proportion to log depth, on the width axis one
step down per doubling; under completep and mup not moved: their claim is that it does not move). The cell grows
on the mean curve over the seeds that have every point of its grid so far (a diverged run counted at FAIL_LOSS): while
its best point is its lowest (highest) k, one more k below (above) for every seed, at most MAX_EXTEND each side. A cell whose best point
is still on its edge after that is reported as a failure ("edge"), never dropped. No other point is ever added, and
none is rerun.

The statistics (resnorm/results/transfer/fit.py), in sqrt(2) steps of lr:
- A cell's optimum: the vertex of a least-squares quadratic in k over the points within WINDOW steps of the curve's
  best point (fit.optimum). Its interval: a seed bootstrap (RESAMPLES resamples of the seeds, the quadratic refitted
  in every one), and beside it a t interval over the per-seed optima (each seed's own curve fitted the same way).
- The shift of a placement's optimum from the axis's base (12 layers; width 32) to its top (96 layers; width 128):
  per resample and per seed the difference of the two cells' optima, paired by seed; the bootstrap and the t
  interval as above. The verdict reads their hull (the wider union: at SEEDS seeds neither alone covers as claimed).
- The verdict (RULES), with the effect of interest EFFECT = one sqrt(2) step: **transfers** when the hull lies within
  +-EFFECT; **does not transfer** when it excludes [-EFFECT, +EFFECT]; **undecided** otherwise; **failed** where either
  cell's seed-mean optimum is on its edge.
- The penalty of tuning at the base: the top cell's seed-mean loss at the base cell's seed-mean optimum (its fitted
  quadratic inside its window, else the curve interpolated; a lower bound beyond its grid) minus its loss at its own
  optimum, in nats/byte.
- What the penalty costs in compute: Pre-Norm's depth curve under the same parametrization (its seed-mean optimal
  loss against training FLOPs, a power law over DEPTHS) read at both losses: the effective speedup C(loss at the
  base's lr) / C(loss at the own optimum) (< 1: compute lost). Undefined where Pre-Norm's optimal loss does not fall
  with depth under that parametrization (said so, not extrapolated).
- Under standard on the depth axis the effective-depth law (arXiv 2602.07494: optimal lr ~ depth^-3/2) predicts a
  shift of EFFECTIVE_DEPTH_EXPONENT x log2(96 / 12) octaves = -9 sqrt(2) steps; each interval is placed against it.

Seeds: SEEDS, run seed-major (a seed's runs finish, and grow their cells, before the next seed's start: a grid
stopped anywhere leaves whole seeds, and the page reports the seeds it has). SEEDS is the power table's (power()): at
the pilot's per-seed scatter of an optimum PILOT_SD (sqrt(2) steps; configs/sweeps/transfer_pilot.py at the recipe:
Pre-Norm, 2 seeds at 12 layers, 1 at 96) it gives each seed count the hull's expected half-width and the smallest shift it calls
"does not transfer" at 80% power. Two seeds give no usable interval (t with 1 degree of freedom, a bootstrap of 3
distinct resamples); 3 decide shifts of a few steps; "transfers" needs seeds to agree better than the pilot's did.

The budget, and why it is not the issue's 8 hours. budget_s() adds the grid's wall time at --jobs=2 from STEP_MS
(ms a step, both cores, `python -m resnorm.bench` at the recipe), JOBS_GAIN, RUN_START_S and EVAL_FRAC (from the
pilot's runs at --jobs=2), for BASE_POINTS + EXTEND_EXPECTED points per cell. One seed of the required scope (9
placements x 2 parametrizations x 4 depths to 96 layers, 6 lrs, and the width axis) costs about 5.6 hours, 60% of it
at 96 layers and half of it HC, mHC and MUDDFormer. The issue's 8 hours hold 3 seeds only at about a third of the
tokens a run. The pilot (docs/figures/transfer/transfer_pilot.json) ran Pre-Norm at 12 layers at 61,440 tokens
(batch 8, 120 steps): every lr from k = 3 to 9 ends within 0.09 nats of the others (3.19-3.27 against a byte unigram
of 3.39), non-monotone: no optimum to transfer. At 102,400 tokens in 16-sequence steps (100 steps) the curve has a
minimum (3.11) but 96 layers stay within 0.15 nats of the unigram; in 8-sequence steps (200 steps, the same tokens and
the recipe here) 12 layers reach 2.94-3.00. So the design keeps the recipe and the scope and spends ALLOWED_S, about
2.5 times the issue's BUDGET_S, seed by seed.
"""
import math

# Fixed by the commit before the grid's first record (results/transfer/ holds the records).
STATUS = "final"

CORPUS = "pystdlib"
WIDTH, HEAD_DIM, SEQ, BATCH = 32, 8, 64, 8
STEPS, WARMUP = 200, 20
EVAL_BYTES = 16384
DEPTHS = (12, 24, 48, 96)
WIDTHS = (32, 64, 128)
BASE_DEPTH, BASE_WIDTH = 12, 32
DEPTH_ARMS = ("pre_norm", "post_norm", "keel", "hc", "mhc", "attn_res_block", "mudd", "denseformer", "value_residual")
DEPTH_PARAMS = ("standard", "completep")
WIDTH_ARMS = ("pre_norm", "post_norm", "keel")
WIDTH_PARAMS = ("standard", "mup")
REFUSED = {("keel", "completep"): "Keel's alpha = L is a depth parametrization of its own"}
SEEDS = 3
LR_REF = 1e-3
BASE_POINTS, MAX_EXTEND, EXTEND_EXPECTED = 6, 3, 0.5
EFFECT = 1.0
FAIL_LOSS = math.log(256)
EFFECTIVE_DEPTH_EXPONENT = -1.5
BUDGET_S, MARGIN = 8 * 3600, 0.10     # the budget, and the margin a design keeps
ALLOWED_S = 20 * 3600                  # this design's (module docstring: why)

RULES = {
    "optimum": "vertex of a least-squares quadratic in k over the points within WINDOW (2) steps of the best point "
               "(contiguous, none diverged); the best point itself where that has under 3 points, opens downward or "
               "puts the vertex outside the window (coarse); an edge best point is a failure (edge)",
    "interval": "95% seed bootstrap (2000 resamples, the quadratic refitted in each; an undefined resample counts "
                "as the least favourable tail) and 95% t interval over per-seed optima; the verdict reads their hull",
    "verdict": "transfers: hull within +-1 step; does not transfer: hull excludes [-1, +1]; undecided otherwise; "
               "failed: either cell's seed-mean optimum on its edge",
    "growth": "a cell grows by one k past its edge, for every seed, while the best point of its mean over the seeds "
              "that have every point so far is on that edge, at most 3 a side; seeds run one after another",
}

# The pilot (configs/sweeps/transfer_pilot.py; docs/figures/transfer/transfer_pilot.json, recipe b8-s200), by
# fit.optimum: Pre-Norm's optimum (k) under standard, the mean of seeds 0 and 1 at 12 layers (theirs: 3.32 and 4.59),
# seed 0 at 96 (its grid in steps of 2); and the sd of the two seeds' 12-layer optima.
PILOT_K = {12: 3.98, 96: 2.66}
PILOT_SD = 0.89
# ms a step at the recipe (8 x 64 tokens, d 32, model.remat=none), both cores, one process, at DEPTHS (`python -m
# resnorm.bench --config=configs/pre_norm_12l.py --residuals=... --depths=12,24,48,96 --steps=5
# --config.model.d_model=32 --config.model.num_heads=4 --config.model.mlp_dim=128 --config.data.seq_len=64
# --config.train.batch_size=8 --config.model.remat=none`, 2026-12-06).
STEP_MS = {
    "pre_norm": (22.8, 42.6, 81.8, 161.1), "post_norm": (23.9, 46.4, 89.1, 178.1),
    "keel": (27.2, 51.0, 101.2, 208.6), "value_residual": (24.8, 48.1, 92.5, 173.8),
    "hc": (42.4, 81.5, 167.9, 372.9), "mhc": (73.5, 146.0, 285.7, 610.3),
    "attn_res_block": (32.8, 64.4, 124.3, 248.5), "mudd": (37.6, 92.5, 262.5, 884.6),
    "denseformer": (28.2, 57.8, 120.5, 296.2)}
# At 12 layers, WIDTHS (the same command at widths 64 and 128, 8 and 16 heads).
STEP_MS_WIDTH = {"pre_norm": (22.8, 45.1, 112.8), "post_norm": (23.9, 45.3, 112.5), "keel": (27.2, 49.8, 110.9)}
# From the pilot at --jobs=2: a run's training took 1 / JOBS_GAIN of two bench step times a step (each run has half
# the cores, and the loop's own work: data, metrics, the final checkpoint); its start (process, data, compile) 5-6 s
# for Pre-Norm, plus each arm's longer compile (the bench's compile time less Pre-Norm's); the eval 7% of training.
JOBS_GAIN = 0.86
RUN_START_S = {"pre_norm": 6.0, "post_norm": 6.0, "keel": 6.5, "value_residual": 6.7, "hc": 9.2, "mhc": 10.5,
               "attn_res_block": 16.6, "mudd": 21.3, "denseformer": 13.7}
EVAL_FRAC = 0.07


def lr(k: int) -> float:
  return LR_REF * 2 ** (k / 2)


def center(param: str, layers: int, width: int) -> int:
  """A cell's starting center (module docstring)."""
  k12 = round(PILOT_K[BASE_DEPTH])
  if param in ("completep", "depth_mup", "mup"):
    return k12
  if width != BASE_WIDTH:
    return k12 - round(math.log2(width / BASE_WIDTH))
  return round(PILOT_K[BASE_DEPTH] + (PILOT_K[96] - PILOT_K[BASE_DEPTH]) * math.log2(layers / BASE_DEPTH) / 3)


def base_ks(param: str, layers: int, width: int) -> tuple:
  c = center(param, layers, width)
  return tuple(range(c - BASE_POINTS // 2, c + (BASE_POINTS + 1) // 2))


def cells() -> list[tuple]:
  """(arm, param, layers, width) of every cell the study reports (base-shape cells under each parametrization)."""
  out = [(a, p, L, WIDTH) for a in DEPTH_ARMS for p in DEPTH_PARAMS if (a, p) not in REFUSED for L in DEPTHS]
  out += [(a, p, BASE_DEPTH, w) for a in WIDTH_ARMS for p in WIDTH_PARAMS for w in WIDTHS]
  return list(dict.fromkeys(out))


def run_param(param: str, layers: int, width: int) -> str:
  """The parametrization a cell's runs are made under: standard at the base shape (every one is standard there)."""
  return "standard" if (layers, width) == (BASE_DEPTH, BASE_WIDTH) else param


def run_s(arm: str, layers: int, width: int) -> float:
  """One run's share of the grid's wall time at --jobs=2 by the budget model: half its start (two start at once)
  and its training and eval at JOBS_GAIN times one process's rate, shared by the two."""
  ms = STEP_MS[arm][DEPTHS.index(layers)] if width == WIDTH else STEP_MS_WIDTH[arm][WIDTHS.index(width)]
  return RUN_START_S[arm] / 2 + STEPS * ms / 1000 * (1 + EVAL_FRAC) / JOBS_GAIN


def budget_s(seeds: int = SEEDS) -> float:
  """The grid's wall time at --jobs=2: every distinct run cell, BASE_POINTS + EXTEND_EXPECTED points, each seed."""
  runs = {(a, run_param(p, L, w), L, w) for a, p, L, w in cells()}
  return seeds * (BASE_POINTS + EXTEND_EXPECTED) * sum(run_s(a, L, w) for a, _, L, w in runs)


def power(seeds: int, sd: float = None, level: float = 0.95, want: float = 0.8) -> tuple[float, float]:
  """(the hull's expected half-width, the smallest |shift| called "does not transfer" with probability `want`) at
  `seeds` seeds, for a shift whose per-seed values scatter sd * sqrt(2) (two cells' independent optima)."""
  from scipy import stats as st
  s = (PILOT_SD if sd is None else sd) * math.sqrt(2) / math.sqrt(seeds)
  half = st.t.ppf(0.5 + level / 2, seeds - 1) * s
  return half, EFFECT + half + st.norm.ppf(want) * s
