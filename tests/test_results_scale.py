"""resnorm.results at the accelerator scale (--scale=tpu): its design and device-hour budget, the report from a partly
finished grid, and the launcher's refusals. Through a real SLURM: tests/test_slurm.py."""
import os
import subprocess
import sys

import pytest

from resnorm.core.errors import InputError
from resnorm.results.engine import paths
from resnorm.results.v4 import claims as cl
from resnorm.results.v4 import grid
from test_cli import ENV, ROOT
from test_results import _fake_run, sweep_file


def test_tpu_design_and_its_budget(monkeypatch):
  """--scale=tpu: the :tpu configs on the user's shards, fewer cells than the CPU design, and the device-hours the
  sweep file's docstring states (recomputed from resnorm.model.flops)."""
  monkeypatch.delenv(grid.TPU_DATA_ENV, raising=False)
  with pytest.raises(InputError, match="--scale=tpu needs --data_paths"):
    grid.design(sweep_file.FULL, "full", "tpu", sweep_file.TPU)
  monkeypatch.setenv(grid.TPU_DATA_ENV, "gs://b/c4-*.json.gz")
  with pytest.raises(InputError, match="no quick size"):
    grid.design(sweep_file.FULL, "quick", "tpu", sweep_file.TPU)
  d = grid.design(sweep_file.FULL, "full", "tpu", sweep_file.TPU)
  assert d["config"] == "configs/base.py:tpu" and d["corpora"] == {
      "web": {"data.name": "files", "data.paths": "gs://b/c4-*.json.gz"}}
  names = [grid.run_name(r, s, c) for c, r, s in grid.points(d)]
  assert len(names) == len(set(names)) == 120 and all("-web-" in n for n in names)
  assert len(names) < len(grid.points(grid.design(sweep_file.FULL, "full")))
  points = []
  monkeypatch.setenv(grid.SCALE_ENV, "tpu")  # what resnorm.results sets for the sweep it starts
  sweep_file.sweep(lambda config, name, **o: points.append((config, name, o)))
  assert {c for c, _, _ in points} == {"configs/base.py:tpu"} and [n for _, n, _ in points] == names
  assert sweep_file.device_hours(d, "v4-8") == pytest.approx(56, abs=1)  # the docstring's figures
  assert sweep_file.device_hours(d, "H100") == pytest.approx(62, abs=1)
  assert sweep_file.device_hours(d, "v4-8", mfu=0.2) == pytest.approx(2 * sweep_file.device_hours(d, "v4-8"))
  deeper = {**d, "map_depths": (12, 48)}
  assert sweep_file.device_hours(deeper, "v4-8") - sweep_file.device_hours(d, "v4-8") == pytest.approx(112, abs=2)
  # one run by hand: Pre-Norm, 12 layers, d 1024, MLP 4096, 1024 tokens, 256 x 1024 x 2000 tokens, 3 x forward
  D, F, L, T = 1024, 4096, 12, 1024
  fwd = 2 * (L * (4 * D * D + 2 * D * F) + D * 320) + L * 4 * T * D
  one = {**d, "seeds": (0,), "lrs": (3e-4,), "warmup_fracs": (0.1,), "variants": ("pre_norm",), "depths": (12,),
         "long": {**d["long"], "steps": 2000}, "c3": None, "bf16_tags": ()}
  runs = [r for _, r, _ in grid.points(one)]
  # the reference run of each arm (C4 adds Post-Norm) and C8's Pre-Norm without its final norm: equal FLOPs
  assert sorted((r.variant, r.layers, r.steps, r.tag) for r in runs) == [
      ("post_norm", 12, 2000, ""), ("pre_norm", 12, 2000, ""), ("pre_norm", 12, 2000, "nofinal")]
  hours = sweep_file.device_hours(one, "v4-8")
  assert hours == pytest.approx(len(runs) * 3 * fwd * 256 * 1024 * 2000 / (4 * 275e12 * 0.4) / 3600, rel=0.02)


def test_unfinished_lists_every_run_not_finished(tmp_path):
  """The report of a partly finished grid names each run that has not finished, with its state."""
  from resnorm.results.v4 import page as results_md
  d = grid.design(sweep_file.FULL, "test")
  pts = grid.points(d)
  (c0, r0, s0), (c1, r1, s1) = pts[0], pts[1]
  _fake_run(tmp_path, r0, s0, 3.0, corpus=c0)
  _fake_run(tmp_path, r1, s1, 3.0, status="interrupted", corpus=c1)
  Rs = {c: cl.Runs(str(tmp_path), d, c) for c in d["corpora"]}
  out = results_md.unfinished(Rs, d)
  assert len(out) == len(pts) - 1
  assert out[0] == f"`{grid.run_name(r1, s1, c1)}` (interrupted)"
  assert out[1] == f"`{grid.run_name(*pts[2][1:], pts[2][0])}` (no summary yet: pending or running)"


def test_bad_launcher_flag_is_one_line_and_no_report(tmp_path, text_corpus):
  """A --slurm.* value the sweep refuses: resnorm.results passes on its exit 2 and its one line, and writes no report
  (not one of nothing, from init diagnostics that would otherwise run)."""
  out = tmp_path / "out"
  r = subprocess.run([sys.executable, "-m", "resnorm.results", "--scale=tpu", "--launcher=slurm",
                      "--slurm.nodes=0", "--nomemory_plan", f"--root={tmp_path / 'runs'}", f"--out={out}", f"--data_paths={text_corpus}"],
                     cwd=ROOT, env={**ENV, paths.SIZE_ENV: "test"}, capture_output=True, text=True, timeout=300)
  assert r.returncode == 2 and "--slurm.nodes=0 must be >= 1" in r.stderr and "Traceback" not in r.stderr, r.stderr
  assert not (out / "results.md").exists()


@pytest.mark.integration  # the report and every figure, end to end
def test_report_of_a_grid_with_nothing_finished_draws_every_figure(tmp_path):
  """A partial report (the SLURM or TPU grid still running) writes every figure, even one whose runs are all
  missing; a log axis with no data must not crash it (it did, on a real partial grid)."""
  from resnorm.results.v4 import figs as results_figs
  from resnorm.results.engine.spec import Plan
  from resnorm.results.v4 import spec as v4
  d = grid.design(sweep_file.FULL, "test")
  plan = Plan(d, None, str(tmp_path / "out"), str(tmp_path / "runs"), None)
  ledger, Rs = v4.SPEC.read(plan)
  text = "\n".join(v4.SPEC.build(plan, ledger, Rs, 0.0).page)
  assert f"**Unfinished: {len(grid.points(d))} of {len(grid.points(d))} runs**" in text
  # a run that has not finished is unfinished, not a statistic that had not settled
  assert "Parts whose own statistic was not shown settled by the end of their runs: none." in text
  for c in d["corpora"]:
    drawn = sorted(os.listdir(tmp_path / "out" / "figures" / c))
    assert len(drawn) == len(set(drawn)) >= len(results_figs.FIGURES), drawn


@pytest.mark.parametrize("launcher", ["local", pytest.param("slurm", marks=pytest.mark.integration)])
def test_data_that_matches_nothing_starts_and_writes_nothing(tmp_path, launcher):
  """--data_paths matching no file: the 120-run design is refused in one line before the first run starts or the
  first job is queued; neither the root nor the report directory is created."""
  root, out = tmp_path / "runs", tmp_path / "out"
  r = subprocess.run([sys.executable, "-m", "resnorm.results", "--scale=tpu", f"--launcher={launcher}",
                      f"--root={root}", f"--out={out}", f"--data_paths={tmp_path}/nomatch/*.json.gz"],
                     cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
  lines = r.stderr.strip().splitlines()
  assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: point "), r.stderr[-2000:]
  assert f"'{tmp_path}/nomatch/*.json.gz' matches no file" in lines[0]
  assert not root.exists() and not out.exists()
