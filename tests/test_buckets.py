"""Workdirs in a bucket (docs/buckets.md), against a local GCS: gcp-storage-emulator in memory on a loopback port
(tests/scripts/gcs_emulator.py), started here and stopped after. Nothing reaches the network.

gcsfs and etils.epath find it through STORAGE_EMULATOR_HOST, tensorstore (Orbax's checkpoints) through
TENSORSTORE_GCS_HTTP_URL and GOOGLE_AUTH_TOKEN_FOR_TESTING. GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false keeps gcsfs from
probing the bucket's type over gRPC first (60 s against an emulator, with credentials around)."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import text_config
from resnorm.io import storage, workdir as wd
from test_cli import ENV, ROOT

BUCKET = "resnorm-test"


@pytest.fixture(scope="module")
def gcs():
  """The emulator's environment for this process and for the scripts the tests start."""
  p = subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "scripts", "gcs_emulator.py"), BUCKET],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  try:
    url = f"http://127.0.0.1:{int(p.stdout.readline())}"
    env = {"STORAGE_EMULATOR_HOST": url, "TENSORSTORE_GCS_HTTP_URL": url, "GOOGLE_AUTH_TOKEN_FOR_TESTING": "test",
           "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "RESNORM_LOCK_SETTLE_S": "0.2"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield {**ENV, **env}
  finally:
    p.terminate()
    p.wait(timeout=30)
  for k, v in old.items():
    if v is None:
      os.environ.pop(k, None)
    else:
      os.environ[k] = v


def _pieces(path):
  try:
    return storage.listdir(path + wd.PARTS)
  except FileNotFoundError:
    return []


def _lines(piece):
  return [json.loads(l)["step"] for l in storage.read_text(piece).splitlines()]


def test_logs_are_pieces_written_at_flush_and_truncated_on_resume(gcs):
  path = f"gs://{BUCKET}/logs/metrics.jsonl"
  log = wd.JsonlLog(path)
  for s in (1, 2, 3):
    log.write({"step": s, "loss": float("nan") if s == 2 else 1.0 / s})
  assert _pieces(path) == []  # nothing uploaded before a flush
  log.flush()
  log.write({"step": 4})
  log.write({"step": 5})
  log.close()
  assert _pieces(path) == ["000001.jsonl", "000002.jsonl"]
  assert [r["step"] for r in wd.read_jsonl(path)] == [1, 2, 3, 4, 5]
  assert wd.read_jsonl(path)[1]["loss"] == "nan"  # strict JSON
  one = storage.join(path + wd.PARTS, "000001.jsonl")
  before = storage.as_epath(one).stat().mtime

  log = wd.JsonlLog(path, resume_step=4)  # a resume from step 4: step 5 is dropped, the rest kept
  assert _pieces(path) == ["000001.jsonl", "000002.jsonl"] and _lines(one) == [1, 2, 3]
  assert storage.as_epath(one).stat().mtime == before  # a piece with nothing to drop is not rewritten
  log.write({"step": 5, "again": True})
  log.close()
  assert _pieces(path) == ["000001.jsonl", "000002.jsonl", "000003.jsonl"]
  assert [(r["step"], r.get("again")) for r in wd.read_jsonl(path)] == [(1, None), (2, None), (3, None), (4, None),
                                                                       (5, True)]
  wd.JsonlLog(path, resume_step=2).close()  # pieces wholly past the step go, the one across it is cut
  assert _pieces(path) == ["000001.jsonl"] and _lines(one) == [1, 2]
  wd.JsonlLog(path).close()  # a start from scratch drops every line
  assert _pieces(path) == [] and wd.read_jsonl(path) == []


def test_files_glob_and_tensorboard_in_a_bucket(gcs):
  base = f"gs://{BUCKET}/files"
  wd.write_json(f"{base}/a/summary.json", {"status": "completed", "x": float("inf")})
  wd.write_json(f"{base}/b/summary.json", {"status": "running"})
  storage.write_text(f"{base}/b/other.txt", "x")
  assert wd.read_json(f"{base}/a/summary.json", "s") == {"status": "completed", "x": "inf"}
  assert storage.glob(f"{base}/*/summary.json") == [f"{base}/a/summary.json", f"{base}/b/summary.json"]
  assert storage.glob(f"{base}/[a]") == [f"{base}/a"]
  # a "glob" that is a literal path matches that object, or nothing when it is missing
  assert storage.glob(f"{base}/a/summary.json") == [f"{base}/a/summary.json"]
  assert storage.glob(f"{base}/a/missing.json") == []
  with pytest.raises(wd.InputError, match="does not exist"):
    wd.read_json(f"{base}/c/summary.json", "summary")

  from tensorboard.backend.event_processing import event_accumulator
  tb = wd.TensorBoard(f"{base}/tb")
  tb.scalars(1, {"loss": 1.0})
  tb.publish()
  assert len(storage.listdir(f"{base}/tb")) == 1  # uploaded at publish, not at close
  tb.publish()  # nothing new: no empty event file
  for step in range(2, 13):  # past ten event files: their names must still sort in the order written
    tb.scalars(step, {"loss": 1.0 / step})
    tb.publish()
  tb.close()
  names = storage.listdir(f"{base}/tb")
  assert len(names) == 12
  # TensorBoard's own reader (no TensorFlow) reads the bucket through fsspec, as `tensorboard --logdir gs://` does
  acc = event_accumulator.EventAccumulator(f"{base}/tb", size_guidance={"scalars": 0})
  acc.Reload()
  assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(s, np.float32(1.0 / s)) for s in range(1, 13)]


# ---- end to end: train.py, eval.py on gs:// ------------------------------------------------------------------------

ARGS = ["--config.train.steps=24", "--config.train.warmup_steps=2", "--config.train.ckpt_every=4",
        "--config.train.eval_every=8", "--config.train.diag_every=0", "--config.train.log_every=1"]


def _train(workdir, env, text_corpus):
  return subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), "--config=configs/tiny.py",
                           f"--workdir={workdir}", *ARGS, "--config.data.name=text_files",
                           f"--config.data.paths={text_corpus}"],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _losses(workdir):
  """[(step, train loss, eval loss)] in log order."""
  return [(r["step"], r.get("loss"), r.get("eval_loss")) for r in wd.read_jsonl(storage.join(workdir, "metrics.jsonl"))]


@pytest.mark.integration
def test_train_preempt_resume_eval_generate_in_a_bucket(gcs, text_corpus, tmp_path):
  # one compilation cache for the five scripts: the first compiles, the others load (the test's time is compiles)
  gcs = {**gcs, "RESNORM_COMPILATION_CACHE": str(tmp_path / "jax_cache")}
  local = str(tmp_path / "local")
  _, err = (p := _train(local, gcs, text_corpus)).communicate(timeout=600)
  assert p.returncode == 0, err[-3000:]  # the uninterrupted reference, on a local disk

  run = f"gs://{BUCKET}/runs/tiny"
  p = _train(run, gcs, text_corpus)
  for line in p.stdout:
    if line.startswith("step 2/"):
      break
  p.send_signal(signal.SIGSTOP)  # the owner, alive and holding the lock, while a second launch tries
  try:
    second = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--config=configs/tiny.py",
                             f"--workdir={run}"], cwd=ROOT, env=gcs, capture_output=True, text=True, timeout=300)
  finally:
    p.send_signal(signal.SIGCONT)
  assert second.returncode == 2 and "is in use by train.py" in second.stderr, second.stderr[-2000:]
  p.send_signal(signal.SIGTERM)
  out, err = p.communicate(timeout=300)
  assert p.returncode == 4 and "SIGTERM" in err and "Traceback" not in err, err[-3000:]
  summary = wd.read_json(f"{run}/summary.json", "summary")
  assert summary["status"] == "preempted" and 2 <= summary["step"] < 24
  assert str(summary["step"]) in storage.listdir(f"{run}/checkpoints")
  assert max(s for s, _, _ in _losses(run)) == summary["step"]  # the logs were written at the preemption's checkpoint

  p = _train(run, gcs, text_corpus)
  out, err = p.communicate(timeout=600)
  assert p.returncode == 0, err[-3000:]
  assert f"resumed from checkpoint step {summary['step']}" in out
  assert _losses(run) == _losses(local)  # bit for bit, eval losses included
  assert not storage.exists(f"{run}/lock.json") and storage.listdir(f"{run}/tb")

  r = subprocess.run([sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={run}"], cwd=ROOT, env=gcs,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  result = wd.read_json(f"{run}/eval/step_24.json", "eval")
  final_eval = _losses(local)[-1][2]
  assert result["eval_loss"] == pytest.approx(final_eval, rel=1e-6)
  assert storage.read_bytes(f"{run}/eval/loss.png")[:4] == b"\x89PNG"

  r = subprocess.run([sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={run}", "--generate=def f",
                      "--max_new_tokens=5"], cwd=ROOT, env=gcs, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  samples = wd.read_jsonl(f"{run}/eval/samples_step_24.jsonl")
  assert len(samples) == 1 and samples[0]["prompt"] == "def f" and len(samples[0]["tokens"]) <= 5

  from resnorm.results.v4 import claims  # resnorm.results --root=gs://...: how it reads each run of its grid
  read = claims.Runs._read(run)
  assert read["loss"] == final_eval and [(st, full) for st, full, _ in read["evals"]] == [
      (s, e) for s, _, e in _losses(local) if e is not None]

  from resnorm.results import sweep_report  # eval.py --sweep's work, here in-process
  rows = sweep_report.report(f"gs://{BUCKET}/runs/*", f"gs://{BUCKET}/table")
  assert [(r["run"], r["status"], r["final_eval_loss"]) for r in rows] == [
      ("tiny", "completed", final_eval)]
  assert storage.read_text(f"gs://{BUCKET}/table/sweep.csv").splitlines()[1].startswith("tiny,pre_norm,2,")


@pytest.mark.integration
def test_sweep_runs_skips_and_reports_status_in_a_bucket(gcs, text_corpus, tmp_path):
  """`resnorm.sweep --root=gs://...` (what `resnorm.results --root=gs://...` runs): points train into the bucket,
  their logs and exit codes land there, `--status` reads them, and a rerun skips what finished."""
  env = {**gcs, "RESNORM_SMOKE_DATA": text_corpus, "RESNORM_COMPILATION_CACHE": str(tmp_path / "jax_cache")}
  root = f"gs://{BUCKET}/sweep"
  sweep = lambda *a: subprocess.run([sys.executable, "-m", "resnorm.sweep", "configs/sweeps/smoke.py",
                                     f"--root={root}", *a], cwd=ROOT, env=env, capture_output=True, text=True,
                                    timeout=600)
  r = sweep("--jobs=2")
  assert r.returncode == 0 and "smoke-hc: completed" in r.stdout, r.stdout + r.stderr[-3000:]
  assert wd.read_json(f"{root}/smoke-pre_norm/summary.json", "summary")["status"] == "completed"
  assert "step 4/4" in storage.read_text(f"{root}/logs/smoke-hc.log")
  r = sweep("--status")
  rows = [l.split() for l in r.stdout.splitlines() if l.startswith(("0 ", "1 "))]
  assert r.returncode == 0 and len(rows) == 2 and all(row[2] in ("completed", "stalled") and row[4] == "0"
                                                      for row in rows), r.stdout
  r = sweep()
  assert r.returncode == 0 and "2 already done, running 0" in r.stdout, r.stdout + r.stderr[-3000:]


UNREACHABLE = {
    "train": ["train.py", "--config=configs/tiny.py", "--workdir=gs://b/run"],
    "eval": ["eval.py", "--workdir=gs://b/run"],
    "generate": ["eval.py", "--workdir=gs://b/run", "--generate=def "],
    "eval_sweep": ["eval.py", "--sweep=gs://b/runs/*", "--outdir={tmp}/out"],
    "sweep": ["-m", "resnorm.sweep", "configs/sweeps/smoke.py", "--root=gs://b/runs"],
}


@pytest.mark.parametrize("cmd", [c if c in ("train", "sweep") else pytest.param(c, marks=pytest.mark.integration)
                                 for c in UNREACHABLE])
def test_an_unreachable_endpoint_is_one_line_and_quick(tmp_path, text_corpus, cmd):
  """The store's address set, nothing listening there: one line naming the endpoint, exit 2, well inside 30 s
  (gcsfs alone retries for about a minute and logs a traceback), and nothing written locally."""
  import socket
  import time
  hold = socket.socket()  # bound, never listening: connections are refused, and no other test can take the port
  hold.bind(("127.0.0.1", 0))
  url = f"http://127.0.0.1:{hold.getsockname()[1]}"
  env = {**ENV, "STORAGE_EMULATOR_HOST": url, "TENSORSTORE_GCS_HTTP_URL": url, "GOOGLE_AUTH_TOKEN_FOR_TESTING": "t",
         "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "RESNORM_SMOKE_DATA": text_corpus}
  argv = [a.format(tmp=tmp_path) for a in UNREACHABLE[cmd]]
  argv[0] = os.path.join(ROOT, argv[0]) if argv[0].endswith(".py") else argv[0]
  t0 = time.monotonic()
  try:
    r = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
  finally:
    hold.close()
  took = time.monotonic() - t0
  lines = [l for l in r.stderr.splitlines() if l.strip()]
  assert r.returncode == 2 and len(lines) == 1, (cmd, r.returncode, r.stderr[-3000:])
  assert lines[0].startswith("error: gs://b/") and f"the storage endpoint {url} cannot be reached" in lines[0]
  assert took < 30, took
  assert not (tmp_path / "out").exists()
