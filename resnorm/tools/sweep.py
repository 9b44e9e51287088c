"""Run a sweep: python -m resnorm.sweep configs/sweeps/NAME.py --root=DIR [--jobs=K] [--dry_run]

A sweep file defines `sweep(add)` and calls `add(config='configs/x.py[:scale]', name=None, **{'train.lr': 1e-3})`
once per point. Each point runs as its own `train.py` process into DIR/<name>/ (name: readable from the config and
overrides). Completed and diverged runs are skipped (a divergence is a result); interrupted ones resume.
--dry_run prints one train.py command per point, for a cluster or TPU launcher.
"""
import concurrent.futures
import importlib.util
import os
import re
import shlex
import subprocess
import sys

from absl import flags

from resnorm import configkeys
from resnorm import workdir as wd
from resnorm.errors import check, cli_main, run_app

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
FLAGS = flags.FLAGS
flags.DEFINE_string("root", None, "Directory for the runs.")
flags.DEFINE_integer("jobs", 1, "Runs at once.")
flags.DEFINE_bool("dry_run", False, "Print the train.py commands, run nothing.")
DONE = ("completed", "diverged")


def _short(key: str, val) -> str:
  return f"{key.split('.')[-1]}{val}"


def load_points(path: str) -> list[dict]:
  check(os.path.isfile(path), f"sweep file {path!r} does not exist")
  spec = importlib.util.spec_from_file_location("sweep_def", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  check(hasattr(mod, "sweep"), f"sweep file {path!r} defines no sweep(add)")
  points = []

  def add(config: str, name: str | None = None, **overrides):
    cfg_path = config.split(":")[0]
    check(os.path.isfile(os.path.join(ROOT, cfg_path)), f"{path}: config {config!r} does not exist")
    for key in overrides:  # refused here, not in each point's train.py log after the others have run
      configkeys.check_dotted(key, f"{path}: ")
    stem = os.path.splitext(os.path.basename(cfg_path))[0]
    auto = "-".join([stem] + [_short(k, v) for k, v in overrides.items()])
    points.append({"config": config, "name": re.sub(r"[^A-Za-z0-9_.=-]", "_", name or auto),
                   "overrides": overrides})

  mod.sweep(add)
  names = [p["name"] for p in points]
  check(len(set(names)) == len(names), f"{path}: two points have the same run name")
  return points


def command(point: dict, root: str) -> list[str]:
  return ([sys.executable, os.path.join(ROOT, "train.py"), f"--config={os.path.join(ROOT, point['config'])}",
           f"--workdir={os.path.join(root, point['name'])}"]
          + [f"--config.{k}={v}" for k, v in point["overrides"].items()])


def status(root: str, name: str) -> str | None:
  path = os.path.join(root, name, "summary.json")
  return wd.read_json(path, "summary").get("status") if os.path.exists(path) else None


def _run(point, root) -> tuple[str, int]:
  os.makedirs(os.path.join(root, "logs"), exist_ok=True)
  with open(os.path.join(root, "logs", f"{point['name']}.log"), "a") as log:
    rc = subprocess.run(command(point, root), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
  return point["name"], rc


@cli_main
def main(argv) -> int:
  check(len(argv) == 2, "usage: python -m resnorm.sweep configs/sweeps/NAME.py --root=DIR [--jobs=K] [--dry_run]")
  check(FLAGS.root, "--root is required")
  check(FLAGS.jobs >= 1, f"--jobs={FLAGS.jobs} must be >= 1")
  points = load_points(argv[1])
  if FLAGS.dry_run:
    for p in points:
      print(shlex.join(command(p, FLAGS.root)))
    return 0
  todo = [p for p in points if status(FLAGS.root, p["name"]) not in DONE]
  print(f"{len(points)} points, {len(points) - len(todo)} already done, running {len(todo)} "
        f"({FLAGS.jobs} at a time)", flush=True)
  failed = []
  with concurrent.futures.ThreadPoolExecutor(FLAGS.jobs) as pool:
    for name, rc in pool.map(lambda p: _run(p, FLAGS.root), todo):
      result = status(FLAGS.root, name)
      print(f"{name}: {result or 'no summary'} (exit {rc})", flush=True)
      if result not in DONE:
        failed.append(name)
  if failed:
    print(f"{len(failed)} runs did not finish: {', '.join(failed)} (logs in {FLAGS.root}/logs)", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  run_app(main)
