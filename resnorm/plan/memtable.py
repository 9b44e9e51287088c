"""Memory plans of many configs on many targets: `python -m resnorm.plan.memtable`, the table of docs/scaling.md.

Each cell is `train.py --config=CONFIG --dry_run --target=TARGET --compiler=COMPILER --json` in its own process
(plan_json below; resnorm.results --scale=tpu calls it for its design's models). Finished cells are kept in
--cache (JSON) so a table can be stopped and resumed. The markdown table gives the train-step peak and the peak
over all steps per device, in GiB, TPU compiler beside the CPU estimate, and whether the config fits.

  python -m resnorm.plan.memtable --configs='configs/*_96l.py' --targets=v4-8,v5e-8,v5p-8,v6e-8
"""
import glob
import json
import os
import subprocess
import sys
import time

from absl import flags

from resnorm.core.errors import EXIT_BAD_INPUT, InputError, check, run_app

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GiB = 2**30
FLAGS = flags.FLAGS


def plan_json(config: str, target: str, compiler: str = "auto", overrides: dict | None = None,
              timeout: int = 1800) -> dict:
  """One memory plan as train.py --json gives it (fits, peak, memory per step, compiler, suggestions). A plan
  that does not fit exits 2 with its JSON all the same; any other failure raises InputError with its last line."""
  args = [sys.executable, os.path.join(ROOT, "train.py"), f"--config={config}", "--dry_run", f"--target={target}",
          f"--compiler={compiler}", "--json", *(f"--config.{k}={v}" for k, v in (overrides or {}).items())]
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS",)}
  r = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
  out = r.stdout.strip().splitlines()
  if r.returncode in (0, EXIT_BAD_INPUT) and out and out[-1].startswith("{"):
    return json.loads(out[-1])
  last = (r.stderr.strip().splitlines() or ["no output"])[-1]
  raise InputError(f"the memory plan of {config} on {target} ({compiler}) failed (exit {r.returncode}): {last}")


def _cell(p: dict | None, key: str = "train") -> str:
  if p is None:
    return "-"
  mem = p["memory"].get(key)
  if mem is None:
    return "-"
  text = f"{mem['peak'] / GiB:.2f}"
  return (">" + text) if mem.get("refused") is not None else text


def table(configs: list[str], targets: list[str], plans: dict) -> str:
  """Markdown: one row per config and target; plans[(config, target, compiler)] -> plan_json."""
  rows = ["| config | target | TPU compiler: train | TPU: peak of all steps | fits (TPU) | CPU estimate: train | "
          "CPU: peak of all steps |", "|---|---|---|---|---|---|---|"]
  for c in configs:
    for t in targets:
      tpu, cpu = plans.get((c, t, "tpu")), plans.get((c, t, "cpu"))
      peak = lambda p: "-" if p is None else f"{p['peak'] / GiB:.2f}"
      fits = "-" if tpu is None else ("yes" if tpu["fits"] else "**no**")
      rows.append(f"| `{os.path.basename(c.split(':')[0])[:-3]}:tpu` | {t} | {_cell(tpu)} | {peak(tpu)} | {fits} | "
                  f"{_cell(cpu)} | {peak(cpu)} |")
  return "\n".join(rows)


flags.DEFINE_string("configs", "configs/*_96l.py", "Glob of config files (each at :tpu).")
flags.DEFINE_list("targets", ["v4-8", "v5e-8", "v5p-8", "v6e-8"], "Targets of the memory plan.")
flags.DEFINE_list("compilers", ["tpu", "cpu"], "tpu (libtpu), cpu (the simulated-CPU estimate), or both.")
flags.DEFINE_string("cache", "runs/memtable.json", "Finished cells, kept between invocations.")


def _read_cache(path: str) -> dict:
  if not os.path.exists(path):
    return {}
  try:
    with open(path) as f:
      cache = json.load(f)
  except (OSError, ValueError) as e:
    raise InputError(f"--cache={path} cannot be read ({type(e).__name__}: {e}); move it away to plan again") from None
  check(isinstance(cache, dict), f"--cache={path} is not a JSON object of cells; move it away to plan again")
  return cache


def _write_cache(path: str, cache: dict) -> None:
  """Whole, through a rename: a run stopped mid-write keeps the cells it had."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(f"{path}.tmp", "w") as f:
    json.dump(cache, f, indent=1)
  os.replace(f"{path}.tmp", path)


def main(argv):
  check(len(argv) == 1, f"unexpected arguments: {' '.join(argv[1:])}")
  configs = sorted(glob.glob(os.path.join(ROOT, FLAGS.configs)) or glob.glob(FLAGS.configs))
  check(bool(configs), f"--configs={FLAGS.configs!r} matches no file")
  configs = [os.path.relpath(c, ROOT) + ":tpu" for c in configs]
  bad = [c for c in FLAGS.compilers if c not in ("tpu", "cpu")]
  check(not bad, f"--compilers: {', '.join(bad)} unknown; known: tpu, cpu")
  cache = _read_cache(FLAGS.cache)
  plans = {}
  for c in configs:
    for t in FLAGS.targets:
      for comp in FLAGS.compilers:
        key = f"{c}|{t}|{comp}"
        if key not in cache:
          t0 = time.time()
          cache[key] = plan_json(c, t, comp)
          print(f"{c} on {t} ({comp}): train {_cell(cache[key])} GiB, {time.time() - t0:.0f} s", file=sys.stderr,
                flush=True)
          _write_cache(FLAGS.cache, cache)
        plans[(c, t, comp)] = cache[key]
  print(table(configs, FLAGS.targets, plans))
  return 0


if __name__ == "__main__":
  run_app(main)
