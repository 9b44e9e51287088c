"""The workdir lock: one train.py per workdir, a dead owner's lock taken over (local and a simulated gs://), and
eval.py on a live run writing only under eval/. The takeover after a real kill -9 (with a leftover Orbax save, and
the resume equal to an uninterrupted run) is asserted in test_reliability's kill -9 test, which that run already
pays for."""
import hashlib
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from resnorm.io import ckpt, lock
from test_reliability import _start, _wait_for_step


def _snapshot(wd):
  """{relative path: sha1} of every file under wd."""
  out = {}
  for root, _, files in os.walk(wd):
    for f in files:
      path = os.path.join(root, f)
      with open(path, "rb") as fh:
        out[os.path.relpath(path, wd)] = hashlib.sha1(fh.read()).hexdigest()
  return out


def _loss_steps(wd):
  return [r["step"] for r in map(json.loads, open(os.path.join(wd, "metrics.jsonl"))) if "loss" in r]


def _stop(pid, timeout_s=60.0):
  """SIGSTOP, then wait until every thread of pid is stopped: kill() returns before the kernel has stopped them,
  and a thread still running (an Orbax save of step 10, say) would change files between the two snapshots."""
  os.kill(pid, signal.SIGSTOP)
  deadline = time.monotonic() + timeout_s
  while True:
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
      try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
          states.append(f.read().rpartition(")")[2].split()[0])
      except FileNotFoundError:  # a thread that has just exited
        pass
    if states and all(s in "tTZX" for s in states):
      return
    assert time.monotonic() < deadline, f"pid {pid} did not stop: thread states {states}"
    time.sleep(0.005)


@pytest.fixture(scope="module")
def contested(tmp_path_factory, text_corpus):
  """A run (60 steps) that a second train.py on its workdir meets while the first is at step 12 or later, held
  still with SIGSTOP so that anything the second one changes shows."""
  wd = str(tmp_path_factory.mktemp("live") / "run")
  first = _start(wd, text_corpus)
  _wait_for_step(first, 12)
  _stop(first.pid)
  try:
    before = _snapshot(wd)
    second = _start(wd, text_corpus)
    _, second_err = second.communicate(timeout=300)
    after = _snapshot(wd)
  finally:
    os.kill(first.pid, signal.SIGCONT)
  _, first_err = first.communicate(timeout=600)
  return dict(wd=wd, first=first, first_err=first_err, second=second, second_err=second_err, before=before,
              after=after)


@pytest.mark.integration
def test_second_launch_on_a_live_workdir_exits_2_and_changes_nothing(contested):
  c, wd = contested, contested["wd"]
  err = c["second_err"]
  assert c["second"].returncode == 2 and "Traceback" not in err, err[-2000:]
  line, = [l for l in err.splitlines() if l.startswith("error:")]
  assert f"is in use by train.py on host {socket.gethostname()} pid {c['first'].pid} since 20" in line
  assert c["after"] == c["before"]  # not one byte of the live run's workdir changed
  # the first run finished undisturbed: every step logged once, completed, its lock gone
  assert c["first"].returncode == 0, c["first_err"][-2000:]
  assert _loss_steps(wd) == list(range(1, 61))
  summary = json.load(open(os.path.join(wd, "summary.json")))
  assert summary["status"] == "completed" and summary["step"] == 60
  assert "60" in os.listdir(os.path.join(wd, "checkpoints"))
  assert not os.path.exists(os.path.join(wd, lock.LOCK_NAME))


@pytest.mark.integration
def test_eval_on_a_live_workdir_writes_only_under_eval(contested, monkeypatch, capfd):
  from resnorm.evaluation import evaluate
  wd = contested["wd"]
  owner = lock.WorkdirLock(wd).acquire()  # a live owner (this process)
  real = ckpt.Checkpointer.steps
  calls = []

  def steps(self):  # the newest step is listed, then pruned by the live run before it loads
    calls.append(1)
    return real(self) + ([99] if len(calls) == 1 else [])

  monkeypatch.setattr(ckpt.Checkpointer, "steps", steps)
  try:
    before = {k: v for k, v in _snapshot(wd).items() if not k.startswith("eval")}
    assert evaluate.eval_workdir(wd, None) == 0
    after = _snapshot(wd)
  finally:
    owner.release()
  assert {k: v for k, v in after.items() if not k.startswith("eval")} == before  # lock, logs, checkpoints
  assert "checkpoint step 99 was removed while loading it (the run is live); using the newest, 60" in \
      capfd.readouterr().err
  assert json.load(open(os.path.join(wd, "eval", "step_60.json")))["step"] == 60


# ---- the lock itself, on a simulated object store and on local disk, with a fake clock -------------------------


class Clock:

  def __init__(self):
    self.t, self.on_sleep = 1.8e9, None

  def __call__(self):
    return self.t

  def sleep(self, s):
    self.t += s
    if self.on_sleep:
      hook, self.on_sleep = self.on_sleep, None
      hook()


class FakeGcsPath:
  """gs://bucket/...: whole-object reads and writes in a dict shared by every host, no rename, no exclusive
  create, no flock (what etils.epath offers on GCS)."""

  def __init__(self, objects, name):
    self.objects, self.name = objects, name

  @property
  def parent(self):
    return FakeGcsPath(self.objects, self.name.rsplit("/", 1)[0])

  def mkdir(self, parents=False, exist_ok=False):
    pass  # GCS has no directories

  def exists(self):
    return self.name in self.objects

  def read_text(self):
    if self.name not in self.objects:
      raise FileNotFoundError(self.name)
    return self.objects[self.name]

  def write_text(self, text):
    self.objects[self.name] = text

  def unlink(self):
    if self.objects.pop(self.name, None) is None:
      raise FileNotFoundError(self.name)

  def stat(self):
    raise FileNotFoundError(self.name)


GS = "gs://bucket/run"


def _on_gcs(objects, clock, host, pid=4242, **kw):
  store = lock.RemoteStore(FakeGcsPath(objects, f"{GS}/{lock.LOCK_NAME}"), settle_s=2.0, sleep=clock.sleep)
  return lock.WorkdirLock(GS, store=store, clock=clock, host=host, pid=pid, **{"heartbeat_s": 60, "stale_s": 300, **kw})


def test_stale_heartbeat_on_a_remote_path_is_taken_over(capsys):
  objects, clock = {}, Clock()
  key = f"{GS}/{lock.LOCK_NAME}"
  a = _on_gcs(objects, clock, "vm-a").acquire()
  clock.t += 250
  assert a.refresh()  # a live owner's heartbeat
  clock.t += 110
  with pytest.raises(lock.LockHeld):  # a launcher with a shorter margin still waits two of the owner's heartbeats
    _on_gcs(objects, clock, "vm-b", stale_s=100).acquire()
  clock.t += 189
  with pytest.raises(lock.LockHeld, match=r"in use by train.py on host vm-a pid 4242 since 2027-.*Z \(last heartbeat "
                     r"299 s ago\).*300 s old.*--force_unlock"):
    _on_gcs(objects, clock, "vm-b").acquire()
  clock.t += 2  # vm-a was lost: no heartbeat for 301 s
  b = _on_gcs(objects, clock, "vm-b").acquire()
  assert f"took over the lock of {GS} from host vm-a pid 4242" in capsys.readouterr().err
  rec = json.loads(objects[key])
  assert rec["host"] == "vm-b" and rec["took_over"]["host"] == "vm-a"
  assert rec["took_over"]["reason"] == "last heartbeat 301 s ago, stale after 300 s"
  held = objects[key]
  assert not a.refresh()  # vm-a comes back: it has lost the lock, says to whom and why...
  assert "taken over by host vm-b pid 4242" in a.lost and "(last heartbeat 301 s ago" in a.lost
  assert objects[key] == held  # ...and wrote nothing
  b.release()
  assert key not in objects


def test_remote_takeover_race_is_settled_by_reading_back():
  """Two launchers judge one stale lock dead; the write that lands last owns it, the other reads that back."""
  objects, clock = {}, Clock()
  key = f"{GS}/{lock.LOCK_NAME}"
  _on_gcs(objects, clock, "vm-a").acquire()
  clock.t += 400
  c = _on_gcs(objects, clock, "vm-c")
  b = _on_gcs(objects, clock, "vm-b")
  clock.on_sleep = lambda: objects.update({key: c._record()})  # c read the stale lock too; its write lands later
  with pytest.raises(lock.LockHeld, match="host vm-c"):
    b.acquire()
  assert json.loads(objects[key])["host"] == "vm-c"


def test_pid_check_is_for_local_disks_only():
  """On gs:// a lock of this host's name with a dead pid may be another VM's (same hostname): only its heartbeat
  counts."""
  objects, clock = {}, Clock()
  _on_gcs(objects, clock, socket.gethostname(), pid=_dead_pid()).acquire()
  with pytest.raises(lock.LockHeld):
    _on_gcs(objects, clock, socket.gethostname()).acquire()


def _dead_pid():
  p = subprocess.Popen(["true"])
  p.wait()
  return p.pid


def test_local_lock_dead_pid_live_pid_stale_heartbeat_and_force(tmp_path, capsys):
  wd = str(tmp_path / "run")
  clock = Clock()
  path = os.path.join(wd, lock.LOCK_NAME)
  owner = lock.WorkdirLock(wd, clock=clock).acquire()
  with pytest.raises(lock.LockHeld, match=f"pid {os.getpid()}"):  # this very process: alive
    lock.WorkdirLock(wd, clock=clock).acquire()
  clock.t += 301  # alive but silent for 301 s (stopped, or its pid reused by another program): stale
  lock.WorkdirLock(wd, clock=clock).acquire()
  assert "stale after 300 s" in capsys.readouterr().err
  assert not owner.refresh()
  rec = json.load(open(path))
  rec["pid"] = _dead_pid()  # a fresh heartbeat, but its process is gone (kill -9): no waiting
  open(path, "w").write(json.dumps(rec))
  lock.WorkdirLock(wd, clock=clock).acquire()
  assert f"pid {rec['pid']} no longer runs on this host" in capsys.readouterr().err
  lock.WorkdirLock(wd, clock=clock, force=True).acquire()  # alive and fresh, but the user says it is dead
  assert json.load(open(path))["took_over"]["reason"] == "--force_unlock"


def test_local_swap_only_replaces_what_was_judged(tmp_path):
  store = lock.LocalStore(str(tmp_path / lock.LOCK_NAME))
  assert store.create("x") and not store.create("y")
  assert not store.swap("stale", "mine") and store.read() == "x"  # refreshed since it was judged: left alone
  assert store.swap("x", "mine") and store.read() == "mine"
  assert sorted(os.listdir(tmp_path)) == [lock.LOCK_NAME]


def test_zombie_counts_as_dead():
  p = subprocess.Popen(["true"])
  deadline = time.time() + 10
  while lock.pid_alive(p.pid) and time.time() < deadline:
    time.sleep(0.01)
  assert not lock.pid_alive(p.pid) and lock.pid_alive(os.getpid())
  p.wait()


def test_heartbeat_thread_refreshes_and_notices_a_takeover(tmp_path):
  wd = str(tmp_path / "run")
  owner = lock.WorkdirLock(wd, heartbeat_s=0.05).acquire()
  path = os.path.join(wd, lock.LOCK_NAME)
  first = json.load(open(path))["heartbeat"]
  owner.start_heartbeat()
  deadline = time.time() + 10
  while json.load(open(path))["heartbeat"] == first and time.time() < deadline:
    time.sleep(0.02)
  assert json.load(open(path))["heartbeat"] > first
  lock.WorkdirLock(wd, force=True).acquire()
  while owner.lost is None and time.time() < deadline:
    time.sleep(0.02)
  owner._thread.join(timeout=10)
  assert owner.lost and not owner._thread.is_alive()  # it stopped beating
  taker = open(path).read()
  owner.release()  # the loser's release leaves the winner's lock alone
  assert open(path).read() == taker


def test_hold_releases_on_any_exit_and_leaves_no_empty_workdir(tmp_path):
  wd = str(tmp_path / "a" / "run")
  with pytest.raises(RuntimeError):
    with lock.hold(wd) as owner:
      assert owner.pid == os.getpid() and os.path.exists(os.path.join(wd, lock.LOCK_NAME))
      with pytest.raises(lock.LockHeld):
        with lock.hold(wd):
          pass
      raise RuntimeError("a crash")
  assert os.listdir(tmp_path) == []  # the directories it created for nothing are gone too
  os.makedirs(wd)
  with lock.hold(wd):
    with lock.hold(wd, force=True):
      pass
  assert os.listdir(wd) == []


class _LosesItAfter:
  """An owner whose heartbeat finds, after n steps, that another launcher took the lock."""

  def __init__(self, n):
    self.n = n

  @property
  def lost(self):
    self.n -= 1
    return "the lock was taken over by host vm-b" if self.n < 0 else None


def test_a_run_that_lost_its_lock_stops_without_writing_more(tmp_path, text_corpus):
  from conftest import text_config
  from resnorm.train import trainer
  wd = str(tmp_path / "run")
  with pytest.raises(lock.LockLost, match="taken over by host vm-b"):
    trainer.Trainer(text_config(text_corpus), wd, _LosesItAfter(3)).run()
  assert max(_loss_steps(wd)) == 3  # steps 1-3 (step 3 synced and checkpointed), nothing after
  assert sorted(os.listdir(os.path.join(wd, "checkpoints"))) == ["3"]
  assert json.load(open(os.path.join(wd, "summary.json")))["status"] == "running"  # the new owner's to write
