"""eval.py --sweep --paired (resnorm.results.paired): arms against a base run for run, by condition and seed."""
import math

import numpy as np
import pytest
from scipy import stats

from resnorm.core.errors import InputError
from resnorm.results import paired


def _row(run, loss, cos=0.9, status="completed", stalled=False):
  return {"run": run, "status": status, "final_eval_loss": loss, "cos_last_quarter": cos, "stalled": stalled}


def test_names_split_into_arm_condition_and_seed():
  assert paired.split("keel-48l-s2") == ("keel", "48l", 2)
  assert paired.split("ddl_paper-12l-pystdlib-s10") == ("ddl_paper", "12l-pystdlib", 10)
  assert paired.split("pre_norm-s0") == ("pre_norm", "", 0)
  for bad in ("keel-48l", "keel", "keel-48l-sx"):
    with pytest.raises(InputError, match="is not named ARM-COND-sSEED"):
      paired.split(bad)


def test_the_difference_pairs_by_seed_and_condition_not_by_position():
  base = {0: 3.0, 1: 3.2, 2: 2.9}
  arm = {2: 2.7, 0: 2.95, 1: 3.0}   # listed out of seed order, and a second condition with other values
  rows = [_row(f"pre_norm-12l-s{s}", v, cos=0.99) for s, v in base.items()]
  rows += [_row(f"keel-12l-s{s}", v, cos=0.9 + 0.01 * s) for s, v in arm.items()]
  rows += [_row(f"pre_norm-48l-s{s}", 5.0) for s in range(3)] + [_row(f"keel-48l-s{s}", 4.0) for s in range(3)]
  out = {(r["cond"], r["arm"]): r for r in paired.paired(rows, "pre_norm")}
  d = [arm[s] - base[s] for s in range(3)]
  k = out[("12l", "keel")]
  half = stats.t.ppf(0.975, 2) * np.std(d, ddof=1) / math.sqrt(3)
  assert k["loss_diff"] == pytest.approx(np.mean(d)) and k["pairs"] == 3
  assert (k["loss_lo"], k["loss_hi"]) == pytest.approx((np.mean(d) - half, np.mean(d) + half))
  assert k["loss_mean"] == pytest.approx(np.mean(list(arm.values())))
  assert k["cos_diff"] == pytest.approx(np.mean([0.9 + 0.01 * s - 0.99 for s in range(3)]))
  assert out[("48l", "keel")]["loss_diff"] == pytest.approx(-1.0)
  assert math.isnan(out[("12l", "pre_norm")]["loss_diff"])
  assert [(r["cond"], r["arm"]) for r in paired.paired(rows, "pre_norm")][0] == ("12l", "pre_norm")


def test_diverged_and_stalled_runs_are_counted_and_leave_the_pairs():
  rows = [_row(f"pre_norm-12l-s{s}", 3.0 + 0.1 * s) for s in range(3)]
  rows += [_row("post_norm-12l-s0", None, status="diverged"), _row("post_norm-12l-s1", 3.5, stalled=True),
           _row("post_norm-12l-s2", 3.3)]
  r = [x for x in paired.paired(rows, "pre_norm") if x["arm"] == "post_norm"][0]
  assert (r["runs"], r["diverged"], r["stalled"], r["pairs"]) == (3, 1, 1, 2)
  assert r["loss_diff"] == pytest.approx(((3.5 - 3.1) + (3.3 - 3.2)) / 2)
  assert r["loss_mean"] == pytest.approx(3.4)
  table = paired.markdown(paired.paired(rows, "pre_norm"), "pre_norm")
  assert "| 12l | post_norm | 3.400 ± 0.141 | +0.2500 [" in table and "| 3 | 1 | 1 |" in table


def test_one_pair_has_a_mean_and_no_interval_and_an_excluding_interval_is_bold():
  rows = [_row("pre_norm-s0", 3.0), _row("keel-s0", 2.5)]
  r = paired.paired(rows, "pre_norm")[1]
  assert r["loss_diff"] == pytest.approx(-0.5) and math.isnan(r["loss_lo"])
  assert "| -0.5000 |" in paired.markdown([r], "pre_norm")
  rows = [_row(f"pre_norm-s{s}", 3.0 + s) for s in range(3)] + [_row(f"keel-s{s}", 2.5 + s + 0.01 * s) for s in range(3)]
  assert "**-0.4900 [" in paired.markdown(paired.paired(rows, "pre_norm"), "pre_norm")


def test_an_unknown_base_or_a_duplicate_run_is_refused():
  rows = [_row("pre_norm-s0", 3.0), _row("keel-s0", 2.5)]
  with pytest.raises(InputError, match=r"--paired='prenorm' names no arm of the sweep; its arms: pre_norm, keel"):
    paired.paired(rows, "prenorm")
  with pytest.raises(InputError, match="two runs of arm 'keel'"):
    paired.paired(rows + [_row("keel-s0", 2.4)], "pre_norm")


def test_the_figure_draws_conditions_that_lack_an_arm_and_pairs_without_an_interval(tmp_path):
  from resnorm.viz import plots
  rows = [_row(f"{a}-{c}-s{s}", 3.0 + 0.1 * s + (0.2 if a == "post_norm" else 0.0)) for c in ("12l", "48l")
          for a in ("pre_norm", "post_norm") for s in range(3)] + [_row("keel-12l-s0", 2.9)]
  path = plots.paired_figure(paired.paired(rows, "pre_norm"), "pre_norm", str(tmp_path / "paired.png"))
  assert (tmp_path / "paired.png").stat().st_size > 5000 and path.endswith("paired.png")
