"""`--launcher=tpu` on CPU: the same sweep command run by 2 processes (as on the 2 hosts of a slice), each point one
2-process JAX job (gloo), against the same sweep run by 1 process with the same 2 devices.

The sweep's middle point is already completed; process 1 is made to see it late (tests/scripts/stale_sweep.py:
its own view says the point never started). Process 0 alone decides, so both skip it, nothing deadlocks, and the
two points that ran equal the 1-process sweep's.
"""
import json
import os
import subprocess
import sys

import portpicker
import pytest

from test_cli import ENV, ROOT

pytestmark = pytest.mark.integration

RUN = {"train.steps": 4, "train.warmup_steps": 1, "train.eval_every": 2, "train.ckpt_every": 2,
       "train.diag_every": 0, "data.name": "text_files"}
STALE = os.path.join(ROOT, "tests", "scripts", "stale_sweep.py")


def _setup(tmp_path, text_corpus, name):
  file, root = tmp_path / "three.py", tmp_path / name
  file.write_text(f"RUN = {{**{RUN!r}, 'data.paths': {text_corpus!r}}}\n\ndef sweep(add):\n"
                  "  add(config='configs/tiny.py', name='p0', **RUN)\n"
                  "  add(config='configs/tiny.py', name='p1', **RUN)\n"
                  "  add(config='configs/tiny.py', name='p2', **{**RUN, 'seed': 1})\n")
  os.makedirs(root / "p1")
  (root / "p1" / "summary.json").write_text('{"status": "completed", "step": 4}\n')  # finished before this sweep
  return file, root


def _losses(root, name):
  return [(m["step"], m.get("loss"), m.get("eval_loss")) for m in map(json.loads, open(root / name / "metrics.jsonl"))]


def test_two_process_sweep_skips_by_process_0_and_equals_one_process(tmp_path, text_corpus):
  file, one = _setup(tmp_path, text_corpus, "one")
  env = {**ENV, "RESNORM_COMPILATION_CACHE": str(tmp_path / "cache"), "RESNORM_HEARTBEAT_TIMEOUT": "8",
         "RESNORM_JOIN_TIMEOUT": "120"}
  args = [str(file), "--launcher=tpu"]
  r = subprocess.run([sys.executable, "-m", "resnorm.sweep", *args, f"--root={one}"], cwd=ROOT, capture_output=True,
                     text=True, timeout=600, env={**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
  assert r.returncode == 0, r.stderr[-3000:]
  assert "3 points: 1 already done, 2 run on 1 process(es)" in r.stdout

  _, two = _setup(tmp_path, text_corpus, "two")
  jax_port, sweep_port = portpicker.pick_unused_port(), portpicker.pick_unused_port()
  procs = []
  for pid in range(2):
    e = {**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_NUM_PROCESSES": "2",
         "JAX_PROCESS_ID": str(pid), "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{jax_port}",
         "RESNORM_SWEEP_PORT": str(sweep_port), "RESNORM_TEST_STALE": "p1" if pid == 1 else ""}
    cmd = [STALE] if pid == 1 else ["-m", "resnorm.sweep"]
    procs.append(subprocess.Popen([sys.executable, *cmd, *args, f"--root={two}"], cwd=ROOT, env=e, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
  try:
    outs = [p.communicate(timeout=600)[0] for p in procs]
  finally:
    for p in procs:
      p.kill()
  assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
  assert "3 points: 1 already done, 2 run on 2 process(es)" in outs[0]
  assert "p0: completed (exit codes [0, 0])" in outs[0] and "p2: completed (exit codes [0, 0])" in outs[0]
  assert sorted(os.listdir(two / "p1")) == ["summary.json"]  # skipped by both: nothing written
  assert not (two / "logs" / "p1.p1.log").exists() and (two / "logs" / "p2.p1.log").exists()
  for name in ("p0", "p2"):
    a, b = _losses(one, name), _losses(two, name)
    assert [s for s, *_ in a] == [s for s, *_ in b] and len(a) >= 4, name
    for (_, la, ea), (_, lb, eb) in zip(a, b):
      for x, y in ((la, lb), (ea, eb)):
        assert (x is None) == (y is None) and (x is None or abs(x - y) <= 1e-5 * abs(x)), (name, a, b)
  assert _losses(two, "p0") != _losses(two, "p2")  # the points differ: each ran its own command
