"""resnorm/plan/memtable.py's cache of finished cells: written whole, and an unreadable one is one line (exit 2),
never a traceback that loses every finished cell."""
import json

import pytest

from resnorm.core.errors import InputError
from resnorm.plan import memtable


def test_the_cache_round_trips_and_is_written_through_a_rename(tmp_path, monkeypatch):
  path = str(tmp_path / "sub" / "memtable.json")
  assert memtable._read_cache(path) == {}  # noqa: SLF001
  cells = {"configs/a_96l.py:tpu|v4-8|cpu": {"train_gib": 3.5}}
  memtable._write_cache(path, cells)  # noqa: SLF001
  assert memtable._read_cache(path) == cells and sorted(p.name for p in (tmp_path / "sub").iterdir()) == [  # noqa: SLF001
      "memtable.json"]
  def interrupted(*args, **kwargs):
    raise KeyboardInterrupt
  monkeypatch.setattr(json, "dump", interrupted)
  with pytest.raises(KeyboardInterrupt):
    memtable._write_cache(path, {**cells, "more": {}})  # noqa: SLF001
  monkeypatch.undo()
  assert memtable._read_cache(path) == cells  # noqa: SLF001  the cells it had, not a half-written file


@pytest.mark.parametrize("text, says", [('{"a": 1', "cannot be read (JSONDecodeError"), ("[1, 2]", "is not a JSON object")])
def test_an_unreadable_cache_is_one_line(tmp_path, text, says):
  path = tmp_path / "memtable.json"
  path.write_text(text)
  with pytest.raises(InputError, match=r"--cache=.*memtable\.json " + says.replace("(", r"\(")):
    memtable._read_cache(str(path))  # noqa: SLF001
  assert path.read_text() == text
