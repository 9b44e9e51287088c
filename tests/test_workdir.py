"""Workdir files: JSONL truncation on resume (no step twice, nothing kept past the restored step), strict JSON."""
import json
import math

import pytest

from resnorm.io import workdir as wd
from resnorm.core.errors import InputError


def _lines(path):
  return [json.loads(l) for l in open(path)]


def test_resume_drops_lines_past_the_restored_step_and_partial_lines(tmp_path):
  path = str(tmp_path / "metrics.jsonl")
  log = wd.JsonlLog(path)
  for s in range(1, 7):
    log.write({"step": s, "loss": 10.0 - s})
    if s % 3 == 0:
      log.write({"step": s, "eval_loss": 1.0 * s})
  log.close()
  with open(path, "a") as f:
    f.write('{"step": 7, "loss": 1.')  # killed mid-line
  log = wd.JsonlLog(path, resume_step=3)
  assert _lines(path) == [{"step": 1, "loss": 9.0}, {"step": 2, "loss": 8.0}, {"step": 3, "loss": 7.0},
                          {"step": 3, "eval_loss": 3.0}]
  log.write({"step": 4, "loss": 0.5})
  log.close()
  assert [r["step"] for r in _lines(path)] == [1, 2, 3, 3, 4]


@pytest.mark.parametrize("resume_step", [None, 0])
def test_a_fresh_start_over_old_logs_keeps_nothing(tmp_path, resume_step):
  """No checkpoint restored (killed before the first one, or every one unreadable): the run starts over and logs
  every step again, the step-0 diagnostics line included, so no old line may stay."""
  path = str(tmp_path / "diagnostics.jsonl")
  log = wd.JsonlLog(path)
  for s in (0, 2, 4):
    log.write({"step": s, "sublayers": []})
  log.close()
  wd.JsonlLog(path, resume_step).close()
  assert _lines(path) == []


def test_json_is_strict_and_atomic(tmp_path):
  path = str(tmp_path / "summary.json")
  wd.write_json(path, {"loss": math.nan, "x": [math.inf, 1.0], "nested": {"y": -math.inf}})
  text = open(path).read()
  assert json.loads(text) == {"loss": "nan", "x": ["inf", 1.0], "nested": {"y": "-inf"}}
  assert "NaN" not in text and not (tmp_path / "summary.json.tmp").exists()
  log = wd.JsonlLog(str(tmp_path / "m.jsonl"))
  log.write({"step": 1, "loss": math.nan})
  log.close()
  assert json.loads(open(tmp_path / "m.jsonl").read()) == {"step": 1, "loss": "nan"}
  (tmp_path / "bad.json").write_text("{oops")
  with pytest.raises(InputError, match="is not valid JSON"):
    wd.read_json(str(tmp_path / "bad.json"), "workdir config")
