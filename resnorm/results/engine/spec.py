"""What a report declares (Spec), and what the engine hands it back (Plan) and takes from it (Built).

A spec names its page, records, runs root, sweep file and README blocks, and implements five hooks: the design at
the command's flags, the runs its recorder watches, the reading of its records into a ledger, and the page built
from them. Everything else (flags, waves of the sweep, the checks, writing whole) is the engine's
(resnorm/results/engine/driver.py)."""
import os
from typing import NamedTuple

from resnorm.results.engine.paths import ROOT


class Plan(NamedTuple):
  """One report's command, checked before anything runs: its design, records directory (None: read the runs'
  workdirs), report directory, runs root, and the README it regenerates (None: it writes none)."""
  d: dict
  records: str | None
  out: str
  root: str
  readme: str | None


class Built(NamedTuple):
  """A report built from its ledger: the page's lines, the README blocks' new lines (Block -> lines), and what the
  line printed after writing adds."""
  page: list[str]
  readme: dict
  summary: str


class Spec:
  """One report. Subclasses set the class attributes and implement design, runs, read and build."""

  name = ""            # --report=NAME
  title = ""           # in words, for errors ("report v5")
  page = ""            # the page's file name in the report directory
  records = ""         # its records' directory, relative to the checkout (the full design's)
  runs_root = ""       # default --root
  sweep = ""           # the sweep file, relative to the checkout
  blocks: tuple = ()   # the README blocks it regenerates (readme.Block)
  waves = False        # run the sweep again while new records grow the grid (a grid that depends on its records)
  pinned = False       # the full design's runs are made only from a clean checkout

  def design(self, flags) -> dict:
    """The design at the command's flags (d["size"] among them); one line for flags it has no design for."""
    raise NotImplementedError

  def full(self, d) -> bool:
    """Whether d is the committed design: its report goes to docs/ and regenerates the README."""
    return d["size"] == "full"

  def tag(self, d) -> str:
    """The report directory's tag for any other design (runs/report_TAG)."""
    return f"{self.name}_{d['size']}"

  def env(self, d) -> dict:
    """What the sweep file reads, besides the size and the records directory, to build this same design."""
    return {}

  def data_configs(self, d) -> list:
    """The data configs of the corpora its runs read (built here once, before two runs would both build them)."""
    return []

  def runs(self, d, records_dir: str) -> list:
    """(corpus, point, seed, run name) of the runs the recorder watches: the grid's, or (waves) those it runs next."""
    raise NotImplementedError

  def record_extra(self) -> dict | None:
    """Fields every record of this report carries besides the run's own (the design's identity)."""
    return None

  def before_grid(self, plan: Plan, flags) -> None:
    """Checks made once the plan stands, before the grid runs (a budget, memory plans)."""

  def after_grid(self, plan: Plan, flags) -> bool:
    """Work in the reporting process after the grid (diagnostics of its own); False where this process does not
    write the report (not process 0)."""
    return True

  def read(self, plan: Plan):
    """Every record (or workdir) of the design, read and checked one by one: (ledger, what build reads)."""
    raise NotImplementedError

  def build(self, plan: Plan, ledger, state, wall_s: float) -> Built:
    """The page from what read gave. Called once every check has passed (the records', the README's markers): it
    writes its figures under plan.out itself; the engine then writes the page and the README."""
    raise NotImplementedError

  def has_records(self) -> bool:
    """Whether the repository holds any of its records (--report=all then includes it)."""
    recs = os.path.join(ROOT, self.records)
    return any(n.endswith(".json") for _, _, names in os.walk(recs) for n in names)
