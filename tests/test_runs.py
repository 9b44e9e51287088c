"""resnorm/results/v4/runs.py: the grid's runs read at a fraction of their steps, on the full eval set or its fixed
subset, and their diagnostics: from hand-made run directories whose every eval and diagnostics step differs."""
import json
import os

import pytest

from resnorm.results.v4 import claims as cl
from resnorm.results.v4 import grid
from test_results import _fake_run, sweep_file

R100 = grid.Recipe("pre_norm", 2, 1e-2, 0.5, 100)
# step: (loss on every eval row, loss on the fixed subset); the last eval records both from the same sums
EVALS = {50: (3.5, 3.6), 75: (3.3, 3.45), 100: (3.0, 3.2)}
DIAGS = {0: 0.9, 40: 0.5, 100: 0.3}  # step: every sublayer's cos_next_median there


def write_run(root, r, seed, evals=EVALS, diags=DIAGS, shift=0.0, corpus="pystdlib"):
  """A completed run: its evals (both losses, shifted by `shift`), final_eval_loss the last full loss, and
  diagnostics rows at `diags`' steps (step 0: the init's)."""
  path = os.path.join(root, grid.run_name(r, seed, corpus))
  os.makedirs(path)
  last = max(evals)
  json.dump({"status": "completed", "final_eval_loss": evals[last][0] + shift, "learned_beyond_unigram": True},
            open(os.path.join(path, "summary.json"), "w"))
  with open(os.path.join(path, "metrics.jsonl"), "w") as f:
    for st, (full, sub) in sorted(evals.items()):
      f.write(json.dumps({"step": st, "loss": 9.0, "eval_loss": full + shift, "eval_loss_subset": sub + shift,
                          "eval_tokens": 640, "eval_loss_se": 0.01, "eval_subset_every": 8}) + "\n")
  with open(os.path.join(path, "diagnostics.jsonl"), "w") as f:
    for st, c in sorted(diags.items()):
      rows = [{"cos_next_median": c, "act_rms": 1.0 + st / 100, "grad_norm": 2.0 - st / 100}] * 4
      f.write(json.dumps({"step": st, "sublayers": rows}) + "\n")
  return path


def design():
  return grid.design(sweep_file.FULL, "test")


def test_runs_read_at_a_fraction_of_their_steps(tmp_path):
  d = {**design(), "steps": 100}
  r = grid.Recipe("pre_norm", 2, 1e-2, 0.5, 100)
  _fake_run(tmp_path, r, 0, 3.0, drift=0.1, cos=[0.5])
  _fake_run(tmp_path, r, 1, None, "diverged")
  R = cl.Runs(str(tmp_path), d)
  with R.at(0.5):
    assert R.loss(r, 0) == pytest.approx(3.2) and R.loss(r, 1) is None  # a divergence has no loss, ever
    assert R.last(r, 0)[0]["cos_next_median"] == 0.5
  with R.at(0.75):
    assert R.loss(r, 0) == pytest.approx(3.1)
  assert R.loss(r, 0) == 3.0 and R.frac == 1.0 and R.loss(r, 1) is None
  with R.at(1.0, subset=True):  # no eval_loss_subset recorded: the eval's own loss
    assert R.loss(r, 0) == pytest.approx(3.0)


def test_the_subset_is_read_at_every_fraction_and_the_full_set_only_outside_it(tmp_path):
  """At 100% with subset=True the loss is the last eval's subset loss (3.2), not the run's final full-set loss
  (3.0) that the claims read: the regime compares it with the 75% eval's subset loss, like with like."""
  write_run(tmp_path, R100, 0)
  R = cl.Runs(str(tmp_path), design())
  assert R.loss(R100, 0) == 3.0
  for frac in (0.5, 0.75, 1.0):
    step = max(s for s in EVALS if s <= frac * 100)
    with R.at(frac, subset=True):
      assert R.loss(R100, 0) == EVALS[step][1], frac
    with R.at(frac):
      assert R.loss(R100, 0) == EVALS[step][0], frac
  with R.at(0.4, subset=True):
    assert R.loss(R100, 0) is None  # no eval yet


def test_a_fraction_before_the_first_trained_diagnostics_reads_none_not_the_init(tmp_path):
  """Diagnostics at steps 0 (init), 40 and 100: at 25% no trained row exists yet, so last() is None rather than the
  step-0 rows; at 50% the step-40 rows; at the end the last ones; first() is always the init's."""
  write_run(tmp_path, R100, 0)
  R = cl.Runs(str(tmp_path), design())
  with R.at(0.25):
    assert R.last(R100, 0) is None
  with R.at(0.5):
    assert R.last(R100, 0)[0]["cos_next_median"] == DIAGS[40]
  assert R.last(R100, 0)[0]["cos_next_median"] == DIAGS[100]
  assert R.run(R100, 0)["first"][0]["cos_next_median"] == DIAGS[0]


def test_a_report_from_records_reads_no_diagnostics_before_the_first_trained_ones(tmp_path):
  """Runs whose diagnostics are the init's (step 0) and the last step's only, read from their records as the
  committed report reads them: a diagnostics part's trajectory at 50% and 75% of training is None, not the init's
  median cosine; its value at the end is the trained one; and the regime has no change over the last quarter to
  test (the init's rows would make one of 0.3 - 0.9)."""
  from resnorm.results import records
  from resnorm.results.v4 import parts, runs
  recs = tmp_path / "records"
  R = runs.Runs("", design(), "pystdlib", str(recs))
  for s in range(3):
    path = write_run(tmp_path / "runs", R100, s, diags={0: 0.9, 100: 0.3 + 0.01 * s})
    records.write(R.record_path(grid.run_name(R100, s, "pystdlib")),
                  records.from_workdir(path, R100, "pystdlib", s, "f" * 16))
  fn = lambda s: parts.median_cos(R.last(R100, s))
  x = {s: fn(s) for s in range(3)}
  assert x == pytest.approx({0: 0.3, 1: 0.31, 2: 0.32})
  out = parts._regime(R, fn, x, +1, 0.05)  # noqa: SLF001
  assert out["trajectory"][0.5] is None and out["trajectory"][0.75] is None, out["trajectory"]
  assert out["trajectory"][1.0] == pytest.approx(0.31)
  assert out["regime"] is None and out["settled"] is False
  assert R.run(R100, 0)["first"][0]["cos_next_median"] == 0.9   # the init's rows are there, read as the init's
