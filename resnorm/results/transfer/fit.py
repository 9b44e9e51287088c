"""The transfer study's statistics, as its design declares them (resnorm/results/transfer/design.py, RULES).

Learning rates are on the grid's own axis: k half-octaves (sqrt(2) steps), lr = LR_REF 2^(k/2). A curve is the final
eval loss at each k of a cell (one seed's, or the mean over seeds). Its optimum is the vertex of a least-squares
quadratic in k over the points within WINDOW steps of the curve's best point (contiguous, none diverged); it falls
back to the best point itself ("coarse") where the window has under 3 points, the quadratic opens downward, or the
vertex leaves the window. An optimum on the grid's edge is flagged "edge": the cell's minimum was not bracketed.
"""
import math
from typing import NamedTuple

import numpy as np
from scipy import stats as st

WINDOW = 2          # grid steps either side of the best point that the quadratic reads
RESAMPLES, SEED = 2000, 0


class Optimum(NamedTuple):
  k: float          # the optimum, in sqrt(2) steps
  loss: float       # the fitted (or best) loss there
  flag: str         # "" | "coarse" (no usable quadratic: the best point) | "edge" (best point on the grid's edge)
  coef: tuple       # (a, b, c) of a k^2 + b k + c, or () where none was fitted
  window: tuple     # (k_lo, k_hi) the quadratic read


def optimum(ks, losses, failed=None) -> Optimum:
  """The optimum of one curve: ks ascending grid steps (consecutive integers), losses their final eval losses;
  failed[i] True where a run diverged (its loss is never the best and ends the window)."""
  ks, y = np.asarray(ks, float), np.asarray(losses, float)
  failed = np.zeros(len(ks), bool) if failed is None else np.asarray(failed, bool)
  ok = ~failed & np.isfinite(y)
  if not ok.any():
    return Optimum(math.nan, math.nan, "failed", (), ())
  i = int(np.argmin(np.where(ok, y, np.inf)))
  edge = i in (0, len(ks) - 1)
  lo = i
  while lo > 0 and i - lo < WINDOW and ok[lo - 1]:
    lo -= 1
  hi = i
  while hi < len(ks) - 1 and hi - i < WINDOW and ok[hi + 1]:
    hi += 1
  window = (float(ks[lo]), float(ks[hi]))
  if edge:
    return Optimum(float(ks[i]), float(y[i]), "edge", (), window)
  if hi - lo + 1 < 3:
    return Optimum(float(ks[i]), float(y[i]), "coarse", (), window)
  a, b, c = np.polyfit(ks[lo:hi + 1], y[lo:hi + 1], 2)
  if a <= 0 or not window[0] <= -b / (2 * a) <= window[1]:
    return Optimum(float(ks[i]), float(y[i]), "coarse", (), window)
  k = -b / (2 * a)
  return Optimum(float(k), float(a * k * k + b * k + c), "", (float(a), float(b), float(c)), window)


def loss_at(opt: Optimum, ks, losses, k: float) -> tuple[float, str]:
  """A curve's loss at step k: its quadratic inside the window, else the piecewise-linear interpolation of the
  curve; outside the grid the nearest edge's loss, flagged ">=" (the loss there is at least that: a lower bound
  where the curve rises toward the edge)."""
  ks, y = np.asarray(ks, float), np.asarray(losses, float)
  if opt.coef and opt.window[0] <= k <= opt.window[1]:
    a, b, c = opt.coef
    return float(a * k * k + b * k + c), ""
  if k < ks[0] or k > ks[-1]:
    return float(y[0] if k < ks[0] else y[-1]), ">="
  return float(np.interp(k, ks, y)), ""


def t_interval(values, level: float = 0.95) -> tuple[float, float]:
  """mean +- t(n-1) sd / sqrt(n) over per-seed values; (nan, nan) under two finite values."""
  v = np.asarray([x for x in values if np.isfinite(x)], float)
  if v.size < 2:
    return math.nan, math.nan
  half = st.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
  return float(v.mean() - half), float(v.mean() + half)


def bootstrap(stat, seeds: int, level: float = 0.95, resamples: int = RESAMPLES, seed: int = SEED):
  """Percentile interval of stat(idx) over seed resamples with replacement (idx: an int array of seed positions,
  the same for every cell a statistic reads: the pairing by seed), its ends the order statistics just outside the
  quantiles. Resamples whose statistic is undefined (nan) count as the least favourable tail on both sides (never
  dropped): the interval widens. stat is a function of idx alone: each distinct resample (at most seeds^seeds) is
  computed once."""
  rng = np.random.default_rng(seed)
  memo = {}

  def once(idx):
    key = tuple(idx.tolist())
    if key not in memo:
      memo[key] = stat(idx)
    return memo[key]

  vals = np.array([once(rng.integers(0, seeds, seeds)) for _ in range(resamples)], float)
  bad = ~np.isfinite(vals)
  if bad.all():
    return math.nan, math.nan
  lo_v, hi_v = np.where(bad, -np.inf, vals), np.where(bad, np.inf, vals)
  q = (1 - level) / 2  # the order statistics outside the quantiles (no interpolation: an infinite tail stays one)
  return float(np.quantile(lo_v, q, method="lower")), float(np.quantile(hi_v, 1 - q, method="higher"))


def hull(*intervals) -> tuple[float, float]:
  """The smallest interval holding every given one (nan if any is undefined)."""
  los, his = [i[0] for i in intervals], [i[1] for i in intervals]
  if any(not np.isfinite(x) for x in los + his):
    return math.nan, math.nan
  return min(los), max(his)


def verdict(interval, band: float) -> str:
  """transfers: the interval lies within +-band; does not transfer: it excludes [-band, band]; else undecided."""
  lo, hi = interval
  if not (np.isfinite(lo) and np.isfinite(hi)):
    return "undecided"
  if -band <= lo and hi <= band:
    return "transfers"
  if lo > band or hi < -band:
    return "does not transfer"
  return "undecided"


def power_law(c, loss):
  """log L = a - b log C fitted over (compute, loss) points: (a, b); b > 0 when loss falls with compute."""
  slope, icpt = np.polyfit(np.log(np.asarray(c, float)), np.log(np.asarray(loss, float)), 1)
  return float(icpt), float(-slope)


def compute_for(fit, loss: float) -> float:
  """The compute at which a power-law fit (a, b) reaches `loss` (nan where b <= 0: it never falls)."""
  a, b = fit
  return math.exp((a - math.log(loss)) / b) if b > 0 else math.nan
