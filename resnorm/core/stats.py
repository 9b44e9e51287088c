"""The standard error of one model's eval loss: a block bootstrap over the eval set's rows.

eval_loss is a ratio, sum of target losses / number of targets, over the eval rows (windows of seq_len targets
spread across the validation documents, resnorm.data.data.stratified_rows). Rows of one document are correlated
(Shakespeare's rows are windows about 140 bytes apart in a few works), and resampling them one by one as if they
were independent understates the error 1.4-2x. So the rows are cut into blocks of `block` consecutive rows within a
document (a block never spans two documents; a document with fewer rows is one block), and the blocks are resampled
with replacement (the moving-blocks idea of Kunsch 1989, with non-overlapping blocks, Carlstein 1986), B times with a
fixed seed, by scipy.stats.bootstrap; the standard error is the standard deviation of the ratio over the resamples.
The default block is the cube root of the number of rows (Hall, Horowitz and Jing 1995's order for a variance).
"""
import numpy as np

RESAMPLES, SEED = 1000, 0


def blocks_of(docs, block: int) -> np.ndarray:
  """Each row's block id: consecutive runs of at most `block` rows of one document (rows in document order)."""
  docs = np.asarray(docs)
  ids, cur, count, prev = np.empty(docs.size, np.int64), -1, 0, None
  for i, d in enumerate(docs):
    if d != prev or count == block:
      cur, count, prev = cur + 1, 0, d
    ids[i] = cur
    count += 1
  return ids


def block_sums(sums, counts, docs=None, block: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """The bootstrap's units: per block, the summed target loss and target count of its scored rows (rows with no
  target dropped). docs None: one document; block None: the cube root of the scored rows."""
  sums, counts = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
  docs = np.zeros(sums.size, np.int64) if docs is None else np.asarray(docs)
  keep = counts > 0
  sums, counts, docs = sums[keep], counts[keep], docs[keep]
  if not sums.size:
    return sums, counts
  ids = blocks_of(docs, block or max(1, int(round(sums.size ** (1 / 3)))))
  return np.bincount(ids, sums), np.bincount(ids, counts)


def bootstrap_se(sums, counts, docs=None, block: int | None = None, resamples: int = RESAMPLES,
                 seed: int = SEED) -> float | None:
  """sums[i], counts[i]: row i's total target loss and target count; docs[i]: its document (None: one document,
  rows in text order). block: rows per block (default: cube root of the scored rows; 1 resamples rows). None below
  two blocks."""
  b_sums, b_counts = block_sums(sums, counts, docs, block)
  if b_sums.size < 2 or not np.isfinite(b_sums).all():  # a non-finite loss has no standard error
    return None
  from scipy import stats as st    # imported here: scipy.stats costs every train.py half a second at start
  res = st.bootstrap((b_sums, b_counts), lambda s, c, axis=-1: s.sum(axis) / c.sum(axis), paired=True,
                     vectorized=True, n_resamples=resamples, method="percentile", rng=np.random.default_rng(seed))
  return float(res.standard_error)
