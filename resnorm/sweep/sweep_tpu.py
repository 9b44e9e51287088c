"""`--launcher=tpu`: every host of a multi-host slice runs the same sweep command; each point is one JAX job across
all of them.

    gcloud compute tpus tpu-vm ssh NAME --worker=all --command='cd resnorm && python -m resnorm.sweep FILE \
        --root=/gcs/bucket/runs --launcher=tpu'

Every host walks the same points in the same order and starts the same train.py command for each; those train.py
processes join one JAX job (resnorm.scale.distributed: the slice is detected by JAX, or JAX_COORDINATOR_ADDRESS,
JAX_NUM_PROCESSES and JAX_PROCESS_ID name the processes, also on CPU).

One view of the root. Before each point, process 0 alone reads the point's summary.json and publishes whether to
run it or skip it through a key-value store of its own (a JAX coordination service on the coordinator's host, port
$RESNORM_SWEEP_PORT, by default the JAX coordinator's port + 1); the others wait for that word. Each host reading
its own view (a gcsfuse mount can be stale) could send one host into a point that the others skip, and the two
would wait for each other until the join timeout.

After each point every process posts train.py's exit code and meets the others at a barrier; the sweep goes on
only if process 0 then reads completed or diverged, and otherwise every process stops (exit 1) and the same command
resumes it. A host that dies mid-point: its train.py peers stop within the heartbeat timeout
($RESNORM_HEARTBEAT_TIMEOUT), and so does this coordination service (the runtime ends the other sweep processes),
so the sweep exits non-zero in bounded time rather than hanging.

Process 0 writes ROOT/logs/NAME.log and NAME.exit; process k > 0 writes ROOT/logs/NAME.pK.log.
"""
import os
import shlex
import subprocess
import sys

from resnorm.scale import distributed
from resnorm.core.errors import InputError, check

PORT_ENV = "RESNORM_SWEEP_PORT"
DONE = ("completed", "diverged")


def _processes() -> tuple[str | None, int, int]:
  """(sweep coordinator host:port, process count, process id); (None, 1, 0) for a single process."""
  setup = distributed._env_setup()  # noqa: SLF001: the same JAX_* variables train.py reads
  if setup is None and (int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1
                        or "," in os.environ.get("TPU_WORKER_HOSTNAMES", "")):
    from jax._src import clusters  # what jax.distributed.initialize() would detect, without starting a backend
    addr, num, pid, _ = clusters.ClusterEnv.auto_detect_unset_distributed_params(None, None, None, None, None, 300)
    setup = (addr, num, pid) if addr and num and num > 1 else None
  if setup is None:
    return None, 1, 0
  addr, num, pid = setup
  host, _, port = addr.rpartition(":")
  raw = os.environ.get(PORT_ENV, str(int(port) + 1))
  check(raw.isdigit() and 0 < int(raw) < 65536, f"${PORT_ENV}={raw!r} must be a port number")
  return f"{host}:{raw}", num, pid


class Board:
  """The sweep's key-value store and barriers: a JAX coordination service hosted by process 0 (or nothing, alone)."""

  def __init__(self, addr: str | None, num: int, pid: int, timeout_s: int, heartbeat_s: int):
    self.num, self.pid, self.timeout_ms, self.client = num, pid, timeout_s * 1000, None
    if num == 1:
      return
    from jax._src.lib import _jax  # private: pinned jax, as in resnorm.scale.distributed
    if pid == 0:
      try:
        self.service = _jax.get_distributed_runtime_service(
            f"[::]:{addr.rpartition(':')[2]}", num, heartbeat_timeout=heartbeat_s, shutdown_timeout=heartbeat_s)
      except Exception as e:  # noqa: BLE001: the port is taken
        raise InputError(f"sweep coordinator {addr}: cannot listen ({str(e).splitlines()[0][:200]}); "
                         f"set ${PORT_ENV} to a free port") from None
    self.client = _jax.get_distributed_runtime_client(
        addr, pid, init_timeout=timeout_s, heartbeat_timeout=heartbeat_s, shutdown_timeout=heartbeat_s,
        use_compression=True)
    try:
      self.client.connect()
    except Exception:  # noqa: BLE001
      raise InputError(f"sweep process {pid} of {num}: the others did not join {addr} within {timeout_s}s; run the "
                       "same command on every host") from None

  def publish(self, key: str, value: str) -> str:
    """Process 0's `value` under `key`, as every process reads it."""
    if self.num == 1:
      return value
    if self.pid == 0:
      self.client.key_value_set(f"resnorm/sweep/{key}", value)
      return value
    return self.client.blocking_key_value_get(f"resnorm/sweep/{key}", self.timeout_ms)

  def gather(self, key: str, value: str) -> list[str]:
    """Every process's `value`, in process order, once all have posted."""
    if self.num == 1:
      return [value]
    self.client.key_value_set(f"resnorm/sweep/{key}/{self.pid}", value)
    self.client.wait_at_barrier(f"resnorm/sweep/{key}", self.timeout_ms)
    return [self.client.blocking_key_value_get(f"resnorm/sweep/{key}/{p}", self.timeout_ms) for p in range(self.num)]

  def close(self) -> None:
    if self.client is not None:
      self.client.shutdown()


def _lost(pid: int, name: str, err: Exception):
  """One line and exit 1 at once: interpreter teardown would wait in the coordination client's shutdown barrier for
  the host that is gone."""
  print(f"error: sweep process {pid}: lost the other hosts at point {name} ({str(err).splitlines()[0][:200]}); "
        "rerun the same command on every host to resume", file=sys.stderr, flush=True)
  sys.stdout.flush()
  os._exit(1)


def run(points: list[dict], root: str, commands: list[list[str]], checkout: str, status, dry_run: bool) -> int:
  addr, num, pid = _processes()
  if dry_run:
    print(f"# process {pid} of {num}; every host runs these in this order, each as one {num}-process JAX job")
    for c in commands:
      print(shlex.join(c))
    return 0
  join_s = distributed._seconds(distributed.JOIN_ENV, 300)  # noqa: SLF001
  heartbeat_s = distributed._seconds(distributed.HEARTBEAT_ENV, 100)  # noqa: SLF001
  # a point ends on every host within the heartbeat timeout of the first; the next starts within the join timeout
  board = Board(addr, num, pid, join_s + 2 * heartbeat_s, heartbeat_s)
  logs = os.path.join(root, "logs")
  os.makedirs(logs, exist_ok=True)
  ran = skipped = 0
  for i, (p, cmd) in enumerate(zip(points, commands)):
    name = p["name"]
    try:
      decision = board.publish(f"{i}/decision", ("skip" if status(root, name) in DONE else "run") if pid == 0 else "")
    except Exception as e:  # noqa: BLE001: a host died or left; the runtime's own error says how
      _lost(pid, name, e)
    if decision == "skip":
      skipped += 1
      continue
    log = os.path.join(logs, f"{name}.log" if pid == 0 else f"{name}.p{pid}.log")
    with open(log, "a") as f:
      rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=checkout).returncode
    try:
      codes = [int(c) for c in board.gather(f"{i}/exit", str(rc))]
      outcome = board.publish(f"{i}/outcome", (status(root, name) or "no summary") if pid == 0 else "")
    except Exception as e:  # noqa: BLE001
      _lost(pid, name, e)
    first = next((c for c in codes if c != 0), 0)
    ran += 1
    if pid == 0:
      from resnorm.sweep import sweep_status
      sweep_status.write_exit(root, name, first, f"tpu:{num}")
      print(f"{name}: {outcome} (exit codes {codes})", flush=True)
    if outcome not in DONE:
      print(f"process {pid}: {name} did not finish ({outcome}, exit codes {codes}; log {log}); rerun the same "
            "command on every host to resume", file=sys.stderr, flush=True)
      board.close()
      return 1
  if pid == 0:
    print(f"{len(points)} points: {skipped} already done, {ran} run on {num} process(es)", flush=True)
  board.close()
  return 0
