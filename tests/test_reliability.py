"""Preemption (SIGTERM), kill -9 at any moment, truncated checkpoints, and bad inputs that must not touch data."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import text_config
from resnorm import lock, trainer
from test_cli import ENV, ROOT, TINY

LONG = [a for a in TINY if "train.steps" not in a and "ckpt_every" not in a] + [
    "--config.train.steps=60", "--config.train.ckpt_every=5", "--config.train.eval_every=30",
    "--config.train.diag_every=0"]


def _start(wd, text_corpus):
  return subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), "--config=configs/tiny.py",
                           f"--workdir={wd}", *LONG, "--config.data.name=text_files",
                           f"--config.data.paths={text_corpus}"],
                          cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_step(proc, step):
  for line in proc.stdout:
    if line.startswith(f"step {step}/"):
      return
  raise AssertionError(f"process ended before step {step}: {proc.stderr.read()[-2000:]}")


def _losses(wd):
  return {r["step"]: r["loss"] for r in map(json.loads, open(os.path.join(wd, "metrics.jsonl"))) if "loss" in r}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, text_corpus):
  wd = str(tmp_path_factory.mktemp("full") / "run")
  p = _start(wd, text_corpus)
  out, err = p.communicate(timeout=600)
  assert p.returncode == 0, err[-2000:]
  return wd


def test_sigterm_checkpoints_and_resume_continues(tmp_path, text_corpus, uninterrupted):
  wd = str(tmp_path / "run")
  p = _start(wd, text_corpus)
  _wait_for_step(p, 12)
  t0 = time.time()
  p.send_signal(signal.SIGTERM)
  _, err = p.communicate(timeout=120)
  assert p.returncode == 4 and "SIGTERM" in err and "Traceback" not in err
  assert time.time() - t0 < 30
  summary = json.load(open(os.path.join(wd, "summary.json")))
  assert summary["status"] == "preempted" and summary["step"] >= 12
  assert str(summary["step"]) in os.listdir(os.path.join(wd, "checkpoints"))
  p = _start(wd, text_corpus)
  _, err = p.communicate(timeout=600)
  assert p.returncode == 0, err[-2000:]
  assert _losses(wd) == _losses(uninterrupted)


def test_kill_9_then_resume_equals_uninterrupted(tmp_path, text_corpus, uninterrupted):
  wd = str(tmp_path / "run")
  p = _start(wd, text_corpus)
  _wait_for_step(p, 17)
  p.kill()
  p.wait()
  assert json.load(open(os.path.join(wd, lock.LOCK_NAME)))["pid"] == p.pid  # the dead owner's lock is left
  leftover = os.path.join(wd, "checkpoints", "7.orbax-checkpoint-tmp-1234")  # a save a killed writer left
  os.makedirs(os.path.join(leftover, "state"))
  dead, p = p.pid, _start(wd, text_corpus)
  out, err = p.communicate(timeout=600)
  assert p.returncode == 0, err[-2000:]
  assert f"took over the lock of {wd} from host {socket.gethostname()} pid {dead}" in err, err[-2000:]
  assert "no longer runs on this host" in err
  assert "unfinished checkpoint save" in err and os.path.basename(leftover) in err
  assert not os.path.exists(leftover) and not os.path.exists(os.path.join(wd, lock.LOCK_NAME))
  resumed = int(re.search(r"resumed from checkpoint step (\d+)", out).group(1))
  assert 5 <= resumed < 60 and re.search(r"^step (\d+)/", out, re.M).group(1) == str(resumed + 1)  # not scratch
  lines = [json.loads(l) for l in open(os.path.join(wd, "metrics.jsonl"))]
  steps = [r["step"] for r in lines if "loss" in r]
  assert steps == sorted(set(steps))
  assert _losses(wd) == _losses(uninterrupted)
  from test_trainer import _final_params, _leaves
  cfg = text_config(text_corpus)
  cfg.train.steps = 60
  for a, b in zip(_leaves(_final_params(cfg, wd, 60)), _leaves(_final_params(cfg, uninterrupted, 60))):
    np.testing.assert_array_equal(a, b)


def test_truncated_checkpoint_falls_back_one(tmp_path, text_corpus, capfd):
  cfg = text_config(text_corpus)
  wd = str(tmp_path / "t")
  assert trainer.train(cfg, wd) == 0
  ckpt6 = os.path.join(wd, "checkpoints", "6", "state")
  for root, _, files in os.walk(ckpt6):
    for f in files:
      path = os.path.join(root, f)
      if os.path.getsize(path) > 64:
        with open(path, "r+b") as fh:
          fh.truncate(16)
  cfg.train.steps = 9
  assert trainer.train(cfg, wd) == 0
  err = capfd.readouterr().err
  assert "checkpoint step 6 cannot be restored" in err and "falling back" in err
  assert sorted(int(s) for s in os.listdir(os.path.join(wd, "checkpoints")) if s.isdigit())[-1] == 9
  assert os.path.isdir(os.path.join(wd, "checkpoints.corrupt", "6"))  # kept aside, not deleted


BAD_WORKDIR = [
    ("not_a_dir", "is not writable"),
    ("corrupt_config", "is not valid JSON"),
]


@pytest.mark.parametrize("case,msg", BAD_WORKDIR)
def test_bad_workdir(tmp_path, text_corpus, case, msg):
  from resnorm.errors import InputError
  if case == "not_a_dir":
    (tmp_path / "file").write_text("x")
    wd = str(tmp_path / "file" / "run")
  else:
    wd = str(tmp_path / "run")
    os.makedirs(wd)
    (tmp_path / "run" / "config.json").write_text("{not json")
  before = sorted(os.listdir(tmp_path))
  with pytest.raises(InputError, match=msg):
    trainer.train(text_config(text_corpus), wd)
  assert sorted(os.listdir(tmp_path)) == before


MORE_BAD = [
    (["--config.model.hc.n=0", "--config.model.residual=hc"], "model.hc.n=0"),
    (["--config.data.seq_len=1"], "data.seq_len=1"),
    (["--config.model.num_layers=0"], "model.num_layers=0"),
    (["--config.train.schedule=step"], "train.schedule='step'"),
    (["--config.model.init=kaiming"], "model.init='kaiming'"),
    (["--config.model.remat=some"], "model.remat='some'"),
    (["--config.data.name=text_files", "--config.data.paths={empty}"], "is empty"),
    (["--config.data.data_dir=/etc/passwd"], "data.data_dir"),
    (["--config.mesh.data=3"], "mesh"),
    (["--config.train.grad_accum=3"], "train.grad_accum=3 must be >= 1 and divide train.batch_size=4"),
]


@pytest.mark.parametrize("args,msg", MORE_BAD, ids=[m for _, m in MORE_BAD])
def test_more_bad_inputs(tmp_path, args, msg):
  empty = tmp_path / "empty.txt"
  empty.write_text("")
  args = [a.replace("{empty}", str(empty)) for a in args]
  r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--config=configs/tiny.py",
                      f"--workdir={tmp_path / 'wd'}", *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                     timeout=120)
  assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr[-1500:]
  assert not (tmp_path / "wd").exists()
