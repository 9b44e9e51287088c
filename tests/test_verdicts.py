"""resnorm/results/verdicts.py: the paired t-test against scipy, the minimum detectable effect's power by simulation,
and Holm's correction holding the familywise error under a global null."""
import numpy as np
import pytest

from resnorm.results import verdicts


def test_t_test_matches_scipy_and_the_mde_has_its_power():
  from scipy import stats as st
  x = [0.3, 0.1, 0.25, -0.05, 0.2]
  t = verdicts.t_test(x)
  ref = st.ttest_1samp(x, 0.0, alternative="greater")
  assert t["p"] == pytest.approx(ref.pvalue) and t["p_opp"] == pytest.approx(1 - ref.pvalue)
  lo, hi = st.t.interval(0.95, 4, loc=np.mean(x), scale=st.sem(x))
  assert (t["mean"] - t["half_ci"], t["mean"] + t["half_ci"]) == pytest.approx((lo, hi))
  # the minimum detectable effect: a true mean of that size is detected about 80% of the time
  rng = np.random.default_rng(0)
  n, alpha = 5, 0.05 / 10
  m = verdicts.mde(1.0, n, alpha)
  draws = rng.normal(m, 1.0, (4000, n))
  power = np.mean([verdicts.t_test(row)["p"] < alpha for row in draws])
  assert 0.75 < power < 0.86, power
  assert verdicts.t_test([0.5]) is None and verdicts.mde(1.0, 1, 0.05) is None


def test_holm_controls_the_familywise_error_under_a_global_null():
  """44 parts of 3 seeds with no effect anywhere: without a correction about 9 in 10 reports would call some part
  reproduced (1 - 0.95^44); with Holm's, at most about 5%."""
  rng = np.random.default_rng(1)
  reports = 400
  wrong = 0
  for _ in range(reports):
    parts = [{"test": verdicts.t_test(rng.normal(0, 1, 3)), "in_regime_ok": True, "x": {}, "stalled_seeds": []}
             for _ in range(44)]
    verdicts.finalize(parts)
    wrong += any(p["verdict"] != verdicts.INCONCLUSIVE for p in parts)
  assert wrong / reports < 0.08, wrong / reports
  assert verdicts.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
