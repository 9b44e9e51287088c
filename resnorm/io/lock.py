"""One owner per workdir: the lock train.py takes before it touches DIR and holds until it exits.

DIR/lock.json names the owner (host, pid, a random token, since when, the command) and carries a heartbeat: the
owner's wall clock, rewritten every HEARTBEAT_S by a background thread (the training loop never waits on it). A
lock is its owner's until the heartbeat is older than STALE_S by the reader's clock; then the owner counts as dead
(kill -9, a lost VM) and the next train.py takes the lock over, saying so on stderr and in the new lock.json
(`took_over`). On a local filesystem a lock of this host whose pid no longer runs is dead at once.

No flock, so it also works on gs://:
- local paths: create with O_CREAT|O_EXCL (atomic); a takeover renames the stale file aside (atomic: of several
  takers one gets it), checks it is still the content it judged stale (else puts it back) and creates afresh.
- remote paths (etils.epath): without google-cloud-storage's generation preconditions there is no exclusive
  create or compare-and-swap, so creating or taking over is read -> write -> wait SETTLE_S -> read back, and the
  token found there owns the lock. GCS is strongly consistent (a write is seen by every later read), so two
  launchers can both win only if one stalls longer than SETTLE_S between its read and its write.
An owner that finds another token in the file at its next heartbeat has lost the lock (it was stalled for longer
than STALE_S) and stops without writing more (LockLost, exit 2).

HEARTBEAT_S, STALE_S and SETTLE_S can be set with $RESNORM_LOCK_HEARTBEAT_S, $RESNORM_LOCK_STALE_S and
$RESNORM_LOCK_SETTLE_S (tests shorten them).
"""
import contextlib
import datetime
import json
import os
import socket
import sys
import threading
import time
import uuid

from resnorm.io import storage
from resnorm.core.errors import InputError

LOCK_NAME = "lock.json"
HEARTBEAT_S = 60.0
STALE_S = 300.0  # five missed heartbeats: far above write latency and NTP clock skew between hosts
SETTLE_S = 2.0


class LockHeld(InputError):
  """The workdir has a live owner: one line naming it, exit 2, nothing written."""


class LockLost(InputError):
  """This run's lock was taken over while it ran (it looked dead): it stops without writing more."""


def _env_s(name: str, default: float) -> float:
  value = os.environ.get(name)
  if not value:
    return default
  try:
    return float(value)
  except ValueError:
    raise InputError(f"${name}={value!r} must be a number of seconds") from None


def _iso(t: float) -> str:
  return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pid_alive(pid: int) -> bool:
  """Whether `pid` runs on this host (a zombie, killed but not yet reaped, counts as dead)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # another user's process
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except (OSError, IndexError):
    return True


class LocalStore:
  """The lock file on a POSIX filesystem."""
  local = True

  def __init__(self, path: str):
    self.path = path

  def makedirs(self) -> str | None:
    """Creates the lock's directory; returns the topmost directory it created (None if it existed)."""
    top, p = None, os.path.dirname(os.path.abspath(self.path))
    while not os.path.exists(p):
      top, p = p, os.path.dirname(p)
    os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
    return top

  def read(self) -> str | None:
    try:
      with open(self.path) as f:
        return f.read()
    except FileNotFoundError:
      return None

  def mtime(self) -> float:
    return os.stat(self.path).st_mtime

  def create(self, text: str) -> bool:
    try:
      fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
      return False
    with os.fdopen(fd, "w") as f:
      f.write(text)
    return True

  def write(self, text: str) -> None:
    tmp = f"{self.path}.{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "w") as f:
      f.write(text)
    os.replace(tmp, self.path)

  def swap(self, expected: str, text: str) -> bool:
    """Replaces the lock by `text` if it still reads `expected`."""
    aside = f"{self.path}.{uuid.uuid4().hex[:8]}.stale"
    try:
      os.rename(self.path, aside)
    except FileNotFoundError:
      return self.create(text)
    with open(aside) as f:
      moved = f.read()
    if moved != expected:  # refreshed or replaced since it was judged: put it back (unless a new one is there)
      self.create(moved)
      os.remove(aside)
      return False
    os.remove(aside)
    return self.create(text)

  def remove(self) -> None:
    with contextlib.suppress(FileNotFoundError):
      os.remove(self.path)


class RemoteStore:
  """The lock file behind an etils.epath path (gs://...): write, wait, read back (see the module docstring)."""
  local = False

  def __init__(self, path, settle_s: float, sleep=time.sleep):
    self.path, self.settle_s, self.sleep = path, settle_s, sleep

  def makedirs(self) -> None:
    self.path.parent.mkdir(parents=True, exist_ok=True)

  def read(self) -> str | None:
    try:
      return self.path.read_text()
    except FileNotFoundError:
      return None

  def mtime(self) -> float:
    return float(self.path.stat().mtime)

  def create(self, text: str) -> bool:
    return not self.path.exists() and self._write_verified(text)

  def write(self, text: str) -> None:
    self.path.write_text(text)

  def swap(self, expected: str, text: str) -> bool:
    return self.read() == expected and self._write_verified(text)

  def _write_verified(self, text: str) -> bool:
    self.path.write_text(text)
    self.sleep(self.settle_s)
    return self.read() == text

  def remove(self) -> None:
    with contextlib.suppress(FileNotFoundError):
      self.path.unlink()


def store_for(workdir: str):
  if storage.is_remote(workdir):
    return RemoteStore(storage.as_epath(storage.join(workdir, LOCK_NAME)), _env_s("RESNORM_LOCK_SETTLE_S", SETTLE_S))
  return LocalStore(os.path.join(workdir, LOCK_NAME))


def _who(h: dict) -> str:
  return f"host {h.get('host', '?')} pid {h.get('pid', '?')} since {h.get('since', '?')}"


class WorkdirLock:
  """The lock of one workdir: acquire() (or LockHeld), start_heartbeat(), `lost`, release()."""

  def __init__(self, workdir: str, force: bool = False, store=None, clock=time.time, host=None, pid=None,
               heartbeat_s=None, stale_s=None):
    self.workdir, self.force, self.clock = str(workdir), force, clock
    self.store = store if store is not None else store_for(self.workdir)
    self.heartbeat_s = heartbeat_s or _env_s("RESNORM_LOCK_HEARTBEAT_S", HEARTBEAT_S)
    self.stale_s = stale_s or _env_s("RESNORM_LOCK_STALE_S", STALE_S)
    self.host, self.pid = host or socket.gethostname(), pid or os.getpid()
    self.token, self.since = uuid.uuid4().hex, clock()
    self.lost: str | None = None  # why this lock is no longer ours, once a heartbeat finds that out
    self._extra, self._created, self._thread, self._stop = {}, None, None, threading.Event()

  def _record(self) -> str:
    return json.dumps({"host": self.host, "pid": self.pid, "since": _iso(self.since), "heartbeat": self.clock(),
                       "heartbeat_s": self.heartbeat_s, "token": self.token,
                       "command": " ".join(sys.argv), **self._extra}, indent=1) + "\n"

  def _parse(self, text: str) -> dict:
    try:
      rec = json.loads(text)
      if isinstance(rec, dict) and "heartbeat" in rec:
        return rec
    except json.JSONDecodeError:
      pass
    try:  # half-written or foreign: as old as the file
      return {"heartbeat": self.store.mtime()}
    except (OSError, ValueError):
      return {"heartbeat": 0.0}

  def _dead(self, holder: dict) -> str | None:
    """Why the holder counts as dead (None: it is alive)."""
    if self.force:
      return "--force_unlock"
    pid = holder.get("pid")
    if self.store.local and holder.get("host") == self.host and isinstance(pid, int) and not pid_alive(pid):
      return f"pid {pid} no longer runs on this host"
    age, limit = self._age(holder)
    return f"last heartbeat {age:.0f} s ago, stale after {limit:.0f} s" if age > limit else None

  def _age(self, holder: dict) -> tuple[float, float]:
    # never less than two of the holder's own heartbeat intervals, whatever this launcher's STALE_S says
    limit = max(self.stale_s, 2 * float(holder.get("heartbeat_s") or 0))
    return self.clock() - float(holder.get("heartbeat") or 0), limit

  def acquire(self) -> "WorkdirLock":
    try:
      self._created = self.store.makedirs()
      for _ in range(5):  # each retry follows a lost race; five in a row means a crowd
        self._extra = {}
        text = self.store.read()
        if text is None:
          if self.store.create(self._record()):
            return self
          continue
        holder = self._parse(text)
        reason = self._dead(holder)
        if reason is None:
          age, limit = self._age(holder)
          raise LockHeld(f"--workdir={self.workdir!r} is in use by train.py on {_who(holder)} (last heartbeat "
                         f"{age:.0f} s ago); a dead owner's lock is taken over once its heartbeat is {limit:.0f} "
                         "s old, or now with --force_unlock if you know it is dead")
        self._extra = {"took_over": {**{k: holder.get(k) for k in ("host", "pid", "since")}, "reason": reason}}
        if self.store.swap(text, self._record()):
          print(f"warning: took over the lock of {self.workdir} from {_who(holder)} ({reason})", file=sys.stderr,
                flush=True)
          return self
      raise LockHeld(f"--workdir={self.workdir!r}: other launchers keep racing for its lock; retry")
    except OSError as e:
      self._remove_created()
      raise InputError(f"--workdir={self.workdir!r} is not writable: {e.strerror or e}") from None
    except ImportError as e:  # gs:// without gcsfs or tensorflow behind etils.epath
      raise InputError(f"--workdir={self.workdir!r} cannot be reached: {e}") from None
    except InputError:
      self._remove_created()
      raise

  def refresh(self) -> bool:
    """One heartbeat. False once the lock is someone else's (`lost` says whose)."""
    if self.lost:
      return False
    text = self.store.read()
    if text is None and self.store.create(self._record()):  # removed by hand: still ours
      return True
    text = text if text is not None else self.store.read() or ""
    holder = self._parse(text)
    if holder.get("token") == self.token:
      self.store.write(self._record())
      return True
    why = (holder.get("took_over") or {}).get("reason", "?")
    self.lost = f"the lock of {self.workdir} was taken over by {_who(holder)} ({why}); stopping without writing more"

    return False

  def start_heartbeat(self) -> None:
    self._thread = threading.Thread(target=self._beat, name="workdir-lock-heartbeat", daemon=True)
    self._thread.start()

  def _beat(self) -> None:
    failing = False
    while not self._stop.wait(self.heartbeat_s):
      try:
        if not self.refresh():
          print(f"error: {self.lost}", file=sys.stderr, flush=True)
          return
        failing = False
      except Exception as e:  # noqa: BLE001: a flaky filesystem must not kill the heartbeat; it retries
        if not failing:
          print(f"warning: workdir lock heartbeat failed ({type(e).__name__}: {e}); retrying", file=sys.stderr,
                flush=True)
        failing = True

  def release(self) -> None:
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
    try:
      text = self.store.read()
      if text is not None and self._parse(text).get("token") == self.token:
        self.store.remove()
    except OSError as e:
      print(f"warning: could not remove the workdir lock ({e})", file=sys.stderr, flush=True)
    self._remove_created()

  def _remove_created(self) -> None:
    """A run that failed before writing anything leaves no empty workdir behind."""
    if not self._created:
      return
    p = os.path.abspath(self.workdir)
    while True:
      try:
        os.rmdir(p)
      except OSError:
        return
      if p == self._created:
        return
      p = os.path.dirname(p)


@contextlib.contextmanager
def hold(workdir: str, force: bool = False):
  """train.py's lock, held for the block: process 0 takes it on behalf of all processes (which learn the outcome
  by broadcast, so all exit 2 together), a heartbeat thread keeps it fresh, and any exit releases it."""
  import jax
  owner, err = None, None
  if jax.process_index() == 0:
    owner = WorkdirLock(workdir, force=force)
    try:
      owner.acquire()
    except InputError as e:
      owner, err = None, e
  if jax.process_count() > 1:
    import numpy as np
    from jax.experimental import multihost_utils
    if not int(multihost_utils.broadcast_one_to_all(np.int32(err is None))) and err is None:
      err = LockHeld(f"--workdir={workdir!r}: process 0 could not take the workdir lock (its stderr says why)")
  if err is not None:
    raise err
  try:
    if owner is not None:
      owner.start_heartbeat()
    yield owner
  finally:
    if owner is not None:
      owner.release()
