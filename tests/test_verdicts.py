"""resnorm/results/verdicts.py: the two-sided t-test and its intervals against scipy, the exact MDE's power by
simulation, one Benjamini-Hochberg correction holding the false-call rate under a global null (2,000 reports at
several RNG seeds), the FCR interval level, the four-outcome verdict rule on the interval (a decided null, an
opposite effect, a small one flagged), McNemar's exact test, the worst case for failed seeds, TOST's regime rule under
a stable effect and a drift, and the power table."""
import numpy as np
import pytest
from scipy import stats as st

from resnorm.results import verdicts
from resnorm.results.v4 import design


def test_t_test_is_scipys_two_sided_test_and_its_intervals():
  x = [0.3, 0.1, 0.25, -0.05, 0.2]
  t = verdicts.t_test(x)
  ref = st.ttest_1samp(x, 0.0)
  assert t["p"] == pytest.approx(ref.pvalue) and t["direction"] == 1 and t["n"] == 5
  # the sample sd (ddof 1) and its standard error, which the report prints and the MDE column reads
  assert t["sd"] == pytest.approx(np.std(x, ddof=1)) and t["se"] == pytest.approx(st.sem(x))
  assert t["t"] == pytest.approx(ref.statistic) and t["df"] == 4
  assert verdicts.t_test([-v for v in x])["direction"] == -1
  lo, hi = st.t.interval(0.95, 4, loc=np.mean(x), scale=st.sem(x))
  assert verdicts.interval(t, 0.95) == pytest.approx((lo, hi))
  lo, hi = st.t.interval(0.99, 4, loc=np.mean(x), scale=st.sem(x))
  assert verdicts.interval(t, 0.99) == pytest.approx((lo, hi))
  assert verdicts.t_test([0.5]) is None and verdicts.mde(1.0, 1, 0.05) is None


@pytest.mark.parametrize("n", [3, 5])
def test_mde_has_its_power_at_small_n(n):
  """The exact MDE (noncentral t): a true mean of that size is detected 80% of the time, at df 2 and 4 where the
  t + t approximation gives 67% and 71%. Simulated with 20,000 draws (SE of the rate 0.003)."""
  alpha = 0.05 * 12 / 48
  m = verdicts.mde(1.0, n, alpha)
  approx = (st.t.ppf(1 - alpha / 2, n - 1) + st.t.ppf(0.8, n - 1)) / np.sqrt(n)
  assert m > approx * 1.05  # the approximation understates it
  draws = np.random.default_rng(n).normal(m, 1.0, (20000, n))
  tstat = draws.mean(1) / (draws.std(1, ddof=1) / np.sqrt(n))
  rate = np.mean(np.abs(tstat) > st.t.ppf(1 - alpha / 2, n - 1))
  assert abs(rate - 0.80) < 0.015, rate
  assert verdicts.power(m, n, alpha) == pytest.approx(0.80, abs=1e-4)


def test_one_correction_holds_the_false_call_rate_under_a_global_null():
  """48 parts (both corpora) at n = 3 and at n = 5, no effect anywhere: the rate of reports with any call stays at
  q = 0.05, within 3 standard errors, at every RNG seed (a correction applied once per direction gives about 0.09).
  2,000 reports per seed and n; each report's p-values are scipy's two-sided t-tests, its calls verdicts.calls."""
  reports, m = 2000, 48
  margin = 3 * np.sqrt(0.05 * 0.95 / reports)
  pooled = []
  for seed in (3, 5, 6):
    for n in (3, 5):
      x = np.random.default_rng(seed * 10 + n).normal(0, 1, (reports, m, n))
      ps, dirs = st.ttest_1samp(x, 0.0, axis=-1).pvalue, np.sign(x.mean(-1))
      rate = np.mean([any(c != verdicts.UNDECIDED for c in verdicts.calls(p, d)) for p, d in zip(ps, dirs)])
      pooled.append(rate)
      assert rate <= 0.05 + margin, (seed, n, rate)
  assert np.mean(pooled) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / (reports * len(pooled))), pooled
  # finalize decides through the same function
  parts = [{"test": verdicts.t_test(row)} for row in np.random.default_rng(0).normal(0, 1, (m, 3))]
  verdicts.finalize(parts)
  assert [p["values_verdict"] for p in parts] == verdicts.calls([p["test"]["p"] for p in parts],
                                                                [p["test"]["direction"] for p in parts])


def test_bh_decisions_and_the_fcr_level():
  ps = [0.001, 0.02, 0.03, 0.5]
  assert verdicts.bh(ps) == pytest.approx(list(st.false_discovery_control(ps)))
  parts = [{"test": verdicts.t_test(x)} for x in ([1.0, 1.1, 0.9, 1.05], [-1.0, -1.1, -0.9, -1.05], [0.1, -0.2, 0.05,
                                                                                                      0.0])]
  out = verdicts.finalize(parts)
  assert [p["verdict"] for p in parts] == [verdicts.REPRODUCED, verdicts.OPPOSITE, verdicts.UNDECIDED]
  assert out == {"m": 3, "calls": 2, "level": pytest.approx(1 - 2 * 0.05 / 3)}
  assert parts[0]["ci"] == pytest.approx(verdicts.interval(parts[0]["test"], 1 - 2 * 0.05 / 3))
  assert parts[0]["ci95"] == pytest.approx(verdicts.interval(parts[0]["test"], 0.95))
  assert parts[0]["ci"][0] < parts[0]["ci95"][0]  # wider than the unadjusted interval


class _D:  # a part's design, as far as the rule reads it
  def __init__(self, effect):
    self.effect = effect


def test_with_no_call_the_fcr_level_takes_r_as_one_and_intervals_stay_finite():
  """Benjamini-Hochberg calls none of four null parts (three t-tests, one discordant count): the FCR level is
  1 - 1 q / m with R = 1, not 1 - 0 q / m = 1, where a t interval is infinite and every part would be undecided
  whatever its spread (a tight null around 0 is a decided null)."""
  xs = ([0.2, -0.1, 0.05, -0.15], [0.3, -0.2, 0.1, -0.25], [0.0002, -0.0003, 0.0001, -0.0001])
  parts = [{"test": verdicts.t_test(x), "design": _D(0.05)} for x in xs]
  parts.append({"test": verdicts.discordant_test(3, 2), "design": _D(0.3)})
  out = verdicts.finalize(parts)
  level = 1 - 0.05 / 4
  assert out == {"m": 4, "calls": 0, "level": pytest.approx(level)}
  for p in parts:
    assert np.all(np.isfinite(p["ci"])), p["ci"]
    assert p["ci"] == pytest.approx(verdicts.interval(p["test"], level))
  lo, hi = st.t.interval(level, 3, loc=np.mean(xs[0]), scale=st.sem(xs[0]))
  assert parts[0]["ci"] == pytest.approx((lo, hi))
  assert [p["verdict"] for p in parts] == [verdicts.UNDECIDED, verdicts.UNDECIDED, verdicts.NOT_REPRODUCED,
                                           verdicts.UNDECIDED]


E, S, T = verdicts.EFFECT, verdicts.SIZE, verdicts.THRESHOLD


@pytest.mark.parametrize("ci, kind, want, flag", [
    ((0.10, 0.40), E, verdicts.REPRODUCED, None),         # above 0 and reaching delta
    ((0.001, 0.02), E, verdicts.REPRODUCED, verdicts.SMALLER),  # above 0, below delta: smaller than claimed
    ((0.01, 0.30), E, verdicts.REPRODUCED, None),         # starts below delta but reaches it: not flagged
    ((-0.40, -0.10), E, verdicts.OPPOSITE, None),         # below 0, reaching -delta
    ((-0.04, -0.01), E, verdicts.OPPOSITE, verdicts.SMALL_OPPOSITE),  # below 0, within -delta (C4b on Python)
    ((-0.002, 0.002), E, verdicts.NOT_REPRODUCED, None),  # reaches 0, below delta: a decided null (C6b)
    ((-0.15, 0.15), E, verdicts.UNDECIDED, None),         # reaches 0 and delta (C3b)
    ((-0.01, 0.05), E, verdicts.UNDECIDED, None),         # reaching delta exactly is not below it
    ((0.10, 0.40), E, verdicts.REPRODUCED, None),         # above delta: an `effect` part has no claimed size
    ((0.10, 0.40), S, verdicts.REPRODUCED, verdicts.LARGER),  # ... a `size` part does (C15 on Python)
    ((0.03, 0.40), S, verdicts.REPRODUCED, None),         # reaching below the claimed size: not larger
    ((0.001, 0.02), S, verdicts.REPRODUCED, verdicts.SMALLER),
    ((0.001, 0.02), T, verdicts.REPRODUCED, None),        # a threshold's claim has no size to fall short of
    ((-0.239, 0.0198), T, verdicts.UNDECIDED, None),      # C10b on Shakespeare: (0, 0.0198] is still possible
    ((-0.239, 0.0), T, verdicts.NOT_REPRODUCED, None),    # every positive value excluded: a decided null
    ((-0.04, -0.01), T, verdicts.OPPOSITE, verdicts.SMALL_OPPOSITE),
])
def test_four_outcome_rule_on_the_interval(ci, kind, want, flag):
  assert verdicts.classify(ci, 0.05, kind=kind) == want
  assert verdicts.flag(want, ci, 0.05, kind) == flag
  if want in (verdicts.REPRODUCED, verdicts.OPPOSITE):  # only a part the correction selects excludes 0
    assert verdicts.classify(ci, 0.05, selected=False, kind=kind) in (verdicts.NOT_REPRODUCED, verdicts.UNDECIDED)


def test_finalize_decides_a_null_and_flags_a_small_effect():
  """C6b's case: a tight interval around 0, far below its effect of interest, is "not reproduced" (the old rule
  printed it inconclusive); a significant effect below its effect of interest is reproduced and flagged; a wide
  interval stays undecided; the verdicts follow the intervals at the correction's level."""
  strong = {"test": verdicts.t_test([1.0, 1.1, 0.9, 1.05]), "design": _D(0.5)}
  null = {"test": verdicts.t_test([0.0001, -0.0008, 0.0009, 0.0002]), "design": _D(0.03)}
  small = {"test": verdicts.t_test([0.010, 0.011, 0.0105, 0.0095]), "design": _D(0.05)}
  wide = {"test": verdicts.t_test([0.3, -0.2, 0.1, -0.15]), "design": _D(0.05)}
  parts = [strong, null, small, wide]
  verdicts.finalize(parts)
  assert [p["verdict"] for p in parts] == [verdicts.REPRODUCED, verdicts.NOT_REPRODUCED, verdicts.REPRODUCED,
                                           verdicts.UNDECIDED]
  assert [p["flag"] for p in parts] == [None, None, verdicts.SMALLER, None]
  for p in parts:
    assert p["verdict"] == verdicts.classify(p["ci"], p["design"].effect, p["selected"])
  assert "decided null" in design.VERDICT_RULE and "smaller than claimed" in design.VERDICT_RULE


def test_the_verdict_reads_the_interval_at_the_corrections_level():
  """Ten parts, one called: the FCR level is 1 - 0.05 / 10. A null part whose unadjusted 95% interval lies below its
  effect of interest but whose interval at that level reaches it is undecided, not a decided null."""
  rng = np.random.default_rng(4)
  null = {"test": verdicts.t_test([0.02, -0.02, 0.01, -0.01]), "design": _D(0.05)}
  parts = [{"test": verdicts.t_test([1.0, 1.1, 0.9, 1.05]), "design": _D(0.5)}, null] + \
      [{"test": verdicts.t_test(rng.normal(0, 1, 4)), "design": _D(10.0)} for _ in range(8)]
  out = verdicts.finalize(parts)
  assert out["calls"] == 1 and out["level"] == pytest.approx(0.995)
  assert null["ci95"][1] < 0.05 < null["ci"][1]
  assert null["verdict"] == verdicts.UNDECIDED


def test_discordant_pairs_are_mcnemars_exact_test():
  t = verdicts.discordant_test(9, 1)
  assert t["p"] == pytest.approx(st.binomtest(9, 10, 0.5).pvalue) and t["direction"] == 1
  assert verdicts.discordant_test(0, 0) is None and verdicts.discordant_test(1, 9)["direction"] == -1
  assert verdicts.excess_failures(9, 0) and not verdicts.excess_failures(3, 2) and not verdicts.excess_failures(0, 0)


def test_the_worst_case_for_a_failed_seed_must_agree():
  """Seeds well above 0 and one failed seed: its worst case (the smallest observed value) still agrees, so the part
  is reproduced. Where the smallest value is below 0, the worst case (p 0.061 against 0.033) undoes the call:
  undecided, and the row says why. An "opposite" call is tested against the largest observed value instead, the
  mirror image."""
  for xs, want in (([1.0, 1.1, 0.95, 1.05], verdicts.REPRODUCED),
                   ([0.5, 0.6, 0.55, 0.52, -0.1], verdicts.UNDECIDED),
                   ([-1.0, -1.1, -0.95, -1.05], verdicts.OPPOSITE),
                   ([-0.5, -0.6, -0.55, -0.52, 0.1], verdicts.UNDECIDED)):
    x = dict(enumerate(xs))
    part = {"test": verdicts.t_test(list(x.values())), "worst": verdicts.sensitivity(x, [len(xs)]),
            "worst_high": verdicts.sensitivity(x, [len(xs)], high=True)}
    least = max(xs) if np.mean(xs) < 0 else min(xs)
    verdicts.finalize([part])
    assert part["worst"]["n"] == len(xs) + 1 and part["worst"]["mean"] == pytest.approx(np.mean(xs + [least]))
    assert part["p_adj"] < 0.05 and part["verdict"] == want, part
    assert part["worst_verdict"] == want
  assert verdicts.sensitivity({0: 1.0}, []) is None


def test_tost_is_two_one_sided_tests():
  x = [0.01, -0.02, 0.015, 0.0]
  lo = st.ttest_1samp(x, -0.05, alternative="greater").pvalue
  hi = st.ttest_1samp(x, 0.05, alternative="less").pvalue
  r = verdicts.tost(x, 0.05)
  assert r["p"] == pytest.approx(max(lo, hi)) and r["settled"] and not verdicts.tost(x, 0.015)["settled"]
  assert verdicts.tost([0.1, 0.1], 0.05)["settled"] is False and verdicts.tost([0.1], 0.5) is None


def _regime_rates(n, sd, tol, reps=4000, seed=0):
  """(P(out of regime | no change), P(settled | a drift of 2 tol)) of TOST over n seeds, per-seed change noise sd."""
  rng = np.random.default_rng(seed)
  stable = np.mean(verdicts.tost_p(rng.normal(0, sd, (reps, n)), tol) >= verdicts.TOST_ALPHA)
  drift = np.mean(verdicts.tost_p(rng.normal(2 * tol, sd, (reps, n)), tol) < verdicts.TOST_ALPHA)
  return stable, drift


@pytest.mark.parametrize("key", sorted(k for k, p in design.DESIGN.items() if p.tol is not None))
def test_regime_rule_calls_a_stable_effect_settled_and_catches_a_drift(key):
  """At each part's design n and change noise from the pilot (design.CHANGE_SD_FRAC of its per-seed sd), a stable
  statistic is called out of regime at most 20% of the time, and a drift of twice the tolerance is caught at least
  80% of the time. (The rule this replaces compared the change with the between-seed standard error: more seeds
  flagged more stable parts.)"""
  p = design.DESIGN[key]
  n = design.BLOCK_SEEDS[p.block]
  stable, drift = _regime_rates(n, p.pilot_sd * design.CHANGE_SD_FRAC, p.tol, seed=sum(map(ord, "".join(key))))
  assert stable <= 0.20 and drift <= 0.20, (key, n, stable, drift)


def test_the_old_se_rule_fails_the_regime_simulation():
  """The v4 first-pass rule (last change under one between-seed SE of the final mean) on the same simulation: a
  perfectly stable effect of 2 SE is flagged far more than 20% of the time at n = 5."""
  rng = np.random.default_rng(1)
  n, flagged = 5, 0
  for _ in range(2000):  # uncorrelated readings at 75% and 100%, the audit's first case
    x75, x100 = rng.normal(2.0, 1.0, n), rng.normal(2.0, 1.0, n)
    flagged += abs(x100.mean() - x75.mean()) > x100.std(ddof=1) / np.sqrt(n)
  assert flagged / 2000 > 0.4
  # TOST at a tolerance fitted to that noise (the change's sd is sqrt 2) does not
  assert _regime_rates(n, np.sqrt(2), 3.5)[0] <= 0.2


def test_power_table_reports_each_parts_design():
  rows = verdicts.power_table(design.DESIGN, design.BLOCK_SEEDS, 48, design.DESIGN_CALLS)
  assert [r["part"] for r in rows] == [f"{c}{l}" for c, l in design.DESIGN]
  level = 0.05 * design.DESIGN_CALLS / 48
  for r, p in zip(rows, design.DESIGN.values()):
    assert r["n"] == design.BLOCK_SEEDS[p.block] and r["level"] == pytest.approx(level)
    if r["mde"] is not None:
      assert verdicts.power(r["mde"] / p.pilot_sd, r["n"], level) == pytest.approx(0.8, abs=1e-3)
      assert r["decidable"] == (r["mde"] <= p.effect)


def test_pending_parts_enter_no_test_and_no_correction():
  """A part whose runs are not all finished reads "pending": it is not one of the m parts Benjamini-Hochberg
  corrects over, so the finished parts' adjusted p-values are BH's over them alone."""
  xs = ([1.0, 1.2, 0.9, 1.1], [0.2, -0.1, 0.3, 0.1], [0.5, 0.6, 0.4, 0.55])
  finished = [{"test": verdicts.t_test(x)} for x in xs]
  pending = {"test": verdicts.t_test([2.0, 2.1, 1.9, 2.05]), "pending": True}
  out = verdicts.finalize(finished + [pending])
  assert out["m"] == 3 and pending["p_adj"] is None and pending["values_verdict"] == verdicts.PENDING
  want = verdicts.bh([p["test"]["p"] for p in finished])
  assert [p["p_adj"] for p in finished] == pytest.approx(want)


def test_a_claim_whose_parts_disagree_in_sign_is_mixed_and_carries_its_parts_flags():
  """C12's pattern: one part reproduced, another opposite: 'mixed', naming each, not 'opposite'; opposite with a
  decided null stays opposite; a reproduced claim carries a part's size flag in its words (C14's)."""
  from resnorm.results.engine import claims as claim_rule
  part = lambda label, v, flag=None: {"cid": "C12", "label": label, "verdict": v, "flag": flag}
  mixed = [part("a", verdicts.REPRODUCED), part("b", verdicts.OPPOSITE, verdicts.SMALL_OPPOSITE)]
  assert claim_rule.combine(p["verdict"] for p in mixed) == claim_rule.MIXED
  assert claim_rule.deciding(mixed) == ["a", "b"]
  assert claim_rule.worded(mixed) == "mixed (a reproduced, b opposite, b smaller than the effect of interest)"
  assert claim_rule.combine([verdicts.OPPOSITE, verdicts.NOT_REPRODUCED]) == verdicts.OPPOSITE
  assert claim_rule.combine([verdicts.PENDING, verdicts.OPPOSITE, verdicts.REPRODUCED]) == verdicts.PENDING
  small = [part("a", verdicts.REPRODUCED, verdicts.SMALLER)]
  assert claim_rule.worded(small) == "reproduced (a smaller than claimed)"
  # a flag on a part whose verdict is out of regime is its values', not the claim's
  assert claim_rule.worded([part("a", verdicts.OUT_OF_REGIME, verdicts.SMALLER)]) == verdicts.OUT_OF_REGIME
  assert "mixed" in design.CLAIM_RULE and "larger than" in design.VERDICT_RULE


def test_every_declared_part_kind_names_a_part_of_its_report_and_each_page_lists_its_post_hoc_rules():
  """A misspelt part in post_hoc.KINDS would leave that part judged as `effect` without a word: each key is a part of
  its report's design, and each kind is one the rule reads."""
  from resnorm.results import post_hoc
  from resnorm.results.v5 import design as design_v5
  designs = {"v4": design.DESIGN, "v5": design_v5.DESIGN}
  for report, kinds in post_hoc.KINDS.items():
    assert set(kinds) <= set(designs[report]), report
    assert set(kinds.values()) <= {verdicts.EFFECT, verdicts.SIZE, verdicts.THRESHOLD}
  assert post_hoc.kind("v4", "C10", "b") == verdicts.THRESHOLD and post_hoc.kind("v4", "C4", "b") == verdicts.EFFECT
  for report in post_hoc.RULES:
    text = post_hoc.paragraph(report)
    assert all(f"({day}, commit {sha})" in text for _, day, sha in post_hoc.RULES[report]), text


def test_the_flag_reads_the_interval_at_the_corrections_level_not_the_unadjusted_one():
  """One small effect among 19 nulls: its 95% interval lies below the effect of interest, its FCR interval (at
  1 - q/20) reaches it, and the flag follows the decision's interval: not 'smaller than claimed'."""
  small = {"test": verdicts.t_test([0.010, 0.0125, 0.011, 0.0105]), "design": _D(0.014)}
  nulls = [{"test": verdicts.t_test([0.3, -0.3, 0.2, -0.2]), "design": _D(0.05)} for _ in range(19)]
  verdicts.finalize([small, *nulls])
  assert small["verdict"] == verdicts.REPRODUCED and small["ci95"][1] < 0.014 < small["ci"][1]
  assert small["flag"] is None
