"""Per-step cost of train.py's logging (a metrics.jsonl line and its TensorBoard scalars every step, a flush every
FLUSH steps, as at evals and checkpoints) on a local disk and in a bucket, side by side in one process.

  python tools/bucket_log_bench.py LOCAL_DIR gs://BUCKET/PREFIX [STEPS] [FLUSH] [REPEATS]

Point it at a real bucket, or at the test emulator (tests/scripts/gcs_emulator.py; STORAGE_EMULATOR_HOST and
GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false, as in tests/test_buckets.py). Prints the median over REPEATS of the time per
step of the writes, and of one flush.
"""
import statistics
import sys
import time

from resnorm.io import storage, workdir as wd


def one(base: str, steps: int, flush: int) -> tuple[float, float]:
  """(seconds per step for write + scalars, seconds per flush)."""
  storage.makedirs(base)
  metrics, tb = wd.JsonlLog(storage.join(base, "metrics.jsonl")), wd.TensorBoard(storage.join(base, "tb"))
  t_write = t_flush = 0.0
  for s in range(1, steps + 1):
    rec = {"step": s, "loss": 5.0 / s, "lr": 1e-3, "grad_norm": 0.5, "tokens_per_s": 123456.0}
    t0 = time.perf_counter()
    metrics.write(rec)
    tb.scalars(s, {k: v for k, v in rec.items() if k != "step"})
    t1 = time.perf_counter()
    if s % flush == 0:
      metrics.flush()
      tb.publish()
    t_write, t_flush = t_write + t1 - t0, t_flush + time.perf_counter() - t1
  metrics.close()
  tb.close()
  return t_write / steps, t_flush / (steps // flush)


def main():
  local, remote = sys.argv[1], sys.argv[2]
  steps, flush, repeats = (int(a) for a in (sys.argv[3:] + ["1000", "50", "5"][len(sys.argv) - 3:]))
  res = {"local": [], "bucket": []}
  for r in range(repeats):  # interleaved: the machine's load falls on both alike
    for name, base in (("local", local), ("bucket", remote)):
      res[name].append(one(storage.join(base, f"r{r}"), steps, flush))
  for name, rows in res.items():
    w = statistics.median(x for x, _ in rows)
    f = statistics.median(y for _, y in rows)
    print(f"{name:6s}: {w * 1e6:7.1f} us/step writing, {f * 1e3:7.2f} ms per flush (every {flush} steps) -> "
          f"{(w + f / flush) * 1e6:7.1f} us/step all in")


if __name__ == "__main__":
  main()
