"""Report v5's design (resnorm.results.v5.design): the ladder the report's issue asks for, a grid that fits its
budget by the measured step times, one design entry per claim part, and a power row per part."""
import math

from resnorm.config import configlib
from resnorm.model import flops, residual
from resnorm.results import verdicts
from resnorm.results.v5 import design as v5


def test_the_ladder_has_four_widths_spanning_eight_times_the_params_at_one_depth():
  n = [v5.non_embedding_params(d) for d in v5.LADDER_D]
  assert len(n) >= 4 and n == sorted(n) and n[-1] / n[0] >= 8
  assert all(d % v5.HEAD_DIM == 0 and (d // v5.HEAD_DIM) >= 1 for d in v5.LADDER_D)


def test_non_embedding_params_are_the_models_own_count(tiny):
  """144 d^2 at 12 layers: the model's params less the embedding, the head and the norms."""
  for d in (24, 48):
    cfg = tiny("pre_norm", v5.DEPTH, **{"model.d_model": d, "model.num_heads": d // v5.HEAD_DIM,
                                         "model.mlp_dim": 4 * d})
    m = configlib.model_config(cfg)
    norms = v5.DEPTH * 2 * 2 * d + 2 * d                       # two LayerNorms (scale, bias) per block, the final
    assert flops.param_count(m) - 2 * m.vocab_size * d - norms == v5.non_embedding_params(d)


def test_each_width_trains_the_same_tokens_per_param():
  for d in v5.LADDER_D:
    tokens = v5.steps(d) * v5.BATCH * v5.SEQ
    assert abs(tokens - v5.TOKENS_PER_PARAM * v5.non_embedding_params(d)) <= v5.BATCH * v5.SEQ / 2


def test_the_grid_fits_its_budget_by_the_measured_step_times():
  assert set(v5.STEP_MS) == set(v5.ARMS) and all(len(t) == len(v5.LADDER_D) for t in v5.STEP_MS.values())
  assert v5.run_s("mhc", 72) == v5.RUN_START_S + (v5.steps(72) + v5.EVAL_STEPS) * v5.STEP_MS["mhc"][3] / 1000
  assert v5.budget_s() <= v5.BUDGET_S * (1 - v5.MARGIN)
  # one more seed would not fit: the budget is what sets the seeds
  assert v5.budget_s(seeds=v5.SEEDS + 1) > v5.BUDGET_S * (1 - v5.MARGIN)


def test_every_placement_the_issue_names_is_an_arm_and_every_part_is_designed():
  assert {"attn_res_block", "mudd", "denseformer", "value_residual", "laurel", "hc", "mhc"} <= set(v5.ARMS)
  assert all(residual.get(a) for a in v5.ARMS) and v5.ARMS[0] == "pre_norm"
  assert set(v5.CLAIMS) == set(v5.DESIGN)
  for key, c in v5.CLAIMS.items():
    assert c.arm in v5.ARMS and c.arm != "pre_norm", key
    assert c.figure is None or (c.statistic == v5.MULT and c.figure > 1), key
    assert v5.DESIGN[key].effect > 0


def test_the_power_table_has_a_row_per_part_and_power_only_where_the_pilot_measured():
  rows = verdicts.power_table(v5.DESIGN, v5.BLOCK_SEEDS, v5.FAMILY, 1)
  assert [r["part"] for r in rows] == [c + p for c, p in v5.DESIGN]
  for r, d in zip(rows, v5.DESIGN.values()):
    assert (r["mde"] is None) == (not math.isfinite(d.pilot_sd)) and r["n"] == v5.SEEDS
