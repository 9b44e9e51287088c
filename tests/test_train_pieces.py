"""The pieces the training loop calls (resnorm/train/): the cadence (which steps log, eval, run the diagnostics,
checkpoint, fetch metrics at once), the monitor's timers and its reading of a resumed run's logs, TensorBoard's
depth figures within their budget, the workdir's checks before anything is written, and publish()."""
import json
import os
import time

import ml_collections
import pytest

from conftest import text_config
from resnorm.core.errors import InputError
from resnorm.io import workdir as wd
from resnorm.train import monitor, run_files, tb_figures, trainer


def _t(**kw):
  base = {"steps": 6, "log_every": 1, "eval_every": 3, "eval_start": 0, "diag_every": 0, "ckpt_every": 3}
  return ml_collections.ConfigDict({**base, **kw})


def _steps(pred, n=6):
  return [s for s in range(1, n + 1) if pred(s)]


def test_cadence():
  c = monitor.Cadence(_t(log_every=4, eval_every=3, ckpt_every=2, diag_every=4))
  assert _steps(c.log) == [4, 6]            # and the last step always logs
  assert _steps(c.eval) == [3, 6]
  assert _steps(c.ckpt) == [2, 4, 6] and c.ckpt(3, stopping="SIGTERM")
  assert _steps(c.diag) == [4, 6]
  assert _steps(c.sync) == [2, 3, 4, 6]     # metrics fetched at once before an eval or a checkpoint
  assert c.sync(5, stopping="SIGTERM") and not c.sync(5)
  assert _steps(monitor.Cadence(_t(diag_every=0)).diag) == []
  # the report's evals: every quarter from the half on (50, 75, 100%)
  assert _steps(monitor.Cadence(_t(steps=8, eval_every=2, eval_start=4)).eval, 8) == [4, 6, 8]
  assert _steps(monitor.Cadence(_t(steps=8, eval_every=5, eval_start=6)).eval, 8) == [8]


class _Runtime:
  """What Monitor asks of a runtime: an evaluate that takes its time."""

  def __init__(self, seconds):
    self.seconds, self.calls = seconds, []

  def evaluate(self, params, batches, step_fn=None, subset_every=1, blocks=False):
    time.sleep(self.seconds)
    self.calls.append((len(batches), subset_every))
    return {"eval_loss": 3.0, "bits_per_byte": 4.3, "eval_tokens": 10, "eval_loss_se": 0.1}


def _cfg(tmp_path, **over):
  return text_config(str(tmp_path / "x.txt"), **{"train.steps": 6, **over})


def test_monitor_sums_every_evals_time(tmp_path):
  files = run_files.RunFiles(str(tmp_path), _cfg(tmp_path), lead=False)
  mon = monitor.Monitor(_Runtime(0.05), _cfg(tmp_path), [{"inputs": 0}], files, str(tmp_path))
  for step in (2, 4, 6):
    mon.eval(None, step)
  assert mon.eval_s >= 0.15 and mon.timings()["eval_s"] >= 0.15  # all of the run's evals, not the last one
  assert set(mon.timings()) == {"diag_s", "diag_compile_s", "tb_draw_s", "eval_s", "eval_compile_s"}


def test_monitor_reads_what_a_resumed_runs_logs_kept(tmp_path):
  """A resumed run keeps the diagnostics steps up to the checkpoint (TensorBoard's profiles draw them again) and
  knows its unigram baseline was logged already."""
  cfg = _cfg(tmp_path)
  for name, rows in (("metrics.jsonl", [{"step": 2, "eval_loss": 3.0, "unigram_eval_loss": 2.9},
                                        {"step": 4, "eval_loss": 2.8}]),
                     ("diagnostics.jsonl", [{"step": k, "sublayers": []} for k in (0, 2, 4, 6)])):
    with open(tmp_path / name, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in rows)
  files = run_files.RunFiles(str(tmp_path), cfg, lead=True)
  files.open(4, [])
  try:
    mon = monitor.Monitor(_Runtime(0), cfg, [{"inputs": 0}], files, str(tmp_path))
    assert [h[0] for h in mon.figures.history] == [0, 2, 4] and mon.unigram_logged
  finally:
    files.close()


def test_thin_keeps_the_first_and_the_newest():
  for n in (65, 66, 130):
    kept = tb_figures.thin(list(range(n)))
    assert kept[0] == 0 and kept[-1] == n - 1 and len(kept) == (n - 1 + 1) // 2 + 1 and kept == sorted(set(kept))
  assert tb_figures.thin(list(range(10))) == list(range(10))


def test_depth_figures_draw_within_budget_and_always_at_the_last_step(monkeypatch):
  drawn = []
  monkeypatch.setattr(tb_figures, "tb_diagnostics", lambda tb, history, title, mixing=None: drawn.append(history[-1][0]))
  figs = tb_figures.DepthFigures(object(), "t", [])
  figs.add(2, [], last=False, elapsed_s=1e6)   # budget allows: drawn
  figs.add(4, [], last=False, elapsed_s=0.0)   # no budget: not drawn
  figs.add(6, [], last=True, elapsed_s=0.0)    # the last step: drawn
  assert drawn == [2, 6]
  figs.add(8, [], last=False, elapsed_s=0.0)
  figs.draw_pending()                           # a stop before the last step draws what the budget skipped
  figs.draw_pending()
  assert drawn == [2, 6, 8]


def test_prepare_workdir_checks_before_writing(tmp_path, text_corpus):
  """A workdir whose config.json is another model's (a run killed before its first checkpoint) is refused, and one
  whose checkpoint was trained on another trajectory is refused unless allowed: before anything is written."""
  out = tmp_path / "w"
  out.mkdir()
  other = text_config(text_corpus, "hc")
  from resnorm.config import configlib
  wd.write_json(str(out / "config.json"), configlib.to_json(other))
  before = (out / "config.json").read_text()
  with pytest.raises(InputError, match="residual"):
    run_files.prepare_workdir(str(out), text_config(text_corpus, "pre_norm"))
  assert (out / "config.json").read_text() == before and sorted(os.listdir(out)) == ["config.json"]
  done = str(tmp_path / "done")
  base = {"train.steps": 2, "train.warmup_steps": 1}
  assert trainer.train(text_config(text_corpus, **base), done) == 0
  changed = text_config(text_corpus, **{**base, "train.lr": 5e-3})
  with pytest.raises(InputError, match="would change the training trajectory"):
    run_files.prepare_workdir(done, changed)
  run_files.prepare_workdir(done, changed, allow_config_change=True).close()


def test_a_resume_keeps_the_config_changes_before_the_restored_step(tmp_path):
  """config_changes.jsonl of a run resumed from step 4 once (b) and from step 6 (c): a new resume from step 4 keeps
  a (step 2), drops c (step 6 is recomputed) and b (this resume computes the change from step 4 against that
  checkpoint's config again: d), so no change is recorded twice or for steps that were redone without it."""
  rows = [{"step": st, "field": f, "old": 1, "new": 2, "kind": "harmless"} for st, f in ((2, "a"), (4, "b"), (6, "c"))]
  path = tmp_path / "config_changes.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  files = run_files.RunFiles(str(tmp_path), _cfg(tmp_path), lead=True)
  new = {"field": "d", "old": 3, "new": 4, "kind": "harmless"}
  files.open(4, [new])
  files.close()
  assert wd.read_jsonl(str(path)) == [rows[0], {"step": 4, **new}]
  files.open(6, [])  # no change: the lines before the step stay as they are
  files.close()
  assert wd.read_jsonl(str(path)) == [rows[0], {"step": 4, **new}]


class _Checkpoints:
  """A checkpoint directory's steps and the config each stored (None: none stored)."""

  def __init__(self, configs):
    self.configs = configs

  def __call__(self, directory, keep):
    return self

  def steps(self):
    return sorted(self.configs)

  def config(self, step):
    return self.configs[step]


def test_the_trajectory_check_reads_the_newest_stored_config(tmp_path, monkeypatch):
  """Checkpoints at 2 (trained at lr 1e-3), 4 (resumed at lr 2e-3, allowed) and 6 (no stored config): a resume at
  lr 2e-3 is the newest checkpoint's trajectory (accepted), one at lr 1e-3 changes it (refused naming step 4)."""
  from resnorm.config import configlib
  from resnorm.io import ckpt
  lr1, lr2 = (_cfg(tmp_path, **{"train.lr": lr}) for lr in (1e-3, 2e-3))
  monkeypatch.setattr(ckpt, "Checkpointer", _Checkpoints({2: configlib.to_json(lr1), 4: configlib.to_json(lr2),
                                                          6: None}))
  run_files.prepare_workdir(str(tmp_path / "w"), lr2)
  with pytest.raises(InputError, match=r"resuming at step 4 with train\.lr=0\.002 -> 0\.001 would change"):
    run_files.prepare_workdir(str(tmp_path / "w"), lr1)


def test_publish_flushes_every_log(tmp_path, monkeypatch):
  calls = []
  monkeypatch.setattr(wd.JsonlLog, "flush", lambda self: calls.append(os.path.basename(self.path)))
  monkeypatch.setattr(wd.TensorBoard, "publish", lambda self: calls.append("tb"), raising=False)
  files = run_files.RunFiles(str(tmp_path), _cfg(tmp_path), lead=True)
  files.open(0, None)
  files.publish()
  assert sorted(calls) == ["diagnostics.jsonl", "metrics.jsonl", "tb"]
  monkeypatch.undo()
  files.close()
