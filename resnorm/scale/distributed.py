"""Several JAX processes, one global mesh: JAX's multi-controller runtime (`jax.distributed`).

Joining. A Cloud TPU pod slice and SLURM are detected by JAX itself. Anywhere else (GPU nodes, or several processes
on one machine) the processes are named by JAX_COORDINATOR_ADDRESS (host:port where process 0 listens),
JAX_NUM_PROCESSES and JAX_PROCESS_ID. On the CPU, the processes' devices exchange data through gloo
(`jax_cpu_collectives_implementation`), so one mesh spans all of them, as on accelerators.

Failing within bounds, never hanging:
- a process waits $RESNORM_JOIN_TIMEOUT seconds (default 300) for all the others to join; then, as for a missing
  coordinator, an unset variable, or processes started with different JAX_NUM_PROCESSES or arguments, it exits 2
  with one line;
- once running, a process that sends no heartbeat for $RESNORM_HEARTBEAT_TIMEOUT seconds (default 100, JAX's) is
  declared dead, and the runtime terminates every other process (non-zero exit; a process that was blocked in a
  collective with it included); a collective that sees its peer's connection close fails at once, and the process
  exits 1 (`_exit_now`). Rerunning the same command on every host resumes from the newest checkpoint.

Stopping together. A SIGTERM seen by any process must stop every process after the same step, or they would
disagree on which collectives come next. `StopVote` agrees on that step through the coordination service's
key-value store; see its docstring.
"""
import hashlib
import os
import sys
import time

import jax

from resnorm.core.errors import EXIT_BAD_INPUT, InputError

JOIN_ENV, HEARTBEAT_ENV = "RESNORM_JOIN_TIMEOUT", "RESNORM_HEARTBEAT_TIMEOUT"
_STOP_KEY = "resnorm/stop_after_step"
# Steps between the step at which a process asks to stop and the step at which all stop. Every process polls once
# a step; when one polls at step k, each other has polled at k - 2 or later and polls again by k + 3 (a host is at
# most one step of dispatch ahead of its device, and its device waits in each step's collectives for the others').
STOP_MARGIN = 4
_joined = {"done": False}


def _seconds(name: str, default: int) -> int:
  raw = os.environ.get(name, str(default))
  try:
    val = int(raw)
  except ValueError:
    val = 0
  if val < 1:
    raise InputError(f"${name}={raw!r} must be a whole number of seconds >= 1")
  return val


def _fail(msg: str):
  """One line and exit 2, without interpreter teardown: the half-joined runtime's destructors would print screens of
  C++ errors after it."""
  print(f"error: {msg}", file=sys.stderr, flush=True)
  sys.stdout.flush()
  os._exit(EXIT_BAD_INPUT)


def _env_setup() -> tuple[str, int, int] | None:
  """(coordinator address, process count, process id) from the JAX_* variables; None when they say one process."""
  env = os.environ
  names = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
  given = [n for n in names if env.get(n, "").strip()]
  if not given:
    return None
  missing = [n for n in names if n not in given]
  try:
    num = int(env.get("JAX_NUM_PROCESSES", "0"))
    pid = int(env.get("JAX_PROCESS_ID", "0"))
  except ValueError:
    raise InputError("JAX_NUM_PROCESSES and JAX_PROCESS_ID must be whole numbers") from None
  if "JAX_NUM_PROCESSES" in given and (num < 1 or not 0 <= pid < num):  # also for one process
    raise InputError(f"JAX_PROCESS_ID={pid} must be in [0, JAX_NUM_PROCESSES={num})")
  if missing == ["JAX_COORDINATOR_ADDRESS"] and num == 1:
    return None
  if missing:
    raise InputError(f"several processes need all of {', '.join(names)}; {', '.join(missing)} "
                     f"{'is' if len(missing) == 1 else 'are'} not set (the coordinator is process 0's host:port)")
  addr = env["JAX_COORDINATOR_ADDRESS"].strip()
  host, _, port = addr.rpartition(":")
  if not host or not port.isdigit():
    raise InputError(f"JAX_COORDINATOR_ADDRESS={addr!r} must be host:port (process 0's address)")
  return (addr, num, pid) if num > 1 else None


def initialize() -> None:
  """Joins the other processes when this is one of several (a no-op for a single process). Call before the first
  JAX computation."""
  env = os.environ
  join_s, heartbeat_s = _seconds(JOIN_ENV, 300), _seconds(HEARTBEAT_ENV, 100)
  detected = int(env.get("SLURM_NTASKS", "1") or 1) > 1 or "," in env.get("TPU_WORKER_HOSTNAMES", "")
  setup = None if detected else _env_setup()
  if setup is None and not detected:
    return
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if detected:  # TPU pod slice or SLURM: JAX finds the coordinator and the process ids itself
    jax.distributed.initialize(initialization_timeout=join_s, heartbeat_timeout_seconds=heartbeat_s,
                               shutdown_timeout_seconds=heartbeat_s)
  else:
    _connect(*setup, join_s, heartbeat_s)
  _check_same_setup(join_s)
  sys.excepthook = _exit_now


def _exit_now(kind, value, tb):
  """An uncaught error in one of several processes (a peer died mid-collective: gloo's 'connection reset'): print it
  and exit 1 at once. Interpreter teardown would wait in JAX's shutdown barrier, and in Orbax's, for the dead peer."""
  sys.__excepthook__(kind, value, tb)
  sys.stderr.flush()
  sys.stdout.flush()
  os._exit(1)


def _connect(addr: str, num: int, pid: int, join_s: int, heartbeat_s: int) -> None:
  """What jax.distributed.initialize does, from its own pieces: given a heartbeat callback, the runtime raises when
  the processes fail to join instead of aborting the process (a C++ fatal error with a stack trace)."""
  from jax._src import distributed as jd  # private: pinned jax 0.10.2
  from jax._src.lib import _jax
  state = jd.global_state
  who = f"process {pid} of {num} (JAX_COORDINATOR_ADDRESS={addr})"
  if pid == 0:
    try:
      state.service = _jax.get_distributed_runtime_service(
          f"[::]:{addr.rpartition(':')[2]}", num, heartbeat_timeout=heartbeat_s, shutdown_timeout=heartbeat_s)
    except Exception as e:  # noqa: BLE001: the port is taken, or the address cannot be bound
      _fail(f"{who}: cannot start the coordinator: {str(e).splitlines()[0][:200]}")
  state.client = _jax.get_distributed_runtime_client(
      addr, pid, init_timeout=join_s, heartbeat_timeout=heartbeat_s, shutdown_timeout=heartbeat_s,
      use_compression=True, missed_heartbeat_callback=_lost)
  try:
    state.client.connect()
  except Exception:  # noqa: BLE001: any failure to join is the set-up's
    others = "the other processes" if pid == 0 else "process 0 (the coordinator)"
    _fail(f"{who}: {others} did not join within ${JOIN_ENV}={join_s}s; start all JAX_NUM_PROCESSES={num} "
          "processes with the same JAX_COORDINATOR_ADDRESS and JAX_NUM_PROCESSES, each with its own JAX_PROCESS_ID")
  _joined["done"] = True
  state.coordinator_address, state.num_processes, state.process_id = addr, num, pid
  state.initialize_preemption_sync_manager()


def _lost(status) -> None:
  """The runtime lost a process (or the coordinator). In jaxlib 0.10.2 this is never reached while running (the status
  cannot be passed to Python, and the runtime terminates the process itself); if it is, stop the same way. While
  joining, connect() raises after this returns."""
  if not _joined["done"]:
    return
  print(f"error: the distributed runtime lost a process: {str(status).splitlines()[0][:300]}; rerun the same "
        "command on every host to resume from the newest checkpoint", file=sys.stderr, flush=True)
  os._exit(1)


def _check_same_setup(join_s: int) -> None:
  """Processes started with different JAX_NUM_PROCESSES or arguments would run into each other's collectives."""
  from jax._src import distributed as jd
  client, pid = jd.global_state.client, jd.global_state.process_id  # the backend is not started yet
  mine = f"{os.environ.get('JAX_NUM_PROCESSES', '')}|" + hashlib.sha256("\0".join(sys.argv[1:]).encode()).hexdigest()
  client.key_value_set(f"resnorm/setup/{pid}", mine)
  try:
    client.wait_at_barrier("resnorm/joined", join_s * 1000)
  except Exception:  # noqa: BLE001
    _fail(f"process {pid}: not every process reached start-up within ${JOIN_ENV}={join_s}s")
  setups = dict(client.key_value_dir_get("resnorm/setup/"))
  if len(set(setups.values())) > 1:
    counts = sorted({v.split("|")[0] for v in setups.values()})
    what = (f"JAX_NUM_PROCESSES differs between processes ({', '.join(counts)})" if len(counts) > 1
            else "the processes were started with different arguments")
    msg = f"process {pid}: {what}; start every process with the same command"
    if pid != 0:  # process 0 hosts the coordinator: it leaves last, or the others die of its absence, unexplained
      print(f"error: {msg}", file=sys.stderr, flush=True)
      client.key_value_set(f"resnorm/failed/{pid}", "1")
      os._exit(EXIT_BAD_INPUT)
    for other in range(1, len(setups)):
      try:
        client.blocking_key_value_get(f"resnorm/failed/{other}", 10_000)
      except Exception:  # noqa: BLE001: it is gone already
        pass
    time.sleep(0.5)  # their os._exit after the key
    _fail(msg)


def _client():
  from jax._src import distributed as jd
  return jd.global_state.client


class StopVote:
  """Agrees on the step after which every process stops, once any process is asked to (SIGTERM / SIGINT).

  A process asked to stop after step k writes k + STOP_MARGIN under one key (the first writer wins); every process
  reads the key once a step and stops after the step it holds, so all of them checkpoint the same step. A single
  process stops after the step at which it was asked, as before.
  """

  def __init__(self):
    self.multi = jax.process_count() > 1
    self.client = _client() if self.multi else None
    self.stop_after = None

  def should_stop(self, step: int, asked: bool) -> bool:
    if not self.multi:
      return asked
    if self.stop_after is None:
      if asked:
        try:
          self.client.key_value_set(_STOP_KEY, str(step + STOP_MARGIN))
        except Exception:  # noqa: BLE001: another process wrote it first; its step holds
          pass
      try:
        self.stop_after = int(self.client.key_value_try_get(_STOP_KEY))
      except Exception:  # noqa: BLE001: no key: nobody asked
        return False
    return step >= self.stop_after
