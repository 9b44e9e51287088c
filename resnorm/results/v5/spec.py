"""Report v5 (docs/results_v5.md): do the 2026 depth-aggregation claims hold? (design: resnorm/results/v5/design.py,
grid: resnorm/results/v5/grid.py, sweep: configs/sweeps/v5.py), built from its records in results/v5/ alone: the
claims C11-C17 (claims.py), the compute multipliers under three accountings (compute_equiv.py) and the
page (page.py)."""
import os

from resnorm.core.errors import check
from resnorm.results.engine import ledger as lg
from resnorm.results.engine import page as engine_page
from resnorm.results.engine import paths
from resnorm.results.engine.spec import ROOT, Built, Plan, Spec
from resnorm.results.v5 import claims as c5
from resnorm.results.v5 import design as v5
from resnorm.results.v5 import grid as grid_v5
from resnorm.results.v5 import page as md


def header(d, T) -> list[str]:
  """The page's title, provenance, run counts, cost (from the records' own times) and what is unfinished."""
  recs = list(T.recs.values())
  n = len(grid_v5.points(d))
  diverged = sum(r["status"] == "diverged" for r in recs)
  run_s = lg.run_seconds(recs)
  # the design's budget model for the runs that finished, beside what they took (at --jobs=2, two at a time)
  model_s = sum(v5.run_s(r["recipe"][0], r["recipe"][1]) for r in recs if r["recipe"][1] in v5.LADDER_D)
  stalled = sum(r.get("learned_beyond_unigram") is False for r in recs)
  missing: dict = {}
  for c, p, s in grid_v5.points(d):
    if (c, p.arm, p.d, s) not in T.recs:
      missing[p.arm] = missing.get(p.arm, 0) + 1
  commits = engine_page.commits(recs)
  return [
      "# Report v5: do the 2026 depth-aggregation claims hold?", "", engine_page.generated("v5"), "",
      f"From the run records in `{T.ledger.where(ROOT)}` (code fingerprint{'s' if len(T.fingerprints) > 1 else ''} "
      f"{engine_page.quoted(sorted(T.fingerprints))}; runs at commit{'s' if len(commits) > 1 else ''} "
      f"{engine_page.quoted(commits)}). Runs: {len(recs)} of {n} finished ({diverged} diverged, {stalled} "
      "learned nothing beyond byte frequencies). Every number below is read from the records.",
      "", f"Cost, from the records' own times: {run_s / 3600:.2f} run-hours (each run's start to finish, summed) and "
      f"{lg.active_seconds(recs) / 3600:.2f} hours of wall time with a run going (the union of those intervals); the "
      f"design's budget model (v5/design.py run_s) gave {model_s / 3600:.2f} hours of wall time for these runs.",
      "", ("**Unfinished** (their parts read pending; rerun the same command, which runs only what has no record): "
           + ", ".join(f"{a} {k}" for a, k in missing.items()) + " runs.") if missing else "All runs finished."]


class V5(Spec):
  name = "v5"
  title = "report v5"
  page = "results_v5.md"
  records = grid_v5.DEFAULT_RECORDS
  runs_root = "runs/v5"
  sweep = grid_v5.SWEEP
  blocks = (md.FINDINGS,)

  def design(self, flags) -> dict:
    check(not flags.quick and flags.scale == "cpu", "report v5 has no --quick or --scale=tpu design")
    return grid_v5.design()

  def data_configs(self, d) -> list:
    return [paths.base_config("cpu", {"data.name": c}).data for c in d["corpora"]]

  def runs(self, d, records_dir: str) -> list:
    return [(c, p, s, grid_v5.run_name(p, s, c)) for c, p, s in grid_v5.points(d)]

  def read(self, plan: Plan):
    T = c5.Table(plan.d, plan.records)
    return T.ledger, T

  def build(self, plan: Plan, ledger, T, wall_s: float) -> Built:
    d = plan.d
    parts, summary, claim_verdicts = c5.judge(T)
    mults = {c: c5.multipliers(T, c) for c in d["corpora"]}
    t_mults = md.t_multipliers(T, mults)
    lines = md.page(T, parts, summary, claim_verdicts, mults, t_mults, header(d, T))
    readme = {md.FINDINGS: md.findings(T, parts, claim_verdicts, t_mults)} if plan.readme else {}
    os.makedirs(os.path.join(plan.out, "figures"), exist_ok=True)
    md.figure(T, t_mults, os.path.join(plan.out, md.FIGURE))
    return Built(lines, readme, "")


SPEC = V5()
