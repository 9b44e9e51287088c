"""The transfer study (docs/transfer.md): each placement's optimal learning rate from 12 to 96 layers and over width
(design: resnorm/results/transfer/design.py, grid: resnorm/results/transfer/grid.py, sweep:
configs/sweeps/transfer.py). Its grid grows with its records (design.RULES["growth"]), so the engine runs it in waves;
every record names the design it ran under (design_identity), and its runs are made from a clean checkout."""
import hashlib
import os

from resnorm.core.errors import check
from resnorm.io import storage
from resnorm.results.engine import paths
from resnorm.results.engine.spec import ROOT, Built, Plan, Spec
from resnorm.results.transfer import grid, study
from resnorm.results.transfer import page as tpage

DESIGN_FILE = os.path.join("resnorm", "results", "transfer", "design.py")


def design_identity(root: str = ROOT) -> dict:
  """What every record names of the design it ran under: the design module and the sha256 of its bytes."""
  with open(os.path.join(root, DESIGN_FILE), "rb") as f:
    return {"design": DESIGN_FILE, "design_sha256": hashlib.sha256(f.read()).hexdigest()[:16]}


class Transfer(Spec):
  name = "transfer"
  title = "the transfer study"
  page = "transfer.md"
  records = grid.DEFAULT_RECORDS
  runs_root = "runs/transfer"
  sweep = grid.SWEEP
  blocks = (tpage.FINDINGS,)
  waves = True
  pinned = True

  def design(self, flags) -> dict:
    check(not flags.quick and flags.scale == "cpu", "the transfer study has no --quick or --scale=tpu design")
    return grid.design()

  def data_configs(self, d) -> list:
    return [paths.base_config("cpu", {"data.name": d["corpus"]}).data]

  def runs(self, d, records_dir: str) -> list:
    """The runs the sweep runs next (grid.missing): those the records so far add to the grid and lack."""
    return [(d["corpus"], p, s, grid.run_name(p, s)) for p, s in grid.missing(d, records_dir)]

  def record_extra(self) -> dict:
    return design_identity()

  def read(self, plan: Plan):
    S = study.Study(plan.d, plan.records)
    return S.ledger, S

  def build(self, plan: Plan, ledger, S, wall_s: float) -> Built:
    d = plan.d
    stats = S.cells()
    shifts = S.shifts(stats)
    lines = tpage.page(d, S, stats, shifts)
    checks = os.path.join(ROOT, "docs", tpage.CHECKS)  # the checkout's, wherever the page is written
    if os.path.exists(checks):
      lines += ["", storage.read_text(checks).rstrip("\n")]
    tpage.figure(d, stats, "depth", os.path.join(plan.out, tpage.FIG_DEPTH))
    tpage.figure(d, stats, "width", os.path.join(plan.out, tpage.FIG_WIDTH))
    return Built(lines, {tpage.FINDINGS: tpage.readme_lines(d, shifts)} if plan.readme else {}, "")


SPEC = Transfer()
