"""train.py and eval.py as a user runs them: end to end, and one clear line + exit 2 for bad input."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# PYTHONPATH: scripts run from this checkout's resnorm, whatever else is installed
ENV = {**os.environ, "JAX_DISABLE_MOST_OPTIMIZATIONS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
# configs/tiny.py:VARIANT, with the run lengths these tests rely on
TINY = ["--config.train.steps=4", "--config.train.warmup_steps=1", "--config.train.eval_every=2",
        "--config.train.ckpt_every=2", "--config.train.diag_every=2", "--config.model.remat=dots"]


def run(script, *args, cwd=ROOT):
  return subprocess.run([sys.executable, os.path.join(ROOT, script), *args], cwd=cwd, env=ENV,
                        capture_output=True, text=True, timeout=300)


def _text_args(text_corpus):
  return ["--config.data.name=text_files", f"--config.data.paths={text_corpus}"]


@pytest.mark.integration
def test_train_then_eval_end_to_end(tmp_path, text_corpus):
  wd = str(tmp_path / "run")
  r = run("train.py", "--config=configs/tiny.py:mhc", f"--workdir={wd}", *TINY, *_text_args(text_corpus))
  assert r.returncode == 0, r.stderr[-2000:]
  assert "step 4/4" in r.stdout and "params" in r.stdout
  for name in ("config.json", "metrics.jsonl", "summary.json", "diagnostics.jsonl"):
    assert os.path.exists(os.path.join(wd, name)), name
  assert os.listdir(os.path.join(wd, "tb"))
  summary = json.load(open(os.path.join(wd, "summary.json")))
  assert summary["status"] == "completed" and summary["residual"] == "mhc" and summary["num_layers"] == 2
  assert summary["unigram_eval_loss"] > 0 and summary["learned_beyond_unigram"] is False  # 4 steps learn nothing
  assert "stalled:" in r.stdout
  lines = [json.loads(l) for l in open(os.path.join(wd, "metrics.jsonl"))]
  assert {"step", "loss", "lr", "grad_norm", "tokens_per_s"} <= set(lines[0])
  assert any("eval_loss" in l for l in lines)
  # the same command again: already complete, nothing retrained
  r = run("train.py", "--config=configs/tiny.py:mhc", f"--workdir={wd}", *TINY, *_text_args(text_corpus))
  assert r.returncode == 0 and "compiled" not in r.stdout
  # a trajectory change on resume is refused, naming the field and both values; allowed, it is recorded
  started = open(os.path.join(wd, "config.json")).read()
  more = ["--config.train.batch_size=8", "--config.train.steps=8"]
  r = run("train.py", "--config=configs/tiny.py:mhc", f"--workdir={wd}", *TINY, *_text_args(text_corpus), *more)
  assert r.returncode == 2 and "train.batch_size=4 -> 8" in r.stderr and "--allow_config_change" in r.stderr
  assert "Traceback" not in r.stderr and not os.path.exists(os.path.join(wd, "config_changes.jsonl"))
  r = run("train.py", "--config=configs/tiny.py:mhc", f"--workdir={wd}", *TINY, *_text_args(text_corpus),
          "--config.train.lr=0.002", "--allow_config_change")
  assert r.returncode == 0 and "compiled" not in r.stdout, r.stderr[-2000:]
  assert [json.loads(l) for l in open(os.path.join(wd, "config_changes.jsonl"))] == [
      {"step": 4, "field": "train.lr", "old": 0.001, "new": 0.002, "kind": "trajectory"}]
  assert open(os.path.join(wd, "config.json")).read() == started
  # eval uses the checkpoint's own config, whatever the current config files say
  r = run("eval.py", f"--workdir={wd}", "--step=2")
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stderr == "" and r.stdout.startswith("eval_loss ")  # no library notice (Orbax's 'read only=DIR')
  out = json.load(open(os.path.join(wd, "eval", "step_2.json")))
  assert out["residual"] == "mhc" and out["num_layers"] == 2 and out["step"] == 2
  assert out["eval_loss"] > 0 and out["bits_per_byte"] == pytest.approx(out["eval_loss"] / 0.6931471805599453)
  assert out["unigram_eval_loss"] == pytest.approx(summary["unigram_eval_loss"], rel=1e-6)  # same eval batches
  assert len(out["sublayers"]) == 4 and out["sublayers"][0]["gain_forward"] == pytest.approx(1.0, abs=1e-3)
  # generation from the checkpoint: printed, appended with its settings; an over-long prompt is refused
  r = run("eval.py", f"--workdir={wd}", "--generate=def ", "--max_new_tokens=5", "--num_samples=2")
  assert r.returncode == 0 and r.stdout.count("--- sample") == 2, r.stderr[-2000:]
  assert r.stderr == ""
  rows = [json.loads(l) for l in open(os.path.join(wd, "eval", "samples_step_4.jsonl"))]
  assert [(x["prompt"], x["index"], x["temperature"], x["max_new_tokens"]) for x in rows] == [
      ("def ", 0, 0.0, 5), ("def ", 1, 0.0, 5)]
  assert rows[0]["tokens"] == rows[1]["tokens"] and len(rows[0]["tokens"]) <= 5  # greedy: both the same
  r = run("eval.py", f"--workdir={wd}", "--generate=" + "x" * 16)
  assert r.returncode == 2 and "longer than the model's context of 16" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.integration  # eval.py as a subprocess, end to end
def test_eval_init_writes_diagnostics(tmp_path, text_corpus):
  out = str(tmp_path / "init")
  r = run("eval.py", "--config=configs/tiny.py:hc", "--init", f"--outdir={out}", *TINY, *_text_args(text_corpus))
  assert r.returncode == 0, r.stderr[-2000:]
  res = json.load(open(os.path.join(out, "init.json")))
  assert res["step"] == 0 and res["residual"] == "hc" and len(res["sublayers"]) == 4
  assert all(s["gain_forward"] == pytest.approx(1.0) and s["gain_backward"] == pytest.approx(1.0)
             for s in res["sublayers"])


E2E = pytest.mark.integration
# make test keeps one case per kind of refusal (an unknown name, key or file, a bad scale, a glob matching nothing); the
# value checks, each also refused in process by test_configlib, run as train.py in make test-integration
BAD = [
    (["--config=configs/pre_norm_12l.py", "--config.model.residual=nope"], "model.residual='nope' is unknown"),
    pytest.param(["--config=configs/pre_norm_12l.py", "--config.model.norm=batchnorm"], "model.norm='batchnorm'",
                 marks=E2E),
    pytest.param(["--config=configs/pre_norm_12l.py", "--config.model.num_heads=3"], "model.num_heads=3 must divide",
                 marks=E2E),
    pytest.param(["--config=configs/pre_norm_12l.py", "--config.train.lr=0"], "train.lr=0", marks=E2E),
    pytest.param(["--config=configs/pre_norm_12l.py", "--config.train.warmup_steps=999"], "train.warmup_steps=999",
                 marks=E2E),
    (["--config=configs/pre_norm_12l.py", "--config.model.nope=1"], "error: unknown config key model.nope\n"),
    # a near miss: one line, the dotted key and the key it misspells (not ml_collections' quoted, two-line message)
    (["--config=configs/tiny.py", "--config.model.attn_res.num_block=2"],
     "error: unknown config key model.attn_res.num_block (did you mean model.attn_res.num_blocks?)\n"),
    (["--config=configs/pre_norm_12l.py", "--config.model.num_layers=abc"], "num_layers"),
    (["--config=configs/missing.py"], "configs/missing.py"),
    (["--config=configs/pre_norm_12l.py", "configs/tiny.py"], "unexpected arguments: configs/tiny.py"),
    (["--config=configs/pre_norm_12l.py:gpu"], "config scale 'gpu' is unknown"),
    (["--config=configs/pre_norm_12l.py", "--config.data.name=text_files", "--config.data.paths=/no/such*.txt"],
     "matches no file"),
    pytest.param(["--config=configs/dyt_pre_norm_12l.py", "--config.model.dyt.alpha_attn=nan"],
                 "model.dyt.alpha_attn=nan", marks=E2E),
]


@pytest.mark.parametrize("args,msg", BAD, ids=[(p.values if hasattr(p, "values") else p)[1] for p in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, msg):
  wd = tmp_path / "wd"
  r = run("train.py", *args, f"--workdir={wd}")
  assert r.returncode == 2, (r.returncode, r.stderr[-1500:])
  assert msg in r.stderr and "Traceback" not in r.stderr
  assert len([l for l in r.stderr.splitlines() if l.startswith("error:")]) == 1
  assert not wd.exists()


MODULE_BAD = [
    (["resnorm.results", "--report=v6"], "error: flag --report=v6: value should be one of <v4|v5|transfer|all>"),
    (["resnorm.results", "--quick", "--out=docs"], "error: --out=docs: docs/ holds the full CPU design's report"),
    (["resnorm.sweep", "configs/sweeps/smoke.py", "--jobs=two"], "error: flag --jobs=two: invalid literal"),
    (["resnorm.bench", "--config=configs/missing.py"], "error: --config: cannot load config file configs/missing.py"),
    (["resnorm.bench", "--config=configs/tiny.py", "--config.model.nope=1"], "error: unknown config key model.nope"),
    (["resnorm.bench", "--config=configs/tiny.py", "--json=/no/such/dir/b.json"],
     "error: --json=/no/such/dir/b.json: its directory does not exist"),
]


# one refusal of each command in `make test` (the others in `make test-integration`)
@pytest.mark.parametrize("argv,msg", [pytest.param(a, m, id=m, marks=() if i in (0, 2, 3) else pytest.mark.integration)
                                      for i, (a, m) in enumerate(MODULE_BAD)])
def test_the_module_commands_bad_flags_are_one_line_and_exit_2(argv, msg):
  """absl's own parser would print two FATAL lines and exit 1; the bench would meet a bad --config or --json only
  after its work."""
  r = subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
  assert r.returncode == 2 and r.stderr.strip().splitlines() == [r.stderr.strip()], (r.returncode, r.stderr[-1500:])
  assert r.stderr.startswith(msg)


def test_a_config_file_that_sets_an_unknown_key_is_refused(tmp_path):
  """A key configs/base.py does not define, set by a config file (not an override): exit 2 naming it."""
  cfg = tmp_path / "stale.py"
  cfg.write_text("from configs import tiny\n\ndef get_config(arg=None):\n  c = tiny.get_config('mhc')\n"
                 "  c.model.mhc.sym_break = 'onehot'\n  return c\n")
  wd = tmp_path / "wd"
  r = run("train.py", f"--config={cfg}", f"--workdir={wd}")
  assert r.returncode == 2, (r.returncode, r.stderr[-1500:])
  assert r.stderr.strip().splitlines() == [
      "error: unknown config key model.mhc.sym_break"]
  assert not wd.exists()


def test_eval_errors(tmp_path):
  r = run("eval.py", f"--workdir={tmp_path}")
  assert r.returncode == 2 and "no checkpoints" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.integration
def test_second_run_loads_compiled_steps_from_the_cache(tmp_path, text_corpus):
  """The persistent compilation cache: a second run of one config compiles nothing new."""
  cache = tmp_path / "cache"
  env = {**ENV, "RESNORM_COMPILATION_CACHE": str(cache), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
  args = ["--config=configs/tiny.py", *TINY, "--config.train.steps=2", *_text_args(text_corpus)]

  def train(wd):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args, f"--workdir={tmp_path / wd}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.load(open(tmp_path / wd / "summary.json"))

  train("first")
  entries = set(os.listdir(cache))
  assert any(e.startswith("jit_train_step-") for e in entries), entries
  summary = train("second")
  assert set(os.listdir(cache)) == entries  # every compilation was a cache hit
  assert summary["startup_s"] > 0 and summary["compile_s"] > 0
