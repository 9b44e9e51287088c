"""Sweeps: dry run, running points as train.py processes, skipping finished ones, and the sweep table."""
import csv
import os
import subprocess
import sys

from test_cli import ENV, ROOT


def sweep(*args, env=None):
  return subprocess.run([sys.executable, "-m", "resnorm.sweep", *args], cwd=ROOT, env=env or ENV,
                        capture_output=True, text=True, timeout=600)


def test_dry_run_prints_one_command_per_point(tmp_path):
  r = sweep("configs/sweeps/stability.py", f"--root={tmp_path}", "--dry_run")
  lines = r.stdout.strip().splitlines()
  assert r.returncode == 0 and len(lines) == 4 * 2 * 3 * 2
  assert all("train.py" in l and f"--workdir={tmp_path}/" in l for l in lines)
  assert len(set(lines)) == len(lines) and not os.listdir(tmp_path)
  r = sweep("configs/sweeps/depth.py", f"--root={tmp_path}", "--dry_run")
  assert len(r.stdout.strip().splitlines()) == 16


def test_dry_run_into_a_closed_pipe_is_quiet(tmp_path):
  """`... --dry_run | head -1`: the reader stops early; no BrokenPipeError traceback, exit 1."""
  p = subprocess.Popen([sys.executable, "-m", "resnorm.sweep", "configs/sweeps/results.py", f"--root={tmp_path}",
                        "--dry_run"], cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  assert p.stdout.readline().startswith(sys.executable.encode())
  p.stdout.close()
  err = p.stderr.read().decode()
  assert p.wait(timeout=120) == 1 and "Traceback" not in err and "BrokenPipe" not in err, err[-2000:]


def test_smoke_sweep_runs_skips_and_reports(tmp_path, text_corpus):
  env = {**ENV, "RESNORM_SMOKE_DATA": text_corpus}
  root = tmp_path / "runs"
  r = sweep("configs/sweeps/smoke.py", f"--root={root}", "--jobs=2", env=env)
  assert r.returncode == 0, r.stdout + r.stderr
  assert "smoke-hc: completed" in r.stdout
  r = sweep("configs/sweeps/smoke.py", f"--root={root}", env=env)
  assert "2 already done, running 0" in r.stdout
  out = tmp_path / "report"
  r = subprocess.run([sys.executable, os.path.join(ROOT, "eval.py"), f"--sweep={root}/smoke-*",
                      f"--outdir={out}"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  rows = list(csv.DictReader(open(out / "sweep.csv")))
  assert [r["residual"] for r in rows] == ["hc", "pre_norm"] and all(r["status"] == "completed" for r in rows)
  assert rows[0]["max_gain"] and not rows[1]["max_gain"] and rows[1]["cos_last_quarter"]
  assert float(rows[1]["final_eval_loss"]) > 0
  assert (out / "sweep.md").exists() and (out / "sweep_loss.png").exists()
  # the per-run eval writes its JSON and figures
  r = subprocess.run([sys.executable, os.path.join(ROOT, "eval.py"), f"--workdir={root}/smoke-hc", "--all_steps"],
                     cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  files = set(os.listdir(root / "smoke-hc" / "eval"))
  assert {"step_2.json", "step_4.json", "loss.png", "cosine.png", "grad_norm.png", "gains.png", "mixing.png",
          "angular_distance.png", "evolution_grad_norm.png"} <= files


def test_empty_glob_is_an_input_error(tmp_path):
  r = subprocess.run([sys.executable, os.path.join(ROOT, "eval.py"), f"--sweep={tmp_path}/none*",
                      f"--outdir={tmp_path}/o"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and "matches no run directory" in r.stderr
