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
from resnorm.io import lock
from resnorm.train import trainer
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


@pytest.mark.integration
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


@pytest.mark.integration
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


@pytest.mark.integration
def test_truncated_checkpoint_falls_back_one_saying_so_in_one_clean_line(tmp_path, text_corpus):
  """The array data of the newest checkpoint truncated (a writer killed mid-save): the resume falls back to the one
  before, and its stderr is exactly one warning line naming the cause. The reads in flight when the first one failed
  used to follow it with Orbax's 'Event loop is closed' / 'Exception ignored in: <coroutine ...>' tracebacks
  (sys.unraisablehook, which pytest captures in-process: hence a train.py process here), and the warning ended in a
  cut-off '<bound method pybind11_...' repr."""
  cfg = text_config(text_corpus)
  wd = str(tmp_path / "t")
  assert trainer.train(cfg, wd) == 0
  truncated = 0
  for root, _, files in os.walk(os.path.join(wd, "checkpoints", "6", "state")):
    for f in files:
      path = os.path.join(root, f)
      if os.path.basename(root) == "d" and os.path.getsize(path) > 64:  # array data, not metadata
        with open(path, "r+b") as fh:
          fh.truncate(16)
        truncated += 1
  assert truncated >= 2
  r = subprocess.run([sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={wd}", "--step=6"], cwd=ROOT,
                     env=ENV, capture_output=True, text=True, timeout=600)  # eval names it, and sets nothing aside
  assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr[-3000:]
  assert r.stderr.startswith(f"error: checkpoint step 6 of {wd} cannot be restored (ValueError: OUT_OF_RANGE: ")
  assert not os.path.exists(os.path.join(wd, "checkpoints.corrupt"))
  r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--config=configs/tiny.py", f"--workdir={wd}",
                      "--config.data.name=text_files", f"--config.data.paths={text_corpus}",
                      "--config.train.steps=9"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  lines = r.stderr.splitlines()
  assert len(lines) == 1, r.stderr[-3000:]
  # the cause is capped at 500 characters ("..."): with a long tmp path (an xdist worker's) its tail is cut
  assert re.fullmatch(r"warning: checkpoint step 6 cannot be restored \(ValueError: OUT_OF_RANGE: .*(is not valid "
                      r"for value of size 16|\.\.\.)\); falling back to the previous one", lines[0]), lines[0]
  assert "resumed from checkpoint step 3" in r.stdout
  assert sorted(int(s) for s in os.listdir(os.path.join(wd, "checkpoints")) if s.isdigit())[-1] == 9
  assert os.path.isdir(os.path.join(wd, "checkpoints.corrupt", "6"))  # kept aside, not deleted


def test_eval_names_a_step_it_cannot_restore_in_one_line(monkeypatch):
  from resnorm.core.errors import InputError
  from resnorm.evaluation import evaluate

  class Live:  # the run's checkpoints, as eval lists them
    reload = lambda self: None
    steps = lambda self: [3, 6]

  def unreadable(*args):
    raise ValueError("OUT_OF_RANGE: Requested byte range [0, 4844) is not valid for value of size 16")
  monkeypatch.setattr(evaluate, "_restore", unreadable)
  with pytest.raises(InputError, match=re.escape("checkpoint step 6 of wd cannot be restored (ValueError: "
                                                 "OUT_OF_RANGE: Requested byte range [0, 4844) is not valid for value "
                                                 "of size 16); available: 3, 6")):
    evaluate._restore_live(Live(), "wd", 6, "step")  # noqa: SLF001


@pytest.mark.parametrize("step, mode", [(None, "the newest"), (3, "--step=3")])
def test_eval_of_a_workdir_emptied_while_loading_says_available_none(tmp_path, monkeypatch, step, mode):
  """A checkpoint fails to restore and, when eval re-lists the workdir, no checkpoint is left: one line naming the
  step, the cause and "available: none", for the newest checkpoint and for --step=N alike; the --step form does not
  claim its step was removed while loading it (there is nothing left to load instead); nothing is written."""
  from resnorm.core.errors import InputError
  from resnorm.evaluation import evaluate

  class Emptied:  # lists the run's steps until eval re-reads the directory
    listed = [3, 6]
    reload = lambda self: setattr(self, "listed", [])
    steps = lambda self: list(self.listed)

  def unreadable(*args):
    raise FileNotFoundError("[Errno 2] No such file or directory: '_CHECKPOINT_METADATA'\n(and a second line)")
  monkeypatch.setattr(evaluate, "_checkpoints", lambda wd, k: (Emptied(), [3, 6], 6 if k is None else k))
  monkeypatch.setattr(evaluate, "_restore", unreadable)
  k = 6 if step is None else step
  with pytest.raises(InputError) as e:
    evaluate.eval_workdir(str(tmp_path), step)
  assert str(e.value) == (f"checkpoint step {k} of {tmp_path} cannot be restored (FileNotFoundError: [Errno 2] No "
                          "such file or directory: '_CHECKPOINT_METADATA'); available: none"), mode
  assert not list(tmp_path.iterdir())


def _truncated_checkpoint(directory):
  """A Checkpointer holding step 1 of a small state whose array data is then truncated; (it, abstract state)."""
  import jax
  import jax.numpy as jnp
  from resnorm.io import ckpt
  state = {"a": jnp.arange(4096.0), "b": jnp.ones((64, 64)), "c": jnp.zeros(3000)}
  writer = ckpt.Checkpointer(directory)
  writer.save(1, state, None, {})
  writer.close()
  for root, _, files in os.walk(directory):
    for f in files:
      if os.path.basename(root) == "d" and os.path.getsize(os.path.join(root, f)) > 64:
        os.truncate(os.path.join(root, f), 16)
  sh = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  return (ckpt.Checkpointer(directory, read_only=True),
          jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh), state))


def test_a_failed_restore_silences_only_its_stragglers(monkeypatch, tmp_path):
  """The reports a failed read leaves (ckpt._is_aborted_read; asyncio's 'Task exception was never retrieved' for an
  Orbax task) are dropped once a Checkpointer exists; any other still reaches the hook, or the log, as before."""
  import logging
  from types import SimpleNamespace
  from orbax.checkpoint._src.serialization import serialization
  seen = []
  monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u))

  async def elsewhere():
    pass
  orbax_coro = serialization._read_array_index_and_device_put(  # created, never run
      [], (), None, global_shape=(), new_shard_shape=(), dtype=None, byte_limiter=None, strict=True, dll=None,
      memory_kind=None)
  other_coro = elsewhere()

  def report(exc, obj=None):
    sys.unraisablehook(SimpleNamespace(exc_type=type(exc), exc_value=exc, exc_traceback=None, err_msg=None,
                                       object=obj))
  reports = [(RuntimeError("Event loop is closed"), None), (Exception("Encountered error"), orbax_coro),
             (RuntimeError("Event loop is closed"), other_coro), (RuntimeError("other"), None),
             (ValueError("x"), other_coro)]
  for exc, obj in reports:
    report(exc, obj)
  assert len(seen) == 5  # nothing is dropped before a restore
  reader, abstract = _truncated_checkpoint(str(tmp_path / "ckpt"))
  with pytest.raises(Exception):
    reader.restore(1, abstract)
  seen.clear()  # whatever the real failure left and the filter let through (other kinds) is not this test's
  for exc, obj in reports:
    report(exc, obj)
  assert [(str(u.exc_value), u.object) for u in seen] == [("Event loop is closed", other_coro), ("other", None),
                                                          ("x", other_coro)]
  logged = []

  class Keep(logging.Handler):
    def emit(self, record):
      logged.append(record.getMessage().splitlines()[0])
  asyncio_logger, keep = logging.getLogger("asyncio"), Keep()
  asyncio_logger.addHandler(keep)
  try:
    asyncio_logger.error("Task exception was never retrieved\nfuture: <Task finished coro=<async_deserialize() done, "
                         f"defined at {serialization.__file__}:394> exception=ValueError('x')>")
    asyncio_logger.error("Task exception was never retrieved\nfuture: <Task finished coro=<mine() done, defined at "
                         "/home/me/x.py:1>>")
    for where in (serialization.__file__, "/home/me/x.py"):  # a gather's exception, raised in Orbax's code or not
      try:
        exec(compile("raise ValueError('OUT_OF_RANGE')", where, "exec"))
      except ValueError:
        asyncio_logger.error("_GatheringFuture exception was never retrieved\nfuture: <_GatheringFuture finished>",
                             exc_info=True)
  finally:
    asyncio_logger.removeHandler(keep)
  # kept: the task that is not Orbax's, the gather whose exception did not come through Orbax
  assert logged == ["Task exception was never retrieved", "_GatheringFuture exception was never retrieved"]
  orbax_coro.close()
  other_coro.close()


def test_the_warning_names_the_innermost_cause():
  from resnorm.io import ckpt
  spec = "\n".join(["TensorStore({", "  'driver': 'zarr',", "})"])
  try:
    try:
      raise ValueError('OUT_OF_RANGE: Error reading "params.head/0.0" in OCDBT database at local file "/r/6/state/": '
                       'Requested byte range [0, 4844) is not valid for value of size 16 [tensorstore_spec[1]=\'{"a"}\']')
    except ValueError as inner:
      raise Exception("Encountered error while reading array index: (slice(0, 2, 1),). See full TensorStore details: "
                      f"<bound method pybind11_detail_function_record_v1.spec of {spec}>.") from inner
  except Exception as e:  # noqa: BLE001
    assert ckpt.reason(e) == ('ValueError: OUT_OF_RANGE: Error reading "params.head/0.0" in OCDBT database at local '
                               'file "/r/6/state/": Requested byte range [0, 4844) is not valid for value of size 16')
  assert ckpt.reason(ValueError("x" * 30 + " " + "y" * 600)) == "ValueError: " + "x" * 30 + " ..."
  assert ckpt.reason(KeyError()) == "KeyError"


BAD_WORKDIR = [
    ("not_a_dir", "is not writable"),
    ("corrupt_config", "is not valid JSON"),
]


@pytest.mark.parametrize("case,msg", BAD_WORKDIR)
def test_bad_workdir(tmp_path, text_corpus, case, msg):
  from resnorm.core.errors import InputError
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


# make test keeps the refusals made after the config validates (data, mesh, batch); the config's own value checks,
# each also refused in process by test_configlib, run as train.py in make test-integration
MORE_BAD = [pytest.param(*case, marks=pytest.mark.integration) for case in (
    (["--config.model.hc.n=0", "--config.model.residual=hc"], "model.hc.n=0"),
    (["--config.data.seq_len=1"], "data.seq_len=1"),
    (["--config.model.num_layers=0"], "model.num_layers=0"),
    (["--config.train.schedule=step"], "train.schedule='step'"),
    (["--config.model.init=kaiming"], "model.init='kaiming'"),
    (["--config.model.remat=some"], "model.remat='some'"))] + [
    (["--config.data.name=text_files", "--config.data.paths={empty}"], "is empty"),
    (["--config.data.data_dir=/etc/passwd"], "data.data_dir"),
    (["--config.mesh.data=3"], "mesh"),
    (["--config.train.grad_accum=3"], "train.grad_accum=3 must be >= 1 and divide train.batch_size=4"),
]


@pytest.mark.parametrize("args,msg", MORE_BAD, ids=[(p.values if hasattr(p, "values") else p)[1] for p in MORE_BAD])
def test_more_bad_inputs(tmp_path, args, msg):
  empty = tmp_path / "empty.txt"
  empty.write_text("")
  args = [a.replace("{empty}", str(empty)) for a in args]
  r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), "--config=configs/tiny.py",
                      f"--workdir={tmp_path / 'wd'}", *args], cwd=ROOT, env=ENV, capture_output=True, text=True,
                     timeout=120)
  assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr[-1500:]
  assert not (tmp_path / "wd").exists()


def test_opening_a_checkpoint_read_only_logs_nothing(tmp_path, caplog):
  """Orbax logs 'Given directory is read only=DIR' (absl WARNING) when a manager is opened read-only, as eval,
  --generate and train.init_from do: resnorm's reader drops that one message, only while it opens the manager."""
  import logging
  import orbax.checkpoint as ocp
  from absl import logging as absl_logging
  from resnorm.io import ckpt
  notice = "Given directory is read only"
  reader, _ = _truncated_checkpoint(str(tmp_path / "ckpt"))  # opened read-only (its data does not matter here)
  absl = logging.getLogger("absl")
  filters = list(absl.filters)
  with caplog.at_level(logging.WARNING):
    ckpt.Checkpointer(str(tmp_path / "ckpt"), read_only=True)
    assert not [r for r in caplog.records if notice in r.getMessage()]
    assert absl.filters == filters  # scoped: nothing left on the logger
    # the same message from Orbax's own manager, and an absl warning after the reader is open, are kept
    ocp.CheckpointManager(str(tmp_path / "ckpt"), options=ocp.CheckpointManagerOptions(read_only=True))
    absl_logging.warning("something else is wrong=%s", 1)
  assert [r.getMessage() for r in caplog.records if notice in r.getMessage() or "else" in r.getMessage()] == [
      f"{notice}={tmp_path / 'ckpt'}", "something else is wrong=1"]
  reader.close()
