"""The transfer study's runs (resnorm/results/transfer/design.py): one per cell, learning-rate step k and seed, named
<arm>-<param>-L<layers>-d<width>-k<p|m><|k|>-s<seed>, each run's record under results/transfer/<corpus>/<name>.json. A
cell at the base shape runs once, under standard (design.run_param), and is read for every parametrization.

A cell's grid is its base steps plus its growth (design.RULES["growth"]), read from the records so far: the sweep
file (configs/sweeps/transfer.py) and the report compute the same grid from the same records, and a stopped grid
resumes anywhere. Imports nothing heavy: the sweep file imports this module.
"""
import json
import math
import os
import re
from typing import NamedTuple

import numpy as np

from resnorm.core.errors import check
from resnorm.results.engine import paths
from resnorm.results.transfer import design as D

DEFAULT_RECORDS = "results/transfer"
SWEEP = os.path.join("configs", "sweeps", "transfer.py")
SIZES = ("full", "test")


class Cell(NamedTuple):
  arm: str
  param: str
  layers: int
  width: int


class Point(NamedTuple):
  """One run before its seed: the cell it is made under (run_param's parametrization) and its lr step."""
  arm: str
  param: str
  layers: int
  width: int
  k: int


# The test's size: 1 and 2 layers at width 8, widths 8 and 16 at 1 layer, 8 steps, 3 lr points, 2 seeds.
TEST = {"depths": (1, 2), "widths": (8, 16), "base_depth": 1, "base_width": 8, "width": 8, "head_dim": 4,
        "depth_arms": ("pre_norm", "keel"), "width_arms": ("pre_norm",), "seeds": 2, "steps": 8, "warmup": 1,
        "base_points": 3, "max_extend": 2, "center": 15,
        "common": {"data.seq_len": 16, "train.batch_size": 4, "data.eval_bytes": 2048, "data.eval_batch_size": 32,
                   "model.remat": "none"}}


def design(size: str | None = None) -> dict:
  """The study at a size (full: design.py; test: TEST, for the end-to-end test)."""
  size = size or os.environ.get(paths.SIZE_ENV) or "full"
  check(size in SIZES, f"the transfer study has sizes {' and '.join(SIZES)}, not {size!r}")
  d = {"size": size, "depths": D.DEPTHS, "widths": D.WIDTHS, "base_depth": D.BASE_DEPTH, "base_width": D.BASE_WIDTH,
       "width": D.WIDTH, "head_dim": D.HEAD_DIM, "depth_arms": D.DEPTH_ARMS, "width_arms": D.WIDTH_ARMS,
       "depth_params": D.DEPTH_PARAMS, "width_params": D.WIDTH_PARAMS, "seeds": D.SEEDS, "steps": D.STEPS,
       "warmup": D.WARMUP, "base_points": D.BASE_POINTS, "max_extend": D.MAX_EXTEND, "center": None,
       "corpus": D.CORPUS,
       "common": {"data.seq_len": D.SEQ, "train.batch_size": D.BATCH, "data.eval_bytes": D.EVAL_BYTES,
                  "model.remat": "none"}}
  if size == "test":
    d.update({k: v for k, v in TEST.items() if k != "common"})
    d["common"] = {**d["common"], **TEST["common"]}
  return d


def cells(d) -> list[Cell]:
  """Every cell the study reports: the depth axis, then the width axis (a base-shape cell under each param)."""
  out = [Cell(a, p, L, d["width"]) for a in d["depth_arms"] for p in d["depth_params"]
         if (a, p) not in D.REFUSED for L in d["depths"]]
  out += [Cell(a, p, d["base_depth"], w) for a in d["width_arms"] for p in d["width_params"] for w in d["widths"]]
  return list(dict.fromkeys(out))


def run_cell(d, c: Cell) -> Cell:
  """The cell whose runs a cell reads: under standard at the base shape, where every parametrization is standard."""
  base = (c.layers, c.width) == (d["base_depth"], d["base_width"])
  return c._replace(param="standard") if base else c


def center(d, c: Cell) -> int:
  if d["center"] is not None:
    return d["center"]
  return D.center(c.param, c.layers, c.width)


def base_ks(d, c: Cell) -> list[int]:
  k0 = center(d, run_cell(d, c)) - d["base_points"] // 2
  return list(range(k0, k0 + d["base_points"]))


def run_name(p: Point, seed: int) -> str:
  """k's sign as a letter (kp3: +3, km2: -2): a run's name is its workdir's, which keeps letters, digits, - and _."""
  return f"{p.arm}-{p.param}-L{p.layers}-d{p.width}-k{'m' if p.k < 0 else 'p'}{abs(p.k)}-s{seed}"


def record_path(records_dir: str, d, p: Point, seed: int) -> str:
  return paths.record_path(records_dir, d["corpus"], run_name(p, seed))


def diverged(rec: dict) -> bool:
  """A run that diverged, or ended without a finite eval loss."""
  loss = rec.get("final_eval_loss")
  return rec["status"] == "diverged" or loss is None or not math.isfinite(loss)


def final_loss(rec: dict | None) -> float | None:
  """A record's loss for the study: FAIL_LOSS for a diverged run; None without a record."""
  if rec is None:
    return None
  return D.FAIL_LOSS if diverged(rec) else rec["final_eval_loss"]


def read_loss(records_dir: str | None, d, p: Point, seed: int) -> float | None:
  if not records_dir:
    return None
  path = record_path(records_dir, d, p, seed)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return final_loss(json.load(f))


def cell_ks(d, c: Cell, loss) -> list[int]:
  """A cell's grid so far: its base steps, grown by the growth rule on the mean over the seeds that have every point
  of its grid so far recorded (none: no growth yet). loss(point, seed) -> float or None (no record yet)."""
  rc, ks = run_cell(d, c), base_ks(d, c)
  grown = {-1: 0, 1: 0}
  while True:
    ys = [[loss(Point(*rc, k), s) for s in range(d["seeds"])] for k in ks]
    seeds = [s for s in range(d["seeds"]) if all(row[s] is not None for row in ys)]
    if not seeds:
      return ks
    i = int(np.argmin([np.mean([row[s] for s in seeds]) for row in ys]))
    side = -1 if i == 0 else 1 if i == len(ks) - 1 else 0
    if not side or grown[side] >= d["max_extend"]:
      return ks
    grown[side] += 1
    ks = [ks[0] - 1] + ks if side < 0 else ks + [ks[-1] + 1]


def points(d, records_dir: str | None) -> list[tuple[Point, int]]:
  """(point, seed) of every run the grid holds given the records so far, seed-major (whole seeds finish first),
  each distinct run once."""
  loss = lambda p, s: read_loss(records_dir, d, p, s)
  per_cell = {}
  for c in cells(d):
    rc = run_cell(d, c)
    per_cell.setdefault(rc, set()).update(cell_ks(d, c, loss))
  return [(Point(*rc, k), s) for s in range(d["seeds"]) for rc, ks in per_cell.items() for k in sorted(ks)]


def overrides(d, p: Point, seed: int) -> dict:
  w, L = p.width, p.layers
  return {"seed": seed, "data.name": d["corpus"], "model.residual": p.arm, "model.num_layers": L,
          "model.d_model": w, "model.num_heads": w // d["head_dim"], "model.mlp_dim": 4 * w,
          "model.param": p.param, "model.param_base.num_layers": d["base_depth"],
          "model.param_base.d_model": d["base_width"], "model.param_base.head_dim": d["head_dim"],
          "train.lr": D.lr(p.k), "train.steps": d["steps"], "train.warmup_steps": d["warmup"],
          "train.eval_every": d["steps"], "train.ckpt_every": d["steps"], "train.diag_every": 0, **d["common"]}


def parse_name(name: str) -> tuple[Point, int] | None:
  """run_name's inverse: (point, seed), or None for a name run_name does not make."""
  m = re.fullmatch(r"([a-z0-9_]+)-([a-z0-9_]+)-L(\d+)-d(\d+)-k([pm])(\d+)-s(\d+)", name)
  if not m:
    return None
  arm, param, L, w, sign, k, s = m.groups()
  p = Point(arm, param, int(L), int(w), -int(k) if sign == "m" else int(k))
  return (p, int(s)) if run_name(p, int(s)) == name else None


def outside(d, records_dir: str | None, held=None) -> list[tuple[Point, int]]:
  """The records in the grid's directory that the grid, as the records now grow it, does not hold: runs a cell's
  growth added while fewer seeds decided it (the mean over the seeds that have every point of its grid, design.RULES
  ["growth"]), kept and listed but read by no statistic. A .json named as no run of the grid is refused in one line."""
  folder = os.path.join(records_dir, d["corpus"]) if records_dir else ""
  if not folder or not os.path.isdir(folder):
    return []
  held = set(points(d, records_dir) if held is None else held)
  out = []
  for f in sorted(n for n in os.listdir(folder) if n.endswith(".json")):
    ps = parse_name(f[:-len(".json")])
    check(ps is not None, f"{os.path.join(folder, f)} is not named as a run of the transfer grid "
          "(<arm>-<param>-L<layers>-d<width>-k<p|m><k>-s<seed>.json): move it out of the records directory")
    if ps not in held:
      out.append(ps)
  return out


def missing(d, records_dir: str | None) -> list[tuple[Point, int]]:
  """The runs of the lowest seed that the grid holds now without a record: a seed's runs finish, and grow their
  cells, before the next seed's start (a grid stopped anywhere leaves whole seeds)."""
  runs = [(p, s) for p, s in points(d, records_dir)
          if not (records_dir and os.path.exists(record_path(records_dir, d, p, s)))]
  first = min((s for _, s in runs), default=None)
  return [(p, s) for p, s in runs if s == first]


def add_points(add, d, records_dir: str | None) -> None:
  """The sweep's points: the missing runs (missing())."""
  for p, s in missing(d, records_dir):
    add(config="configs/pre_norm_12l.py", name=run_name(p, s), **overrides(d, p, s))
