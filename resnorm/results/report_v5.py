"""Report v5 (resnorm/results/design_v5.py): runs its grid through resnorm.sweep, writing each finished run's record
under results/v5/, then builds docs/results_v5.md and its figure from the records alone.

`python -m resnorm.results --report=v5` runs what has no record yet and reports; `--from_records` only reports.
"""
import os
import subprocess
import sys

from resnorm.core.errors import EXIT_BAD_INPUT, check
from resnorm.io import storage
from resnorm.results import grid, grid_v5, records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout


def runs(d) -> list:
  """(corpus, point, seed, run name) of every run of the grid: what the recorder writes records for."""
  return [(c, p, s, grid_v5.run_name(p, s, c)) for c, p, s in grid_v5.points(d)]


def prepare_corpora(d) -> None:
  """Builds the package's corpora once, here, before two runs would both build them into the same data_dir."""
  from resnorm.data import data
  for corpus in d["corpora"]:
    cfg = grid.config({"scale": "cpu", "common": {}, "corpora": {corpus: {"data.name": corpus}}}, corpus, {})
    if cfg.data.name in data.PREPARED:
      data.tfds_info(cfg.data, "train")


def run_grid(d, root: str, records_dir: str, jobs: int, launcher: str, passed=()) -> int:
  """Every run of the grid without a record, through resnorm.sweep (one train.py process per run); each finished
  run's record is written as it finishes (records.Recorder). Returns the sweep's exit code."""
  prepare_corpora(d)
  env = {**os.environ, grid.SIZE_ENV: d["size"], grid.RECORDS_ENV: records_dir,
         "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
  with records.Recorder(root, records_dir, runs(d), records.fingerprint()) as rec:
    rc = subprocess.run([sys.executable, "-m", "resnorm.sweep", os.path.join(ROOT, grid_v5.SWEEP), f"--root={root}",
                         f"--jobs={jobs}", f"--launcher={launcher}", *passed], cwd=ROOT, env=env).returncode
  print(f"{rec.written} new run records in {records_dir}", flush=True)
  return rc


def from_flags(FLAGS, own_records: bool) -> int:
  """resnorm.results' flags: --records names v5's records only under --report=v5 (else they are v4's)."""
  check(not FLAGS.quick and FLAGS.scale == "cpu", "report v5 has no --quick or --scale=tpu design")
  recs = storage.absolute(FLAGS.records if own_records and FLAGS.records else
                          os.path.join(ROOT, grid_v5.DEFAULT_RECORDS))
  passed = [f"--{name}={FLAGS[name].value}" for name in FLAGS if name.startswith("slurm.") and FLAGS[name].present]
  d = grid_v5.design()
  rc = 0
  if not FLAGS.from_records:
    rc = run_grid(d, storage.absolute(FLAGS.root or "runs/v5"), recs, FLAGS.jobs, FLAGS.launcher, passed)
    if rc == EXIT_BAD_INPUT:
      return rc
  return rc
