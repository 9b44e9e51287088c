"""Several JAX processes on one machine (127.0.0.1), one mesh of 8 CPU devices: 2 processes x 4 devices against
1 process x 8 devices, checkpoints across process counts, SIGTERM, SIGKILL, and bad set-ups.

A chain of runs on one workdir, each checked as it ends, then compared with an uninterrupted 1-process run, whose
step-4 checkpoint starts the chain:
  2 processes resume it, SIGTERM to both   -> both exit 4 after the same step, one checkpoint (1 -> 2 processes),
                                              though process 0 is signalled a step after process 1
  2 processes resume, SIGKILL process 1    -> process 0 exits non-zero within KILL_BOUND_S
  1 process resumes and finishes           -> (2 -> 1) every loss equals the 1-process run's within 1e-5
Process 1 runs with tests/scripts/guard on its path: opening a run file for writing ends it (exit 97).
"""
import json
import os
import socket
import shutil
import signal
import subprocess
import sys
import time

import portpicker
import pytest

from test_cli import ENV, ROOT

pytestmark = pytest.mark.integration  # several processes

GUARD = os.path.join(ROOT, "tests", "scripts", "guard")
HEARTBEAT_S = 8
KILL_BOUND_S = 60  # heartbeat timeout, then the runtime's error polling, on 2 shared cores
STEPS = 24
ARGS = ["--config=configs/tiny.py", "--config.data.name=files", "--config.train.batch_size=8",
        f"--config.train.steps={STEPS}", "--config.train.warmup_steps=1", "--config.train.ckpt_every=4",
        "--config.train.eval_every=8", "--config.train.diag_every=0", "--config.ckpt.keep=10"]


class Job:
  """train.py as `nproc` processes with 8 // nproc CPU devices each; output to files (pipes could fill and block).
  `env` applies to every process, `each[pid]` to one."""

  def __init__(self, tmp, name, nproc, args, each=None, **env):
    port = portpicker.pick_unused_port()
    self.files, self.procs, self.name = [], [], name
    for pid in range(nproc):
      e = {**ENV, "XLA_FLAGS": f"--xla_force_host_platform_device_count={8 // nproc}",
           "RESNORM_HEARTBEAT_TIMEOUT": str(HEARTBEAT_S), "RESNORM_JOIN_TIMEOUT": "120"}
      if nproc > 1:
        e.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(nproc), JAX_PROCESS_ID=str(pid))
      if pid > 0:
        e["PYTHONPATH"] = f"{GUARD}{os.pathsep}{ROOT}"
      e.update(env, **(each or {}).get(pid, {}))
      out, err = (str(tmp / f"{name}.p{pid}.{k}") for k in ("out", "err"))
      self.files.append((out, err))
      self.procs.append(subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *args], cwd=ROOT, env=e,
                                         stdout=open(out, "w"), stderr=open(err, "w")))

  def out(self, pid):
    return open(self.files[pid][0]).read()

  def err(self, pid):
    return open(self.files[pid][1]).read()

  def wait_for_step(self, pid, step, timeout=240):
    end = time.time() + timeout
    while time.time() < end:
      if f"\nstep {step}/" in "\n" + self.out(pid):
        return
      if self.procs[pid].poll() is not None:
        break
      time.sleep(0.05)
    self.kill()
    raise AssertionError(f"{self.name}: process {pid} did not reach step {step}: {self.err(pid)[-2000:]}")

  def wait(self, timeout=240):
    try:
      return [p.wait(timeout=max(1, timeout)) for p in self.procs]
    finally:
      self.kill()

  def kill(self):
    for p in self.procs:
      if p.poll() is None:
        p.kill()
        p.wait()


def _losses(wd):
  rows = [json.loads(l) for l in open(os.path.join(wd, "metrics.jsonl"))]
  return {(r["step"], k): r[k] for r in rows for k in ("loss", "eval_loss") if k in r}


def _checkpointed(err):
  return [int(l.split("checkpointed step ")[1].split(";")[0]) for l in err.splitlines() if "checkpointed step" in l]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  """One compilation cache for the module's runs: the 1- and 2-process runs each compile their steps once."""
  return {"RESNORM_COMPILATION_CACHE": str(tmp_path_factory.mktemp("cache")),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def test_two_processes_equal_one_across_restarts(tmp_path, shards, cache):
  data = f"--config.data.paths={shards[0]}/part-*"
  ref = str(tmp_path / "ref")
  job = Job(tmp_path, "ref", 1, [*ARGS, data, f"--workdir={ref}"], **cache)
  assert job.wait() == [0], job.err(0)[-2000:]
  wd = str(tmp_path / "run")  # the reference's first 4 steps, from its 1-process checkpoint
  shutil.copytree(ref, wd)
  for step in os.listdir(os.path.join(wd, "checkpoints")):
    if int(step) > 4:
      shutil.rmtree(os.path.join(wd, "checkpoints", step))
  args = [*ARGS, data, f"--workdir={wd}"]
  guard = {"RESNORM_TEST_LEAD_WRITES_ONLY": wd, **cache}

  # 2 processes resume the 1-process checkpoint; SIGTERM to process 1, and to process 0 a step later, as signals
  # reach the hosts of a pod: one agreed step, one checkpoint, exit 4 each
  job = Job(tmp_path, "term", 2, args, **guard)
  job.wait_for_step(0, 6)
  job.procs[1].send_signal(signal.SIGTERM)
  job.wait_for_step(0, 7, timeout=60)
  job.procs[0].send_signal(signal.SIGTERM)
  assert job.wait() == [4, 4], (job.err(0)[-1500:], job.err(1)[-1500:])
  assert "resumed from checkpoint step 4" in job.out(0)
  (s0,), (s1,) = _checkpointed(job.err(0)), _checkpointed(job.err(1))
  summary = json.load(open(os.path.join(wd, "summary.json")))
  assert s0 == s1 == summary["step"] and summary["status"] == "preempted" and s0 < STEPS - 4
  assert str(s0) in os.listdir(os.path.join(wd, "checkpoints"))
  assert "Traceback" not in job.err(0) + job.err(1)

  # 2 processes resume; SIGKILL process 1 once they are past a new checkpoint
  job = Job(tmp_path, "kill", 2, args, **guard)
  ckpt = (s0 // 4 + 1) * 4
  job.wait_for_step(0, ckpt + 1)
  assert f"resumed from checkpoint step {s0}" in job.out(0)
  job.procs[1].kill()
  t0 = time.time()
  rc = job.wait(timeout=KILL_BOUND_S)[0]
  took = time.time() - t0
  print(f"process 0 exited {rc} {took:.1f}s after process 1 was killed")
  assert rc != 0 and took < KILL_BOUND_S, (rc, took)

  # 1 process resumes the 2-process checkpoint and finishes
  job = Job(tmp_path, "finish", 1, args, **cache)
  assert job.wait() == [0], job.err(0)[-1500:]
  assert f"resumed from checkpoint step {ckpt}" in job.out(0)
  got, want = _losses(wd), _losses(ref)
  assert set(got) == set(want) and len(want) == STEPS + STEPS // 8
  for k in want:
    assert abs(got[k] - want[k]) <= 1e-5 * abs(want[k]), (k, got[k], want[k])


def test_bad_setups_exit_2_in_one_line(tmp_path, shards):
  """Started together: a missing coordinator variable, a coordinator that never starts, process counts that differ,
  and a batch the process count does not divide. Each process says why in one line and exits 2, writing nothing."""
  hold = socket.socket()  # bound, never listening: no coordinator there, and no other job can take the port
  hold.bind(("127.0.0.1", 0))
  port = hold.getsockname()[1]
  lone = {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}
  cases = {  # name: (processes, extra args, env, per-process env, message)
      "no_coordinator_variable": (1, [], lone, None, "JAX_COORDINATOR_ADDRESS is not set"),
      "coordinator_never_starts": (1, [], {**lone, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
                                           "RESNORM_JOIN_TIMEOUT": "3"}, None, "did not join within"),
      "counts_differ": (2, [], {}, {1: {"JAX_NUM_PROCESSES": "3"}}, "JAX_NUM_PROCESSES differs between processes"),
      "batch_3": (2, ["--config.train.batch_size=3"], {}, None, "not divisible by the 2 processes"),
  }
  jobs = {name: Job(tmp_path, name, n, ["--config=configs/tiny.py", "--config.data.name=files",
                                        f"--config.data.paths={shards[0]}/part-*", f"--workdir={tmp_path / name}",
                                        *extra], each=each, **env)
          for name, (n, extra, env, each, _) in cases.items()}
  try:
    codes = {name: job.wait(timeout=240) for name, job in jobs.items()}
  finally:
    hold.close()
  for name, job in jobs.items():
    for pid, rc in enumerate(codes[name]):
      lines = [l for l in job.err(pid).splitlines() if l.strip()]
      assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), (name, pid, rc, lines[-20:])
      assert cases[name][-1] in lines[0], (name, lines[0])
    assert not os.path.exists(tmp_path / name)
