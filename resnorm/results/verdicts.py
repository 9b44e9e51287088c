"""Report v4's statistics (second pass): per part a two-sided paired test, one Benjamini-Hochberg correction over
every part of the report, intervals at the correction's level, the minimum detectable effect from the noncentral t,
and a regime rule that is an equivalence test.

Per part, x_s is the paired per-seed value (one seed gives every arm the same base weights and data order) times the
claim's predicted sign, so that the claim predicts mean(x) > 0, over the seeds the design fixed for it in advance
(claims.DESIGN, from the power table; no data-dependent second stage).
- test: the two-sided one-sample t-test of mean(x) = 0 (scipy.stats.ttest_1samp); the call's direction is the sign
  of the mean. Parts about stability count failures instead: the exact two-sided binomial test of the discordant
  (cell, seed) pairs (McNemar's exact test, scipy.stats.binomtest), pooled over the part's declared cells.
- correction: Benjamini-Hochberg at Q over every tested part of both corpora (scipy.stats.false_discovery_control),
  which bounds the directional false discovery rate (Benjamini & Yekutieli 2005, section 5). Its selected parts
  (adjusted p < Q) are the report's R calls.
- intervals: the FCR-adjusted interval of Benjamini & Yekutieli (2005), at level 1 - R Q / m (m the tested parts;
  R = 1 when there is none), printed beside the unadjusted 95% interval. At that level a t-test part's interval
  excludes 0 exactly when BH selects it.
- verdict (classify(); the rule is declared in resnorm/results/v4/design.py, VERDICT_RULE): from that interval, signed so
  that the claim predicts > 0, and the part's effect of interest delta: **reproduced** when it lies above 0 (flagged
  "smaller than claimed" when it also lies below delta); **opposite** when it lies below 0; **not reproduced** (a
  decided null) when it reaches 0 and lies below delta; **undecided** when it reaches both 0 and delta. Only a part
  BH selects can be reproduced or opposite. A part's kind (post hoc: resnorm/results/post_hoc.py) says what delta
  is: `effect` (the smallest effect worth reporting), `size` (the size the paper claims: a reproduced part above it
  is flagged "larger than claimed") or `threshold` (the claim holds for any value above 0, and delta only sized the
  design: such a part is a decided null only where its interval excludes every positive value, and carries no size
  flag). An opposite part whose interval lies within -delta is flagged "smaller than the effect of interest", as a
  small reproduced one is "smaller than claimed" (flag()).
- minimum detectable effect, two of them: the a-priori MDE (the design's: the pilot sd at the design level,
  power_table) and the observed MDE (post hoc: the part's own sd at the report's BH level). Both solve for the
  smallest true mean that the two-sided t-test detects with probability POWER on the noncentral t (scipy.stats.nct).
- regime: a part is settled when the per-seed change of its own statistic over the last quarter of training
  (75% -> 100% of each run's steps) is equivalent to zero within the part's declared tolerance: TOST (two one-sided
  t-tests, Schuirmann 1987) at TOST_ALPHA, paired across seeds. A part not shown settled is **out of regime**.
- failures: no seed is dropped for an outcome of an arm under test. Where such an arm failed (stalled or diverged) in
  a seed and the statistic needs it trained, the part is judged on the other seeds, and the verdict stands only if the
  worst case agrees: that seed given the least favourable difference observed in the other seeds (sensitivity()).
"""
import math
import warnings

import numpy as np
from scipy import integrate, optimize
from scipy import stats as st

Q, POWER, TOST_ALPHA = 0.05, 0.80, 0.05
CHECK_FRACS = (0.5, 0.75, 1.0)   # the fractions of each run's steps at which a part's statistic is read
REPRODUCED, NOT_REPRODUCED, OPPOSITE, UNDECIDED, OUT_OF_REGIME = "reproduced", "not reproduced", "opposite", \
    "undecided", "out of regime"
SMALLER = "smaller than claimed"  # the flag of a reproduced part whose interval also lies below its effect of interest
LARGER = "larger than claimed"    # ... of a reproduced `size` part whose interval lies above the claimed size
SMALL_OPPOSITE = "smaller than the effect of interest"  # ... of an opposite part whose interval lies within -delta
EFFECT, SIZE, THRESHOLD = "effect", "size", "threshold"   # part kinds: what its effect of interest is
PENDING = "pending"  # a run the part reads has not finished (its record is missing): no test, no verdict yet
CORRECTION = ("Benjamini-Hochberg at q = {q} over all {m} tested parts of the report (both corpora), on two-sided "
              "p-values (directional FDR); intervals FCR-adjusted (Benjamini & Yekutieli 2005) at {level:.2%}, the "
              "unadjusted 95% beside them")


def t_test(x) -> dict | None:
  """The two-sided one-sample t-test of mean(x) = 0 (x sign-adjusted: the claim predicts > 0). None below 2 values."""
  x = np.asarray(x, float)
  n = len(x)
  if n < 2:
    return None
  m, sd = float(x.mean()), float(x.std(ddof=1))
  # identical values (to rounding): scipy's t is undefined; an exact nonzero effect is certain, zero says nothing
  if sd <= 1e-12 * max(1.0, abs(m)):
    return {"kind": "t", "n": n, "mean": m, "sd": 0.0, "se": 0.0, "t": math.copysign(math.inf, m) if m else 0.0,
            "df": n - 1, "p": 0.0 if m else 1.0, "direction": int(np.sign(m))}
  r = st.ttest_1samp(x, 0.0)
  return {"kind": "t", "n": n, "mean": m, "sd": sd, "se": sd / math.sqrt(n), "t": float(r.statistic),
          "df": n - 1, "p": float(r.pvalue), "direction": int(np.sign(m)), "_x": x}


def discordant_test(worse: int, better: int) -> dict | None:
  """McNemar's exact test on the discordant pairs: `worse` (the claim's failure arm failed where its comparison
  trained, counted in the claim's direction) against `better` (the reverse). Two-sided binomial test of 1/2.
  None without a discordant pair."""
  n = worse + better
  if n == 0:
    return None
  r = st.binomtest(worse, n, 0.5)
  ci = r.proportion_ci(0.95, method="exact")
  return {"kind": "discordant", "n": n, "worse": worse, "better": better, "mean": worse / n - 0.5, "p": r.pvalue,
          "direction": int(np.sign(worse - better)), "ci95": (ci.low - 0.5, ci.high - 0.5), "_binom": r}


def interval(test: dict | None, level: float):
  """The two-sided interval of the part's mean at `level` (sign-adjusted units), or None."""
  if test is None:
    return None
  if test["kind"] == "discordant":
    ci = test["_binom"].proportion_ci(level, method="exact")
    return (ci.low - 0.5, ci.high - 0.5)
  if test["se"] == 0:
    return (test["mean"], test["mean"])
  ci = st.ttest_1samp(test["_x"], 0.0).confidence_interval(level)
  return (float(ci.low), float(ci.high))


def _tail_power(d: float, n: int, alpha: float) -> float:
  """P(|T| > t_{1-alpha/2, n-1}) for T noncentral t with n - 1 degrees of freedom and noncentrality d sqrt(n)."""
  df, nc = n - 1, d * math.sqrt(n)
  tc = st.t.ppf(1 - alpha / 2, df)
  p = st.nct.sf(tc, df, nc) + st.nct.cdf(-tc, df, nc)
  if np.isfinite(p):
    return float(p)
  # scipy's nct returns NaN far in its tails: the same probability as an integral over the chi-square variable
  f = lambda v: st.chi2.pdf(v, df) * (st.norm.sf(tc * math.sqrt(v / df) - nc) + st.norm.cdf(-tc * math.sqrt(v / df) - nc))
  return float(integrate.quad(f, 0, np.inf, limit=200)[0])


def power(effect_sd: float, n: int, alpha: float) -> float:
  """Exact power of the two-sided one-sample t-test at level alpha for a true mean of effect_sd standard deviations."""
  return _tail_power(abs(effect_sd), n, alpha)


def mde(sd: float, n: int, alpha: float) -> float | None:
  """The smallest true mean (in the units of sd) that the two-sided t-test at level alpha detects with probability
  POWER, from the noncentral t."""
  if n < 2 or not np.isfinite(sd):
    return None
  hi = 1.0
  while power(hi, n, alpha) < POWER:
    hi *= 2
  return float(optimize.brentq(lambda d: power(d, n, alpha) - POWER, 0.0, hi, xtol=1e-6) * sd)


def tost_p(x, tol: float):
  """TOST's p-value (the larger of the two one-sided t-tests' against -tol and +tol) over the last axis of x: the
  equivalence of the mean to zero within +-tol. Vectorized: x [..., n] gives [...]. Identical values: 0 inside the
  bounds, 1 outside."""
  x = np.asarray(x, float)
  with np.errstate(all="ignore"), warnings.catch_warnings():  # identical values: decided by `const` below
    warnings.simplefilter("ignore", RuntimeWarning)
    lo = st.ttest_1samp(x, -tol, axis=-1, alternative="greater").pvalue
    hi = st.ttest_1samp(x, tol, axis=-1, alternative="less").pvalue
  const = np.where(np.abs(x.mean(-1)) < tol, 0.0, 1.0)
  return np.where(x.std(-1) > 1e-12 * np.maximum(1.0, np.abs(x.mean(-1))), np.maximum(lo, hi), const)


def tost(changes, tol: float) -> dict | None:
  """Equivalence of the mean per-seed change to zero within +-tol, at TOST_ALPHA (Schuirmann 1987). settled: both
  one-sided tests reject. None below two changes."""
  x = np.asarray([c for c in changes if c is not None and np.isfinite(c)], float)
  if len(x) < 2 or tol <= 0:
    return None
  p = float(tost_p(x, tol))
  return {"n": len(x), "mean_change": float(x.mean()), "tol": tol, "p": p, "settled": p < TOST_ALPHA}


def sensitivity(x: dict, failed: list, high: bool = False) -> dict | None:
  """The worst case for seeds whose arm under test failed where the statistic needs it trained: each such seed at
  the least favourable difference observed among the others: the smallest sign-adjusted value against a call that
  the claim holds, the largest (`high`) against an "opposite" call. Returns the test with those values added, or
  None when nothing failed."""
  if not failed or not x:
    return None
  worst = max(x.values()) if high else min(x.values())
  return t_test(list(x.values()) + [worst] * len(failed))


def bh(pvals: list[float]) -> list[float]:
  """Benjamini-Hochberg adjusted p-values, in the input's order (scipy.stats.false_discovery_control)."""
  return [float(p) for p in st.false_discovery_control(np.asarray(pvals, float), method="bh")] if pvals else []


def excess_failures(worse: int, better: int) -> bool:
  """Whether `worse` discordant failures are significantly more numerous than `better` (one-sided exact binomial
  test at Q): the stability half of C6c-d's non-inferiority."""
  n = worse + better
  return bool(n) and st.binomtest(worse, n, 0.5, alternative="greater").pvalue < Q


def design_level(m: int, calls: int) -> float:
  """The two-sided level the power table designs for: BH's threshold for a further part once `calls` parts are
  called among m (Q (calls + 1) / m would be its own step; Q calls / m is one step stricter)."""
  return Q * max(calls, 1) / m


def power_table(design: dict, block_seeds: dict, m: int, calls: int) -> list[dict]:
  """Per part (design: (claim, label) -> claims.Design): the pilot sd, its seeds, the MDE at 80% power at the design
  level, the effect of interest, the power at that effect, and whether the design can decide it (MDE <= effect).
  Discordant-count parts (no pilot sd) have none."""
  level = design_level(m, calls)
  rows = []
  for (cid, label), p in design.items():
    n = block_seeds[p.block]
    ok = np.isfinite(p.pilot_sd) and p.pilot_sd > 0
    mde_ = mde(p.pilot_sd, n, level) if ok else None
    rows.append({"part": f"{cid}{label}", "pilot_sd": p.pilot_sd if ok else None, "n": n, "level": level,
                 "mde": mde_, "effect": p.effect, "power": power(p.effect / p.pilot_sd, n, level) if ok else None,
                 "decidable": None if mde_ is None else mde_ <= p.effect})
  return rows


def calls(pvals, directions) -> list[str]:
  """The parts BH selects, from their two-sided p-values and directions: REPRODUCED or OPPOSITE by the direction,
  UNDECIDED where not selected. The one place the correction is applied (finalize and the global-null test)."""
  return [UNDECIDED if a >= Q or d == 0 else (REPRODUCED if d > 0 else OPPOSITE)
          for a, d in zip(bh(list(pvals)), directions)]


def classify(ci, effect: float, selected: bool = True, kind: str = EFFECT) -> str:
  """The four-outcome rule (design.VERDICT_RULE) on an interval ci = (lo, hi), signed so that the claim predicts a
  positive value, against the effect of interest. Only a selected part (BH) counts as excluding 0. A `threshold`
  part's claim is every positive value: its null is decided only where the interval excludes them all."""
  if ci is None:
    return UNDECIDED
  lo, hi = ci
  if selected and lo > 0:
    return REPRODUCED
  if selected and hi < 0:
    return OPPOSITE
  if kind == THRESHOLD:
    return NOT_REPRODUCED if hi <= 0 else UNDECIDED
  return NOT_REPRODUCED if math.isfinite(effect) and hi < effect else UNDECIDED


def flag(verdict: str, ci, effect: float, kind: str = EFFECT) -> str | None:
  """The size qualifier of a reproduced or opposite part (None if it has none): SMALLER when a reproduced part's
  interval lies below its effect of interest (not for a threshold part, whose claim has no size), LARGER when a
  `size` part's lies above the claimed size, SMALL_OPPOSITE when an opposite part's lies above -delta."""
  if ci is None or not math.isfinite(effect):
    return None
  lo, hi = ci
  if verdict == REPRODUCED and kind != THRESHOLD and hi < effect:
    return SMALLER
  if verdict == REPRODUCED and kind == SIZE and lo > effect:
    return LARGER
  if verdict == OPPOSITE and lo > -effect:
    return SMALL_OPPOSITE
  return None


def effect_of(p: dict) -> float:
  """The part's effect of interest (its design's; inf where a part has none: no null is then decided)."""
  dz = p.get("design")
  return dz.effect if dz is not None else p.get("effect", math.inf)


def finalize(parts: list[dict]) -> dict:
  """Applies the one correction over these parts (every part of the report) and sets each part's p_adj, intervals,
  verdicts (classify() on the interval at the correction's level) and observed MDE. Returns {"m": tested parts,
  "calls": R (BH's selected parts), "level": the FCR interval level}."""
  tested = [p for p in parts if p["test"] is not None and not p.get("pending")]
  for p, a in zip(tested, bh([p["test"]["p"] for p in tested])):
    p["p_adj"] = a
  m = max(len(tested), 1)
  for p in parts:
    p.setdefault("p_adj", None)
    p["selected"] = p["p_adj"] is not None and p["p_adj"] < Q and p["test"]["direction"] != 0
  calls = sum(p["selected"] for p in parts)
  level = 1 - max(calls, 1) * Q / m
  for p in parts:
    t, delta, kind = p["test"], effect_of(p), p.get("kind", EFFECT)
    p["ci"], p["ci95"] = interval(t, level), interval(t, 0.95)
    p["mde_observed"] = mde(t["sd"], t["n"], design_level(m, calls)) if t and t["kind"] == "t" else None
    p["values_verdict"] = PENDING if p.get("pending") else classify(p["ci"], delta, p["selected"], kind)
    if p["values_verdict"] in (REPRODUCED, OPPOSITE) and p.get("worst") is not None:  # must agree
      if p["values_verdict"] == OPPOSITE and p.get("worst_high") is not None:  # its least favourable is the largest
        p["worst"] = p["worst_high"]
      w = p["worst"]
      w_adj = min(1.0, w["p"] * (p["p_adj"] / t["p"] if t["p"] > 0 else 1.0))
      p["worst_verdict"] = classify(interval(w, level), delta, w_adj < Q and w["direction"] != 0, kind)
      if p["worst_verdict"] != p["values_verdict"]:
        p["values_verdict"] = UNDECIDED
    if p.get("veto") and p["values_verdict"] == REPRODUCED:  # C6c-d: significantly more failures than the control
      p["values_verdict"] = NOT_REPRODUCED
    p["flag"] = flag(p["values_verdict"], p["ci"], delta, kind)
    p["verdict"] = p["values_verdict"] if p.get("settled") is not False or p.get("pending") else OUT_OF_REGIME
  return {"m": len(tested), "calls": calls, "level": level}
