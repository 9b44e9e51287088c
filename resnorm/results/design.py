"""Report v4's design, declared before any run of its grid: per part of the claims (resnorm/results/claims.py) the
block of runs it reads and so its seeds, the pilot's standard deviation per seed, the effect of interest and the
regime tolerance, in the part's own units. verdicts.power_table turns it into the power table the report prints.

Pilot: report v3 (docs/results.md before v4, 3 seeds on two corpora), the larger of the two corpora's per-seed
standard deviations. Seeds are 0..n-1 per block (BLOCK_SEEDS, the sweep file's FULL["block_seeds"]); a recipe read by
several blocks runs the largest count. There is no data-dependent second stage.
"""
import math
from typing import NamedTuple

MARGIN = 0.02              # nats/byte: "matches" (C7a) allows this much
NI_MARGIN = 0.02           # nats/byte: C6c-d's non-inferiority margin for the mean paired loss difference over cells
GAIN_TOL = math.log(1.1)   # C10: "near 1" means within 10%


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


