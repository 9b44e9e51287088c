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
