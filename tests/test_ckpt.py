"""Checkpoints outlive code moves: a checkpoint written by the code before resnorm/ was grouped by role (7e66a2b,
tests/data/legacy_hc_7e66a2b: configs/tiny.py:hc, 4 steps, on conftest's TEXT) is evaluated now with its own config
and gives the eval loss and per-sublayer diagnostics that the old code's eval.py wrote."""
import json
import os
import shutil

import pytest

from conftest import TEXT
from resnorm.evaluation import evaluate

LEGACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "legacy_hc_7e66a2b")


@pytest.mark.integration  # a committed legacy workdir trained and evaluated twice
def test_checkpoint_from_before_the_move_evaluates_the_same(tmp_path, monkeypatch):
  want = json.load(open(os.path.join(LEGACY, "expected.json")))
  shutil.copytree(LEGACY, tmp_path / "run", ignore=shutil.ignore_patterns("expected.json"))
  (tmp_path / "part0.txt").write_text(TEXT)  # the run's data.paths is relative: part0.txt
  monkeypatch.chdir(tmp_path)
  assert evaluate.eval_workdir("run", None) == 0
  got = json.load(open(tmp_path / "run" / "eval" / "step_4.json"))
  assert got["residual"] == "hc" and got["eval_tokens"] == want["eval_tokens"]
  # the same params and the same eval rows; XLA options differ between eval.py and the suite (conftest), hence rtol
  assert got["eval_loss"] == pytest.approx(want["eval_loss"], rel=1e-5)
  assert [s["act_rms"] for s in got["sublayers"]] == pytest.approx(want["act_rms"], rel=1e-4)
  assert [s["grad_norm"] for s in got["sublayers"]] == pytest.approx(want["grad_norm"], rel=1e-3)


def test_params_of_another_layout_are_refused_in_one_line_and_kept(tmp_path):
  """A checkpoint of MUDDFormer's earlier layout (every layer's DA padded to the largest, in the blocks; the carry
  form keeps it) restored into today's model (packed DAs outside the blocks): one InputError naming the param, read
  from the metadata, and the checkpoint stays where it is (not quarantined as unreadable). The same layout loads."""
  from carry_placements import carry_variants
  from conftest import tiny_config
  from resnorm.core.errors import InputError
  from resnorm.io import ckpt
  from resnorm.step import runtime
  with carry_variants():
    old = runtime.build(tiny_config("mudd_carry", 3))
    writer = ckpt.Checkpointer(str(tmp_path / "old"))
    writer.save(5, old.init_state(), None, {})
    writer.wait()
  new = runtime.build(tiny_config("mudd", 3))
  reader = ckpt.Checkpointer(str(tmp_path / "old"))
  with pytest.raises(InputError, match=r"step 5 holds params of another layout: params\.blocks\.attn_res\.dense\."
                                       r"bias is \[3, 4, 3\] there and absent in this model"):
    reader.restore_latest(new.abstract)
  assert reader.steps() == [5] and not os.path.exists(str(tmp_path / "old") + ".corrupt")
  writer = ckpt.Checkpointer(str(tmp_path / "new"))
  writer.save(2, new.init_state(), None, {})
  writer.wait()
  step, (state, _) = ckpt.Checkpointer(str(tmp_path / "new")).restore_latest(new.abstract)
  assert step == 2 and state["params"]["dense"]["w2"].shape == (16 * (2 * 2 + 3 * 3),)
