"""Regenerates docs/results.md and docs/figures/:
python -m resnorm.results [--quick] [--root=runs/results] [--out=docs] [--jobs=K]

1. Runs the grid of configs/sweeps/results.py through resnorm.sweep (one train.py process per run; finished runs
   are reused), then the init diagnostics of C1-C2 in this process (reused too).
2. Computes the claims C1-C10 from the runs (resnorm/tools/claims.py: quantities, predicted signs, verdict rule).
3. Writes OUT/results.md: the generated claims table, a section per claim with its figure and per-seed numbers,
   the stability map; then OUT/results_notes.md (the discussion, written by hand) is appended.
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
from resnorm.errors import check, run_app
from resnorm.tools import claims as cl
from resnorm.tools import grid
from resnorm.tools import results_figs as figs

FLAGS = flags.FLAGS
flags.DEFINE_string("root", "runs/results", "Where the runs go (finished runs are reused).")
flags.DEFINE_string("out", "docs", "Report directory: results.md and figures/.")
flags.DEFINE_integer("jobs", 1, "Training runs at once.")
flags.DEFINE_bool("quick", False, "The same pipeline on a tiny model, 2 seeds (minutes).")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
SWEEP = os.path.join(ROOT, "configs", "sweeps", "results.py")


def _module(path):
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def run_grid(size: str, root: str, jobs: int) -> int:
  env = {**os.environ, grid.SIZE_ENV: size, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
  return subprocess.run([sys.executable, "-m", "resnorm.sweep", SWEEP, f"--root={root}", f"--jobs={jobs}"],
                        cwd=ROOT, env=env).returncode


def init_diagnostics(R, d) -> int:
  """C1-C2: diagnostics of freshly initialized models, per variant, depth and seed (written once)."""
  todo = [(v, L, s) for v in grid.MAIN for L in d["init_depths"] for s in d["seeds"]
          if not storage.exists(R.init_path(v, L, s))]
  if not todo:
    return 0
  from absl import logging
  from resnorm import data, evaluate, runtime, startup
  logging.set_verbosity(logging.WARNING)
  startup.start()
  base = _module(os.path.join(ROOT, "configs", "base.py"))
  for v, L, s in todo:
    cfg = base.get_config("cpu")
    over = {**d["common"], "model.residual": v, "model.num_layers": L, "seed": s, "data.eval_batches": 2,
            "model.init": "xavier"}  # Xiong et al.'s setting: the init-time claims hold under it (docs/variants.md 6)
    for key, val in over.items():
      *path, last = key.split(".")
      node = cfg
      for p in path:
        node = node[p]
      node[last] = val
    setup = runtime.build(cfg)
    res = evaluate.report(setup, setup.init_state()["params"], data.eval_batches(cfg), 0)
    storage.makedirs(storage.join(R.root, "init"))
    wd.write_json(R.init_path(v, L, s), res)
  return len(todo)


# ---- markdown ----------------------------------------------------------------------------------------------------

def _pm(values):
  x = np.array(values, dtype=float)
  if not len(x):
    return "n/a"
  return f"{x.mean():+.3g} ± {x.std(ddof=1):.2g}" if len(x) > 1 else f"{x.mean():+.3g}"


def _seeds(c, d):
  n = min(len(p["values"]) for p in c["parts"])
  return str(n) if n == len(d["seeds"]) else f"{n} of {len(d['seeds'])}"


def claims_table(results, d) -> list[str]:
  lines = ["| claim | source | verdict | effect (mean ± std) | seeds |", "|---|---|---|---|---|"]
  for c in results:
    effect = "; ".join(f"{p['label']}: {_pm(list(p['values'].values()))}" for p in c["parts"])
    lines.append(f"| [{c['id']}](#{c['id'].lower()}) {c['claim']} | {c['source']} | **{c['verdict']}** | {effect} | "
                 f"{_seeds(c, d)} |")
  return lines


def claim_section(c, d, fig_names) -> list[str]:
  seeds = d["seeds"]
  lines = [f"### {c['id']}", "", f"**{c['claim']}** ({c['source']}). Verdict: **{c['verdict']}**.", "",
           "| part | measured per seed (paired) | predicted | " + " | ".join(f"seed {s}" for s in seeds) +
           " | mean ± std | verdict |", "|---|---|---|" + "---|" * len(seeds) + "---|---|"]
  for p in c["parts"]:
    vals = " | ".join(f"{p['values'][s]:+.4g}" if s in p["values"] else "missing" for s in seeds)
    lines.append(f"| {p['label']} | {p['what']} | {'> 0' if p['sign'] > 0 else '< 0'} | {vals} | "
                 f"{_pm(list(p['values'].values()))} | {p['verdict']} |")
  return lines + [""] + [f"![{n}](figures/{n})" for n in fig_names] + [""]


def map_tables(R, d) -> list[str]:
  n = len(d["seeds"])
  cols = [(lr, f) for lr in d["lrs"] for f in d["warmup_fracs"]]
  out = []
  for L in d["map_depths"]:
    out += [f"**{L} layers** (final eval loss, mean ± std over the seeds that did not diverge; counts of diverged and "
            "stalled seeds)", "",
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


def run_counts(R, d) -> dict:
  names = [(r, s) for s in d["seeds"] for r in grid.recipes(d)]
  runs = [R.run(r, s) for r, s in names]
  secs = sum(sum(x["summary"].get(k) or 0 for k in ("startup_s", "train_s")) for x in runs if x)
  return {"runs": len(names), "finished": sum(bool(x) for x in runs), "diverged": sum(bool(x) and x["diverged"]
          for x in runs), "stalled": sum(bool(x) and x["stalled"] for x in runs), "run_minutes": secs / 60,
          "flagged": sum(bool(x) and "learned_beyond_unigram" in x["summary"] for x in runs)}


def _flags(k) -> str:
  if k["flagged"] == k["finished"]:
    return ""
  return f"; {k['finished'] - k['flagged']} runs predate summary.json's learned_beyond_unigram and count as not stalled"


def design_text(d) -> str:
  lg = d["long"]
  return (f"Model: d {d['common'].get('model.d_model', 64)}, {d['steps']} steps, batch "
          f"{d['common'].get('train.batch_size', 8)} x {d['common'].get('data.seq_len', 64)} bytes, seeds "
          f"{list(d['seeds'])} (paired: a seed gives every variant the same base weights and data order). "
          f"Stability map: {', '.join(d['variants'])} at {' and '.join(map(str, d['map_depths']))} layers, lr "
          f"{', '.join(f'{x:g}' for x in d['lrs'])}, warmup {', '.join(f'{f:.0%}' for f in d['warmup_fracs'])}. "
          f"Reference recipe: lr {d['ref_lr']:g}, warmup {d['ref_warmup_frac']:.0%}. Depth sweep (C4): "
          f"{list(d['depths'])} layers. Init diagnostics (C1, C2): {list(d['init_depths'])} layers, Xavier init, 2 "
          f"validation batches. Longer training "
          f"(C7): {lg['layers']} layers, lr {lg['lr']:g}, {lg['steps']} steps.")


def write_report(R, d, out: str, wall_s: float) -> str:
  fig_dir = os.path.join(out, "figures")
  os.makedirs(fig_dir, exist_ok=True)
  results = cl.evaluate(R, d)
  k = run_counts(R, d)
  lines = ["# Results at CPU scale", "",
           f"Generated by `python -m resnorm.results{' --quick' if d['size'] == 'quick' else ''}` (size "
           f"`{d['size']}`) from {k['finished']} of {k['runs']} runs ({k['diverged']} diverged, {k['stalled']} "
           f"stalled: learned nothing beyond byte frequencies{_flags(k)}) plus init diagnostics. The runs' own time: "
           f"{k['run_minutes']:.0f} run-minutes; this invocation took {wall_s / 60:.1f} minutes of wall time "
           "(finished runs are reused). Every number below is read from the runs.", "", design_text(d), "",
           "## Claims", "", *claims_table(results, d), "",
           "Verdict per part, from the paired per-seed values x (sign-adjusted so the claim predicts x > 0): "
           "**reproduced** if x > 0 in every seed and the mean exceeds 2 standard errors; **not reproduced** if x < 0 "
           "in every seed by the same rule; **inconclusive** otherwise. A claim is reproduced if every part is, not "
           f"reproduced if any part is. A diverged run scores ln 256 = {cl.FAIL_LOSS:.3f} nats/byte; \"no worse\" "
           f"allows {cl.MARGIN} nats/byte.", ""]
  for c in results:
    names = figs.FIGURES[c["id"]](R, d, fig_dir)
    lines += claim_section(c, d, names)
    if c["id"] == "C3":
      lines += ["Stability map, cell by cell:", "", *map_tables(R, d)]
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
  size = "quick" if FLAGS.quick else os.environ.get(grid.SIZE_ENV) or "full"
  t0 = time.time()
  if size != "full":  # tiny models: XLA's optimizations cost more compile time than they save (read at jax import)
    os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
  d = grid.design(_module(SWEEP).FULL, size)
  rc = run_grid(size, FLAGS.root, FLAGS.jobs)
  R = cl.Runs(FLAGS.root, d)
  init_diagnostics(R, d)
  path = write_report(R, d, FLAGS.out, time.time() - t0)
  print(f"wrote {path} ({(time.time() - t0) / 60:.1f} min)" + (" (some runs did not finish)" if rc else ""))


if __name__ == "__main__":
  run_app(main)
