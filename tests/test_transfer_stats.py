"""The transfer study's statistics on curves whose answers are known: fit.py (the optimum, its window and flags,
the loss at a step, the t and bootstrap intervals, the verdict's closed band, the power law) and study.py on a loss
function instead of records (a cell's bootstrap refits the seed-mean curve, a point where any seed diverged ends the
window, a shift's value, hull, verdict, penalty, speedup and the law's placement, an edge optimum fails the shift).
The records, the grid and the page: test_transfer.py."""
import functools
import math

import numpy as np
import pytest

from resnorm.results.transfer import design as D
from resnorm.results.transfer import fit, grid, study

# --- fit.py -------------------------------------------------------------------------------------------------------


def test_the_optimum_is_the_quadratics_vertex_within_two_steps_of_the_best_point():
  ks = list(range(-3, 4))
  y = [0.1 * (k - 0.3) ** 2 + 2.0 for k in ks]
  o = fit.optimum(ks, y)
  assert o.flag == "" and o.k == pytest.approx(0.3) and o.loss == pytest.approx(2.0) and o.window == (-2.0, 2.0)
  y[-1] = 100.0  # a point three steps from the best is outside the window: it cannot move the vertex
  assert fit.optimum(ks, y).k == pytest.approx(0.3)


def test_edge_coarse_and_diverged_points():
  ks = [0, 1, 2, 3]
  assert fit.optimum(ks, [1.0, 2, 3, 4]).flag == "edge"
  assert fit.optimum(ks, [4.0, 3, 2, 1]).flag == "edge"
  o = fit.optimum(ks, [3.0, 1.0, 2.0, 9.0], failed=[True, False, False, True])  # window: the best and one other
  assert (o.flag, o.k) == ("coarse", 1.0)
  o = fit.optimum([0, 1, 2, 3, 4], [3.0, 2.0, 1.0, 9.0, 1.5], failed=[False, False, False, True, False])
  assert o.window == (0.0, 2.0)  # a diverged point ends the window: the point beyond it is not read
  assert fit.optimum(ks, [2.0, 1.0, 1.0, 2.0]).k == pytest.approx(1.5)
  assert fit.optimum(ks, [1.0, 2.0, 2.0, 1.0]).flag == "edge"
  assert fit.optimum(ks, [5.0] * 4, failed=[True] * 4).flag == "failed"
  # a quadratic whose vertex leaves its window is not read: the best point itself
  o = fit.optimum(range(6), [-0.11, -0.446, 0.775, 0.194, -1.631, -1.195])
  assert (o.flag, o.k, o.window) == ("coarse", 4.0, (2.0, 5.0))


def test_loss_at_reads_the_quadratic_then_the_curve_then_a_bound():
  ks = list(range(5))
  y = [(k - 2.0) ** 2 + 1 for k in ks]
  o = fit.optimum(ks, y)
  assert fit.loss_at(o, ks, y, 2.5) == (pytest.approx(1.25), "")
  assert fit.loss_at(o, ks, y, 6.0) == (5.0, ">=")
  y = [(k - 1.0) ** 2 + 1 for k in ks]  # beyond either end, that end's loss
  o = fit.optimum(ks, y)
  assert fit.loss_at(o, ks, y, -1.0) == (2.0, ">=") and fit.loss_at(o, ks, y, 5.0) == (10.0, ">=")


def test_intervals_and_the_verdict():
  lo, hi = fit.t_interval([1.0, 2.0, 3.0])
  assert (lo + hi) / 2 == pytest.approx(2.0) and hi - lo == pytest.approx(2 * 4.302653 * 1 / math.sqrt(3), 1e-5)
  assert np.isnan(fit.t_interval([1.0])[0])
  vals = np.array([0.1, 0.2, 0.3, 0.4])
  b = fit.bootstrap(lambda idx: vals[idx].mean(), 4)
  assert 0.1 <= b[0] < 0.25 < b[1] <= 0.4
  rng = np.random.default_rng(fit.SEED)  # the 2.5% and 97.5% order statistics of the same resamples
  means = [vals[rng.integers(0, 4, 4)].mean() for _ in range(fit.RESAMPLES)]
  assert b == (np.quantile(means, 0.025, method="lower"), np.quantile(means, 0.975, method="higher"))
  calls = []  # each distinct resample computed once (4^4 at most), the same interval as computing all 2000
  assert fit.bootstrap(lambda idx: calls.append(1) or vals[idx].mean(), 4) == b and len(calls) <= 4 ** 4
  b = fit.bootstrap(lambda idx: math.nan if 0 in idx else 0.0, 4)  # undefined resamples widen both tails
  assert b == (-math.inf, math.inf)
  assert fit.hull((0, 1), (-1, 0.5)) == (-1, 1)
  assert fit.verdict((-0.9, 0.8), 1.0) == fit.verdict((-1.0, 1.0), 1.0) == "transfers"  # the band is closed
  assert fit.verdict((1.0, 2.0), 1.0) == fit.verdict((-3.0, -1.0), 1.0) == "undecided"
  assert fit.verdict((-5.0, -1.2), 1.0) == fit.verdict((1.1, 2), 1.0) == "does not transfer"
  assert fit.verdict((-2.0, 0.5), 1.0) == fit.verdict((math.nan, 1), 1.0) == "undecided"


def test_power_law_and_compute_for():
  c = np.array([1e9, 2e9, 4e9])
  f = fit.power_law(c, 3.0 * c ** -0.1)
  assert f[1] == pytest.approx(0.1) and fit.compute_for(f, 3.0 * 2e9 ** -0.1) == pytest.approx(2e9)
  assert np.isnan(fit.compute_for((1.0, -0.1), 2.0))


# --- study.py ------------------------------------------------------------------------------------------------------


def _synthetic(curve, failed=lambda p, s: False, learned=lambda p, s: True):
  """A Study of the test design (3 seeds, 7 base steps centred on 0) over a loss function instead of records:
  curve(point, seed) -> final loss (D.FAIL_LOSS where failed(point, seed)); learned(point, seed): below the
  byte-unigram baseline."""
  S = object.__new__(study.Study)
  S.d = {**grid.design("test"), "seeds": 3, "base_points": 7, "center": 0}
  S.loss, S.failed, S.learned = curve, failed, learned
  return S


def test_a_cells_bootstrap_refits_the_seed_mean_curve_in_every_resample():
  curv, vert = (1.0, 4.0, 0.5), (1.0, -1.0, 0.5)  # the mean curve's vertex is not the mean of the seeds' vertices
  S = _synthetic(lambda p, s: curv[s] * (p.k - vert[s]) ** 2 + 2.0)
  cs = S.cell(grid.Cell("pre_norm", "standard", 2, 8))
  assert cs.ks == list(range(-3, 4)) and cs.opt.k == pytest.approx(-0.5)
  assert cs.boot == fit.bootstrap(lambda idx: fit.optimum(cs.ks, cs.losses[:, idx].mean(axis=1)).k, 3)
  assert cs.t == pytest.approx(fit.t_interval(vert))


def test_a_point_where_any_seed_diverged_ends_the_mean_curves_window():
  bad = lambda p, s: s == 0 and p.k == -2
  S = _synthetic(lambda p, s: D.FAIL_LOSS if bad(p, s) else p.k ** 2 + 2.0, bad)
  cs = S.cell(grid.Cell("pre_norm", "standard", 2, 8))
  assert cs.opt.window == (-1.0, 2.0) and cs.opt.k == pytest.approx(0.0)
  assert [o.window for o in cs.seed_opts] == [(-1.0, 2.0), (-2.0, 2.0), (-2.0, 2.0)]


def _few_resamples(monkeypatch):
  """Every seed alike below: each resample is the same curve, so 100 resamples give the 2000's interval."""
  monkeypatch.setattr(fit, "bootstrap", functools.partial(fit.bootstrap, resamples=100))


def test_a_shift_its_penalty_speedup_and_the_law_from_known_curves(monkeypatch):
  _few_resamples(monkeypatch)
  # the base rung's optimum at k = 0 (loss 3), the top depth's at k = -2 (loss 1); the width's top as its base
  S = _synthetic(lambda p, s: (p.k + 2) ** 2 + 1.0 if p.layers == 2 else p.k ** 2 + 3.0)
  monkeypatch.setattr(study, "pre_curve_fit", lambda *a: (0.0, 0.5))  # Pre-Norm's curve: C(L) = L^-2
  shifts = {(s.arm, s.param, s.axis): s for s in S.shifts(S.cells())}
  s = shifts[("keel", "standard", "depth")]
  assert s.value == pytest.approx(-2.0) and s.hull == pytest.approx((-2.0, -2.0))
  assert s.verdict == "does not transfer"
  assert (s.penalty, s.penalty_bound) == (pytest.approx(4.0), "")  # (0 + 2)^2 + 1 at the base's k, minus 1
  assert s.speedup == pytest.approx((1.0 / 5.0) ** 2)  # C(5) / C(1): the compute the reused lr's loss is worth
  assert study.law_shift(S.d) == -3.0 and s.law == "above"  # -2 lies above the law's -3
  assert shifts[("pre_norm", "completep", "depth")].law == ""
  w = shifts[("pre_norm", "mup", "width")]
  assert w.value == pytest.approx(0.0) and w.verdict == "transfers" and w.penalty == pytest.approx(0.0)


def test_a_cell_stalls_only_when_none_of_its_runs_learned_and_the_shift_says_which(monkeypatch):
  _few_resamples(monkeypatch)
  one = lambda p, s: p.layers == 2 and s == 1  # a single run of the top depth learned
  S = _synthetic(lambda p, s: (p.k + 2) ** 2 + 1.0 if p.layers == 2 else p.k ** 2 + 3.0,
                 learned=lambda p, s: one(p, s) if p.arm == "pre_norm" else p.layers == 1)
  shifts = {(s.arm, s.param, s.axis): s for s in S.shifts(S.cells())}
  assert shifts[("pre_norm", "standard", "depth")].stalled == "base"
  assert shifts[("keel", "standard", "depth")].stalled == "top"
  assert shifts[("pre_norm", "mup", "width")].stalled == "both"
  assert shifts[("keel", "standard", "depth")].verdict == "does not transfer"  # the rule's verdict stands
  # a run without its record, or a record without the flag, is not known to have stalled: nor is its cell
  c = grid.Cell("pre_norm", "standard", 1, 8)
  for unknown in (lambda p, s: None if p.k == 0 else False, lambda p, s: None):
    assert not _synthetic(lambda p, s: p.k ** 2 + 3.0, learned=unknown).cell(c).stalled
  assert _synthetic(lambda p, s: p.k ** 2 + 3.0, learned=lambda p, s: False).cell(c).stalled
  pending = _synthetic(lambda p, s: None if s == 2 else p.k ** 2 + 3.0, learned=lambda p, s: None if s == 2 else False)
  assert not pending.cell(c).complete and not pending.cell(c).stalled


def test_an_optimum_on_the_base_cells_edge_fails_the_shift(monkeypatch):
  _few_resamples(monkeypatch)
  S = _synthetic(lambda p, s: 3.0 - 0.1 * p.k if p.layers == 1 else p.k ** 2 + 1.0)  # the base rung never turns
  stats = S.cells()
  for s in S.shifts(stats):
    assert s.base.opt.flag == "edge" and s.verdict == "failed (edge)", s.arm


def test_a_seed_whose_own_optimum_is_on_its_edge_is_counted_and_leaves_the_bootstrap_unbounded():
  """The page's note on a t interval: one seed's own optimum on its grid's edge (a bound) is a value to the t
  interval, and its one-seed resamples (1/27 of the 2000) leave the bootstrap unbounded: the verdict is undecided."""
  edge = lambda p, s: s == 2 and p.layers == 2
  S = _synthetic(lambda p, s: 3.0 - 0.1 * p.k if edge(p, s) else p.k ** 2 + 1.0)
  shifts = {(s.arm, s.param, s.axis): s for s in S.shifts(S.cells())}
  s = shifts[("pre_norm", "standard", "depth")]
  assert [o.flag for o in s.top.seed_opts] == ["", "", "edge"] and s.top.opt.flag == ""  # the mean is interior
  assert s.edge_seeds == 1 and s.boot == (-math.inf, math.inf) and s.verdict == "undecided"
  assert np.isfinite(s.t).all()
  w = shifts[("pre_norm", "standard", "width")]
  assert w.edge_seeds == 0 and np.isfinite(w.boot).all() and w.verdict == "transfers"
  # a pending shift notes no seed, whatever its complete cell holds
  base_edge = lambda p, s: s == 2 and p.layers == 1 and p.width == 8
  S = _synthetic(lambda p, s: None if p.layers == 2 and s == 0 else 3.0 - 0.1 * p.k if base_edge(p, s)
                 else p.k ** 2 + 1.0)
  stats = S.cells()
  s = next(x for x in S.shifts(stats) if (x.arm, x.param, x.axis) == ("pre_norm", "standard", "depth"))
  assert s.verdict == "pending" and s.base.seed_opts[2].flag == "edge" and s.edge_seeds == 0
