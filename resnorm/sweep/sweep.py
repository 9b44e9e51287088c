"""Run a sweep: python -m resnorm.sweep configs/sweeps/NAME.py --root=DIR [--jobs=K] [--dry_run]
    [--launcher=local|slurm|tpu] [--status]

A sweep file defines `sweep(add)` and calls `add(config='configs/x.py[:scale]', name=None, **{'train.lr': 1e-3})`
once per point. Each point runs as its own `train.py` process into DIR/<name>/ (name: readable from the config and
overrides). Completed and diverged runs are skipped (a divergence is a result); interrupted ones resume.
--dry_run prints one train.py command per point (--launcher=slurm: writes and prints the sbatch script instead).
Launchers: local (subprocesses, --jobs at once), slurm (one job array: resnorm.sweep.slurm), tpu (every host of a
slice runs the same command: resnorm.sweep.sweep_tpu). --status prints each point's state (resnorm.sweep.sweep_status).
"""
import concurrent.futures
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile

from absl import flags

from resnorm.config import configkeys
from resnorm.io import storage, workdir as wd
from resnorm.core.errors import InputError, check, cli_main, run_app
from resnorm.sweep import preflight, slurm, sweep_flags, sweep_status  # noqa: F401 (sweep_flags: --root --jobs ...)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
FLAGS = flags.FLAGS
flags.DEFINE_bool("dry_run", False, "Print the train.py commands, run nothing.")
flags.DEFINE_bool("status", False, "Print one row per point (pending, running, completed, ...) and exit.")
DONE = ("completed", "diverged")


def _short(key: str, val) -> str:
  return f"{key.split('.')[-1]}{val}"


def _own_code(path: str, fn, *args):
  """Runs the sweep file's code: an error in it (a syntax error, a wrong call of add) is the file's, in one line."""
  try:
    return fn(*args)
  except InputError:
    raise
  except Exception as e:
    raise InputError(f"sweep file {path!r}: {type(e).__name__}: {(str(e).splitlines() or [''])[0]}") from None


def load_points(path: str) -> list[dict]:
  check(os.path.isfile(path), f"sweep file {path!r} does not exist")
  spec = importlib.util.spec_from_file_location("sweep_def", path)
  mod = importlib.util.module_from_spec(spec)
  _own_code(path, spec.loader.exec_module, mod)
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

  _own_code(path, mod.sweep, add)
  names = [p["name"] for p in points]
  check(len(set(names)) == len(names), f"{path}: two points have the same run name")
  return points


def command(point: dict, root: str) -> list[str]:
  return ([sys.executable, os.path.join(ROOT, "train.py"), f"--config={os.path.join(ROOT, point['config'])}",
           f"--workdir={storage.join(root, point['name'])}"]
          + [f"--config.{k}={v}" for k, v in point["overrides"].items()])


def status(root: str, name: str) -> str | None:
  path = storage.join(root, name, "summary.json")
  return wd.read_json(path, "summary").get("status") if storage.exists(path) else None


def _run(point, root) -> tuple[str, int]:
  """One point; its output goes to ROOT/logs/NAME.log (in a bucket: written whole when the run ends, after what
  earlier attempts logged), its exit code to ROOT/logs/NAME.exit."""
  path = storage.join(root, "logs", f"{point['name']}.log")
  if not storage.is_remote(root):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as log:
      rc = subprocess.run(command(point, root), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
  else:
    with tempfile.TemporaryFile() as log:
      rc = subprocess.run(command(point, root), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT).returncode
      log.seek(0)
      before = storage.read_bytes(path) if storage.exists(path) else b""
      storage.write_bytes(path, before + log.read())
  sweep_status.write_exit(root, point["name"], rc)
  return point["name"], rc


def _slurm(points: list[dict], root: str, sweep_file: str) -> int:
  """Writes points.json and sweep.sbatch; submits the points neither done nor queued/running as one array."""
  opts = slurm.options()
  if not FLAGS.dry_run:
    slurm.require_sbatch()  # before the script is written: nothing lands in ROOT on a machine without SLURM
  path = slurm.write(points, [command(p, root) for p in points], root, ROOT, opts, sweep_file)
  if FLAGS.dry_run:
    print(open(path).read(), end="")
    print(f"# sbatch --array={slurm.array_spec(list(range(len(points))), opts['concurrency'])} {path}")
    return 0
  active = slurm.active(root) or {}
  todo = [i for i, p in enumerate(points) if status(root, p["name"]) not in DONE and p["name"] not in active]
  print(f"{len(points)} points, {sum(status(root, p['name']) in DONE for p in points)} already done, "
        f"{len(active)} queued or running, submitting {len(todo)}", flush=True)
  if todo:
    job = slurm.submit(path, root, todo, [points[i]["name"] for i in todo], opts["concurrency"])
    print(f"submitted array job {job} ({slurm.array_spec(todo, opts['concurrency'])}); "
          f"python -m resnorm.sweep {sweep_file} --root={root} --status", flush=True)
  return 0


def build_corpora_first(jobs: int, points: int) -> bool:
  """Whether the package corpora are built before the points start: whenever two or more may start together."""
  return jobs > 1 and points > 1


@cli_main
def main(argv) -> int:
  check(len(argv) == 2, "usage: python -m resnorm.sweep configs/sweeps/NAME.py --root=DIR [--jobs=K] [--dry_run] "
        "[--launcher=local|slurm|tpu] [--status]")
  check(FLAGS.root, "--root is required")
  check(FLAGS.jobs >= 1, f"--jobs={FLAGS.jobs} must be >= 1")
  points = load_points(argv[1])
  root = storage.absolute(FLAGS.root)
  if FLAGS.status:
    print(sweep_status.table(points, root)[1])
    return 0
  preflight.check_points(points, ROOT)  # every point's config and data, before anything starts or is written
  if FLAGS.launcher == "slurm":
    return _slurm(points, root, argv[1])
  if FLAGS.launcher == "tpu":
    from resnorm.sweep import sweep_tpu
    return sweep_tpu.run(points, root, [command(p, root) for p in points], ROOT, status, FLAGS.dry_run)
  if FLAGS.dry_run:
    for p in points:
      print(shlex.join(command(p, FLAGS.root)))
    return 0
  if not storage.is_remote(root):  # a --root in a file's way: one line now, not a traceback from each point's thread
    try:
      os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    except OSError as e:
      raise InputError(f"--root={FLAGS.root}: cannot create {e.filename}: {e.strerror}") from None
  todo = [p for p in points if status(FLAGS.root, p["name"]) not in DONE]
  if build_corpora_first(FLAGS.jobs, len(todo)):
    preflight.prepare_corpora(todo, ROOT)  # once, before points start together
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
