"""resnorm/results/v4/parts.py's pieces on their own: the control condition, the per-seed slope and the regime's
readings."""
import pytest

from resnorm.results.v4 import parts


class _Runs:
  """A stand-in for results.runs.Runs: which (recipe, seed) runs trained."""

  def __init__(self, trained):
    self._trained = trained

  def trained(self, r, s):
    return (r, s) in self._trained


def test_a_control_holds_only_where_every_control_run_trained():
  """A part conditions on its control arm: a seed counts only if all of the control's runs (say Pre-Norm at both
  learning rates C8 reads) learned beyond the unigram, not one of them."""
  R = _Runs({("a", 0), ("b", 0), ("a", 1)})
  control = parts.trained(R, "a", "b", text="both trained")
  assert control.ok(0) and not control.ok(1) and not control.ok(2) and control.text == "both trained"
  assert parts.NONE.ok(5)


def test_slope_needs_every_point():
  assert abs(parts.slope([1, 2, 3], [1.0, 3.0, 5.0]) - 2.0) < 1e-12
  assert parts.slope([1, 2, 3], [1.0, None, 5.0]) is None and parts.slope([1, 1], [1.0, 2.0]) is None


def test_the_regime_compares_the_subset_at_75_and_100_percent(tmp_path):
  """Three seeds whose evals score the full set and the fixed subset differently (test_runs.EVALS): the trajectory
  reads the subset at every fraction, 100% included (3.2 + shift, not the final full-set 3.0 + shift), and the
  per-seed change over the last quarter is the subset's 3.2 - 3.45 = -0.25 (the full set at 100% would give -0.45)."""
  from resnorm.results.v4 import runs
  from test_runs import EVALS, R100, design, write_run
  shifts = {0: 0.0, 1: 0.01, 2: 0.03}
  for s, shift in shifts.items():
    write_run(tmp_path, R100, s, shift=shift)
  R = runs.Runs(str(tmp_path), design())
  fn = lambda s: R.loss(R100, s)
  x = {s: fn(s) for s in shifts}
  assert x == pytest.approx({s: EVALS[100][0] + sh for s, sh in shifts.items()})
  out = parts._regime(R, fn, x, +1, 0.3)
  mean_shift = sum(shifts.values()) / 3
  assert out["trajectory"] == pytest.approx({f: EVALS[st][1] + mean_shift for f, st in ((0.5, 50), (0.75, 75),
                                                                                        (1.0, 100))})
  assert out["regime"]["mean_change"] == pytest.approx(EVALS[100][1] - EVALS[75][1]) and out["regime"]["n"] == 3
