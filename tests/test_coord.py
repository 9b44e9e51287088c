"""Coordinate checks (resnorm/coord): Pre-Norm's activations and their change since init stay within FACTOR over a
4x span of width under µP and of depth under CompleteP after 10 steps at one lr, and leave it under the standard
parametrization on both axes (so the check can fail); the command's output and bad input."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from configs import base
from resnorm.coord import coord

FACTOR = 1.5  # max / min over the rungs; measured: µP 1.2x over width, CompleteP 1.25x over depth, standard 3-4x
LADDER = coord.Ladder(widths=(32, 128), depths=(2, 8), width_depth=2, depth_width=32, head_dim=16)
KINDS = ("act", "delta")


def _check(p, ladder):
  c = base.get_config("cpu")
  c.model.residual, c.model.param, c.model.remat = "pre_norm", p, "none"
  c.train.lr, c.train.warmup_steps, c.train.schedule, c.train.grad_clip = 3e-3, 0, "constant", 0.0
  return coord.check(c, ladder, steps=10, batch=4, seq_len=32)


@pytest.fixture(scope="module")
def checks():
  only_width = coord.Ladder(widths=LADDER.widths, depths=(), width_depth=2, head_dim=16)
  only_depth = coord.Ladder(widths=(), depths=LADDER.depths, depth_width=32, head_dim=16)
  return {"standard": _check("standard", LADDER), "mup": _check("mup", only_width),
          "completep": _check("completep", only_depth)}


@pytest.mark.integration
def test_mup_flat_in_width_completep_flat_in_depth_standard_neither(checks):
  mup = coord.spread(checks["mup"], "width", 10, KINDS)
  completep = coord.spread(checks["completep"], "depth", 10, KINDS)
  assert len(mup) == len(completep) == 2 * len(coord.ACTIVATIONS)
  assert max(mup.values()) < FACTOR, mup
  assert max(completep.values()) < FACTOR, completep
  for axis in ("width", "depth"):
    std = coord.spread(checks["standard"], axis, 10, KINDS)
    assert max(std.values()) > 2 * FACTOR, (axis, std)


@pytest.mark.integration
def test_update_sizes_follow_the_rules(checks):
  """Per coordinate, a hidden matrix's Adam update is lr / m_d under µP (4x smaller at 4x the width) and the same
  at every depth under CompleteP (alpha = 1: lr x m_L^0); a norm gain's is lr x m_L^0 too."""
  upd = lambda res, axis, rung, role: res[axis][str(rung)]["update"][role][0]
  assert upd(checks["mup"], "width", 32, "hidden") / upd(checks["mup"], "width", 128, "hidden") == pytest.approx(4, rel=0.02)
  for role in ("hidden", "vector"):
    assert upd(checks["completep"], "depth", 2, role) == pytest.approx(upd(checks["completep"], "depth", 8, role),
                                                                       rel=0.02)


ENV = {**os.environ, "JAX_PLATFORMS": "cpu"}
CMD = [sys.executable, "-m", "resnorm.coord", "--residuals=hc", "--params=completep", "--widths=32", "--depths=1,2",
       "--depth_width=32", "--steps=2", "--batch=2", "--seq_len=16"]


@pytest.mark.integration
def test_the_command_writes_json_and_figure(tmp_path):
  r = subprocess.run(CMD + [f"--out={tmp_path}/out"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  res = json.load(open(tmp_path / "out" / "coord_hc_completep.json"))
  assert set(res["depth"]) == {"1", "2"} and len(res["depth"]["2"]["act"]["stream"]) == 3
  assert (tmp_path / "out" / "coord_hc_completep.png").stat().st_size > 0
  assert "hc completep over depth:" in r.stdout


@pytest.mark.parametrize("bad, words", [
    (["--params=bogus"], "--params: 'bogus' is unknown"),
    (["--residuals=ngpt"], "does not compose with model.residual='ngpt'"),
    pytest.param(["--widths=x"], "must be integers", marks=pytest.mark.integration),
    pytest.param(["--head_dim=5"], "is not a multiple of --head_dim=5", marks=pytest.mark.integration)])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, bad, words):
  r = subprocess.run(CMD + bad + [f"--out={tmp_path}/bad"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                     timeout=300)
  assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
  assert not (tmp_path / "bad").exists()


def test_the_pages_table_is_the_committed_checks():
  """docs/transfer_checks.md's table (appended to docs/transfer.md by its builder) equals resnorm.coord.table over
  the committed JSON, in its order."""
  order = [(r, p) for r in ("pre_norm", "post_norm", "hc", "attn_res_block") for p in ("standard", "mup", "completep")]
  results = [json.load(open(os.path.join(ROOT, "docs", "figures", "transfer", f"coord_{r}_{p}.json"))) for r, p in order]
  page = open(os.path.join(ROOT, "docs", "transfer_checks.md")).read()
  start = page.index("<!-- coord table")
  block = page[page.index("\n", start) + 1: page.index("<!-- /coord table -->")]
  assert block.strip() == coord.table(results)
  assert all(r["steps"] == 10 and r["ladder"]["depths"] == [12, 24, 48, 96] for r in results)


def test_spread_reads_the_step_asked_for():
  """Activations are recorded from step 0 (init) on, updates from the first step: spread at step s reads the
  activation after s steps and the s-th update, max over min across the rungs."""
  rung = lambda k: {"act": {"stream": [1.0, 2.0 * k, 3.0 * k]}, "delta": {"stream": [0.0, 1.0, 5.0 * k]},
                    "update": {"hidden": [7.0 * k, 1.0]}}
  res = {"width": {"32": rung(1), "64": rung(4)}}
  assert coord.spread(res, "width", 2) == {"act/stream": 4.0, "delta/stream": 4.0, "update/hidden": 1.0}
  assert coord.spread(res, "width", 1) == {"act/stream": 4.0, "delta/stream": 1.0, "update/hidden": 4.0}
