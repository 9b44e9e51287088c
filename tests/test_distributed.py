"""resnorm.scale.distributed's reading of the JAX_* variables, in process (the processes themselves: test_multiprocess)."""
import pytest

from resnorm.scale import distributed
from resnorm.core.errors import InputError

ADDR = "127.0.0.1:1234"


def _setup(monkeypatch, num, pid, addr=ADDR):
  for name, val in (("JAX_COORDINATOR_ADDRESS", addr), ("JAX_NUM_PROCESSES", num), ("JAX_PROCESS_ID", pid)):
    if val is None:
      monkeypatch.delenv(name, raising=False)
    else:
      monkeypatch.setenv(name, str(val))
  return distributed._env_setup()


@pytest.mark.parametrize("num,pid", [(2, 0), (2, 1), (4, 3)])
def test_every_process_id_below_the_count_is_accepted(monkeypatch, num, pid):
  assert _setup(monkeypatch, num, pid) == (ADDR, num, pid)


@pytest.mark.parametrize("num,pid", [(2, 2), (4, 4), (4, 5), (2, -1)])
def test_a_process_id_outside_the_count_is_refused(monkeypatch, num, pid):
  with pytest.raises(InputError, match=rf"JAX_PROCESS_ID={pid} must be in \[0, JAX_NUM_PROCESSES={num}\)"):
    _setup(monkeypatch, num, pid)


def test_one_process_and_no_variables_need_no_coordinator(monkeypatch):
  assert _setup(monkeypatch, None, None, None) is None
  assert _setup(monkeypatch, 1, 0, None) is None
  for addr in (ADDR, None):  # the range holds with or without a coordinator
    with pytest.raises(InputError, match="JAX_PROCESS_ID=1 must be in"):
      _setup(monkeypatch, 1, 1, addr)
