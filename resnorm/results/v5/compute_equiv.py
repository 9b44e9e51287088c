"""Compute-equivalent multipliers: the training compute Pre-Norm would need to reach a placement's loss, divided by
the compute the placement used (the figure Attention Residuals, arXiv 2603.15031, and MUDDFormer, arXiv
2502.12170, give: "matches a baseline trained with 1.25x / 1.8-2.4x the compute").

Pre-Norm's loss against compute is fitted over a ladder of K model sizes as a power law, the form the Attention
Residuals paper fits (baseline 1.891 C^-0.057):

    L(C) = a C^-b,   by least squares on (log C_k, log Lbar_k),   Lbar_k the mean loss over seeds at size k

Pre-Norm reaches a loss L at C_pre(L) = (L / a)^(-1/b). A placement's runs at size k reach Lbar'_k with compute C'_k
(its own FLOPs included: resnorm.model.flops counts every placement's extra work), so its multiplier there is

    m_k = C_pre(Lbar'_k) / C'_k      (> 1: the placement is worth more compute than it used)

and over the ladder m = exp(mean_k log m_k), one figure per placement as the papers give one. Reading the fit beyond
the ladder's compute range is reported, not refused (a placement better than Pre-Norm at the largest size is worth
more than the ladder's top): `extrapolation` is the largest factor by which some C_pre(Lbar'_k) lies outside
[C_min, C_max] of Pre-Norm's ladder (1: none).

The interval is a percentile bootstrap over paired seeds: each resample draws seed indices with replacement once and
applies the same draw to every size and every placement, because seed s gives identical base weights to every
placement at a size (the pairing): Pre-Norm's fit and each placement's means are recomputed from that draw. A
resample whose Pre-Norm fit does not fall with compute (b <= 0: no compute reaches a lower loss) counts as failed;
its fraction is reported, and the interval is over all resamples with failed ones at the least favourable end.

Failed runs (diverged, NaN) are outcomes, not dropped: the caller replaces their loss by a stated worst value
(`fill`) before any mean, as the report's verdicts do.
"""
from typing import NamedTuple

import numpy as np


class Fit(NamedTuple):
  """L(C) = a C^-b over the compute range [c_lo, c_hi]."""
  a: float
  b: float
  c_lo: float
  c_hi: float


class Multiplier(NamedTuple):
  value: float              # exp(mean_k log m_k)
  lo: float                 # percentile bootstrap interval over paired seeds
  hi: float
  per_size: tuple           # m_k, one per ladder size
  extrapolation: float      # how far the farthest C_pre(Lbar'_k) lies outside the ladder's compute range (1: inside)
  failed_frac: float        # resamples whose Pre-Norm fit does not fall with compute


def fit_power_law(compute_K, loss_K) -> Fit | None:
  """Least squares of log L on log C; None when the fit does not fall with compute (b <= 0)."""
  c, l = np.asarray(compute_K, np.float64), np.asarray(loss_K, np.float64)
  if c.shape != l.shape or c.ndim != 1 or c.size < 2:
    raise ValueError(f"a power-law fit needs two or more (compute, loss) pairs, got {c.shape} and {l.shape}")
  if not (np.all(c > 0) and np.all(l > 0) and np.all(np.isfinite(l))):
    raise ValueError("a power-law fit needs positive compute and positive finite losses")
  slope, intercept = np.polyfit(np.log(c), np.log(l), 1)
  if slope >= 0:
    return None
  return Fit(float(np.exp(intercept)), float(-slope), float(c.min()), float(c.max()))


def compute_to_reach(fit: Fit, loss) -> np.ndarray:
  """C_pre(L) = (L / a)^(-1/b)."""
  return (np.asarray(loss, np.float64) / fit.a) ** (-1.0 / fit.b)


def _filled(x_KS, fill):
  x = np.asarray(x_KS, np.float64)
  if x.ndim != 2:
    raise ValueError(f"losses must be [sizes, seeds], got shape {x.shape}")
  if np.any(~np.isfinite(x)):
    if fill is None:
      raise ValueError("a failed run's loss (NaN) needs `fill`, the worst value it counts as")
    x = np.where(np.isfinite(x), x, float(fill))
  return x


def _log_multipliers(pre_KS, place_KS, c_pre_K, c_place_K):
  """(log m_k [K], extrapolation) from seed means, or None when Pre-Norm's fit does not fall with compute."""
  fit = fit_power_law(c_pre_K, pre_KS.mean(axis=1))
  if fit is None:
    return None
  mean_K = place_KS.mean(axis=1)
  reach_K = compute_to_reach(fit, mean_K)
  log_m = np.log(reach_K) - np.log(np.asarray(c_place_K, np.float64))
  return log_m, float(max(1.0, np.max(reach_K / fit.c_hi), np.max(fit.c_lo / reach_K)))


def multiplier(pre_KS, place_KS, c_pre_K, c_place_K, fill=None, resamples: int = 2000, level: float = 0.95,
               seed: int = 0) -> Multiplier:
  """A placement's compute-equivalent multiplier over the ladder and its paired-seed bootstrap interval.
  pre_KS, place_KS: final losses [sizes, seeds], seed s of both from the same base weights; c_pre_K, c_place_K:
  each size's training compute (FLOPs), the placement's with its own extra FLOPs."""
  pre, place = _filled(pre_KS, fill), _filled(place_KS, fill)
  if pre.shape != place.shape:
    raise ValueError(f"paired seeds: Pre-Norm's losses are {pre.shape}, the placement's {place.shape}")
  point = _log_multipliers(pre, place, c_pre_K, c_place_K)
  if point is None:
    raise ValueError("Pre-Norm's loss does not fall with compute over the ladder: no multiplier is defined")
  log_m, extrapolation = point
  rng = np.random.default_rng(seed)
  n_seeds = pre.shape[1]
  draws, failed = [], 0
  for _ in range(resamples):
    idx = rng.integers(0, n_seeds, n_seeds)
    out = _log_multipliers(pre[:, idx], place[:, idx], c_pre_K, c_place_K)
    if out is None:
      failed += 1
      draws.append(-np.inf)           # no Pre-Norm compute reaches it: the least favourable end
    else:
      draws.append(float(np.mean(out[0])))
  # order statistics, not interpolation: a failed resample (-inf) beside a finite one would interpolate to NaN
  lo, hi = np.quantile(np.asarray(draws), [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
  return Multiplier(float(np.exp(np.mean(log_m))), float(np.exp(lo)), float(np.exp(hi)),
                    tuple(float(v) for v in np.exp(log_m)), extrapolation, failed / resamples)


def inside(value: float, m: Multiplier) -> bool:
  """Whether a paper's multiplier lies inside the interval."""
  return m.lo <= value <= m.hi


def side(value: float, m: Multiplier) -> str:
  """Where a paper's multiplier lies against the interval: inside, above (the placement is worth less than the paper
  says) or below (worth more)."""
  return "inside" if inside(value, m) else "above" if value > m.hi else "below"


# ---- what a multiplier depends on: its seeds, Pre-Norm's fit, and the cost charged --------------------------------

class Interval(NamedTuple):
  value: float    # the geometric mean of the per-seed multipliers
  lo: float       # its t interval (Student's t over the seeds' log multipliers)
  hi: float
  n: int          # seeds with a defined multiplier


def seed_log_multipliers(pre_KS, place_KS, c_pre_K, c_place_K, fill=None) -> np.ndarray:
  """[S] mean_k log(C_pre,s(L'_k,s) / C'_k), each seed's placement ladder against that seed's own Pre-Norm fit (the
  pairing); NaN where a seed's Pre-Norm fit does not fall with compute."""
  pre, place = _filled(pre_KS, fill), _filled(place_KS, fill)
  out = []
  for s in range(pre.shape[1]):
    fit = fit_power_law(c_pre_K, pre[:, s])
    out.append(np.nan if fit is None else float(np.mean(np.log(compute_to_reach(fit, place[:, s]))
                                                         - np.log(np.asarray(c_place_K, np.float64)))))
  return np.asarray(out)


def t_interval(log_m_S, level: float = 0.95) -> Interval | None:
  """The t interval of the mean log multiplier over seeds (the seeds' spread, not a resample of it: at 5 seeds a
  percentile bootstrap covers less than its nominal level), in multiplier units. None below two defined seeds."""
  from scipy import stats as st
  x = np.asarray(log_m_S, np.float64)
  x = x[np.isfinite(x)]
  if x.size < 2:
    return None
  half = st.t.ppf((1 + level) / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
  m = float(x.mean())
  return Interval(float(np.exp(m)), float(np.exp(m - half)), float(np.exp(m + half)), int(x.size))


def leave_one_rung_out(pre_KS, place_KS, c_pre_K, c_place_K, fill=None) -> tuple[float, float] | None:
  """The range of the multiplier (seed means) over Pre-Norm fits that each leave one rung of its ladder out: how
  far the fit's misfit alone moves it, which every seed shares and a seed interval cannot see. None when a fit
  does not fall or the ladder has fewer than three rungs."""
  pre, place = _filled(pre_KS, fill), _filled(place_KS, fill)
  c_pre = np.asarray(c_pre_K, np.float64)
  if pre.shape[0] < 3:
    return None
  values = []
  for k in range(pre.shape[0]):
    keep = np.arange(pre.shape[0]) != k
    fit = fit_power_law(c_pre[keep], pre[keep].mean(axis=1))
    if fit is None:
      return None
    values.append(float(np.exp(np.mean(np.log(compute_to_reach(fit, place.mean(axis=1)))
                                       - np.log(np.asarray(c_place_K, np.float64))))))
  return min(values), max(values)


def interpolated(pre_KS, place_KS, c_pre_K, c_place_K, fill=None) -> tuple | None:
  """Per rung, Pre-Norm's compute to reach the placement's mean loss read between Pre-Norm's own rungs (piecewise
  linear in log loss and log compute, the end segments extended), over the placement's compute: per-width
  multipliers free of the power law's misfit. None when Pre-Norm's rung means do not fall strictly with compute."""
  pre, place = _filled(pre_KS, fill), _filled(place_KS, fill)
  log_l, log_c = np.log(pre.mean(axis=1)), np.log(np.asarray(c_pre_K, np.float64))
  if not np.all(np.diff(log_l) < 0):
    return None
  out = []
  for target, c in zip(np.log(place.mean(axis=1)), np.asarray(c_place_K, np.float64)):
    j = int(np.clip(np.searchsorted(-log_l, -target), 1, len(log_l) - 1))   # the segment [j-1, j] around target
    t = (target - log_l[j - 1]) / (log_l[j] - log_l[j - 1])
    out.append(float(np.exp(log_c[j - 1] + t * (log_c[j] - log_c[j - 1])) / c))
  return tuple(out)
