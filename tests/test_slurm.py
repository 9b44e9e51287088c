"""`--launcher=slurm` against a real SLURM (tests/slurm_cluster.py: munged, slurmctld and slurmd on this machine).

One 3-point sweep of tiny runs through sbatch, while the test:
  reruns it at once                      -> nothing submitted (every point queued or running, from squeue)
  sends point a's batch shell SIGTERM    -> train.py checkpoints, exits 4, the task requeues itself and resumes:
                                            a's losses equal b's (the same run, never interrupted) at every step
  reruns it when all are done            -> nothing submitted
then a point with bad input               -> exit 2, failed in --status with its log, never requeued;
then `resnorm.results --scale=tpu --launcher=slurm` at a reduced :tpu shape (grid.TEST_TPU: 6 tiny runs of the :tpu
configs) -> a report from what had finished, the rest listed; once the array ends, the same command submits nothing
and reads every run.
Prints the sweep's wall time and the requeue delay (exit 4 -> the restart's first line).
"""
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

import slurm_cluster
from test_cli import ENV, ROOT
from resnorm.results.engine import paths

# Long enough that point a is still training when the SIGTERM sent at its step 10 arrives: with the compilation
# cache a tiny step takes ~8 ms, and at 80 steps the run once finished before the signal (2026-12-04).
STEPS = 600
RUN = {"train.steps": STEPS, "train.warmup_steps": 1, "train.eval_every": 200, "train.ckpt_every": 40,
       "train.diag_every": 0, "data.name": "text_files"}
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(slurm_cluster.missing() is not None,
                                 reason=f"no SLURM here: {slurm_cluster.missing()}")]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
  c = slurm_cluster.Cluster(str(tmp_path_factory.mktemp("slurm")))
  try:
    c.start()
    yield c
  finally:
    c.stop()


def sweep(cluster, file, root, *args):
  return subprocess.run([sys.executable, "-m", "resnorm.sweep", str(file), f"--root={root}", "--launcher=slurm",
                         "--slurm.cpus_per_task=1", *args], cwd=ROOT, env={**ENV, **cluster_env(cluster)},
                        capture_output=True, text=True, timeout=120)


def cluster_env(cluster):
  return {"SLURM_CONF": cluster.conf}


def _stamps(log: str, pattern: str) -> list[datetime.datetime]:
  return [datetime.datetime.fromisoformat(m.replace("Z", "+00:00"))
          for m in re.findall(r"^== (\S+) task \S+" + pattern, log, re.M)]


def _wait(cond, timeout, what, cluster):
  end = time.time() + timeout
  while time.time() < end:
    if cond():
      return
    time.sleep(0.2)
  raise AssertionError(f"{what} within {timeout}s\n{cluster.run('squeue').stdout}\n{cluster.logs()}")


@pytest.fixture(scope="module")
def swept(cluster, tmp_path_factory, text_corpus):
  tmp = tmp_path_factory.mktemp("sweep")
  file, root = tmp / "three.py", tmp / "runs"
  run = {**RUN, "data.paths": text_corpus}
  file.write_text(f"RUN = {run!r}\n\ndef sweep(add):\n"
                  "  add(config='configs/tiny.py', name='a', **RUN)\n"
                  "  add(config='configs/tiny.py', name='b', **RUN)\n"
                  "  add(config='configs/tiny.py:hc', name='c', **{**RUN, 'train.lr': 1e-5})\n")  # stalls
  t0 = time.time()
  first = sweep(cluster, file, root)
  assert first.returncode == 0, first.stderr
  again = sweep(cluster, file, root)  # everything is queued or running
  log_a = root / "logs" / "a.log"
  _wait(lambda: log_a.exists() and f"\nstep 10/{STEPS}" in log_a.read_text(), 300, "point a at step 10", cluster)
  job = (root / "logs" / "a.job").read_text().strip()
  signalled = cluster.run("scancel", "--signal=TERM", "--batch", job)
  assert signalled.returncode == 0, signalled.stderr

  def done():  # a preempted point that is not requeued ends here too (and fails its test)
    st = sweep(cluster, file, root, "--status").stdout
    return (not re.search(r"\b(pending|running)\b", st.split("\n", 1)[1])
            and not cluster.run("squeue", "-h").stdout.strip())
  _wait(done, 600, "every point finished", cluster)
  wall = time.time() - t0
  return {"file": file, "root": root, "first": first, "again": again, "wall": wall, "job": job, "tmp": tmp,
          "run": run}


def test_sweep_on_slurm(cluster, swept, text_corpus):
  """One test, so that pytest-xdist never starts a second cluster for the same sweep."""
  check_every_point_runs_and_rerun_submits_nothing(cluster, swept)
  check_signalled_task_is_requeued_and_resumes_exactly(swept)
  check_bad_input_fails_and_is_not_requeued(cluster, swept)
  check_report_at_tpu_shape(cluster, swept["tmp"], text_corpus)


def check_every_point_runs_and_rerun_submits_nothing(cluster, swept):
  root = swept["root"]
  assert "submitting 3" in swept["first"].stdout and "submitted array job" in swept["first"].stdout
  assert "submitting 0" in swept["again"].stdout and "3 queued or running" in swept["again"].stdout
  script = (root / "sweep.sbatch").read_text()
  assert "#SBATCH --signal=B:TERM@120" in script and "#SBATCH --requeue" in script
  points = json.loads((root / "points.json").read_text())["points"]
  assert [p["name"] for p in points] == ["a", "b", "c"] and "--workdir=" + str(root / "c") in points[2]["command"]
  for name in "abc":
    summary = json.loads((root / name / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["step"] == STEPS, name
  status = sweep(cluster, swept["file"], root, "--status").stdout
  assert re.search(r"^2\s+c\s+stalled\s+\d+_2\s+0\s", status, re.M), status
  rerun = sweep(cluster, swept["file"], root)
  assert rerun.returncode == 0 and "3 already done" in rerun.stdout and "submitting 0" in rerun.stdout
  assert cluster.run("squeue", "-h").stdout.strip() == ""
  print(f"\n3-point SLURM sweep: {swept['wall']:.1f} s from sbatch to the last point done (2 CPUs)")


def check_signalled_task_is_requeued_and_resumes_exactly(swept):
  root = swept["root"]
  log = (root / "logs" / "a.log").read_text()
  assert log.count(": exit 4") == 1 and log.count(": exit 0") == 1, log[-3000:]
  restarts = _stamps(log, r" \(restart 1\)")
  assert len(restarts) == 1
  resumed = re.findall(r"resumed from checkpoint step (\d+)", log)
  assert len(resumed) == 1 and 10 <= int(resumed[0]) < STEPS
  losses = {n: [(m["step"], m.get("loss"), m.get("grad_norm"), m.get("eval_loss"))
                for m in map(json.loads, open(root / n / "metrics.jsonl"))] for n in "ab"}
  assert len(losses["a"]) >= STEPS and losses["a"] == losses["b"]
  assert (json.loads((root / "a" / "summary.json").read_text())["final_eval_loss"]
          == json.loads((root / "b" / "summary.json").read_text())["final_eval_loss"])
  delay = (restarts[0] - _stamps(log, r": exit 4")[0]).total_seconds()
  print(f"\nrequeue delay: {delay:.0f} s from exit 4 to the restart's first line (cred_expire=5)")


def check_bad_input_fails_and_is_not_requeued(cluster, swept):
  file, root = swept["tmp"] / "bad.py", swept["root"]
  # a value train.py would refuse is refused here, before anything is submitted (resnorm.sweep.preflight)
  typo = swept["tmp"] / "typo.py"
  typo.write_text("def sweep(add):\n  add(config='configs/tiny.py', name='typo', **{'model.residual': 'nope'})\n")
  r = sweep(cluster, typo, root)
  assert r.returncode == 2 and "error: point 'typo': model.residual='nope' is unknown" in r.stderr, r.stderr
  assert cluster.run("squeue", "-h").stdout.strip() == "" and not (root / "logs" / "typo.log").exists()
  # what only the run can judge (its workdir holds another model's config): exit 2 in the task, not requeued
  (root / "bad").mkdir()
  shutil.copy(root / "a" / "config.json", root / "bad" / "config.json")
  file.write_text(f"RUN = {swept['run']!r}\n\ndef sweep(add):\n  add(config='configs/tiny.py:hc', name='bad', **RUN)\n")
  assert sweep(cluster, file, root).returncode == 0
  _wait(lambda: (root / "logs" / "bad.exit").exists(), 300, "the bad point ended", cluster)
  _wait(lambda: cluster.run("squeue", "-h").stdout.strip() == "", 60, "the bad task left the queue", cluster)
  log = (root / "logs" / "bad.log").read_text()
  assert "error: " in log and "model.residual" in log and "Traceback" not in log
  assert log.count("(restart") == 1 and "(restart 1)" not in log
  status = sweep(cluster, file, root, "--status").stdout
  row = r"^0\s+bad\s+failed\s+\d+_0\s+2\s+" + re.escape(str(root / "logs" / "bad.log"))
  assert re.search(row, status, re.M), status
  assert not (root / "bad" / "summary.json").exists()


def check_report_at_tpu_shape(cluster, tmp, text_corpus):
  root, out = tmp / "tpu_runs", tmp / "tpu_report"
  cmd = [sys.executable, "-m", "resnorm.results", "--scale=tpu", "--launcher=slurm", f"--root={root}",
         f"--out={out}", f"--data_paths={text_corpus}", "--slurm.cpus_per_task=1", "--target=v5e-1"]

  def results():
    return subprocess.run(cmd, cwd=ROOT, env={**ENV, **cluster_env(cluster), paths.SIZE_ENV: "test"},
                          capture_output=True, text=True, timeout=300)
  t0 = time.time()
  first = results()
  assert first.returncode == 0 and "submitting 6" in first.stdout, first.stdout + first.stderr[-2000:]
  # the budget, with each model's memory plan on the target, before anything was submitted
  assert first.stdout.index("| all | 6 |") < first.stdout.index("submitting 6"), first.stdout
  points = json.loads((root / "points.json").read_text())["points"]
  assert len(points) == 6
  assert all(p["config"] == "configs/base.py:tpu" and "/configs/base.py:tpu" in str(p["command"]) for p in points)
  done = int(re.search(r"from (\d+) of 6 runs", first.stdout)[1])
  report = (out / "results.md").read_text()
  assert report.startswith("# Results at TPU scale") and "| claim | source | web |" in report
  if done < 6:  # the runs take longer than the report, so this is the usual case
    listed = re.search(r"\*\*Unfinished: (\d+) of 6 runs\*\*.*", report)
    assert listed and int(listed[1]) == 6 - done and listed[0].count("-web-s") == 6 - done, report[:3000]
  _wait(lambda: cluster.run("squeue", "-h").stdout.strip() == "", 600, "the report's grid ended", cluster)
  wall = time.time() - t0
  second = results()
  assert second.returncode == 0 and "submitting 0" in second.stdout and "from 6 of 6 runs" in second.stdout, \
      second.stdout + second.stderr[-2000:]
  report = (out / "results.md").read_text()
  assert "Unfinished" not in report and "d 32, 2 heads, MLP 64, float32" in report
  assert re.search(r"^\| \[C8\].*\*\*(reproduced|not reproduced|opposite|undecided|out of regime)\*\*", report, re.M)
  print(f"\nresnorm.results --scale=tpu --launcher=slurm, 6 tiny :tpu runs: {wall:.0f} s to the last run done")
