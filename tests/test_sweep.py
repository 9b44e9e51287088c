"""Sweeps: dry run, running points as train.py processes, skipping finished ones, and the sweep table."""
import csv
import os
import re
import subprocess
import sys

import pytest

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


@pytest.mark.integration
def test_smoke_sweep_runs_skips_and_reports(tmp_path, text_corpus):
  env = {**ENV, "RESNORM_SMOKE_DATA": text_corpus}
  root = tmp_path / "runs"
  r = sweep("configs/sweeps/smoke.py", f"--root={root}", "--jobs=2", env=env)
  assert r.returncode == 0, r.stdout + r.stderr
  assert r.stderr == ""  # nothing from a library: each point's output goes to its log
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
  # --paired reads the runs' names before writing anything: the smoke runs are not named ARM-COND-sSEED
  r = subprocess.run([sys.executable, os.path.join(ROOT, "eval.py"), f"--sweep={root}/smoke-*", "--paired=pre_norm",
                      f"--outdir={tmp_path / 'paired'}"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
  assert r.returncode == 2 and "is not named ARM-COND-sSEED" in r.stderr and len(r.stderr.strip().splitlines()) == 1
  assert not (tmp_path / "paired").exists()
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
  r = subprocess.run([sys.executable, os.path.join(ROOT, "eval.py"), "--paired=pre_norm", f"--workdir={tmp_path}"],
                     cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and r.stderr.strip() == "error: --paired needs --sweep"


@pytest.mark.parametrize("launcher", ["local", "slurm", "tpu"])
def test_a_point_train_py_would_refuse_stops_the_sweep_before_anything_is_written(tmp_path, launcher):
  """Every point is built and checked first: a data glob that matches nothing is one line and exit 2, with no
  point started, no job submitted and nothing written under --root."""
  root = tmp_path / "runs"
  r = sweep("configs/sweeps/smoke.py", f"--root={root}", f"--launcher={launcher}",
            env={**ENV, "RESNORM_SMOKE_DATA": str(tmp_path / "nomatch*.txt")})
  lines = r.stderr.strip().splitlines()
  assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
  assert lines[0] == (f"error: point 'smoke-pre_norm': data.paths: '{tmp_path}/nomatch*.txt' matches no file "
                      "(nothing was started or written)")
  assert not root.exists()


def test_a_broken_sweep_file_is_one_line(tmp_path):
  from resnorm.core.errors import InputError
  from resnorm.sweep import sweep
  for text, msg in [("def sweep(add)\n  pass\n", "SyntaxError: expected ':'"),
                    ("import no_such_module\n", "ModuleNotFoundError: No module named 'no_such_module'"),
                    ("def sweep(add):\n  add('configs/tiny.py', 'a', {'x': 1})\n", "TypeError: "),
                    ("def sweep(add):\n  add('configs/tiny.py', 'a', **{'model.nope': 1})\n", "model.nope")]:
    path = tmp_path / "s.py"
    path.write_text(text)
    with pytest.raises(InputError, match=re.escape(str(path)) + ".*" + re.escape(msg)):
      sweep.load_points(str(path))


def test_a_root_in_a_files_way_is_one_line_before_any_point_starts(tmp_path):
  (tmp_path / "afile").write_text("keep\n")
  r = subprocess.run([sys.executable, "-m", "resnorm.sweep", os.path.join(ROOT, "configs/sweeps/smoke.py"),
                      f"--root={tmp_path / 'afile'}"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
  assert r.returncode == 2 and r.stderr.strip().splitlines() == [
      f"error: --root={tmp_path / 'afile'}: cannot create {tmp_path / 'afile' / 'logs'}: Not a directory"], r.stderr
  assert (tmp_path / "afile").read_text() == "keep\n"


def test_bad_values_and_keys_of_a_point_are_refused_up_front(tmp_path):
  from resnorm.core.errors import InputError
  from resnorm.sweep import preflight
  good = {"config": "configs/tiny.py:hc", "name": "ok", "overrides": {"train.steps": 4}}
  preflight.check_points([good], ROOT)
  for over, msg in [({"train.lr": 0.0}, "train.lr=0.0 must be > 0"), ({"model.nope": 1}, "model.nope"),
                    ({"model.num_layers": "many"}, "model.num_layers"),
                    ({"data.name": "files", "data.paths": str(tmp_path / "x*.json")}, "matches no file")]:
    with pytest.raises(InputError, match="point 'bad': .*" + msg.replace(".", r"\.").replace("*", r"\*")):
      preflight.check_points([good, {**good, "name": "bad", "overrides": over}], ROOT)
  with pytest.raises(InputError, match="point 'ok': model.residual='nope' is unknown"):
    preflight.check_points([{**good, "config": "configs/tiny.py:nope"}], ROOT)
  broken = tmp_path / "broken.py"
  broken.write_text("def get_config(arg=None):\n  raise ValueError('no such scale')\n")
  with pytest.raises(InputError, match=f"config '{broken}:x' does not load: ValueError: no such scale"):
    preflight.check_points([{**good, "config": f"{broken}:x"}], ROOT)


def test_every_shipped_sweep_passes_its_own_preflight():
  from resnorm.sweep import preflight
  from resnorm.sweep.sweep import load_points
  for name in ("smoke", "placements", "depth", "stability", "results", "compare_2025", "compare_2026"):
    preflight.check_points(load_points(os.path.join(ROOT, "configs", "sweeps", f"{name}.py")), ROOT)


def test_slurm_without_sbatch_writes_nothing(tmp_path, text_corpus):
  root = tmp_path / "runs"
  r = sweep("configs/sweeps/smoke.py", f"--root={root}", "--launcher=slurm",
            env={**ENV, "RESNORM_SMOKE_DATA": text_corpus, "PATH": os.path.dirname(sys.executable)})
  lines = r.stderr.strip().splitlines()
  want = "error: --launcher=slurm: sbatch is not on PATH (run on a SLURM login node)"
  assert r.returncode == 2 and lines == [want], r.stderr[-2000:]
  assert not root.exists()


def test_sweep_prints_nothing_from_a_library(tmp_path):
  r = sweep("configs/sweeps/depth.py", f"--root={tmp_path}", "--dry_run")
  assert r.returncode == 0 and r.stderr == "", r.stderr


def test_package_corpora_are_built_once_before_points_start_together(monkeypatch):
  """Two points started together would both build pystdlib into one data_dir (the second rename fails): the sweep
  builds each corpus its points read once, first; text files need nothing built."""
  from resnorm.data import data
  from resnorm.sweep import preflight
  calls = []
  monkeypatch.setattr(data, "tfds_info", lambda dcfg, split: calls.append((dcfg.name, dcfg.data_dir, split)))
  pt = lambda name, **over: {"config": "configs/tiny.py", "name": name, "overrides": over}
  preflight.prepare_corpora([pt("a"), pt("b", seed=1), pt("c", **{"data.data_dir": "/elsewhere"}),
                             pt("d", **{"data.name": "text_files", "data.paths": "x*.txt"})], ROOT)
  assert [(n, s) for n, _, s in calls] == [("pystdlib", "train"), ("pystdlib", "train")]
  assert calls[1][1] == "/elsewhere"


def test_preflight_checks_every_distinct_data_source_name_and_paths(tmp_path, text_corpus):
  """Two points with the same data.name and different globs: the second's, which matches nothing, is refused."""
  from resnorm.core.errors import InputError
  from resnorm.sweep import preflight
  pt = lambda name, paths: {"config": "configs/tiny.py", "name": name,
                            "overrides": {"data.name": "text_files", "data.paths": paths}}
  preflight.check_points([pt("a", text_corpus), pt("b", text_corpus)], ROOT)
  with pytest.raises(InputError, match="point 'b': data.paths: .* matches no file"):
    preflight.check_points([pt("a", text_corpus), pt("b", str(tmp_path / "none*.txt"))], ROOT)


def test_corpora_are_built_first_from_two_jobs_on(tmp_path, monkeypatch):
  """--jobs=2 (not only above 2) builds each package corpus before the points start together; one job or one point
  needs nothing built ahead."""
  from resnorm.sweep import sweep as sweep_lib
  assert sweep_lib.build_corpora_first(2, 2) and sweep_lib.build_corpora_first(3, 5)
  assert not sweep_lib.build_corpora_first(1, 5) and not sweep_lib.build_corpora_first(2, 1)


def test_slurm_dry_run_checks_every_point_before_writing_its_script(tmp_path):
  root = tmp_path / "runs"
  r = sweep("configs/sweeps/smoke.py", f"--root={root}", "--launcher=slurm", "--dry_run",
            env={**ENV, "RESNORM_SMOKE_DATA": str(tmp_path / "nomatch*.txt")})
  assert r.returncode == 2 and "matches no file" in r.stderr, r.stderr[-2000:]
  assert not (root / "sweep.sbatch").exists() and not root.exists()
