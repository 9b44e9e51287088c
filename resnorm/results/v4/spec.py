"""Report v4 (docs/results.md): the claims C1-C10 of the source articles on two corpora (design:
resnorm/results/v4/design.py, grid: resnorm/results/v4/grid.py, sweep: configs/sweeps/results.py), from its records in
results/v4/, or at --quick and --scale=tpu from the runs' workdirs. Besides the grid's runs, the init diagnostics of
C1-C2 are computed in the reporting process (records under results/v4/<corpus>/init/)."""
import importlib.util
import os

from resnorm.core.errors import check
from resnorm.io import storage, workdir as wd
from resnorm.results import records
from resnorm.results.engine import paths
from resnorm.results.engine.ledger import Ledger
from resnorm.results.engine.spec import ROOT, Built, Plan, Spec
from resnorm.results.v4 import claims as cl
from resnorm.results.v4 import findings, grid, replication
from resnorm.results.v4 import page as md
from resnorm.results.v4.runs import Runs

SWEEP = os.path.join("configs", "sweeps", "results.py")


def sweep_module():
  path = os.path.join(ROOT, SWEEP)
  spec = importlib.util.spec_from_file_location("results_sweep", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def init_diagnostics(R, d) -> int:
  """C1-C2: diagnostics of freshly initialized models, per variant, depth and seed, on R's corpus (written once)."""
  todo = [(v, L, s) for v in grid.MAIN for L in d["init_depths"] for s in grid.block_seeds(d, "init")
          if not storage.exists(R.init_path(v, L, s))]
  if not todo:
    return 0
  from absl import logging
  from resnorm.data import data
  from resnorm.evaluation import evaluate
  from resnorm.scale import startup
  from resnorm.step import runtime
  logging.set_verbosity(logging.WARNING)
  startup.start()
  for v, L, s in todo:
    # one batch of stratified rows (drawn across the whole validation split by the fixed rule, the same for every
    # seed and variant): C1-C2a read the diagnostics on it (gradients, activations), not its loss
    base = grid.config(d, R.corpus, {})
    cfg = grid.config(d, R.corpus, {"model.residual": v, "model.num_layers": L, "seed": s,
                                    "data.eval_set": "stratified", "data.eval_batch_size": 0,
                                    "data.eval_bytes": base.train.batch_size * base.data.seq_len,
                                    # Xiong et al.'s setting: the init-time claims hold under it (docs/variants.md 6)
                                    "model.init": "xavier"})
    setup = runtime.build(cfg)
    res = evaluate.report(setup, setup.init_state()["params"], data.eval_batches(cfg), 0)
    path = R.init_path(v, L, s)
    if R.records_dir:
      records.write(path, records.from_init(res, v, L, R.corpus, s, records.fingerprint()))
    else:
      storage.makedirs(path.rsplit("/", 1)[0])
      wd.write_json(path, res)
  return len(todo)


def evaluate_claims(Rs: dict, d) -> tuple[dict, dict]:
  """corpus -> claims, judged together (one correction over every part of the report); and its summary, with the
  design's m, the parts' a-priori MDEs and the replication family (summary["replication"])."""
  by_corpus = {c: cl.evaluate(R, d) for c, R in Rs.items()}
  summary = cl.judge(by_corpus)
  summary["design_m"] = len(cl.DESIGN) * len(Rs)
  md.design_mdes(by_corpus, d, summary["design_m"])
  summary["replication"] = replication.judge(by_corpus)
  return by_corpus, summary


def page_lines(Rs: dict, d, out: str, wall_s: float, by_corpus, summary) -> list[str]:
  """docs/results.md's lines; writes each claim's figures under out/figures/<corpus>/."""
  import datetime
  from resnorm.io import provenance
  k = md.run_counts(Rs, d)
  todo = md.unfinished(Rs, d)
  flags_text = (" --quick" if d["size"] == "quick" else "") + (" --scale=tpu" if d["scale"] == "tpu" else "")
  here = provenance.git_state()
  wall = "n/a" if k["wall_minutes"] is None else f"{k['wall_minutes']:.0f} minutes"
  lines = [f"# Results at {d['scale'].upper()} scale", "",
           f"Generated {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by `python -m "
           f"resnorm.results{flags_text}` (size `{d['size']}`) at commit `{(here['git_commit'] or 'unknown')[:10]}`"
           f"{' (with uncommitted changes)' if here['git_dirty'] else ''}, on {md.machine()}, in {wall_s / 60:.1f} "
           "minutes (finished runs are reused).", "",
           f"{md.source(Rs)}Runs: {k['finished']} of "
           f"{k['runs']} finished ({k['diverged']} diverged, {k['stalled']} stalled: learned nothing beyond byte "
           f"frequencies{md.flags_note(k)}), at commit{'s' if len(k['commits']) > 1 else ''} "
           f"{', '.join(f'`{c[:10]}`' for c in k['commits'])}{' (some with uncommitted changes)' if k['dirty'] else ''}"
           f", plus init diagnostics. Cost: {k['run_minutes']:.0f} run-minutes; wall time from the runs' timestamps "
           f"{wall} ({md.when(k['first'])} to {md.when(k['last'])}). Every number below is read from the runs.", "",
           md.design_text(d), "",
           "## Claims", "", *md.claims_table(by_corpus, summary["level"]), "", md.rule_text(summary, d), "",
           *md.power_table(d, summary), "",
           "Parts whose own statistic was not shown settled by the end of their runs: " +
           ("; ".join(md.unsettled(by_corpus)) or "none") + "." +
           (f" Not run at all, for the budget: {d['beyond_budget']}." if d.get("beyond_budget") and
            d["size"] == "full" else ""), "", *replication.table(summary["replication"], md.values_cell), ""]
  if todo:
    lines += [f"**Unfinished: {len(todo)} of {k['runs']} runs** (their cells read \"missing\"; rerun the same command "
              "when they end): " + ", ".join(todo) + ".", ""]
  from resnorm.results.v4 import figs
  for i, c in enumerate(by_corpus[next(iter(by_corpus))]):
    lines += [f"### {c['id']}", "", f"**{c['claim']}** ({c['source']}).", ""]
    for corpus, R in Rs.items():
      fig_dir = os.path.join(out, "figures", corpus)
      os.makedirs(fig_dir, exist_ok=True)
      lines += md.claim_section(by_corpus[corpus][i], corpus, figs.FIGURES[c["id"]](R, d, fig_dir))
    if c["id"] == "C3":
      lines += ["Stability map, cell by cell:", ""]
      for R in Rs.values():
        lines += md.map_tables(R, d)
  notes = os.path.join(out, "results_notes.md")
  if os.path.exists(notes):
    lines += ["", storage.read_text(notes)]
  return lines


class V4(Spec):
  name = "v4"
  title = "report v4"
  page = "results.md"
  records = "results/v4"
  runs_root = "runs/results"
  sweep = SWEEP
  blocks = (findings.FINDINGS, findings.CAPTION)

  def design(self, flags) -> dict:
    check(not (flags.quick and flags.scale == "tpu"), "--quick is the CPU pipeline on a tiny model; drop --scale=tpu")
    size = "quick" if flags.quick else os.environ.get(paths.SIZE_ENV) or "full"
    if flags.scale == "tpu":
      os.environ[grid.TPU_DATA_ENV] = flags.data_paths or os.environ.get(grid.TPU_DATA_ENV, "")
    mod = sweep_module()
    return grid.design(mod.FULL, size, flags.scale, getattr(mod, "TPU", None))

  def full(self, d) -> bool:
    return d["size"] == "full" and d["scale"] == "cpu"

  def tag(self, d) -> str:
    return d["scale"] if d["scale"] != "cpu" else d["size"]

  def env(self, d) -> dict:
    env = {grid.SCALE_ENV: d["scale"]}
    if d["scale"] == "tpu":
      env[grid.TPU_DATA_ENV] = d["corpora"][grid.TPU_CORPUS]["data.paths"]
    return env

  def data_configs(self, d) -> list:
    return [grid.config(d, corpus, {}).data for corpus in d["corpora"]]

  def runs(self, d, records_dir: str) -> list:
    return [(c, r, s, grid.run_name(r, s, c)) for c, r, s in grid.points(d)]

  def before_grid(self, plan: Plan, flags) -> None:
    if plan.d["scale"] == "tpu" and flags.memory_plan:
      from resnorm.results.v4 import tpu_budget
      mod = sweep_module()
      print(f"budget on {flags.target} at {mod.ASSUMED_MFU:.0%} MFU (assumed), and each model's memory plan:",
            flush=True)
      tpu_budget.check_design(plan.d, ROOT, flags.target, flags.compiler, mod.ASSUMED_MFU, mod.device_hours)

  def after_grid(self, plan: Plan, flags) -> bool:
    if flags.launcher == "tpu":
      from resnorm.sweep import sweep_tpu
      _, num, pid = sweep_tpu._processes()  # noqa: SLF001: the same reading of the slice the sweep made
      if pid != 0:
        return False  # process 0 alone writes the report
      if num > 1:  # one host of a multi-host slice cannot start the TPU runtime alone; init diagnostics on its CPU
        import jax
        jax.config.update("jax_platforms", "cpu")  # the env variable would be read too late: jax may be imported
    for R in self._runs(plan, Ledger(plan.records)).values():
      init_diagnostics(R, plan.d)
    return True

  @staticmethod
  def _runs(plan: Plan, ledger: Ledger) -> dict:
    return {c: Runs(plan.root, plan.d, c, plan.records, ledger) for c in plan.d["corpora"]}

  def read(self, plan: Plan):
    """Every run and init record of the design read (and checked) once, before anything is computed."""
    d, ledger = plan.d, Ledger(plan.records)
    Rs = self._runs(plan, ledger)
    for c, r, s in grid.points(d):
      Rs[c].run(r, s)
    for R in Rs.values():
      for v, L, s in ((v, L, s) for v in grid.MAIN for L in d["init_depths"] for s in grid.block_seeds(d, "init")):
        R.init(v, L, s)
    return ledger, Rs

  def build(self, plan: Plan, ledger, Rs, wall_s: float) -> Built:
    d = plan.d
    by_corpus, summary = evaluate_claims(Rs, d)
    k = md.run_counts(Rs, d)
    readme = findings.readme_blocks(Rs, d, by_corpus, summary, k) if plan.readme else {}
    lines = page_lines(Rs, d, plan.out, wall_s, by_corpus, summary)
    more = "; the others are listed there: rerun this command when they end" if k["finished"] < k["runs"] else ""
    return Built(lines, readme, f" from {k['finished']} of {k['runs']} runs{more}")


SPEC = V4()
