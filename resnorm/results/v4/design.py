"""Report v4's design, declared before any run of its grid: per part of the claims (resnorm/results/v4/claims.py) the
block of runs it reads and so its seeds, the pilot's standard deviation per seed, the effect of interest and the
regime tolerance, in the part's own units. verdicts.power_table turns it into the power table the report prints.

Pilot: report v3 (docs/results.md before v4, 3 seeds on two corpora), the larger of the two corpora's per-seed
standard deviations. Seeds are 0..n-1 per block (BLOCK_SEEDS, the sweep file's FULL["block_seeds"]); a recipe read by
several blocks runs the largest count. There is no data-dependent second stage.

The verdict rule (VERDICT_RULE, applied by verdicts.classify and claims.combine) and the replication family
(REPLICATION, applied by resnorm/results/v4/replication.py) are declared here with the rest of the design.
"""
import math
from typing import NamedTuple

MARGIN = 0.02              # nats/byte: "matches" (C7a) allows this much
NI_MARGIN = 0.02           # nats/byte: C6c-d's non-inferiority margin for the mean paired loss difference over cells
GAIN_TOL = math.log(1.1)   # C10: "near 1" means within 10%


# The rules' texts below are post hoc (written after the last v4 record; resnorm/results/post_hoc.py dates each).
VERDICT_RULE = (
    "Per part, from its interval at the correction's level, signed so that the claim predicts a positive value, and "
    "its effect of interest delta: **reproduced** when the interval lies above 0 (flagged *smaller than claimed* "
    "when it also lies below delta: a significant effect reported with its size, never generalised; *larger than "
    "claimed* when a part whose delta is the paper's own size lies above it); **opposite** when it lies below 0 "
    "(flagged *smaller than the effect of interest* when it also lies above -delta); **not reproduced** when it "
    "reaches 0 and lies below delta, so that an effect of the claim's size is excluded (a decided null); "
    "**undecided** when it reaches both 0 and delta. A threshold part, whose claim holds for any positive value, is "
    "not reproduced only when its interval excludes every positive value, and is never flagged for size.")
CLAIM_RULE = (
    "Every part of a claim decides it: the claim is **pending** while a run any part reads has not finished; else "
    "**mixed** if one part is reproduced and another opposite (each named); else **opposite** if any part is; else "
    "**not reproduced** if any part is; else **reproduced** if every part is; else **out of regime** if any part "
    "is; else **undecided**. A claim's verdict carries its parts' size flags, and the claims table names the parts "
    "that decided it.")
# Replication across the corpora is its own test: per part the paired difference of the two corpora's per-seed
# values (a seed gives identical initial weights on both corpora), one two-sided t-test per part, Benjamini-Hochberg
# at REPLICATION["q"] over this second family, its intervals FCR-adjusted within it. Against the part's effect of
# interest: where the interval excludes 0, "same sign, different size" if the part's mean has one sign on both
# corpora (post hoc), "did not replicate" if it flips (flagged "by less than the effect of interest" when it lies
# within +-delta); "replicated" when it reaches 0 and lies within +-delta, "undecided" otherwise. Significance on
# one corpus and not on the other is never read as either.
REPLICATION = {"q": 0.05, "pairing": "seed", "test": "paired t", "correction": "BH, its own family"}


class Design(NamedTuple):
  """A part's design, declared before the grid: the block of runs it reads (its seeds: BLOCK_SEEDS), the pilot's
  per-seed standard deviation (report v3, the larger corpus), the effect of interest and the regime tolerance, both
  in the part's own units (tol None: the part reads no trained run, or only run ends)."""
  block: str
  pilot_sd: float
  effect: float
  tol: float | None


# The parts the pilot (report v3) measured beyond 8 standard deviations per seed: C1b, C2a, C2b and C4a on both
# corpora, C1c, C3c and C7b on one, C5a on the other. The power table designs for BH's threshold once they are called.
DESIGN_CALLS = 12
# The per-seed change of a statistic over the last quarter of training is assumed to vary half as much as the
# statistic between seeds (a seed's own offset cancels in its change; v3 kept no per-run trajectories to measure it).
# Each tolerance below is at least what TOST needs at its block's seeds to call a stable statistic settled 85% of
# the time under that noise (tests/test_verdicts.py simulates it, and a drift of twice the tolerance).
CHANGE_SD_FRAC = 0.5
# Seeds per block of runs (a recipe read by several blocks runs the largest count); seeds are 0..n-1.
BLOCK_SEEDS = {"init": 8, "map": 3, "c3": 5, "depth": 5, "long": 3, "ablation": 4}
DESIGN = {
    ("C1", "a"): Design("init", 0.50, 0.5, None),
    ("C1", "b"): Design("init", 0.036, 0.1, None),
    ("C1", "c"): Design("init", 0.036, 0.1, None),
    ("C2", "a"): Design("init", 0.067, 0.3, None),
    ("C2", "b"): Design("depth", 0.053, 0.3, 0.15),
    ("C3", "a"): Design("map", 0.17, 0.2, 0.26),
    ("C3", "b"): Design("map", 0.036, 0.05, 0.06),
    ("C3", "c"): Design("c3", 0.17, 0.2, 0.15),
    ("C3", "d"): Design("map", math.nan, 0.25, None),   # failures: a discordant-pair count, no per-seed sd
    ("C4", "a"): Design("depth", 0.045, 0.05, 0.05),
    ("C4", "b"): Design("depth", 0.016, 0.02, 0.02),
    ("C4", "c"): Design("depth", math.nan, 0.25, None),
    ("C5", "a"): Design("depth", 0.032, 0.03, 0.03),
    ("C5", "b"): Design("depth", 0.036, 0.03, 0.035),
    ("C6", "a"): Design("map", 0.05, 0.03, 0.08),
    ("C6", "b"): Design("map", 0.00088, 0.03, 0.03),
    ("C6", "c"): Design("map", 0.12, NI_MARGIN, 0.18),
    ("C6", "d"): Design("map", 0.032, NI_MARGIN, 0.05),
    ("C7", "a"): Design("long", 0.037, MARGIN, 0.06),
    ("C7", "b"): Design("long", 0.04, 0.05, 0.065),
    ("C8", "a"): Design("ablation", 0.12, 0.05, 0.13),
    ("C9", "a"): Design("ablation", 0.016, 0.02, 0.02),
    ("C10", "a"): Design("map", 0.77, 1.0, 1.2),
    ("C10", "b"): Design("map", 0.069, 0.05, 0.11),
}


def seeds(d, cid: str, label: str) -> tuple:
  """The seeds the design fixed for a part: 0..n-1, n its block's (d["block_seeds"])."""
  return tuple(range(d["block_seeds"][DESIGN[(cid, label)].block]))


