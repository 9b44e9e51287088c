"""A mutation pass (tests/README.md): plant each bug of a list, one at a time, in a private copy of HEAD, run the
test files it names, and report which bugs the tests caught.

    python tools/mutants.py MUTANTS.json [--only=m01,m07] [--jobs=2] [--timeout=600] [--out=report.md]

MUTANTS.json is a list of {"id", "file", "old", "new", "tests": [test files], "what": one line}. `old` must occur
exactly once in `file` at HEAD. A bug is caught when pytest exits non-zero within the timeout (a hang counts as
caught: the suite noticed); a bug whose mutated file no longer imports is reported as such, since it tells nothing
about the tests. Each of the --jobs workers has its own copy, a detached git worktree of HEAD under the system temp
dir, removed at the end; the working tree is never touched. Run it under `nice -n 19` while a grid runs.
"""
import argparse
import concurrent.futures
import json
import queue
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fail(msg: str):
  print(f"mutants: {msg}", file=sys.stderr)
  sys.exit(2)


def load(path: str, only: str) -> list[dict]:
  try:
    with open(path) as f:
      mutants = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    _fail(f"cannot read {path}: {e}")
  keep = set(only.split(",")) if only else None
  out = []
  for m in mutants:
    missing = {"id", "file", "old", "new", "tests", "what"} - set(m)
    if missing:
      _fail(f"mutant {m.get('id', '?')} lacks {sorted(missing)}")
    if keep is None or m["id"] in keep:
      out.append(m)
  return out


def run_one(clone: str, m: dict, timeout: int) -> tuple[str, float, str]:
  """Plants m in clone, runs its tests, restores the file. Returns (outcome, seconds, last line)."""
  path = os.path.join(clone, m["file"])
  with open(path) as f:
    src = f.read()
  if src.count(m["old"]) != 1:
    return "bad-mutant", 0.0, f"`old` occurs {src.count(m['old'])} times in {m['file']}"
  try:
    with open(path, "w") as f:
      f.write(src.replace(m["old"], m["new"]))
    env = dict(os.environ, PYTHONPATH=clone, PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *m["tests"]]
    t0 = time.time()
    try:
      p = subprocess.run(cmd, cwd=clone, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
      return "caught (timeout)", time.time() - t0, ""
    secs = time.time() - t0
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if p.returncode == 0:
      return "SURVIVED", secs, last
    if p.returncode in (2, 4) and ("ImportError" in p.stdout + p.stderr or "SyntaxError" in p.stdout + p.stderr):
      return "no-import", secs, last
    return "caught", secs, last
  finally:
    with open(path, "w") as f:
      f.write(src)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("mutants")
  ap.add_argument("--only", default="")
  ap.add_argument("--jobs", type=int, default=1)
  ap.add_argument("--timeout", type=int, default=600)
  ap.add_argument("--out", default="")
  args = ap.parse_args(argv)
  mutants = load(args.mutants, args.only)
  clones = queue.Queue()
  made = []
  for _ in range(max(args.jobs, 1)):
    clone = tempfile.mkdtemp(prefix="resnorm-mutants-")
    shutil.rmtree(clone)
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "-q", "--detach", clone, "HEAD"], check=True)
    made.append(clone)
    clones.put(clone)

  def work(m):
    clone = clones.get()
    try:
      outcome, secs, last = run_one(clone, m, args.timeout)
    finally:
      clones.put(clone)
    print(f"{m['id']:>5}  {outcome:<16} {secs:6.0f}s  {m['file']}: {m['what']}  [{last[:100]}]", flush=True)
    return m, outcome, secs

  try:
    with concurrent.futures.ThreadPoolExecutor(max(args.jobs, 1)) as pool:
      rows = list(pool.map(work, mutants))
  finally:
    for clone in made:
      subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", clone], check=False)
  judged = [r for r in rows if r[1].startswith(("caught", "SURVIVED"))]
  caught = sum(r[1].startswith("caught") for r in judged)
  summary = f"caught {caught} of {len(judged)} ({100 * caught / max(len(judged), 1):.0f}%)"
  print(summary)
  if args.out:
    with open(args.out, "w") as f:
      f.write("| id | file | bug | outcome | tests |\n|---|---|---|---|---|\n")
      for m, outcome, _ in rows:
        f.write(f"| {m['id']} | {m['file']} | {m['what']} | {outcome} | {', '.join(m['tests'])} |\n")
      f.write(f"\n{summary}\n")


if __name__ == "__main__":
  main()
