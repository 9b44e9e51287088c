"""resnorm/results/parts.py's pieces on their own: the control condition and the per-seed slope."""
from resnorm.results import parts


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
