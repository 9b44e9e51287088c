"""resnorm.core.stats: the bootstrap standard error of an eval loss, against the analytic one for independent rows."""
import numpy as np

from resnorm.core import stats


def test_bootstrap_se_matches_the_standard_error_of_a_mean_of_independent_rows():
  rng = np.random.default_rng(1)
  n, t = 2000, 64
  losses = rng.gamma(4.0, 0.5, n)                 # each row's mean target loss
  sums, counts = losses * t, np.full(n, float(t))
  se = stats.bootstrap_se(sums, counts)
  assert abs(se / (losses.std(ddof=1) / np.sqrt(n)) - 1) < 0.1
  assert stats.bootstrap_se(sums, counts) == se    # a fixed seed: the same run, the same figure
  # the ratio of sums: a row with fewer targets weighs less; PAD rows (no targets) are not rows
  assert stats.bootstrap_se(np.r_[sums, 0.0], np.r_[counts, 0.0]) == se
  assert stats.bootstrap_se(sums[:1], counts[:1]) is None
  # four times the rows, half the error
  big = stats.bootstrap_se(np.tile(sums, 4), np.tile(counts, 4))
  assert abs(big / se - 0.5) < 0.1
