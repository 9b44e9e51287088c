"""resnorm.bench runs the real step on a grid and writes the JSON contract (timings are reported, not judged)."""
import json
import subprocess
import sys

from test_cli import ENV, ROOT


def test_bench_grid_json(tmp_path):
  out = tmp_path / "b.json"
  r = subprocess.run([sys.executable, "-m", "resnorm.bench", "--config=configs/pre_norm_12l.py",
                      "--residuals=pre_norm,hc", "--depths=1,2", "--steps=2", "--warmup=1", f"--json={out}",
                      "--config.model.d_model=32", "--config.model.num_heads=2", "--config.model.mlp_dim=64",
                      "--config.data.seq_len=16", "--config.train.batch_size=2"],
                     cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  res = json.load(open(out))
  assert res["peak_source"] == "measured_matmul" and res["peak_flops"] > 1e9
  assert [(x["residual"], x["num_layers"]) for x in res["runs"]] == [("pre_norm", 1), ("pre_norm", 2), ("hc", 1),
                                                                      ("hc", 2)]
  for x in res["runs"]:
    assert x["step_s_min"] <= x["step_s_median"] and 0 < x["mfu"] < 1 and x["compile_s"] > 0
    assert abs(x["achieved_flops"] - x["flops_per_token"] * 32 / x["step_s_median"]) < 1e-6 * x["achieved_flops"]
  assert "x first" in r.stdout


def test_bench_decode_mode(tmp_path):
  out = tmp_path / "d.json"
  r = subprocess.run([sys.executable, "-m", "resnorm.bench", "--config=configs/tiny.py:hc", "--decode",
                      f"--json={out}"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  row = json.load(open(out))["decode"][0]
  assert row["residual"] == "hc" and row["cache_len"] >= 512
  assert all(row[k] > 0 for k in ("prefill_32_s", "token_at_32_s", "prefill_512_s", "token_at_512_s"))
