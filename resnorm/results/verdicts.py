"""Report v4's statistics: per part a paired one-sided t-test with a 95% confidence interval, its minimum detectable
effect, whether the part's own statistic has settled, and Holm's correction over every part of the report.

Per part, x_s is the paired per-seed value (one seed gives every arm the same base weights and data order) times the
claim's predicted sign, so that the claim predicts mean(x) > 0, over the seeds whose runs meet the part's condition
(claims.Regime). With n of them, mean m, standard deviation sd and standard error se = sd / sqrt(n):
- test: t = m / se with n - 1 degrees of freedom; p = P(T >= t), the one-sided p-value in the claim's direction,
  and p_opp = P(T <= t), in the opposite one; 95% CI of the measured mean: m +- t_{0.975, n-1} se (unsigned).
- correction: Holm-Bonferroni (Holm 1979) over all m parts of the report (both corpora), applied to the p's and,
  separately, to the p_opp's; each family's familywise error rate is at most ALPHA.
  **reproduced**: Holm-adjusted p < ALPHA; **not reproduced**: Holm-adjusted p_opp < ALPHA; **inconclusive**
  otherwise.
- minimum detectable effect: (t_{1 - ALPHA/m, n-1} + t_{POWER, n-1}) sd / sqrt(n), the true mean a one-sided test
  at the Bonferroni level ALPHA/m (Holm's strictest step) detects with probability POWER (the usual approximation,
  Cohen 1988, with t quantiles).
- stability of the part's own statistic (issue 37, section 3): its mean over the judged seeds, read with every run
  at CHECK_FRACS of its steps (the run's evals, and diagnostics, at 50%, 75% and 100%), has the same sign at each,
  and its last change (75% -> 100%) is under one standard error of the final mean. A part whose statistic has
  not settled is **out of regime**, and its row says what the values alone give ("out of regime (values: ...)").
- seeds: a seed whose runs fail the part's condition is listed and left out; the part is judged on the rest when
  at least MIN_SEEDS remain (or all planned, when fewer are planned), and is out of regime otherwise.
- one stalled run decides nothing: if leaving out any one seed that has a stalled run changes the values verdict,
  the part is inconclusive, and says so.
"""
import math

import numpy as np
from scipy import stats as st

ALPHA, POWER = 0.05, 0.80
CHECK_FRACS = (0.5, 0.75, 1.0)
MIN_SEEDS = 3
MORE_SEEDS_SE = 3.0   # a part whose |mean| is within this many standard errors of 0 after the first seeds gets more
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, OUT_OF_REGIME = "reproduced", "not reproduced", "inconclusive", \
    "out of regime"
CORRECTION = ("Holm-Bonferroni over all {m} parts of the report (both corpora), for the claim's direction and, "
              "separately, the opposite one")


def t_test(x) -> dict | None:
  """The one-sided paired t-test of mean(x) > 0 (x already sign-adjusted). None below two values."""
  x = np.asarray(x, float)
  n = len(x)
  if n < 2:
    return None
  m, sd = float(x.mean()), float(x.std(ddof=1))
  se = sd / math.sqrt(n)
  if se == 0:
    p = 0.0 if m > 0 else (1.0 if m < 0 else 0.5)
    return {"n": n, "mean": m, "sd": sd, "se": se, "t": math.copysign(math.inf, m) if m else 0.0, "p": p,
            "p_opp": 1.0 - p if m else 0.5, "half_ci": 0.0}
  t = m / se
  return {"n": n, "mean": m, "sd": sd, "se": se, "t": t, "p": float(st.t.sf(t, n - 1)),
          "p_opp": float(st.t.cdf(t, n - 1)), "half_ci": float(st.t.ppf(0.975, n - 1) * se)}


def mde(sd: float, n: int, alpha: float) -> float | None:
  if n < 2:
    return None
  return float((st.t.ppf(1 - alpha, n - 1) + st.t.ppf(POWER, n - 1)) * sd / math.sqrt(n))


def holm(pvals: list[float]) -> list[float]:
  """Holm's step-down adjusted p-values (monotone, capped at 1), in the input's order."""
  m = len(pvals)
  order = sorted(range(m), key=lambda i: pvals[i])
  adj, running = [0.0] * m, 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (m - rank) * pvals[i]))
    adj[i] = running
  return adj


def stable(means: dict, se_end: float | None) -> bool | None:
  """means: frac -> mean of the statistic over the judged seeds. None: nothing to check (at init)."""
  if not means:
    return None
  vals = [means.get(f) for f in CHECK_FRACS]
  if any(v is None for v in vals) or se_end is None:
    return False
  same_sign = len({float(np.sign(v)) for v in vals}) == 1
  return bool(same_sign and abs(vals[-1] - vals[-2]) <= max(se_end, 1e-9))  # 1e-9: rounding, when se is 0


def decide(test: dict | None, p_adj: float | None, p_opp_adj: float | None) -> str:
  if test is None or p_adj is None:
    return INCONCLUSIVE
  if p_adj < ALPHA:
    return REPRODUCED
  if p_opp_adj < ALPHA:
    return NOT_REPRODUCED
  return INCONCLUSIVE


def finalize(parts: list[dict]) -> int:
  """Applies the correction over these parts (every part of the report) and sets each part's p_adj, mde,
  values_verdict and verdict. Returns m, the number of tested parts."""
  tested = [p for p in parts if p["test"] is not None]
  m = max(len(tested), 1)
  for p, a, b in zip(tested, holm([p["test"]["p"] for p in tested]), holm([p["test"]["p_opp"] for p in tested])):
    p["p_adj"], p["p_opp_adj"] = a, b
  for p in parts:
    t = p["test"]
    p.setdefault("p_adj", None)
    p.setdefault("p_opp_adj", None)
    p["mde"] = mde(t["sd"], t["n"], ALPHA / m) if t else None
    p["values_verdict"] = decide(t, p["p_adj"], p["p_opp_adj"])
    p["fragile"] = p["values_verdict"] != INCONCLUSIVE and _rests_on_one_stalled_run(p)
    if p["fragile"]:
      p["values_verdict"] = INCONCLUSIVE
    p["verdict"] = OUT_OF_REGIME if not p["in_regime_ok"] else p["values_verdict"]
  return m


def _rests_on_one_stalled_run(p: dict) -> bool:
  """Whether leaving out one seed that has a stalled run changes the values verdict (at the part's own Holm
  factor, adjusted p / p)."""
  t, x = p["test"], p["x"]
  f = p["p_adj"] / t["p"] if t["p"] > 0 else 1.0
  f_opp = p["p_opp_adj"] / t["p_opp"] if t["p_opp"] > 0 else 1.0
  for s in p["stalled_seeds"]:
    if s not in x:
      continue
    t2 = t_test([v for k, v in x.items() if k != s])
    v2 = decide(t2, t2 and min(1.0, t2["p"] * f), t2 and min(1.0, t2["p_opp"] * f_opp))
    if v2 != p["values_verdict"]:
      return True
  return False


def needs_more_seeds(p: dict, first: int) -> bool:
  """After the design's first seeds: the effect lies within MORE_SEEDS_SE standard errors of zero."""
  t = p["test"]
  return t is not None and t["n"] <= first and abs(t["mean"]) < MORE_SEEDS_SE * t["se"]
