"""The transfer study's grid (resnorm/results/transfer/grid.py): every run named once with the design's config and
its name parsed back, the base-shape cells run once under standard, the growth rule on synthetic records (the seeds
it has, at most max_extend, a diverged run inside), points with a record left out, and the records a later seed's mean
leaves outside the grid (a stray file refused)."""
import json
import os

import pytest

from resnorm.config import configlib
from resnorm.core.errors import InputError
from resnorm.results.engine import paths
from resnorm.results.transfer import design as D
from resnorm.results.transfer import grid


def test_every_run_is_named_once_and_its_config_is_the_designs():
  d = grid.design("full")
  pts = grid.points(d, None)
  names = [grid.run_name(p, s) for p, s in pts]
  assert len(names) == len(set(names))
  run_cells = {grid.run_cell(d, c) for c in grid.cells(d)}
  assert len(pts) == d["seeds"] * d["base_points"] * len(run_cells)
  assert [s for _, s in pts] == sorted(s for _, s in pts)
  for p, s in pts[:: max(1, len(pts) // 40)]:
    cfg = paths.base_config("cpu", grid.overrides(d, p, s))
    configlib.validate(cfg)
    m = cfg.model
    assert (m.residual, m.param, m.num_layers, m.d_model, m.d_model // m.num_heads, m.mlp_dim) == \
        (p.arm, p.param, p.layers, p.width, D.HEAD_DIM, 4 * p.width)
    assert (m.param_base.num_layers, m.param_base.d_model) == (D.BASE_DEPTH, D.BASE_WIDTH)
    assert (cfg.train.lr, cfg.train.steps, cfg.train.warmup_steps, cfg.seed) == (D.lr(p.k), D.STEPS, D.WARMUP, s)
    assert (cfg.train.batch_size, cfg.data.seq_len, cfg.data.eval_bytes) == (D.BATCH, D.SEQ, D.EVAL_BYTES)


def test_base_shape_cells_run_once_under_standard_and_are_read_by_every_parametrization():
  d = grid.design("full")
  for p in ("completep", "mup"):
    c = grid.Cell("pre_norm", p, D.BASE_DEPTH, D.BASE_WIDTH)
    assert grid.run_cell(d, c) == c._replace(param="standard")
  c = grid.Cell("pre_norm", "completep", 96, D.WIDTH)
  assert grid.run_cell(d, c) == c
  assert not [c for c in grid.cells(d) if c.arm == "keel" and c.param == "completep"]


def _records_from(d, tmp, losses):
  """Minimal records (final loss only) for the growth rule, which reads nothing else."""
  for (p, s), y in losses.items():
    path = grid.record_path(str(tmp), d, p, s)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    json.dump({"status": "completed" if y is not None else "diverged", "final_eval_loss": y}, open(path, "w"))


def test_a_cell_grows_past_its_edge_on_the_seeds_it_has_and_at_most_max_extend():
  d = grid.design("test")
  c = grid.Cell("pre_norm", "standard", d["depths"][-1], d["width"])
  ks = grid.base_ks(d, c)
  falling = lambda k: 3.0 - 0.1 * k  # best at the highest lr: grows upward
  part = {(grid.Point(*c, k), 0): falling(k) for k in ks[:-1]}
  assert grid.cell_ks(d, c, lambda p, s: part.get((p, s))) == ks  # no seed has every point: no growth yet
  one = {(grid.Point(*c, k), 0): falling(k) for k in range(-20, 40)}
  assert grid.cell_ks(d, c, lambda p, s: one.get((p, s))) == ks + list(range(ks[-1] + 1, ks[-1] + 1 + d["max_extend"]))
  # the mean over the seeds that have every point: seed 1's curve outweighs seed 0's and the best point is inside
  two = {**one, **{(grid.Point(*c, k), 1): 3.0 + 0.5 * abs(k - ks[1]) for k in range(-20, 40)}}
  assert grid.cell_ks(d, c, lambda p, s: two.get((p, s))) == ks
  rising = {(grid.Point(*c, k), s): 3.0 + 0.1 * k for k in range(-20, 40) for s in range(d["seeds"])}
  assert grid.cell_ks(d, c, lambda p, s: rising.get((p, s)))[0] == ks[0] - d["max_extend"]
  # a diverged run counts at FAIL_LOSS: a divergence at the top lr keeps the best point inside
  bowl = {(grid.Point(*c, k), s): (D.FAIL_LOSS if k == ks[-1] else falling(k)) for k in ks for s in range(2)}
  assert grid.cell_ks(d, c, lambda p, s: bowl.get((p, s))) == ks


def test_points_with_a_record_are_left_out_and_growth_is_read_from_the_records(tmp_path):
  d = grid.design("test")
  pts = grid.points(d, None)
  _records_from(d, tmp_path, {pts[0]: 3.0})
  added = []
  grid.add_points(lambda **kw: added.append(kw["name"]), d, str(tmp_path))
  assert len(added) == sum(s == 0 for _, s in pts) - 1 and grid.run_name(*pts[0]) not in added
  c = grid.Cell("pre_norm", "standard", d["depths"][0], d["width"])
  _records_from(d, tmp_path, {(grid.Point(*c, k), s): 3.0 - 0.1 * k for k in grid.base_ks(d, c)
                              for s in range(d["seeds"])})
  grown = [p for p, _ in grid.points(d, str(tmp_path)) if (p.arm, p.param, p.layers, p.width) == c]
  assert max(p.k for p in grown) == grid.base_ks(d, c)[-1] + 1


def test_a_run_name_parses_back_to_its_point_and_seed():
  d = grid.design("full")
  for p, s in grid.points(d, None):
    assert grid.parse_name(grid.run_name(p, s)) == (p, s)
  p = grid.Point("attn_res_block", "completep", 96, 32, -3)
  assert grid.parse_name(grid.run_name(p, 2)) == (p, 2)
  for bad in ("notes", "pre_norm-standard-L12-d32-kp3", "pre_norm-standard-L12-d32-km0-s0", "pre_norm-L12-d32-kp3-s0"):
    assert grid.parse_name(bad) is None, bad


def test_records_a_cells_growth_no_longer_reaches_are_outside_the_grid(tmp_path):
  d = grid.design("test")
  c = grid.Cell("pre_norm", "standard", d["depths"][-1], d["width"])
  ks = grid.base_ks(d, c)
  # seed 0 alone grows the cell upward; seed 1's bowl then puts the mean's best point inside the base steps
  seed0 = {(grid.Point(*c, k), 0): 3.0 - 0.1 * k for k in ks + [ks[-1] + 1, ks[-1] + 2]}
  _records_from(d, tmp_path, seed0)
  assert grid.outside(d, str(tmp_path)) == []
  assert [p.k for p, s in grid.points(d, str(tmp_path)) if p[:4] == c and s == 0][-1] == ks[-1] + 2
  _records_from(d, tmp_path, {(grid.Point(*c, k), 1): 3.0 + abs(k - ks[1]) for k in ks})
  assert grid.outside(d, str(tmp_path)) == [(grid.Point(*c, k), 0) for k in (ks[-1] + 1, ks[-1] + 2)]
  (tmp_path / d["corpus"] / "notes.json").write_text("{}")
  with pytest.raises(InputError, match="notes.json is not named as a run"):
    grid.outside(d, str(tmp_path))
