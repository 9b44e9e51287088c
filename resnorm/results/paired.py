"""`eval.py --sweep=GLOB --outdir=OUT --paired=BASE`: every arm of a comparison sweep against the arm BASE, run for
run, paired by condition and seed (OUT/paired.md).

Run names are `ARM-COND-sSEED` (configs/sweeps/compare_*.py: `keel-48l-s2`): ARM is the name up to its first `-`,
SEED the integer after the last `-s`, COND what lies between (it may be empty: `ARM-sSEED`). A run of ARM is paired
with BASE's run of the same COND and SEED. Per (COND, ARM), over that arm's runs:
- the final eval loss's mean and sample sd over the runs that completed;
- the paired difference ARM - BASE over the seeds where both completed: the mean and its two-sided 95% t interval
  (scipy.stats.t, n - 1 degrees of freedom; none below 2 pairs);
- the median adjacent-input cosine over the last quarter of sublayers (eval.py's cos_last_quarter) likewise;
- the runs that diverged and that stalled at the byte unigram (counted, never dropped silently: a diverged run has
  no final loss, so it leaves the mean and the pairs, and the count says so).
The intervals are per comparison, unadjusted for how many the table makes: a smoke comparison, not a test.
"""
import math
import re

import numpy as np
from scipy import stats

from resnorm.core.errors import check

_NAME = re.compile(r"^(?P<arm>[^-]+)(?:-(?P<cond>.+?))?-s(?P<seed>\d+)$")
COLUMNS = ("cond", "arm", "runs", "diverged", "stalled", "loss_mean", "loss_sd", "loss_diff", "loss_lo", "loss_hi",
           "pairs", "cos_mean", "cos_diff", "cos_lo", "cos_hi")


def split(run: str) -> tuple[str, str, int]:
  """(arm, condition, seed) of a run name `ARM-COND-sSEED`."""
  m = _NAME.match(run)
  check(m is not None, f"--paired: run {run!r} is not named ARM-COND-sSEED (e.g. keel-48l-s2)")
  return m["arm"], m["cond"] or "", int(m["seed"])


def t_interval(x) -> tuple[float, float, float]:
  """(mean, lo, hi): the two-sided 95% t interval of the mean of x; NaN bounds below 2 values."""
  x = np.asarray(x, float)
  if len(x) == 0:
    return math.nan, math.nan, math.nan
  mean = float(np.mean(x))
  if len(x) < 2:
    return mean, math.nan, math.nan
  half = float(stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / math.sqrt(len(x)))
  return mean, mean - half, mean + half


def _value(row, key):
  v = row.get(key)
  return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else float(v)


def paired(rows: list[dict], base: str) -> list[dict]:
  """One dict per (condition, arm) in COLUMNS, conditions in their first appearance's order, BASE first among the
  arms and the others in theirs."""
  runs = {}
  for r in rows:
    arm, cond, seed = split(r["run"])
    check((cond, arm, seed) not in runs, f"--paired: two runs of arm {arm!r}, condition {cond!r}, seed {seed}")
    runs[(cond, arm, seed)] = r
  conds = list(dict.fromkeys(c for c, _, _ in runs))
  arms = list(dict.fromkeys(a for _, a, _ in runs))
  check(base in arms, f"--paired={base!r} names no arm of the sweep; its arms: {', '.join(arms)}")
  arms = [base] + [a for a in arms if a != base]
  out = []
  for cond in conds:
    for arm in arms:
      mine = {s: r for (c, a, s), r in runs.items() if c == cond and a == arm}
      if not mine:
        continue
      theirs = {s: r for (c, a, s), r in runs.items() if c == cond and a == base}
      loss = {s: _value(r, "final_eval_loss") for s, r in mine.items() if r.get("status") == "completed"}
      loss = {s: v for s, v in loss.items() if v is not None}
      row = {"cond": cond, "arm": arm, "runs": len(mine),
             "diverged": sum(r.get("status") == "diverged" for r in mine.values()),
             "stalled": sum(r.get("stalled") is True for r in mine.values()),
             "loss_mean": float(np.mean(list(loss.values()))) if loss else math.nan,
             "loss_sd": float(np.std(list(loss.values()), ddof=1)) if len(loss) > 1 else math.nan}
      for key, col in (("final_eval_loss", "loss"), ("cos_last_quarter", "cos")):
        pairs = [(_value(mine[s], key), _value(theirs[s], key)) for s in sorted(mine) if s in theirs
                 and mine[s].get("status") == theirs[s].get("status") == "completed"]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        mean, lo, hi = t_interval([a - b for a, b in pairs]) if arm != base else (math.nan,) * 3
        row.update({f"{col}_diff": mean, f"{col}_lo": lo, f"{col}_hi": hi})
        if col == "loss":
          row["pairs"] = len(pairs) if arm != base else 0
        else:
          cos = [v for v in (_value(r, key) for r in mine.values()) if v is not None]
          row["cos_mean"] = float(np.mean(cos)) if cos else math.nan
      out.append(row)
  return out


def _num(v, fmt):
  return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def _diff(row, col):
  mean, lo, hi = row[f"{col}_diff"], row[f"{col}_lo"], row[f"{col}_hi"]
  if math.isnan(mean):
    return ""
  text = f"{mean:+.4f}" + ("" if math.isnan(lo) else f" [{lo:+.4f}, {hi:+.4f}]")
  return f"**{text}**" if not math.isnan(lo) and (lo > 0 or hi < 0) else text


def markdown(rows: list[dict], base: str) -> str:
  """The table: bold where the interval excludes 0."""
  head = (f"| condition | arm | final eval loss | - {base} (paired, 95% t) | pairs | cosine, last quarter | "
          f"- {base} (paired, 95% t) | runs | diverged | stalled |\n|" + "---|" * 10 + "\n")
  body = "".join(
      f"| {r['cond']} | {r['arm']} | {_num(r['loss_mean'], '.3f')}"
      + (f" ± {_num(r['loss_sd'], '.3f')}" if not math.isnan(r["loss_sd"]) else "")
      + f" | {_diff(r, 'loss')} | {r['pairs'] or ''} | {_num(r['cos_mean'], '.4f')} | {_diff(r, 'cos')} | "
      f"{r['runs']} | {r['diverged']} | {r['stalled']} |\n" for r in rows)
  return head + body
