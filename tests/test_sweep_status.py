"""`--status` from the workdirs alone (no scheduler): one hand-made root with a point in each state, and the slurm
launcher's bad flags. In-process, no training."""
import json
import os
import subprocess
import sys

import pytest

from test_cli import ENV, ROOT

from resnorm.sweep import sweep_status

NAMES = ["done", "flat", "nan", "stopped", "bad", "live", "new"]


def _root(tmp_path):
  """done: completed and learned; flat: completed, did not; nan: diverged; stopped: exit 4; bad: exit 2, no
  summary; live: summary says running, nothing else known; new: nothing."""
  root = tmp_path / "runs"
  summaries = {"done": {"status": "completed"},  # a summary from before the unigram verdict: completed, not stalled
               "flat": {"status": "completed", "learned_beyond_unigram": False},
               "nan": {"status": "diverged"}, "stopped": {"status": "preempted"}, "live": {"status": "running"}}
  for name, s in summaries.items():
    os.makedirs(root / name)
    (root / name / "summary.json").write_text(json.dumps(s))
  os.makedirs(root / "logs")
  for name, rc in (("done", 0), ("flat", 0), ("nan", 3), ("stopped", 4), ("bad", 2)):
    sweep_status.write_exit(str(root), name, rc)
    (root / "logs" / f"{name}.log").write_text("...\n")
  return root


def test_every_state_from_the_workdirs(tmp_path):
  root = _root(tmp_path)
  rows, text = sweep_status.table([{"name": n} for n in NAMES], str(root))
  assert [(r["point"], r["state"], r["exit"]) for r in rows] == [
      ("done", "completed", "0"), ("flat", "stalled", "0"), ("nan", "diverged", "3"), ("stopped", "preempted", "4"),
      ("bad", "failed", "2"), ("live", "running", "-"), ("new", "pending", "-")]
  bad_line = next(l for l in text.splitlines() if l.startswith("4 "))
  assert bad_line.split()[-1] == str(root / "logs" / "bad.log")  # a failed point names its log; others do not
  assert all(l.split()[-1] == "-" for l in text.splitlines()[1:-1] if not l.startswith("4 "))
  assert text.splitlines()[-1].startswith("7 points: 1 completed, 1 stalled, 1 diverged, 1 preempted, 1 failed")


def test_running_without_exit_is_failed_once_a_scheduler_knows_it_ended(tmp_path):
  root = _root(tmp_path)
  row = sweep_status.point_state(str(root), "live", {}, {"live": ("TIMEOUT", "0:15")})
  assert row["state"] == "failed" and row["exit"] == "TIMEOUT 0:15"
  row = sweep_status.point_state(str(root), "live", {"live": ("PENDING", "7_5")}, {})
  assert (row["state"], row["job"]) == ("pending", "7_5")


@pytest.mark.parametrize("flag, words", [
    ("--slurm.nodes=0", "--slurm.nodes=0"), pytest.param("--slurm.concurrency=-1", "--slurm.concurrency", marks=pytest.mark.integration),
    pytest.param("--slurm.signal_s=0", "--slurm.signal_s=0 must be >= 1", marks=pytest.mark.integration),
    ("--slurm.extra='--qos", "--slurm.extra")])
def test_bad_slurm_flags_are_one_line_and_exit_2(tmp_path, flag, words):
  r = subprocess.run([sys.executable, "-m", "resnorm.sweep", "configs/sweeps/smoke.py", f"--root={tmp_path}",
                      "--launcher=slurm", "--dry_run", flag], cwd=ROOT, env=ENV, capture_output=True, text=True,
                     timeout=120)
  assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
