"""The loop: resume == uninterrupted, metrics without duplicates, divergence as a result."""
import json
import os
import shutil

import numpy as np
import pytest

from conftest import text_config
from resnorm import ckpt, runtime, trainer
from resnorm.errors import EXIT_DIVERGED, InputError


def _metrics(path):
  with open(os.path.join(path, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(l).items() if k != "tokens_per_s"} for l in f]


def _final_params(cfg, path, step):
  s = runtime.build(cfg)
  state, _ = ckpt.Checkpointer(os.path.join(os.path.abspath(path), "checkpoints"), read_only=True).restore(
      step, s.abstract)
  return state


def test_resume_equals_uninterrupted(tmp_path, text_corpus):
  cfg = text_config(text_corpus, "hc")
  a, b = str(tmp_path / "a"), str(tmp_path / "b")
  assert trainer.train(cfg, a) == 0
  assert trainer.train(cfg, b) == 0
  # simulate a crash after the step-3 checkpoint: the last checkpoint and the summary never happened
  shutil.rmtree(os.path.join(b, "checkpoints", "6"))
  with open(os.path.join(b, "metrics.jsonl"), "a") as f:
    f.write('{"step": 5, "loss": 1.0')  # a half-written line from the killed process
  assert trainer.train(cfg, b) == 0
  ma, mb = _metrics(a), _metrics(b)
  assert ma == mb  # identical losses, and no step logged twice
  steps = [m["step"] for m in mb if "loss" in m]
  assert steps == sorted(set(steps)) == list(range(1, 7))
  pa, pb = _final_params(cfg, a, 6), _final_params(cfg, b, 6)
  for x, y in zip(_leaves(pa), _leaves(pb)):
    np.testing.assert_array_equal(x, y)
  summary = json.load(open(os.path.join(b, "summary.json")))
  assert summary["status"] == "completed" and summary["step"] == 6 and summary["params"] > 0
  assert summary["flops_per_token"] > 0 and summary["final_eval_loss"] is not None


def _leaves(tree):
  import jax
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


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


def test_resume_with_another_residual_is_refused(tmp_path, text_corpus):
  out = str(tmp_path / "r")
  cfg = text_config(text_corpus, **{"train.steps": 3})
  assert trainer.train(cfg, out) == 0
  before = sorted(os.listdir(out))
  with pytest.raises(InputError, match="model.residual='pre_norm' but the config asks for model.residual='hc'"):
    trainer.train(text_config(text_corpus, "hc", **{"train.steps": 3}), out)
  assert sorted(os.listdir(out)) == before


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
