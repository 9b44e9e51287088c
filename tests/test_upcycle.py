"""train.init_from: a run started from another run's checkpoint computes the source's function at step 0 (its eval
equals the source's final eval), with a fresh optimizer; every transition that would change the function is
refused with one line, before the new workdir exists."""
import json
import os

import pytest

from conftest import text_config
from resnorm.config import configlib
from resnorm.train import trainer, upcycle
from resnorm.core.errors import InputError

RUN = {"train.steps": 3, "train.warmup_steps": 0, "train.eval_every": 3, "train.ckpt_every": 3,
       "train.diag_every": 0, "train.lr": 3e-3}


@pytest.fixture(scope="module")
def source(tmp_path_factory, text_corpus):
  """A pre_norm run trained 3 steps (params off their init), with its final eval; checkpoints at steps 2 and 3, so
  taking the wrong one by default shows."""
  wd = str(tmp_path_factory.mktemp("src") / "run")
  assert trainer.train(text_config(text_corpus, "pre_norm", **{**RUN, "train.ckpt_every": 1}), wd) == 0
  assert sorted(int(s) for s in os.listdir(os.path.join(wd, "checkpoints")) if s.isdigit()) == [2, 3]
  return wd


def _records(wd):
  return [json.loads(line) for line in open(os.path.join(wd, "metrics.jsonl"))]


@pytest.mark.parametrize("residual,over", [
    pytest.param("hc", {"model.hc.n": 2}, id="pre_norm->hc", marks=pytest.mark.integration),
    pytest.param("frac_hc", {"model.frac_hc.m": 4}, id="pre_norm->frac_hc", marks=pytest.mark.integration),
    pytest.param("pre_norm", {}, id="same", marks=pytest.mark.integration),
    pytest.param("resid_lambdas", {"model.resid_lambdas.preset": "identity"}, id="pre_norm->resid_lambdas",
                 marks=pytest.mark.integration),
    pytest.param("kromhc", {"model.kromhc.n": 2}, id="pre_norm->kromhc", marks=pytest.mark.integration)])
def test_step_0_eval_equals_the_source_final_eval(source, tmp_path, text_corpus, residual, over):
  wd = str(tmp_path / "run")
  cfg = text_config(text_corpus, residual, **{**RUN, "train.steps": 1, "train.init_from": source, **over})
  assert trainer.train(cfg, wd) == 0
  want = json.load(open(os.path.join(source, "summary.json")))["final_eval_loss"]
  first = _records(wd)[0]
  assert first["step"] == 0 and "loss" not in first
  # the same function on the same eval batches: float32 rounding of another program (HC sums n streams) only
  assert first["eval_loss"] == pytest.approx(want, rel=2e-6, abs=0), (first["eval_loss"] - want) / want
  summary = json.load(open(os.path.join(wd, "summary.json")))
  assert summary["init_from"] == f"{source}:3" and summary["step"] == 1
  # rerun: the new run's own checkpoint wins (the source may be gone), and the provenance stays
  cfg.train.init_from = str(tmp_path / "gone")
  assert trainer.train(cfg, wd) == 0
  assert json.load(open(os.path.join(wd, "summary.json")))["init_from"] == f"{source}:3"


def test_the_new_run_starts_its_own_step_counter_and_schedule(source, tmp_path, text_corpus):
  """A fresh optimizer: the state's step starts at 0 (the source's 3 would shift the schedule), so the logged lr of
  step k is the new run's own schedule at k - 1, and the new run's checkpoint holds its own step count."""
  from resnorm.io import ckpt
  from resnorm.step import optim, runtime
  wd = str(tmp_path / "run")
  cfg = text_config(text_corpus, "hc", **{**RUN, "train.steps": 4, "train.warmup_steps": 2, "train.eval_every": 4,
                                          "train.ckpt_every": 4, "model.hc.n": 2, "train.init_from": source})
  assert trainer.train(cfg, wd) == 0
  lrs = [(r["step"], r["lr"]) for r in _records(wd) if "lr" in r]
  sched = optim.schedule(cfg.train)
  want = [(k, float(sched(k - 1))) for k in range(1, 5)]
  assert want[0][1] == 0.0 and len({lr for _, lr in want}) == 4  # warmup from 0: a shifted schedule shows
  assert [k for k, _ in lrs] == [k for k, _ in want]
  for (_, got), (_, w) in zip(lrs, want):
    assert got == pytest.approx(w, rel=1e-6, abs=1e-12), (lrs, want)
  state, _ = ckpt.Checkpointer(os.path.join(wd, "checkpoints"), read_only=True).restore(4, runtime.build(cfg).abstract)
  assert int(state["step"]) == 4


REFUSED = [
    ({"model.residual": "post_norm"}, "a pre_norm run and this run is post_norm"),
    ({"model.residual": "hc", "model.num_layers": 3}, "model.num_layers=2 but this run has model.num_layers=3"),
    ({"model.residual": "mhc", "model.mhc.init": "uniform"}, "only from the identity init"),
    ({"model.residual": "pre_norm", "model.norm": "rmsnorm"}, "model.norm='layernorm'"),
    ({"train.init_from": "{src}:1"}, "no checkpoint at step 1; available: 2, 3"),
    ({"train.init_from": "{missing}"}, "has no checkpoint"),
]


@pytest.mark.parametrize("over,msg", REFUSED, ids=[m for _, m in REFUSED])
def test_refused_before_the_workdir_exists(source, tmp_path, text_corpus, over, msg):
  spec = over.get("train.init_from", "{src}").format(src=source, missing=str(tmp_path / "missing"))
  cfg = text_config(text_corpus, **{**RUN, **over, "train.init_from": spec})
  wd = str(tmp_path / "run")
  with pytest.raises(InputError, match=msg):
    trainer.train(cfg, wd)
  assert not os.path.exists(wd)


def test_transition_rules():
  """Unit level: the allowed pairs and what each refusal names."""
  def model(residual, **over):
    return configlib.to_json(text_config("x", residual, **over))["model"]
  for src, dst, over in [("pre_norm", "hc", {"model.hc.n": 4, "model.hc.dynamic": False}),
                         ("pre_norm", "mhc", {"model.mhc.init": "uniform", "model.mhc.alpha_init": 0.0}),
                         ("hc", "hc", {}), ("sandwich", "peri_norm", {}),
                         ("pre_norm", "pre_norm", {"model.init": "gpt2", "model.dtype": "bfloat16"}),
                         ("pre_norm", "laurel", {"model.laurel.rw": False, "model.laurel.rw_scale": 1.0}),
                         ("pre_norm", "mudd", {}),
                         ("pre_norm", "value_residual", {"model.value_residual.lambda_init": 0.0}),
                         ("pre_norm", "resid_lambdas", {"model.resid_lambdas.preset": "identity"}),
                         ("pre_norm", "kromhc", {})]:
    upcycle.check_transition(model(src), text_config("x", dst, **over), "src")
  for src, dst, over, msg in [("hc", "pre_norm", {}, "a hc run and this run is pre_norm"),
                              ("hc", "hc", {"model.hc.n": 2}, "model.hc.n=4 but this run has model.hc.n=2"),
                              ("pre_norm", "hc", {"model.final_norm": False}, "model.final_norm=True"),
                              ("pre_norm", "laurel", {"model.laurel.rw_scale": 1.0}, "path weights of 1 at init"),
                              ("pre_norm", "value_residual", {}, r"model.value_residual.lambda_init=0 \(no mix"),
                              ("pre_norm", "resid_lambdas", {}, r"from the identity preset \(model.resid_lambdas"),
                              ("pre_norm", "ddl", {}, "a pre_norm run and this run is ddl"),   # closed gate: x_0
                              ("pre_norm", "mhc_lite", {},
                               "pre_norm -> hc, pre_norm -> mhc, pre_norm -> frac_hc, pre_norm -> laurel, "
                               "pre_norm -> mudd, pre_norm -> value_residual, pre_norm -> kromhc, pre_norm -> resid_lambdas "
                               "preserve")]:
    with pytest.raises(InputError, match=msg):
      upcycle.check_transition(model(src), text_config("x", dst, **over), "src")


@pytest.mark.parametrize("spec,want", [("runs/a", ("runs/a", None)), ("runs/a:12", ("runs/a", 12)),
                                       ("gs://b/run", ("gs://b/run", None)), ("gs://b/run:0", ("gs://b/run", 0))])
def test_init_from_format(spec, want):
  assert configlib.split_init_from(spec) == want


@pytest.mark.parametrize("spec", ["runs/a:", "runs/a:-1", "runs/a:1.5", ":3"])
def test_init_from_bad_format(spec):
  with pytest.raises(InputError, match="train.init_from"):
    configlib.split_init_from(spec)
