"""Report v5 (resnorm/results/design_v5.py): runs its grid through resnorm.sweep, writing each finished run's record
under results/v5/, then builds docs/results_v5.md and its figure from the records alone.

`python -m resnorm.results --report=v5` runs what has no record yet and reports; `--from_records` only reports.
"""
import os
import subprocess
import sys

from resnorm.core.errors import EXIT_BAD_INPUT, check
from resnorm.io import storage
from resnorm.results import design_v5 as v5
from resnorm.results import grid, grid_v5, records

ROOT = grid_v5.ROOT  # the checkout


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


def records_dir(given: str | None, own_records: bool) -> str:
  """v5's records: --records only where it names them (--report=v5), else the repository's results/v5."""
  return storage.absolute(given if own_records and given else os.path.join(ROOT, grid_v5.DEFAULT_RECORDS))


def writes_readme(out: str, size: str) -> bool:
  """The README's v5 findings are regenerated only from this checkout's docs/ at the full size."""
  return grid.is_docs(out) and size == "full"


def check_readme(readme: str | None) -> None:
  """One line unless the README whose findings a report regenerates has its v5 markers, in order."""
  if readme is not None:
    from resnorm.results import report_v5_md as md
    md.findings_block(storage.read_text(readme))


def preflight(FLAGS, own_records: bool) -> tuple:
  """Every check of report v5's flags and inputs that reads no record, before anything is run or written (by
  resnorm.results before report v4 writes too): (design, records dir, out dir, the README to regenerate or None)."""
  check(not FLAGS.quick and FLAGS.scale == "cpu", "report v5 has no --quick or --scale=tpu design")
  recs = records_dir(FLAGS.records, own_records)
  d = grid_v5.design()
  out = grid.out_dir(FLAGS.out, d["size"] == "full", f"v5_{d['size']}")
  if FLAGS.from_records:
    records.check_present(recs)
  readme = os.path.join(ROOT, "README.md") if writes_readme(out, d["size"]) else None
  check_readme(readme)
  return d, recs, out, readme


def from_flags(FLAGS, own_records: bool) -> int:
  """resnorm.results' flags: --records names v5's records only under --report=v5 (else they are v4's)."""
  d, recs, out, readme = preflight(FLAGS, own_records)
  passed = [f"--{name}={FLAGS[name].value}" for name in FLAGS if name.startswith("slurm.") and FLAGS[name].present]
  if d["size"] != "full":  # tiny models: XLA's optimizations cost more compile time than they save
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
  rc = 0
  if not FLAGS.from_records:
    rc = run_grid(d, storage.absolute(FLAGS.root or "runs/v5"), recs, FLAGS.jobs, FLAGS.launcher, passed)
    if rc == EXIT_BAD_INPUT:
      return rc
  path = write_report(d, recs, out, FLAGS.accept_fingerprints, readme)
  print(f"wrote {path}", flush=True)
  return rc


def _spans(recs) -> list[tuple[float, float]]:
  return sorted((t["started_at"], t["finished_at"]) for t in (r.get("timing") or {} for r in recs)
                if t.get("started_at") is not None and t.get("finished_at") is not None)


def run_seconds(recs) -> float:
  """The records' own run time: every finished run's start-to-finish seconds, summed."""
  return sum(b - a for a, b in _spans(recs))


def active_seconds(recs) -> float:
  """The wall time during which at least one run was going: the union of the runs' start-to-finish intervals (a
  pause of the whole grid, with no run going, does not count)."""
  total, end = 0.0, -float("inf")
  for a, b in _spans(recs):
    total += max(0.0, b - max(a, end))
    end = max(end, b)
  return total


def write_report(d, records_dir: str, out: str, accept_fingerprints: bool = False, readme: str | None = None) -> str:
  """OUT/results_v5.md and OUT/figures/v5_loss_compute.png from the records alone, and the v5 findings of `readme`
  where given (preflight gives this checkout's README for its docs/ at the full size). Every record and the
  README's markers are checked first: nothing is written unless all pass."""
  import datetime
  from resnorm.io import provenance
  from resnorm.results import claims_v5 as c5
  from resnorm.results import report_v5_md as md
  check_readme(readme)
  T = c5.Table(d, records_dir)
  records.check_unique(T.digests)
  records.check_fingerprints(T.fingerprints, accept_fingerprints)
  check(T.recs, f"--records={records_dir} holds no record of report v5's runs: nothing to report from")
  parts, summary, claim_verdicts = c5.judge(T)
  mults = {c: c5.multipliers(T, c) for c in d["corpora"]}
  n = len(grid_v5.points(d))
  recs = list(T.recs.values())
  diverged = sum(r["status"] == "diverged" for r in recs)
  run_s = run_seconds(recs)
  # the design's budget model for the runs that finished, beside what they took (at --jobs=2, two at a time)
  model_s = sum(v5.run_s(r["recipe"][0], r["recipe"][1]) for r in recs if r["recipe"][1] in v5.LADDER_D)
  stalled = sum(r.get("learned_beyond_unigram") is False for r in recs)
  missing: dict = {}
  for c, p, s in grid_v5.points(d):
    if (c, p.arm, p.d, s) not in T.recs:
      missing[p.arm] = missing.get(p.arm, 0) + 1
  commits = sorted({(r["provenance"].get("git_commit") or "unknown")[:10] for r in recs})
  here = provenance.git_state()
  where = os.path.relpath(records_dir, ROOT) if records_dir.startswith(ROOT + os.sep) else records_dir
  header = [
      "# Report v5: do the 2026 depth-aggregation claims hold?", "",
      f"Generated {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by `python -m "
      f"resnorm.results --report=v5` (or `--from_records`) at commit `{(here['git_commit'] or 'unknown')[:10]}`.", "",
      f"From the run records in `{where}` (code fingerprint{'s' if len(T.fingerprints) > 1 else ''} "
      f"{', '.join(f'`{f}`' for f in sorted(T.fingerprints))}; runs at commit{'s' if len(commits) > 1 else ''} "
      f"{', '.join(f'`{c}`' for c in commits)}). Runs: {len(recs)} of {n} finished ({diverged} diverged, {stalled} "
      "learned nothing beyond byte frequencies). Every number below is read from the records.",
      "", f"Cost, from the records' own times: {run_s / 3600:.2f} run-hours (each run's start to finish, summed) and "
      f"{active_seconds(recs) / 3600:.2f} hours of wall time with a run going (the union of those intervals); the "
      f"design's budget model (design_v5.run_s) gave {model_s / 3600:.2f} hours of wall time for these runs.",
      "", ("**Unfinished** (their parts read pending; rerun the same command, which runs only what has no record): "
           + ", ".join(f"{a} {k}" for a, k in missing.items()) + " runs.") if missing else "All runs finished."]
  t_mults = md.t_multipliers(T, mults)
  page = "\n".join(md.page(T, parts, summary, claim_verdicts, mults, t_mults, header)) + "\n"
  # spliced before the figure and the page are written (the README read again: it may have changed meanwhile),
  # then written whole: a README that lost its markers leaves every file as it was
  new_readme = md.splice_readme(storage.read_text(readme), md.findings(T, parts, claim_verdicts, t_mults)) \
      if readme is not None else None
  os.makedirs(os.path.join(out, "figures"), exist_ok=True)
  md.figure(T, t_mults, os.path.join(out, md.FIGURE))
  path = os.path.join(out, "results_v5.md")
  storage.write_text(path, page)
  if new_readme is not None:
    storage.write_text(readme, new_readme)
  return path
