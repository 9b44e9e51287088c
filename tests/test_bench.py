"""resnorm.bench runs the real step on a grid and writes the JSON contract (timings are reported, not judged)."""
import json
import subprocess
import sys

import numpy as np

from conftest import tiny_config
from resnorm import configlib, flops
from test_cli import ENV, ROOT


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
  # L x (2 x (4 d^2 + 2 d f) + 4 T d) + 2 d V; hc's from resnorm.flops (hand-checked in test_residual). A step is
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


def test_bench_decode_mode(tmp_path):
  out = tmp_path / "d.json"
  r = subprocess.run([sys.executable, "-m", "resnorm.bench", "--config=configs/tiny.py:hc", "--decode",
                      f"--json={out}"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  row = json.load(open(out))["decode"][0]
  assert row["residual"] == "hc" and row["cache_len"] >= 512
  assert all(row[k] > 0 for k in ("prefill_32_s", "token_at_32_s", "prefill_512_s", "token_at_512_s"))
