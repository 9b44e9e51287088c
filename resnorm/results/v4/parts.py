"""A part of a claim, measured from the grid's runs: the paired per-seed statistic over the seeds the design fixed,
the control condition, failed seeds and their worst case, failure counts per arm, and the regime's trajectory and
TOST (part); stability counted as discordant (cell, seed) pairs (discordant_part). The statistics themselves are
resnorm/results/verdicts.py's.
"""
import math

import numpy as np

from resnorm.results import post_hoc, verdicts
from resnorm.results.v4 import grid
from resnorm.results.v4.design import DESIGN, seeds

# ---- per-seed quantities (None when a run they need is missing or has no value) -----------------------------------

def _ok(*xs):
  return all(x is not None for x in xs)


def col(rows, key):
  return [r[key] for r in rows if r.get(key) is not None] if rows else None


def log_ratio(rows, key, first: int, last: int = -1):
  vals = [r[key] for r in rows] if rows else None
  return math.log(vals[last] / vals[first]) if vals and vals[first] > 0 and vals[last] > 0 else None


def median_cos(rows):
  c = col(rows, "cos_next_median")
  return float(np.median(c)) if c else None


def cos_spread(rows):
  """Median over sublayers of the 5-95% band of the per-token cosine: how concentrated it is."""
  return float(np.median([r["cos_next_p95"] - r["cos_next_p05"] for r in rows if r.get("cos_next_p95") is not None])) \
      if rows else None


def max_log_gain(rows):
  g = col(rows, "gain_forward")
  return max(abs(math.log(x)) for x in g + col(rows, "gain_backward")) if g else None


def slope(xs, ys):
  pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
  return float(np.polyfit(*zip(*pts), 1)[0]) if len(pts) == len(xs) and len({x for x, _ in pts}) >= 2 else None


class Control:
  """The condition a part places on its control or reference arm (never on an arm under test): `text` (printed)
  and ok(seed) -> bool."""

  def __init__(self, text, ok=lambda s: True):
    self.text, self.ok = text, ok


NONE = Control("none")


def trained(R, *recipes, text):
  """The control's runs learned beyond the byte unigram (did not stall or diverge)."""
  return Control(text, lambda s: all(R.trained(r, s) for r in recipes))


def _failed(R, recipes, s, need_trained: bool) -> bool:
  runs = [R.run(r, s) for r in recipes]
  return any(x and (x["diverged"] or (need_trained and x["stalled"])) for x in runs)


def part(R, d, cid, label, what, sign, fn, control: Control = NONE, needs=lambda s: (), note=None):
  """One part: fn(seed) -> the paired per-seed statistic (None when a run it needs is missing or has no value),
  over the seeds DESIGN fixed for it. needs(seed) -> the recipes under test that the statistic needs trained (a seed
  where one stalled has no value; one where a run diverged has none anyway: both are failed seeds, judged by the
  worst case). The verdicts come later, from verdicts.finalize over every part of the report."""
  design = DESIGN[(cid, label)]
  planned = seeds(d, cid, label)
  values, touched, failed, left_out, missing = {}, {}, [], [], []
  for s in planned:
    R.touched = set()
    try:
      v = fn(s)
      need = tuple(needs(s))
      if v is not None and need and _failed(R, need, s, True):
        v = None  # the statistic needs these arms trained
    finally:
      touched[s], R.touched = R.touched, None
    if not control.ok(s):
      left_out.append(s)
    elif v is not None and np.isfinite(v):
      values[s] = float(v)
    elif any((R.run(r, k) or {}).get("diverged") for r, k in touched[s]) or (need and _failed(R, need, s, True)):
      failed.append(s)
    else:
      missing.append(s)
  designed = grid.blocks(R.d)
  # pending: a run of the design that this part reads has not finished yet (a statistic with no value for another
  # reason, or a run outside this size's design, is not waited for)
  pending = any(r in designed and R.run(r, k) is None for s in missing for r, k in touched[s])
  x = {s: sign * v for s, v in values.items()}
  test = verdicts.t_test(list(x.values()))
  reads_runs = any(touched.values())
  out = {"cid": cid, "label": label, "what": what, "sign": sign, "values": values, "planned": planned,
         "control": control.text, "left_out": left_out, "failed": failed, "missing": missing, "x": x,
         "test": test, "worst": verdicts.sensitivity(x, failed),
         "worst_high": verdicts.sensitivity(x, failed, high=True), "design": design, "reads_runs": reads_runs,
         "recipes": sorted({r for keys in touched.values() for r, _ in keys}, key=repr),
         "failures": _failure_counts(R, touched), "pending": pending, "kind": post_hoc.kind("v4", cid, label)}
  out.update(_regime(R, fn, x, sign, design.tol) if reads_runs and design.tol is not None and x else
             {"trajectory": {}, "regime": None, "settled": None})
  out["note"] = note(out) if note else ""
  return out


def _failure_counts(R, touched) -> dict:
  """Per recipe variant: runs read that diverged or stalled, over the part's seeds."""
  out = {}
  for keys in touched.values():
    for r, s in keys:
      run = R.run(r, s)
      if run:
        c = out.setdefault(r.variant, [0, 0])
        c[0] += bool(run["diverged"])
        c[1] += bool(run["stalled"])
  return {v: {"diverged": a, "stalled": b} for v, (a, b) in sorted(out.items())}


def _regime(R, fn, x, sign, tol) -> dict:
  """The part's statistic at verdicts.CHECK_FRACS of each run's steps (its trajectory: mean over the judged seeds),
  and TOST of the per-seed change over the last quarter (75% -> 100%) against the part's tolerance."""
  at = {}
  for f in verdicts.CHECK_FRACS:
    with R.at(f, subset=True):  # the eval set's subset at every fraction: like with like
      at[f] = {s: fn(s) for s in x}
  traj = {f: (float(np.mean([sign * v for v in vals.values()])) if vals and _ok(*vals.values()) else None)
          for f, vals in at.items()}
  changes = [sign * (at[1.0][s] - at[0.75][s]) for s in x if _ok(at[1.0][s], at[0.75][s])]
  reg = verdicts.tost(changes, tol)
  return {"trajectory": traj, "regime": reg, "settled": bool(reg and reg["settled"])}


def discordant_part(R, d, cid, label, what, cells, worse_arm, better_arm):
  """Stability counted: over the declared cells and the part's seeds, (cell, seed) pairs where `worse_arm`'s run
  failed (stalled or diverged) and `better_arm`'s trained, against the reverse; McNemar's exact test. cells: the
  recipes of the worse arm; the better arm's are the same with its variant."""
  design = DESIGN[(cid, label)]
  planned = seeds(d, cid, label)
  worse = better = 0
  pairs, missing = 0, 0
  designed = grid.blocks(R.d)
  for c in cells:
    for s in planned:
      a, b = R.run(c, s), R.run(c._replace(variant=better_arm), s)
      if not (a and b):
        missing += c in designed and (not a or not b)
        continue
      pairs += 1
      ta, tb = R.trained(c, s), R.trained(c._replace(variant=better_arm), s)
      worse += tb and not ta
      better += ta and not tb
  test = verdicts.discordant_test(worse, better)
  return {"cid": cid, "label": label, "what": what, "sign": +1, "values": {}, "planned": planned, "control": "none",
          "left_out": [], "failed": [], "missing": [], "missing_pairs": missing, "x": {}, "test": test, "worst": None,
          "design": design, "reads_runs": True, "recipes": sorted(set(cells), key=repr),
          "failures": {}, "trajectory": {}, "regime": None, "settled": None, "pairs": pairs,
          "discordant": (worse, better), "pending": missing > 0,
          "note": f"{pairs} (cell, seed) pairs: {worse_arm} failed where {better_arm} trained in {worse}, the reverse "
                  f"in {better}"}


def _d(a, b):
  return a - b if _ok(a, b) else None


def _map(x, f):
  return None if x is None else f(x)


def _mean(xs):
  return float(np.mean(xs)) if xs and _ok(*xs) else None


