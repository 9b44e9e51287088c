"""The loop: a real resume == uninterrupted, metrics without duplicates, resume refused for another model,
host state restored, divergence as a result."""
import contextlib
import io
import json
import os
import re
import shutil

import jax
import numpy as np
import pytest

from conftest import text_config
from resnorm.io import ckpt
from resnorm.step import runtime
from resnorm.train import tb_figures, trainer
from resnorm.core.errors import EXIT_DIVERGED, InputError


def _metrics(path):
  with open(os.path.join(path, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(l).items() if k != "tokens_per_s"} for l in f]


def _final_params(cfg, path, step):
  s = runtime.build(cfg)
  state, _ = ckpt.Checkpointer(os.path.join(os.path.abspath(path), "checkpoints"), read_only=True).restore(
      step, s.abstract)
  return state


def _train_captured(cfg, path):
  """trainer.train with its stdout and stderr captured (the module fixture cannot use capfd)."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = trainer.train(cfg, path)
  return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def hc_runs(tmp_path_factory, text_corpus):
  """hc, 6 steps, checkpoints at 3 and 6: `a` uninterrupted; `b` the same, then crashed after the step-3
  checkpoint (step 6's checkpoint gone, a half-written metrics line) and rerun. Returns (cfg, a, b, the
  rerun's stdout and stderr)."""
  cfg = text_config(text_corpus, "hc")
  root = tmp_path_factory.mktemp("hc_runs")
  a, b = str(root / "a"), str(root / "b")
  assert trainer.train(cfg, a) == 0
  assert trainer.train(cfg, b) == 0
  shutil.rmtree(os.path.join(b, "checkpoints", "6"))
  with open(os.path.join(b, "metrics.jsonl"), "a") as f:
    f.write('{"step": 5, "loss": 1.0')  # a half-written line from the killed process
  code, out, err = _train_captured(cfg, b)
  assert code == 0, err
  return cfg, a, b, out, err


def test_resume_equals_uninterrupted(hc_runs):
  cfg, a, b, out, err = hc_runs
  # it resumed (from step 3, the newest checkpoint) and trained only the 3 remaining steps; not a restart that
  # happens to reproduce the same numbers after quarantining an unloadable checkpoint
  assert "resumed from checkpoint step 3" in out and "done: 3 steps" in out, out
  assert "cannot be restored" not in err and not os.path.exists(os.path.join(b, "checkpoints.corrupt")), err
  ma, mb = _metrics(a), _metrics(b)
  assert ma == mb  # identical losses, and no step logged twice
  assert [m["step"] for m in mb if "unigram_eval_loss" in m] == [3]  # once per run: the first eval, not again
  steps = [m["step"] for m in mb if "loss" in m]
  assert steps == sorted(set(steps)) == list(range(1, 7))
  evals = {m["step"]: m["eval_loss"] for m in mb if "eval_loss" in m}
  assert list(evals) == [3, 6]  # every train.eval_every steps and at the end
  pa, pb = _final_params(cfg, a, 6), _final_params(cfg, b, 6)
  for x, y in zip(_leaves(pa), _leaves(pb)):
    np.testing.assert_array_equal(x, y)
  summary = json.load(open(os.path.join(b, "summary.json")))
  assert summary["status"] == "completed" and summary["step"] == 6 and summary["params"] > 0
  assert summary["flops_per_token"] > 0 and summary["final_eval_loss"] == evals[6]


def _leaves(tree):
  import jax
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


# the 2026 placements (issue 69): each one's own state and params through a checkpoint (the run above is hc's)
PLACEMENTS_2026 = ("keel", "ddl", "kromhc", "resid_lambdas", "delta_attn_res", "delta_attn_res_block")


@pytest.mark.integration
@pytest.mark.parametrize("name", PLACEMENTS_2026)
def test_the_2026_placements_resume_as_uninterrupted_and_refuse_another_placement(name, tmp_path, text_corpus):
  cfg = text_config(text_corpus, name)
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  assert trainer.train(cfg, a) == 0 and trainer.train(cfg, b) == 0
  shutil.rmtree(os.path.join(b, "checkpoints", "6"))
  code, out, err = _train_captured(cfg, b)
  assert code == 0 and "resumed from checkpoint step 3" in out, err
  assert _metrics(a) == _metrics(b)
  for x, y in zip(_leaves(_final_params(cfg, a, 6)), _leaves(_final_params(cfg, b, 6))):
    np.testing.assert_array_equal(x, y)
  with pytest.raises(InputError, match=re.escape(f"model.residual={name!r} but the config asks for "
                                                 "model.residual='pre_norm'")):
    trainer.train(text_config(text_corpus, "pre_norm"), b)


def test_nonfinite_loss_is_divergence(tmp_path, text_corpus):
  cfg = text_config(text_corpus, **{"train.lr": 1e30, "train.grad_clip": 0.0, "train.warmup_steps": 0})
  out = str(tmp_path / "d")
  assert trainer.train(cfg, out) == EXIT_DIVERGED
  summary = json.load(open(os.path.join(out, "summary.json")))
  assert summary["status"] == "diverged" and summary["diverged_step"] == 2 and "non-finite" in summary["reason"]


def test_skip_nonfinite_counts_then_stops(tmp_path, text_corpus):
  cfg = text_config(text_corpus, **{"train.lr": 1e30, "train.grad_clip": 0.0, "train.warmup_steps": 0,
                                    "train.skip_nonfinite": True, "train.max_skipped": 3})
  out = str(tmp_path / "s")
  assert trainer.train(cfg, out) == EXIT_DIVERGED
  summary = json.load(open(os.path.join(out, "summary.json")))
  assert summary["diverged_step"] == 4 and summary["skipped_steps"] == 3 and "max_skipped" in summary["reason"]


@pytest.mark.parametrize("over,msg", [
    ({"model.residual": "pre_norm"}, "model.residual='hc' but the config asks for model.residual='pre_norm'"),
    ({"model.hc.n": 2}, "model.hc.n=4 but the config asks for model.hc.n=2"),
    ({"model.hc.dynamic": False}, "model.hc.dynamic=True but the config asks for model.hc.dynamic=False"),
    ({"model.num_layers": 3}, "model.num_layers=2 but the config asks for model.num_layers=3"),
])
def test_resume_with_another_model_is_refused(hc_runs, tmp_path, over, msg):
  """Checked against config.json and, without it, against the newest checkpoint's stored config; nothing changes."""
  cfg, a, _, _, _ = hc_runs
  wd = str(tmp_path / "a")
  shutil.copytree(a, wd)
  other = text_config(cfg.data.paths, "hc", **over)
  for drop_config_json in (False, True):
    if drop_config_json:
      os.remove(os.path.join(wd, "config.json"))
    before = {os.path.join(r, f): os.path.getmtime(os.path.join(r, f)) for r, _, fs in os.walk(wd) for f in fs}
    with pytest.raises(InputError, match=re.escape(msg)):
      trainer.train(other, wd)
    assert {os.path.join(r, f): os.path.getmtime(os.path.join(r, f)) for r, _, fs in os.walk(wd) for f in fs} == before


@pytest.mark.parametrize("allow, msg", [(False, r"train\.grad_clip=.* would change the training trajectory"),
                                        (True, r"step 6 holds optimizer state of another layout: opt_state\.")])
def test_resume_with_another_optimizer_layout_is_refused_and_nothing_is_set_aside(hc_runs, tmp_path, allow, msg):
  """grad_clip switched on or off changes the optimizer's state tree. Allowed as a config change, the restore would
  fail like a truncated checkpoint, every step would be set aside as corrupt and the run would start again from
  step 0 over its logs; it is read from the metadata instead: one InputError, the workdir untouched."""
  cfg, a, _, _, _ = hc_runs
  wd = str(tmp_path / "a")
  shutil.copytree(a, wd)
  other = text_config(cfg.data.paths, "hc", **{"train.grad_clip": 0.0 if cfg.train.grad_clip else 1.0})
  before = {os.path.join(r, f): os.path.getmtime(os.path.join(r, f)) for r, _, fs in os.walk(wd) for f in fs}
  with pytest.raises(InputError, match=msg):
    trainer.train(other, wd, allow_config_change=allow)
  assert {os.path.join(r, f): os.path.getmtime(os.path.join(r, f)) for r, _, fs in os.walk(wd) for f in fs} == before


def test_runtime_fields_and_other_variants_settings_still_resume(hc_runs, tmp_path):
  """remat, kernels and another variant's settings do not change the model: the finished run is accepted (and
  exits at once as completed)."""
  cfg, a, _, _, _ = hc_runs
  wd = str(tmp_path / "a")
  shutil.copytree(a, wd)
  other = text_config(cfg.data.paths, "hc", **{"model.remat": "full", "model.kernels": "reference",
                                               "model.mhc.n": 2, "model.mix_ln.post_fraction": 0.5})
  before = json.load(open(os.path.join(wd, "summary.json")))
  code, out, _ = _train_captured(other, wd)
  assert code == 0 and "resumed from checkpoint step 6" in out and "compiled" not in out
  after = json.load(open(os.path.join(wd, "summary.json")))  # the restored eval, not a blank one
  assert after["status"] == "completed" and after["final_eval_loss"] == before["final_eval_loss"] is not None
  assert after["bits_per_byte"] == before["bits_per_byte"] and after["eval_tokens"] == before["eval_tokens"]


def test_resume_restores_the_host_state(hc_runs):
  """The checkpoint's host item: the spike detector's state (6 losses seen) and the last train / eval losses come
  back with the step, so spike detection and summary.json continue where the run stopped."""
  cfg, a, _, _, _ = hc_runs
  summary = json.load(open(os.path.join(a, "summary.json")))
  t = trainer.Trainer(cfg, a)
  try:
    _, start, _ = t._restore()
  finally:
    t.ckpt.close()
  assert start == 6 and t.spikes.n == 6 and t.spikes.mean > 0
  assert t.last["loss"] == summary["final_train_loss"] and t.restored_eval["eval_loss"] == summary["final_eval_loss"]


def _files(path):
  return {f: open(os.path.join(path, f), "rb").read() for f in sorted(os.listdir(path))
          if os.path.isfile(os.path.join(path, f))}


def test_config_changes_on_resume(tmp_path, text_corpus):
  """train.steps may change; a trajectory change is refused (nothing written) unless allowed; every accepted
  change lands in config_changes.jsonl at the step it took effect, and config.json stays the starting config."""
  out = str(tmp_path / "c")
  base = {"train.steps": 2, "train.warmup_steps": 1}
  assert trainer.train(text_config(text_corpus, **base), out) == 0
  started = open(os.path.join(out, "config.json")).read()
  before = _files(out)
  with pytest.raises(InputError, match=r"step 2 with train\.batch_size=4 -> 8, train\.lr=0\.001 -> 0\.002 "
                                       r"would change the training trajectory"):
    trainer.train(text_config(text_corpus, **{**base, "train.batch_size": 8, "train.lr": 2e-3}), out)
  assert _files(out) == before
  # extending the run, and changing how often it logs: accepted and recorded
  assert trainer.train(text_config(text_corpus, **{**base, "train.steps": 3, "train.log_every": 2}), out) == 0
  assert trainer.train(text_config(text_corpus, **{**base, "train.steps": 4, "train.log_every": 2,
                                                   "train.batch_size": 8}), out, allow_config_change=True) == 0
  assert open(os.path.join(out, "config.json")).read() == started
  with open(os.path.join(out, "config_changes.jsonl")) as f:
    rows = [json.loads(l) for l in f]
  assert rows == [
      {"step": 2, "field": "train.log_every", "old": 1, "new": 2, "kind": "harmless"},
      {"step": 2, "field": "train.steps", "old": 2, "new": 3, "kind": "steps"},
      {"step": 3, "field": "train.batch_size", "old": 4, "new": 8, "kind": "trajectory"},
      {"step": 3, "field": "train.steps", "old": 3, "new": 4, "kind": "steps"}]
  summary = json.load(open(os.path.join(out, "summary.json")))
  assert summary["status"] == "completed" and summary["step"] == 4
  prov = summary["provenance"]
  import subprocess
  head = subprocess.run(["git", "-C", os.path.dirname(trainer.__file__), "rev-parse", "HEAD"], capture_output=True,
                        text=True)
  if head.returncode == 0:  # tests run from a git checkout
    assert prov["git_commit"] == head.stdout.strip() and isinstance(prov["git_dirty"], bool)
  else:
    assert prov["git_commit"] is None and prov["git_dirty"] is None
  assert set(prov["versions"]) == {"jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "grain"}
  import jax
  assert prov["versions"]["jax"] == jax.__version__
  assert prov["devices"] == {"platform": "cpu", "device_kind": jax.devices()[0].device_kind, "count": 1}
  assert prov["processes"] == 1


def test_summary_scores_the_stratified_eval_set_with_its_error_and_baseline(tmp_path, works):
  """summary.json: eval_tokens (the targets of the stratified set), eval_loss_se (bootstrap), and the unigram
  baseline and stall flag on that same set."""
  from resnorm.core import stats
  from resnorm.data import data, unigram
  cfg = text_config(works, **{"data.seq_len": 32, "data.val_fraction": 0.1, "data.eval_set": "stratified",
                              "data.eval_bytes": 4096, "data.eval_batch_size": 16})
  assert trainer.train(cfg, str(tmp_path)) == 0
  summary = json.load(open(tmp_path / "summary.json"))
  batches = data.eval_batches(cfg)
  assert summary["eval_tokens"] == sum(int(b["mask"].sum()) for b in batches) >= 4096
  s = runtime.build(cfg)
  assert summary["unigram_eval_loss"] == pytest.approx(unigram.eval_loss(s, batches, str(tmp_path)), rel=1e-6)
  assert summary["learned_beyond_unigram"] == unigram.learned_beyond(summary["final_eval_loss"],
                                                                       summary["unigram_eval_loss"])
  params = _final_params(cfg, str(tmp_path), cfg.train.steps)["params"]
  rows = [jax.device_get(s.eval_step(params, s.device_batch(b))) for b in batches]
  sums, counts = (np.concatenate([np.asarray(r[i]) for r in rows]) for i in (0, 1))
  docs, row = (np.concatenate([b[k] for b in batches]) for k in ("_doc", "_row"))
  assert summary["final_eval_loss"] == pytest.approx(sums.sum() / counts.sum(), rel=1e-5)
  # the block bootstrap over each row's document, and its units; the subset's loss from the same per-row sums
  assert summary["eval_loss_se"] == pytest.approx(stats.bootstrap_se(sums, counts, docs), rel=1e-5) and \
      summary["eval_loss_se"] > 0
  b_sums, b_counts = stats.block_sums(sums, counts, docs)
  assert np.array_equal([c for _, c in summary["eval_block_sums"]], b_counts)
  assert [a for a, _ in summary["eval_block_sums"]] == pytest.approx(b_sums, abs=1e-3)
  keep = (row >= 0) & (row % cfg.data.eval_subset_every == 0)
  assert summary["eval_loss_subset"] == pytest.approx(sums[keep].sum() / counts[keep].sum(), rel=1e-5)
  # the evals before the last scored the subset: every 8th row
  with open(tmp_path / "metrics.jsonl") as f:
    evals = [e for e in map(json.loads, f) if "eval_loss" in e]
  assert evals[0]["eval_subset_every"] == 8 and evals[0]["eval_tokens"] < summary["eval_tokens"] // 4
  assert "eval_subset_every" not in evals[-1] and evals[-1]["eval_tokens"] == summary["eval_tokens"]


def test_loop_times_its_parts_and_draws_figures_within_budget(tmp_path, text_corpus):
  """summary.json splits train_s into evals, diagnostics, checkpoints and figures, with the eval and diagnostics
  steps compiled at start-up; in a run far shorter than the drawing budget allows, TensorBoard's depth figures are
  drawn once, at the last step, while every diagnostics step is still logged; a resume logs the init's step-0
  diagnostics only once."""
  from tensorboard.backend.event_processing import event_accumulator
  cfg = text_config(text_corpus, **{"train.diag_every": 2})
  assert trainer.train(cfg, str(tmp_path)) == 0
  s = json.load(open(tmp_path / "summary.json"))
  parts = ("eval_s", "diag_s", "ckpt_s", "tb_draw_s")
  assert all(s[k] > 0 for k in parts + ("eval_compile_s", "diag_compile_s")), s
  assert s["train_s"] >= sum(s[k] for k in parts) and s["startup_s"] >= s["eval_compile_s"] + s["diag_compile_s"]
  with open(tmp_path / "diagnostics.jsonl") as f:
    assert [json.loads(l)["step"] for l in f] == [0, 2, 4, 6]
  acc = event_accumulator.EventAccumulator(str(tmp_path / "tb"), size_guidance={"images": 0})
  acc.Reload()
  assert [i.step for i in acc.Images("depth/grad_norm")] == [i.step for i in acc.Images("depth/mixing_matrix")] == [6]
  # resumed from step 3 (step 6's checkpoint gone): the diagnostics past it are redone, step 0's not logged again
  shutil.rmtree(tmp_path / "checkpoints" / "6")
  code, out, err = _train_captured(cfg, str(tmp_path))
  assert code == 0 and "resumed from checkpoint step 3" in out, err
  with open(tmp_path / "diagnostics.jsonl") as f:
    assert [json.loads(l)["step"] for l in f] == [0, 2, 4, 6]


def test_start_up_includes_compiling_the_eval_and_diagnostics_steps(tmp_path, text_corpus, monkeypatch):
  """The loop's clock (train_s) starts after the eval and diagnostics steps are compiled: the wall-clock moment
  those compilations end (slowed by 2 s here) is no later than started_at + startup_s, the loop's start."""
  import time
  from resnorm.train import monitor
  ends, real = [], monitor.Monitor.compile

  def slow_compile(self, state, batch):
    real(self, state, batch)
    time.sleep(2.0)
    ends.append(time.time())

  monkeypatch.setattr(monitor.Monitor, "compile", slow_compile)
  assert trainer.train(text_config(text_corpus, **{"train.diag_every": 3}), str(tmp_path)) == 0
  s = json.load(open(tmp_path / "summary.json"))
  assert len(ends) == 1 and s["startup_s"] >= 2.0 and ends[0] <= s["started_at"] + s["startup_s"] + 0.1, (ends, s)


def test_figures_drawn_while_within_budget():
  assert tb_figures.should_draw(0.0, tb_figures.TB_DRAW_GUESS_S, 60.0)       # 1 s of 60: 1.7%
  assert not tb_figures.should_draw(0.0, tb_figures.TB_DRAW_GUESS_S, 40.0)   # 1 s of 40: 2.5%
  assert tb_figures.should_draw(2.0, 0.5, 125.0) and not tb_figures.should_draw(2.0, 0.5, 124.0)


@pytest.mark.integration
def test_completep_trains_through_the_loop_and_resumes_exactly(tmp_path, text_corpus):
  """Under a parametrization (CompleteP at 2x the base width and depth: the per-role optimizer chain, its state
  in the checkpoint, the multipliers) the loop trains, and a run crashed after its step-3 checkpoint resumes to the
  uninterrupted run's params bit for bit."""
  cfg = text_config(text_corpus, "hc", **{"model.param": "completep", "model.param_base.d_model": 16,
                                          "model.param_base.num_layers": 1})
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  assert trainer.train(cfg, a) == 0 and trainer.train(cfg, b) == 0
  shutil.rmtree(os.path.join(b, "checkpoints", "6"))
  code, out, err = _train_captured(cfg, b)
  assert code == 0 and "resumed from checkpoint step 3" in out and "done: 3 steps" in out, err
  assert _metrics(a) == _metrics(b)
  for x, y in zip(_leaves(_final_params(cfg, a, 6)), _leaves(_final_params(cfg, b, 6))):
    np.testing.assert_array_equal(x, y)
