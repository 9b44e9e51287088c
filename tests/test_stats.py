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
  # a non-finite loss (a diverged eval) has no standard error, rather than a NaN or an inf one
  assert stats.bootstrap_se(np.r_[sums, np.nan], np.r_[counts, t]) is None
  assert stats.bootstrap_se(np.r_[sums, np.inf], np.r_[counts, t]) is None
  # four times the rows, half the error
  big = stats.bootstrap_se(np.tile(sums, 4), np.tile(counts, 4))
  assert abs(big / se - 0.5) < 0.1


def _ar1(rng, n, phi):
  e = rng.normal(0, 1, n)
  x = np.empty(n)
  x[0] = e[0] / np.sqrt(1 - phi ** 2)
  for i in range(1, n):
    x[i] = phi * x[i - 1] + e[i]
  return x


def test_block_bootstrap_se_on_correlated_rows_is_near_the_truth():
  """Rows whose losses are AR(1)-correlated within a document (phi 0.6, Shakespeare-like windows close together):
  the block bootstrap's SE comes within 20% of the true standard deviation of the eval loss (over 300 independent
  eval sets), where resampling rows one by one understates it by about half."""
  rng = np.random.default_rng(0)
  docs, per_doc, t, phi = 4, 500, 64, 0.6
  doc = np.repeat(np.arange(docs), per_doc)
  sets = [3.0 + 0.3 * np.concatenate([_ar1(rng, per_doc, phi) for _ in range(docs)]) for _ in range(300)]
  truth = np.std([s.mean() for s in sets], ddof=1)
  counts = np.full(docs * per_doc, float(t))
  est = np.mean([stats.bootstrap_se(s * t, counts, doc, resamples=300) for s in sets[:20]])
  rows_only = np.mean([stats.bootstrap_se(s * t, counts, doc, block=1, resamples=300) for s in sets[:20]])
  assert abs(est / truth - 1) < 0.2, (est, truth)
  assert rows_only / truth < 0.7, (rows_only, truth)


def test_blocks_never_span_two_documents():
  ids = stats.blocks_of([0, 0, 0, 1, 1, 2, 2, 2, 2, 2], 2)
  assert list(ids) == [0, 0, 1, 2, 2, 3, 3, 4, 4, 5]


def test_each_resample_is_normalized_by_its_own_count():
  """Rows of unequal length (1-64 targets, the longer ones lossier): the bootstrap of the ratio of sums matches the
  delta-method standard error of that ratio; dividing each resample by the original count would not."""
  rng = np.random.default_rng(2)
  n = 3000
  counts = rng.integers(1, 65, n).astype(float)
  sums = counts * (2.0 + counts / 32 + rng.normal(0, 0.5, n))
  ratio = sums.sum() / counts.sum()
  delta = np.sqrt(((sums - ratio * counts) ** 2).sum()) / counts.sum()
  se = stats.bootstrap_se(sums, counts, block=1)
  assert abs(se / delta - 1) < 0.1, (se, delta)
  wrong = np.std(sums[rng.integers(0, n, (500, n))].sum(1) / counts.sum(), ddof=1)
  assert abs(wrong / delta - 1) > 0.5


def test_the_default_block_is_the_cube_root_of_the_scored_rows():
  """60 scored rows of one document and 65 PAD rows: blocks of round(60^(1/3)) = 4 rows (not 3, truncated; not 5,
  counting the PAD rows; not sqrt(60)'s 8), in order, each summed by hand; two documents of 30 rows: blocks of 4
  restart at the boundary, 8 a document."""
  rng = np.random.default_rng(3)
  counts = rng.integers(1, 65, 60).astype(float)
  sums = counts * rng.uniform(1.0, 4.0, 60)
  pad = np.zeros(65)
  b_sums, b_counts = stats.block_sums(np.r_[sums, pad], np.r_[counts, pad])
  np.testing.assert_allclose(b_sums, sums.reshape(15, 4).sum(1))
  np.testing.assert_allclose(b_counts, counts.reshape(15, 4).sum(1))
  docs = np.repeat([0, 1], 30)
  b_sums, _ = stats.block_sums(sums, counts, docs)
  want = [sums[d * 30:(d + 1) * 30][i:i + 4].sum() for d in (0, 1) for i in range(0, 30, 4)]
  np.testing.assert_allclose(b_sums, want)
  # bootstrap_se uses the same default: equal to passing block=4, not to block=3
  assert stats.bootstrap_se(sums, counts, resamples=200) == stats.bootstrap_se(sums, counts, block=4, resamples=200)
  assert stats.bootstrap_se(sums, counts, resamples=200) != stats.bootstrap_se(sums, counts, block=3, resamples=200)
