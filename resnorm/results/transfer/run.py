"""The transfer study's runner: `python -m resnorm.results --report=transfer` runs every point of its grid without a
record through resnorm.sweep (one train.py process per run), writing each finished run's record under
results/transfer/ as it finishes, and runs again while the new records grow a cell's grid (design.RULES["growth"]);
then builds docs/transfer.md from the records alone. `--from_records` only builds the page; `--page=false` only runs.
"""
import hashlib
import os
import subprocess
import sys

from resnorm.core.errors import EXIT_BAD_INPUT, check
from resnorm.io import storage
from resnorm.results import grid as rgrid
from resnorm.results import records
from resnorm.results.transfer import grid

ROOT = rgrid.ROOT
DESIGN_FILE = os.path.join("resnorm", "results", "transfer", "design.py")


def design_identity(root: str = ROOT) -> dict:
  """What every record names of the design it ran under: the design module and the sha256 of its bytes."""
  with open(os.path.join(root, DESIGN_FILE), "rb") as f:
    return {"design": DESIGN_FILE, "design_sha256": hashlib.sha256(f.read()).hexdigest()[:16]}


def todo(d, records_dir: str) -> list:
  """(corpus, point, seed, run name) of the runs the sweep runs next (grid.missing)."""
  return [(d["corpus"], p, s, grid.run_name(p, s)) for p, s in grid.missing(d, records_dir)]


def run_grid(d, root: str, records_dir: str, jobs: int, launcher: str, passed=()) -> int:
  """Waves of the sweep until the grid holds no run without a record; returns the first failing wave's exit code
  (1 when a wave recorded nothing: a run that ends with neither a completed nor a diverged status has no record,
  and running it again would end the same)."""
  from resnorm.results import report_v5
  from resnorm.io import provenance
  check(provenance.git_state().get("git_dirty") is not True or d["size"] != "full",
        "the transfer study's runs are made from a clean checkout (a pinned worktree): commit or stash first")
  report_v5.prepare_corpora({"corpora": (d["corpus"],)})
  env = {**os.environ, rgrid.SIZE_ENV: d["size"], rgrid.RECORDS_ENV: records_dir,
         "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
  ident, fp = design_identity(), records.fingerprint()
  while True:
    runs = todo(d, records_dir)
    if not runs:
      return 0
    print(f"transfer grid: {len(runs)} runs without a record", flush=True)
    with records.Recorder(root, records_dir, runs, fp, extra=ident) as rec:
      rc = subprocess.run([sys.executable, "-m", "resnorm.sweep", os.path.join(ROOT, grid.SWEEP), f"--root={root}",
                           f"--jobs={jobs}", f"--launcher={launcher}", *passed], cwd=ROOT, env=env).returncode
    print(f"{rec.written} new run records in {records_dir}", flush=True)
    if rc or launcher != "local":
      return rc
    if not rec.written:
      return 1


def records_dir(given: str | None) -> str:
  return storage.absolute(given or os.path.join(ROOT, grid.DEFAULT_RECORDS))


def has_records() -> bool:
  """Whether the repository holds any of the study's records (`--from_records` then rebuilds its page too)."""
  recs = os.path.join(ROOT, grid.DEFAULT_RECORDS)
  return any(n.endswith(".json") for _, _, names in os.walk(recs) for n in names)


def preflight(FLAGS) -> tuple:
  """Every check of the flags and inputs that reads no record, before anything is run or written: (design,
  records dir, out dir, whether this checkout's README is regenerated)."""
  check(not FLAGS.quick and FLAGS.scale == "cpu", "the transfer study has no --quick or --scale=tpu design")
  d = grid.design()
  recs = records_dir(FLAGS.records)
  out = rgrid.out_dir(FLAGS.out, d["size"] == "full", f"transfer_{d['size']}")
  if FLAGS.from_records:
    records.check_present(recs)
  from resnorm.results.transfer import page
  if (FLAGS.page or FLAGS.from_records) and page.writes_readme(out, d):
    page.findings_block(storage.read_text(os.path.join(ROOT, "README.md")))
  return d, recs, out


def from_flags(FLAGS) -> int:
  """resnorm.results' flags for --report=transfer (and for --from_records, where the study has records)."""
  d, recs, out = preflight(FLAGS)
  if d["size"] != "full":  # tiny models: XLA's optimizations cost more compile time than they save
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
  rc = 0
  if not FLAGS.from_records:
    passed = [f"--{n}={FLAGS[n].value}" for n in FLAGS if n.startswith("slurm.") and FLAGS[n].present]
    rc = run_grid(d, storage.absolute(FLAGS.root or "runs/transfer"), recs, FLAGS.jobs, FLAGS.launcher, passed)
    if rc == EXIT_BAD_INPUT or not FLAGS.page:
      return rc
  from resnorm.results.transfer import page
  print(f"wrote {page.write_report(d, recs, out, FLAGS.accept_fingerprints)}", flush=True)
  return rc
