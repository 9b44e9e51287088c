"""The standard error of one model's eval loss: a bootstrap over the eval set's rows.

eval_loss is a ratio, sum of target losses / number of targets, over the eval rows (windows of seq_len targets
spread across the validation documents, resnorm.data.data.stratified_rows). Its standard error is the standard deviation
of that ratio over B resamples of the rows with replacement (Efron and Tibshirani 1993, ch. 6), with a fixed seed so
that the same run gives the same figure. Rows of one document are not independent, so this is a lower bound when a
document's rows are alike; it measures how much the loss would move on another eval set of the same size.
"""
import numpy as np

RESAMPLES, SEED = 1000, 0


def bootstrap_se(sums, counts, resamples: int = RESAMPLES, seed: int = SEED) -> float | None:
  """sums[i], counts[i]: row i's total target loss and target count. None below two scored rows."""
  sums, counts = np.asarray(sums, np.float64), np.asarray(counts, np.float64)
  keep = counts > 0
  sums, counts = sums[keep], counts[keep]
  if sums.size < 2:
    return None
  idx = np.random.default_rng(seed).integers(0, sums.size, (resamples, sums.size))
  return float(np.std(sums[idx].sum(1) / counts[idx].sum(1), ddof=1))
