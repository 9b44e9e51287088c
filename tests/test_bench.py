"""resnorm.bench runs the real step on a grid and writes the JSON contract (timings are reported, not judged)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import tiny_config
from resnorm.config import configlib
from resnorm.model import flops
from test_cli import ENV, ROOT


@pytest.mark.integration  # the bench as a subprocess, end to end
def test_bench_grid_json(tmp_path):
  out = tmp_path / "b.json"
  r = subprocess.run([sys.executable, "-m", "resnorm.bench", "--config=configs/pre_norm_12l.py",
                      "--residuals=pre_norm,hc", "--depths=1,2", "--steps=2", "--warmup=1", f"--json={out}",
                      "--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.mlp_dim=64",
                      "--config.data.seq_len=16", "--config.train.batch_size=2"],
                     cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stderr == ""  # nothing from a library (jax's 'Unable to initialize backend tpu' probe, absl INFO)
  res = json.load(open(out))
  assert res["peak_source"] == "measured_matmul" and res["peak_flops"] > 1e9
  assert [(x["residual"], x["num_layers"]) for x in res["runs"]] == [("pre_norm", 1), ("pre_norm", 2), ("hc", 1),
                                                                      ("hc", 2)]
  # Training FLOPs per token counted by hand for pre_norm (d 32, mlp 64, seq 16, vocab 320): 3 x forward, forward =
  # L x (2 x (4 d^2 + 2 d f) + 4 T d) + 2 d V; hc's from resnorm.model.flops (hand-checked in test_residual). A step is
  # batch 2 x seq 16 = 32 tokens.
  d, f, t, v = 32, 64, 16, 320
  hand = {("pre_norm", L): 3 * (L * (2 * (4 * d * d + 2 * d * f) + 4 * t * d) + 2 * d * v) for L in (1, 2)}
  for L in (1, 2):
    cfg = tiny_config("hc", L, **{"model.d_model": d, "model.num_heads": 2, "model.mlp_dim": f})
    hand[("hc", L)] = flops.train_flops_per_token(configlib.model_config(cfg), t)
  assert hand[("pre_norm", 2)] == 172032 and hand[("hc", 1)] > hand[("pre_norm", 1)]
  for x in res["runs"]:
    assert x["step_s_min"] <= x["step_s_median"] and 0 < x["mfu"] < 1 and x["compile_s"] > 0
    fpt = hand[(x["residual"], x["num_layers"])]
    assert x["flops_per_token"] == fpt
    np.testing.assert_allclose(x["tokens_per_s"], 32 / x["step_s_median"], rtol=1e-9)
    np.testing.assert_allclose(x["achieved_flops"], fpt * 32 / x["step_s_median"], rtol=1e-9)
    np.testing.assert_allclose(x["mfu"], x["achieved_flops"] / res["peak_flops"], rtol=1e-9)
  assert "x first" in r.stdout


@pytest.mark.integration  # the bench as a subprocess, end to end
def test_bench_decode_mode(tmp_path):
  out = tmp_path / "d.json"
  r = subprocess.run([sys.executable, "-m", "resnorm.bench", "--config=configs/tiny.py:hc", "--decode",
                      f"--json={out}"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  row = json.load(open(out))["decode"][0]
  assert row["residual"] == "hc" and row["cache_len"] >= 512
  assert all(row[k] > 0 for k in ("prefill_32_s", "token_at_32_s", "prefill_512_s", "token_at_512_s"))


TINY = ["--config=configs/tiny.py", "--config.model.num_layers=1"]


@pytest.mark.integration  # the bench as a subprocess, end to end
def test_bench_xla_option_sets_are_points_of_one_process(tmp_path):
  out = tmp_path / "b.json"
  r = subprocess.run([sys.executable, "-m", "resnorm.bench", *TINY, "--steps=1", "--warmup=0", "--xla=default",
                      "--xla=xla_cpu_use_onednn=true,xla_cpu_enable_fast_min_max=false", f"--json={out}"],
                     cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  assert [x["xla"] for x in json.load(open(out))["runs"]] == [
      "default", "xla_cpu_use_onednn=true,xla_cpu_enable_fast_min_max=false"]
  assert "xla_cpu_use_onednn=true" in r.stdout
  for bad, msg in (("use_onednn=true", "is not KEY=VALUE with an xla_ option"),
                   ("xla_cpu_no_such_option=1", "--xla=xla_cpu_no_such_option=1: ")):
    r = subprocess.run([sys.executable, "-m", "resnorm.bench", *TINY, "--steps=1", f"--xla={bad}"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and msg in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.integration  # the bench as a subprocess, end to end
def test_bench_loop_splits_train_s_against_bare_steps(tmp_path, text_corpus):
  out = tmp_path / "l.json"
  r = subprocess.run([sys.executable, "-m", "resnorm.bench", *TINY, "--loop", "--rounds=2",
                      "--config.data.name=text_files", f"--config.data.paths={text_corpus}",
                      "--config.train.diag_every=3", f"--json={out}"],
                     cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  row = json.load(open(out))["loop"][0]
  assert row["steps"] == 6 and len(row["train_s_all"]) == len(row["bare_s_all"]) == 2
  assert row["train_s"] > 0 and row["bare_s"] > 0 and row["eval_s"] > 0 and row["diag_s"] > 0
  np.testing.assert_allclose(row["other_s"], row["train_s"] - row["bare_s"] - sum(
      row[k] for k in ("eval_s", "diag_s", "ckpt_s", "tb_draw_s")), rtol=1e-9)
  np.testing.assert_allclose(row["ratio_without_evals"], (row["train_s"] - row["eval_s"]) / row["bare_s"])
  assert "no-eval" in r.stdout


def test_xla_option_set_parses_list_values():
  from resnorm.bench.bench import xla_option_set
  assert xla_option_set("default") == ("default", {})
  text = "xla_cpu_experimental_ynn_fusion_type=LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_ELTWISE,xla_cpu_use_onednn=true"
  assert xla_option_set(text)[1] == {
      "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_ELTWISE",
      "xla_cpu_use_onednn": True}
  assert xla_option_set("xla_cpu_matmul_tiling_m_dim=8")[1] == {"xla_cpu_matmul_tiling_m_dim": 8}


def test_a_json_file_name_without_a_directory_is_written_in_the_working_directory(tmp_path, monkeypatch, capsys):
  """--json=b.json, no directory part: its directory is the working directory, which exists (the check reads the
  directory of the absolute path; os.path.dirname('b.json') is '', which is no directory)."""
  import types
  from resnorm.bench import bench
  res = {"runs": [{"residual": "pre_norm", "num_layers": 2}]}   # what run() returns, without benchmarking
  monkeypatch.setattr(bench, "run", lambda *args: res)
  monkeypatch.setattr(bench, "print_table", lambda r: None)
  monkeypatch.setattr(bench.startup, "start", lambda **kw: None)  # its compilation-cache switch is process-wide
  monkeypatch.setattr(bench, "FLAGS", types.SimpleNamespace(
      config=tiny_config(), json="b.json", steps=1, warmup=0, residuals=None, depths=None, kernels=None,
      loop=False, decode=False, xla=None))
  monkeypatch.chdir(tmp_path)
  try:
    rc = bench.main(["bench"])
  except SystemExit as e:  # a refusal: one line and exit 2
    rc = e.code
  assert rc == 0, capsys.readouterr().err
  assert json.load(open(tmp_path / "b.json")) == res and os.listdir(tmp_path) == ["b.json"]
