"""The engine's driver: `python -m resnorm.results [--report=NAME|all] [--from_records]` for every spec alike.

1. plan: every check of the flags and inputs that reads no record, for every report named, before anything runs
   or is written (a README whose markers were edited away, --out=docs for a design that is not the committed one,
   --from_records without records).
2. run: the grid through resnorm.sweep, one train.py process per run, with a recorder writing each finished run's
   record as it finishes; again while new records grow a grid that depends on them (Spec.waves).
3. write: the records read and checked (ledger.Ledger.check), then the figures, the page and the README written
   whole; a failed check leaves every file as it was.

Exit codes: 0 when the report is written (with a SLURM launcher also while runs are queued), 1 when the grid left
runs unfinished (the report is written all the same), 2 on bad input, with one line and nothing written.
"""
import os
import subprocess
import sys
import time

from resnorm.core.errors import EXIT_BAD_INPUT, check
from resnorm.io import storage
from resnorm.results import records
from resnorm.results.engine import paths
from resnorm.results.engine.spec import ROOT, Plan, Spec


def select(registry: dict, report: str | None, from_records: bool, records_given: bool) -> list[Spec]:
  """The specs a command names: --report=NAME, or all (every spec whose repository records exist); without
  --report, all for --from_records without --records, else the registry's first."""
  names = list(registry)
  if report is None:
    report = "all" if from_records and not records_given else names[0]
  check(report == "all" or report in registry, f"--report={report}: one of {', '.join(names)} or all")
  if report != "all":
    return [registry[report]]
  check(not records_given, "--records names one report's records: give --report=NAME with it, not all")
  return [s for s in registry.values() if s.has_records()]


def plan(spec: Spec, flags, records_given: bool) -> Plan:
  """The report's design, directories and README, checked (one line, nothing run or written, on bad input)."""
  d = spec.design(flags)
  full = spec.full(d)
  out = paths.out_dir(flags.out, full, spec.tag(d))
  recs = flags.records if records_given else (os.path.join(ROOT, spec.records) if full else None)
  recs = storage.absolute(recs) if recs else None
  check(recs or not flags.from_records, f"--from_records needs --records ({spec.title}'s design at size "
        f"{d['size']} has no records of its own)")
  if flags.from_records:
    records.check_present(recs)
  readme = os.path.join(ROOT, "README.md") if spec.blocks and full and paths.is_docs(out) else None
  if readme and (flags.page or flags.from_records):
    text = storage.read_text(readme)
    for b in spec.blocks:
      b.locate(text)
  root = storage.absolute(flags.root or spec.runs_root)
  return Plan(d, recs, out, root, readme)


def prepare_corpora(spec: Spec, d) -> None:
  """Builds the package's corpora once, here, before the sweep: two runs starting together would both build them
  into the same data_dir. A missing source stops the report here, in one line."""
  from resnorm.data import data
  for dcfg in spec.data_configs(d):
    if dcfg.name in data.PREPARED:
      data.tfds_info(dcfg, "train")


def run_grid(spec: Spec, p: Plan, jobs: int, launcher: str, passed=()) -> int:
  """The sweep until no run of the grid lacks a record (once, unless Spec.waves); its first failing exit code (1
  when a wave recorded nothing: a run that ends neither completed nor diverged leaves no record, and would end the
  same again). Without a records directory the sweep runs once and the runs' workdirs are the report's input."""
  if spec.pinned and spec.full(p.d):
    from resnorm.io import provenance
    check(provenance.git_state().get("git_dirty") is not True, f"{spec.title}'s runs are made from a clean "
          "checkout (a pinned worktree): commit or stash first")
  prepare_corpora(spec, p.d)
  env = {**os.environ, paths.SIZE_ENV: p.d["size"], **spec.env(p.d),
         "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
  cmd = [sys.executable, "-m", "resnorm.sweep", os.path.join(ROOT, spec.sweep), f"--root={p.root}",
         f"--jobs={jobs}", f"--launcher={launcher}", *passed]
  if not p.records:
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode
  env[paths.RECORDS_ENV] = p.records  # the sweep file leaves out the points that have a record
  fp = records.fingerprint()
  while True:
    runs = spec.runs(p.d, p.records)
    if spec.waves:
      if not runs:
        return 0
      print(f"{spec.title}: {len(runs)} runs without a record", flush=True)
    with records.Recorder(p.root, p.records, runs, fp, extra=spec.record_extra()) as rec:
      rc = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    print(f"{rec.written} new run records in {p.records}", flush=True)
    if rc or launcher != "local" or not spec.waves:
      return rc
    if not rec.written:
      return 1


def write(spec: Spec, p: Plan, accept_fingerprints: bool, t0: float) -> str:
  """The page, its figures and the README's blocks, from the records (or workdirs) alone: every record and the
  README's markers checked first, then everything written whole."""
  ledger, state = spec.read(p)
  if p.records:
    ledger.check(accept_fingerprints, f"{spec.title}'s runs")
  if p.readme:
    text = storage.read_text(p.readme)
    for b in spec.blocks:
      b.locate(text)
  os.makedirs(p.out, exist_ok=True)
  built = spec.build(p, ledger, state, time.time() - t0)
  new_readme = None
  if p.readme:
    new_readme = storage.read_text(p.readme)  # read again: it may have changed while the report was built
    for b, lines in built.readme.items():
      new_readme = b.splice(new_readme, lines)
  path = os.path.join(p.out, spec.page)
  storage.write_text(path, "\n".join(built.page) + "\n")  # whole: a failure leaves the old page, not half of one
  if new_readme is not None:
    storage.write_text(p.readme, new_readme)
  print(f"wrote {path}{built.summary}", flush=True)
  return path


def main(registry: dict, flags) -> int:
  """Every report the flags name: all planned (checked) first, then each run and written in turn."""
  check(flags.jobs >= 1, f"--jobs={flags.jobs} must be >= 1")
  given = flags.records is not None
  specs = select(registry, flags.report if flags["report"].present else None, flags.from_records, given)
  plans = [(s, plan(s, flags, given)) for s in specs]
  passed = [f"--{n}={flags[n].value}" for n in flags if n.startswith("slurm.") and flags[n].present]
  worst = 0
  for spec, p in plans:
    t0 = time.time()
    if p.d["size"] != "full":  # tiny models: XLA's optimizations cost more compile time than they save
      os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
    rc = 0
    if not flags.from_records:
      spec.before_grid(p, flags)
      rc = run_grid(spec, p, flags.jobs, flags.launcher, passed)
      if rc == EXIT_BAD_INPUT:
        return rc  # the sweep refused its input and said why, in one line; there is nothing new to report
    # a SLURM array returns once submitted: its runs still queued are not a failure
    worst = max(worst, 1 if rc and flags.launcher != "slurm" else 0)
    if flags.from_records or (spec.after_grid(p, flags) and flags.page):
      write(spec, p, flags.accept_fingerprints, t0)
  return worst
