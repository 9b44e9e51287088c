"""The transfer study's tables from its records alone (design: resnorm/results/transfer/design.py; statistics:
fit.py): per cell its curve, optimum and intervals; per placement, parametrization and axis the shift of the
optimum from the axis's base to its top, its intervals and verdict, the penalty of reusing the base's optimum, its
effective speedup, and (standard, depth) the effective-depth law's prediction placed against it.
"""
import math
from typing import NamedTuple

import numpy as np

from resnorm.results import records
from resnorm.results.engine.ledger import Ledger
from resnorm.results.transfer import design as D
from resnorm.results.transfer import fit
from resnorm.results.transfer import grid


class CellStat(NamedTuple):
  cell: grid.Cell
  ks: list            # its grid
  losses: np.ndarray  # [len(ks), seeds], nan where a run has no record yet, FAIL_LOSS where it diverged
  failed: np.ndarray  # [len(ks), seeds] bool: the run diverged
  complete: bool      # every run of its (final) grid has a record
  opt: fit.Optimum    # of the seed-mean curve
  seed_opts: list     # per seed
  boot: tuple         # bootstrap interval of the optimum
  t: tuple            # t interval over per-seed optima
  stalled: bool       # every run has its record, and each says it ended above the byte-unigram baseline
                      # (learned_beyond_unigram false; a record without the flag: not stalled): a plateau's curve


class Shift(NamedTuple):
  arm: str
  param: str
  axis: str           # depth | width
  base: CellStat
  top: CellStat
  value: float        # seed-mean optimum at the top minus at the base, sqrt(2) steps
  boot: tuple
  t: tuple
  hull: tuple
  verdict: str        # transfers | does not transfer | undecided | failed (edge) | pending
  penalty: float      # nats/byte: the top's loss at the base's optimum minus at its own
  penalty_bound: str  # ">=" where the base's optimum lies beyond the top's grid
  speedup: float      # C(loss at the base's lr) / C(loss at its own optimum) on Pre-Norm's curve; nan: undefined
  law: str            # standard, depth: the interval against the effective-depth law's prediction; else ""

  @property
  def stalled(self) -> str:
    """Which of the shift's cells stalled: "", "base", "top" or "both" (the verdict stands; the page says so)."""
    base, top = bool(self.base.stalled), bool(self.top.stalled)
    return "both" if base and top else "base" if base else "top" if top else ""

  @property
  def edge_seeds(self) -> int:
    """Seeds whose own optimum at the base or the top lies on its grid's edge: a bound, which the t interval reads
    as a value and the bootstrap, in that seed's one-seed resamples, as undefined (its interval then unbounded)."""
    if not (self.base.complete and self.top.complete):
      return 0
    return sum("edge" in (a.flag, b.flag) for a, b in zip(self.base.seed_opts, self.top.seed_opts))


class Study:
  """Every record of the grid as the records grow it, read and checked (a damaged record, one under another's
  name, or under two names, is refused in one line)."""

  def __init__(self, d, records_dir: str):
    self.d, self.records_dir, self.ledger = d, records_dir, Ledger(records_dir)
    held = grid.points(d, records_dir)
    for p, s in held:
      self.ledger.read((p, s), grid.record_path(records_dir, d, p, s), records.identity(p, d["corpus"], s))
    # checked as every record is (whole, its name's, one design), but no statistic reads them
    self.outside = {(p, s): self.ledger.read(None, grid.record_path(records_dir, d, p, s),
                                             records.identity(p, d["corpus"], s))
                    for p, s in grid.outside(d, records_dir, held)}
    self.recs, self.fingerprints, self.designs = self.ledger.recs, self.ledger.fingerprints, self.ledger.designs
    self.total = len(held)

  def loss(self, p: grid.Point, s: int) -> float | None:
    return grid.final_loss(self.recs.get((p, s)))

  def learned(self, p: grid.Point, s: int) -> bool | None:
    """Whether a run ended below the byte-unigram baseline (its record's flag); None without a record or flag."""
    return (self.recs.get((p, s)) or {}).get("learned_beyond_unigram")

  def failed(self, p: grid.Point, s: int) -> bool:
    """Whether a run diverged (its loss counts at FAIL_LOSS): its status, not its loss's size."""
    rec = self.recs.get((p, s))
    return rec is not None and grid.diverged(rec)

  def cell(self, c: grid.Cell) -> CellStat:
    rc = grid.run_cell(self.d, c)
    ks = grid.cell_ks(self.d, c, self.loss)
    n = self.d["seeds"]
    y = np.array([[self.loss(grid.Point(*rc, k), s) if self.loss(grid.Point(*rc, k), s) is not None else np.nan
                   for s in range(n)] for k in ks], float)
    complete = bool(np.isfinite(y).all())
    failed = np.array([[self.failed(grid.Point(*rc, k), s) for s in range(n)] for k in ks], bool).reshape(y.shape)
    mean_opt = lambda idx: fit.optimum(ks, y[:, idx].mean(axis=1), failed[:, idx].any(axis=1)) if complete else \
        fit.Optimum(math.nan, math.nan, "pending", (), ())
    opt = mean_opt(np.arange(n))
    seed_opts = [fit.optimum(ks, y[:, s], failed[:, s]) if complete else opt for s in range(n)]
    boot = fit.bootstrap(lambda idx: _defined(mean_opt(idx)), n) if complete else (math.nan, math.nan)
    t = fit.t_interval([o.k for o in seed_opts]) if complete else (math.nan, math.nan)
    learned = [self.learned(grid.Point(*rc, k), s) for k in ks for s in range(n)]
    stalled = all(x is False for x in learned)
    return CellStat(c, ks, y, failed, complete, opt, seed_opts, boot, t, stalled)

  def cells(self) -> dict:
    return {c: self.cell(c) for c in grid.cells(self.d)}

  def shifts(self, stats: dict) -> list[Shift]:
    out = []
    for arm, param, axis in axes(self.d):
      base, top = stats[_cell(self.d, arm, param, axis, "base")], stats[_cell(self.d, arm, param, axis, "top")]
      out.append(self._shift(stats, arm, param, axis, base, top))
    return out

  def _shift(self, stats, arm, param, axis, base, top) -> Shift:
    nan2 = (math.nan, math.nan)
    if not (base.complete and top.complete):
      return Shift(arm, param, axis, base, top, math.nan, nan2, nan2, nan2, "pending", math.nan, "", math.nan, "")
    n = self.d["seeds"]
    failed = lambda cs: cs.failed

    def stat(idx):
      a = fit.optimum(base.ks, base.losses[:, idx].mean(axis=1), failed(base)[:, idx].any(axis=1))
      b = fit.optimum(top.ks, top.losses[:, idx].mean(axis=1), failed(top)[:, idx].any(axis=1))
      return _defined(b) - _defined(a)
    value = top.opt.k - base.opt.k
    boot = fit.bootstrap(stat, n)
    t = fit.t_interval([b.k - a.k for a, b in zip(base.seed_opts, top.seed_opts)])
    hull = fit.hull(boot, t)
    # every point diverged: the growth rule's best point is then its lowest edge (all tie at FAIL_LOSS)
    edge = bool({"edge", "failed"} & {base.opt.flag, top.opt.flag})
    verdict = "failed (edge)" if edge else fit.verdict(hull, D.EFFECT)
    at_base, bound = fit.loss_at(top.opt, top.ks, top.losses.mean(axis=1), base.opt.k)
    penalty = at_base - top.opt.loss
    speedup = self._speedup(stats, param, axis, at_base, top.opt.loss)
    law = ""
    if param == "standard" and axis == "depth" and all(np.isfinite(hull)):
      pred = law_shift(self.d)
      law = "inside" if hull[0] <= pred <= hull[1] else ("above" if hull[0] > pred else "below")
    return Shift(arm, param, axis, base, top, value, boot, t, hull, verdict, penalty, bound, speedup, law)

  def _speedup(self, stats, param, axis, loss_transfer, loss_own) -> float:
    """Pre-Norm's curve along the axis under `param`: its seed-mean optimal loss against training FLOPs."""
    f = pre_curve_fit(self.d, stats, param, axis)
    if f is None or not (np.isfinite(loss_transfer) and np.isfinite(loss_own)):
      return math.nan
    return fit.compute_for(f, loss_transfer) / fit.compute_for(f, loss_own)


def _defined(o: fit.Optimum) -> float:
  """An optimum's k for an interval: nan where it is undefined or on its grid's edge (a bound, not a value)."""
  return o.k if o.flag in ("", "coarse") else math.nan


def axes(d) -> list[tuple]:
  """(arm, param, axis) of every shift the study reports."""
  out = [(a, p, "depth") for a in d["depth_arms"] for p in d["depth_params"] if (a, p) not in D.REFUSED]
  return out + [(a, p, "width") for a in d["width_arms"] for p in d["width_params"]]


def _cell(d, arm, param, axis, end) -> grid.Cell:
  if axis == "depth":
    return grid.Cell(arm, param, d["depths"][0] if end == "base" else d["depths"][-1], d["width"])
  return grid.Cell(arm, param, d["base_depth"], d["widths"][0] if end == "base" else d["widths"][-1])


def law_shift(d) -> float:
  """The effective-depth law's shift from the base depth to the top, in sqrt(2) steps: 2 x (-3/2) log2(ratio)."""
  return 2 * D.EFFECTIVE_DEPTH_EXPONENT * math.log2(d["depths"][-1] / d["depths"][0])


def train_flops(d, arm: str, layers: int, width: int) -> float:
  """Training FLOPs of one run (resnorm.model.flops per token, times the tokens it trains on)."""
  from resnorm.model import flops
  from resnorm.results.engine import paths
  over = {k: v for k, v in grid.overrides(d, grid.Point(arm, "standard", layers, width, 0), 0).items()}
  cfg = paths.base_config("cpu", over)
  return flops.train_flops_per_token(cfg.model, cfg.data.seq_len) * cfg.data.seq_len * cfg.train.batch_size * \
      cfg.train.steps


def pre_curve(d, stats: dict, param: str, axis: str) -> list[tuple]:
  """(FLOPs, seed-mean optimal loss) of Pre-Norm at every rung of the axis under `param` (complete cells only)."""
  rungs = [(L, d["width"]) for L in d["depths"]] if axis == "depth" else [(d["base_depth"], w) for w in d["widths"]]
  out = []
  for L, w in rungs:
    cs = stats.get(grid.Cell("pre_norm", param, L, w))
    if cs is not None and cs.complete and np.isfinite(cs.opt.loss):
      out.append((train_flops(d, "pre_norm", L, w), cs.opt.loss))
  return out


def pre_curve_fit(d, stats, param, axis):
  """The power law of Pre-Norm's curve, or None: under 3 rungs, or its loss does not fall with compute."""
  pts = pre_curve(d, stats, param, axis)
  if len(pts) < 3:
    return None
  f = fit.power_law(*zip(*pts))
  return f if f[1] > 0 else None
