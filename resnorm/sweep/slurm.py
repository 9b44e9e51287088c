"""`--launcher=slurm`: a sweep as one SLURM job array, one task per unfinished point.

ROOT/points.json maps each array index (the point's position in the sweep file) to the point and its train.py
command; ROOT/sweep.sbatch runs the command of its $SLURM_ARRAY_TASK_ID. Each submission appends its array job id
and indices to ROOT/slurm_jobs.jsonl, so `--status` and a rerun can ask squeue which points are queued or running.

Preemption. The script asks for SIGTERM to the batch shell `--slurm.signal_s` seconds before the kill
(`--signal=B:TERM@S`: a time limit, or `scancel --signal=TERM --batch`); the shell forwards it to train.py (to srun
on several nodes, which forwards it to every process), which checkpoints and exits 4. On exit 4 the task requeues
itself (`scontrol requeue`); the next start resumes the workdir exactly. Exit 2 (bad input) and 3 (diverged) are
final: never requeued. `#SBATCH --requeue` also lets SLURM's own preemption and node failures requeue the task.

Several nodes per point: the task runs `srun` over its nodes, and each process joins one JAX job through
jax.distributed's SLURM detection (resnorm.scale.distributed).

Per point the script writes ROOT/logs/NAME.log (train.py's output, appended across restarts), NAME.job (the task
running it) and, when train.py ends, NAME.exit (its exit code): the workdirs and these files are the state
wherever squeue and sacct are not available.
"""
import json
import os
import shlex
import shutil
import subprocess
import time

from absl import flags

from resnorm.core.errors import InputError, check

FLAGS = flags.FLAGS
flags.DEFINE_string("slurm.partition", None, "SLURM partition (#SBATCH --partition).")
flags.DEFINE_string("slurm.time", None, "Time limit per task, e.g. 04:00:00 (#SBATCH --time).")
flags.DEFINE_string("slurm.gres", None, "Generic resources per node, e.g. gpu:8 (#SBATCH --gres).")
flags.DEFINE_integer("slurm.cpus_per_task", None, "CPUs per process (#SBATCH --cpus-per-task).")
flags.DEFINE_integer("slurm.nodes", 1, "Nodes per point; > 1 runs the point as one JAX job under srun.")
flags.DEFINE_integer("slurm.ntasks_per_node", 1, "JAX processes per node (one per node on TPU/GPU hosts).")
flags.DEFINE_integer("slurm.concurrency", 0, "At most this many points at once (the array's %K); 0: no limit.")
flags.DEFINE_integer("slurm.signal_s", 120, "SIGTERM this many seconds before the time limit (--signal=B:TERM@S).")
flags.DEFINE_string("slurm.extra", "", "More sbatch options, e.g. '--account=A --qos=Q' (one #SBATCH line each).")

SCRIPT, POINTS, JOBS = "sweep.sbatch", "points.json", "slurm_jobs.jsonl"
ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "REQUEUE_HOLD",
          "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD")


def options() -> dict:
  opts = {k: FLAGS[f"slurm.{k}"].value for k in ("partition", "time", "gres", "cpus_per_task", "nodes",
                                                  "ntasks_per_node", "concurrency", "signal_s", "extra")}
  check(opts["nodes"] >= 1, f"--slurm.nodes={opts['nodes']} must be >= 1")
  check(opts["ntasks_per_node"] >= 1, f"--slurm.ntasks_per_node={opts['ntasks_per_node']} must be >= 1")
  check(opts["concurrency"] >= 0, f"--slurm.concurrency={opts['concurrency']} must be >= 0 (0: no limit)")
  check(opts["signal_s"] >= 1, f"--slurm.signal_s={opts['signal_s']} must be >= 1")
  try:
    opts["extra"] = shlex.split(opts["extra"] or "")
  except ValueError as e:
    raise InputError(f"--slurm.extra={opts['extra']!r} does not parse: {e}") from None
  return opts


def script(points: list[dict], commands: list[list[str]], root: str, checkout: str, opts: dict, job_name: str) -> str:
  """The sbatch script: a header from `opts`, then the point of $SLURM_ARRAY_TASK_ID, run with its log and exit file,
  TERM forwarded, exit 4 requeued."""
  logs = os.path.join(root, "logs")
  head = [f"--job-name={job_name}", f"--output={logs}/slurm-%A_%a.out", "--open-mode=append", "--requeue",
          f"--signal=B:TERM@{opts['signal_s']}", f"--nodes={opts['nodes']}",
          f"--ntasks-per-node={opts['ntasks_per_node']}"]
  for key, name in (("partition", "partition"), ("time", "time"), ("gres", "gres"), ("cpus_per_task", "cpus-per-task")):
    if opts[key] is not None:
      head.append(f"--{name}={opts[key]}")
  head += opts["extra"]
  multi = opts["nodes"] * opts["ntasks_per_node"] > 1
  cases = [f"  {i}) name={shlex.quote(p['name'])}; cmd=({shlex.join(c)}) ;;"
           for i, (p, c) in enumerate(zip(points, commands))]
  q = shlex.quote
  return "\n".join([
      "#!/bin/bash",
      "# Written by python -m resnorm.sweep --launcher=slurm; submitted as an array (--array=INDICES[%K]).",
      *(f"#SBATCH {h}" for h in head),
      "set -u",
      f"cd {q(checkout)}",
      f"logs={q(logs)}",
      'jid="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"',
      'case "$SLURM_ARRAY_TASK_ID" in',
      *cases,
      '  *) echo "error: no point has array index $SLURM_ARRAY_TASK_ID" >&2; exit 2 ;;',
      "esac",
      'mkdir -p "$logs"; rm -f "$logs/$name.exit"; echo "$jid" > "$logs/$name.job"',
      'echo "== $(date -u +%FT%TZ) task $jid (restart ${SLURM_RESTART_COUNT:-0}) on $(hostname)" >> "$logs/$name.log"',
      # several processes: one srun step over the allocation; each joins the JAX job from SLURM's variables
      ('launch=(srun --kill-on-bad-exit=1 "${cmd[@]}")' if multi else 'launch=("${cmd[@]}")'),
      # train.py runs in the background so that this shell can forward SIGTERM (B:TERM reaches only the shell)
      '"${launch[@]}" >> "$logs/$name.log" 2>&1 &',
      "child=$!",
      "signalled=",
      "trap 'signalled=1; kill -TERM \"$child\" 2>/dev/null' TERM INT",
      'while :; do wait "$child"; kill -0 "$child" 2>/dev/null || break; done',
      'wait "$child"; rc=$?',  # bash keeps a finished child's status: this is train.py's exit code
      'echo "$rc $jid" > "$logs/$name.exit"',
      'echo "== $(date -u +%FT%TZ) task $jid: exit $rc" >> "$logs/$name.log"',
      # 4: checkpointed on SIGTERM; a signal that came before train.py could catch it: nothing lost either.
      # A task cancelled outright is not brought back.
      'if [ "$rc" -eq 4 ] || { [ -n "$signalled" ] && [ "$rc" -ge 128 ]; }; then',
      '  state=$(squeue -h -j "$jid" -o %T 2>/dev/null)',
      '  case "$state" in CANCELLED*|COMPLETING*) ;; *) scontrol requeue "$jid" && echo "requeued $jid" ;; esac',
      "fi",
      'exit "$rc"',
      ""])


def write(points, commands, root: str, checkout: str, opts: dict, sweep_file: str) -> str:
  """ROOT/points.json and ROOT/sweep.sbatch; returns the script's path."""
  os.makedirs(os.path.join(root, "logs"), exist_ok=True)
  job_name = "resnorm-" + os.path.splitext(os.path.basename(sweep_file))[0]
  path = os.path.join(root, SCRIPT)
  with open(path, "w") as f:
    f.write(script(points, commands, root, checkout, opts, job_name))
  os.chmod(path, 0o755)
  index = {"sweep": os.path.abspath(sweep_file), "root": root, "checkout": checkout, "launcher": "slurm",
           "points": [{"index": i, "name": p["name"], "config": p["config"], "overrides": p["overrides"],
                       "workdir": os.path.join(root, p["name"]), "log": os.path.join(root, "logs", f"{p['name']}.log"),
                       "command": shlex.join(c)} for i, (p, c) in enumerate(zip(points, commands))]}
  with open(os.path.join(root, POINTS), "w") as f:
    json.dump(index, f, indent=1, default=str)
    f.write("\n")
  return path


def array_spec(indices: list[int], concurrency: int) -> str:
  return ",".join(map(str, indices)) + (f"%{concurrency}" if concurrency else "")


def require_sbatch() -> None:
  check(shutil.which("sbatch"), "--launcher=slurm: sbatch is not on PATH (run on a SLURM login node)")


def submit(path: str, root: str, indices: list[int], names: list[str], concurrency: int) -> str:
  """sbatch --array; records the array job id and its points in ROOT/slurm_jobs.jsonl. Returns the job id."""
  require_sbatch()
  r = subprocess.run(["sbatch", "--parsable", f"--array={array_spec(indices, concurrency)}", path],
                     capture_output=True, text=True)
  check(r.returncode == 0, f"sbatch failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[:500]}")
  job = r.stdout.strip().split(";")[0]
  with open(os.path.join(root, JOBS), "a") as f:
    f.write(json.dumps({"job": job, "time": time.time(), "tasks": dict(zip(map(str, indices), names))}) + "\n")
  return job


def _jobs(root: str) -> list[dict]:
  path = os.path.join(root, JOBS)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def active(root: str) -> dict[str, tuple[str, str]] | None:
  """{point name: (SLURM state, task id)} for this root's tasks that squeue lists (queued, running, completing);
  None where nothing was submitted from this root or squeue is not available."""
  jobs = _jobs(root)
  if not jobs or not shutil.which("squeue"):
    return None
  by_job = {j["job"]: j["tasks"] for j in jobs}
  r = subprocess.run(["squeue", "-h", "-r", "-o", "%F|%K|%T|%i", "-j", ",".join(by_job)], capture_output=True,
                     text=True)
  out = {}
  if r.returncode != 0:  # every id purged already ("Invalid job id"): nothing queued
    return {} if "nvalid job id" in r.stderr else None
  for line in r.stdout.splitlines():
    job, task, state, tid = (line.split("|") + ["", "", "", ""])[:4]
    name = by_job.get(job, {}).get(task)
    if name and state in ACTIVE:
      out[name] = (state, tid)
  return out


def accounting(root: str) -> dict[str, tuple[str, str]]:
  """{point name: (final SLURM state, exit code)} from sacct for this root's finished tasks, newest last; {} where
  sacct is absent or accounting is off."""
  jobs = _jobs(root)
  if not jobs or not shutil.which("sacct"):
    return {}
  by_job = {j["job"]: j["tasks"] for j in jobs}
  r = subprocess.run(["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(by_job)],
                     capture_output=True, text=True)
  out = {}
  if r.returncode != 0:
    return out
  for line in r.stdout.splitlines():
    jid, state, code = (line.split("|") + ["", "", ""])[:3]
    job, _, task = jid.partition("_")
    name = by_job.get(job, {}).get(task)
    if name:
      out[name] = (state.split()[0] if state else "", code)
  return out
