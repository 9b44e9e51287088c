"""`python -m resnorm.sweep FILE --root=ROOT --status`: one row per point, whichever launcher ran it.

A point's state, first match wins:
  pending / running (task id)   squeue lists its SLURM task (queued, requeued, or running)
  completed | stalled           summary.json says completed; stalled when it did not learn beyond the byte-unigram
                                baseline (`learned_beyond_unigram` false)
  diverged                      summary.json says diverged (a result: never rerun)
  preempted                     train.py exited 4 or summary.json says preempted; a rerun resumes it
  failed (exit code, log)       train.py exited otherwise (2: bad input, never requeued), or its SLURM task ended
                                (sacct's state) without train.py recording an exit
  running                       summary.json says running and no scheduler can be asked (squeue absent)
  pending                       nothing yet
ROOT/logs/NAME.exit and NAME.job are written by the local and SLURM launchers (resnorm.sweep.slurm).
"""
from resnorm.io import storage, workdir as wd
from resnorm.sweep import slurm

RUNNING = ("RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT")


def _read(path: str) -> str | None:
  try:
    return storage.read_text(path).strip() or None
  except (OSError, FileNotFoundError):
    return None


def write_exit(root: str, name: str, rc: int, job: str = "local") -> None:
  storage.makedirs(storage.join(root, "logs"))
  storage.write_text(storage.join(root, "logs", f"{name}.exit"), f"{rc} {job}\n")


def exit_code(root: str, name: str) -> int | None:
  raw = _read(storage.join(root, "logs", f"{name}.exit"))
  try:
    return int(raw.split()[0]) if raw else None
  except ValueError:
    return None


def point_state(root: str, name: str, active: dict | None, acct: dict) -> dict:
  """{state, job, exit, log} of one point."""
  log = storage.join(root, "logs", f"{name}.log")
  job = (_read(storage.join(root, "logs", f"{name}.job")) or "-").split()[0]
  row = {"state": "pending", "job": "-", "exit": "-", "log": log if storage.exists(log) else "-"}
  if active and name in active:
    state, tid = active[name]
    return {**row, "state": "running" if state in RUNNING else "pending", "job": tid}
  path = storage.join(root, name, "summary.json")
  summary = wd.read_json(path, "summary") if storage.exists(path) else {}
  status, rc = summary.get("status"), exit_code(root, name)
  row["exit"] = "-" if rc is None else str(rc)
  if status or rc is not None:
    row["job"] = job
  if status == "completed":
    return {**row, "state": "stalled" if summary.get("learned_beyond_unigram") is False else "completed"}
  if status == "diverged":
    return {**row, "state": "diverged"}
  if rc == 4 or (rc is None and status == "preempted"):
    return {**row, "state": "preempted"}
  if rc is not None and rc != 0:
    return {**row, "state": "failed"}
  if status == "running" or rc == 0:
    if active is None and rc is None:
      return {**row, "state": "running"}
    state, code = acct.get(name, ("", ""))  # its task ended, and train.py never said how
    return {**row, "state": "failed", "exit": f"{state or 'ended'} {code}".strip()}
  return row


def table(points: list[dict], root: str) -> tuple[list[dict], str]:
  """The rows and their text: index, point, state, job, exit, and the log of each failed point."""
  active = slurm.active(root)
  acct = slurm.accounting(root) if active is not None else {}
  rows = [{"index": i, "point": p["name"], **point_state(root, p["name"], active, acct)} for i, p in enumerate(points)]
  cols = ("index", "point", "state", "job", "exit", "log")
  cells = [[str(r[c]) if (c != "log" or r["state"] == "failed") else "-" for c in cols] for r in rows]
  width = [max(len(c), *(len(row[k]) for row in cells)) if cells else len(c) for k, c in enumerate(cols)]
  lines = ["  ".join(c.ljust(w) for c, w in zip(cols, width)).rstrip()]
  lines += ["  ".join(c.ljust(w) for c, w in zip(row, width)).rstrip() for row in cells]
  counts = {}
  for r in rows:
    counts[r["state"]] = counts.get(r["state"], 0) + 1
  where = "squeue" if active is not None else "the workdirs"
  lines.append(f"{len(rows)} points: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + f" (from {where})")
  return rows, "\n".join(lines)
