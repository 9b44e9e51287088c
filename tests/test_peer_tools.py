"""The tools' command lines. tools/peer_nanogpt.py: bad input gets one line and exit 2 before torch is needed (torch
is not a resnorm dependency, so the timing itself runs only in a separate environment; docs/performance.md).
tools/mutants.py: the mutation pass of tests/README.md, on a throwaway two-file project."""
import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "peer_nanogpt.py")


def _run(*args):
  r = subprocess.run([sys.executable, TOOL, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
  return r.returncode, r.stderr.strip().splitlines()


@pytest.mark.parametrize("args, says", [
    ([], "--nanogpt is required"),
    (["--nanogpt=/nonexistent/nanoGPT"], "/nonexistent/nanoGPT: no model.py there"),
    (["--nanogpt={ng}", "--residuals=pre_norm,mhc_lite"], "'mhc_lite' is unknown; known: pre_norm, hc, mhc"),
    (["--nanogpt={ng}", "--steps=0"], "--steps and --threads must be >= 1"),
])
def test_bad_input_one_line_exit_2(tmp_path, args, says):
  (tmp_path / "model.py").write_text("raise SystemExit('nanoGPT must not be imported for bad input')\n")
  rc, lines = _run(*[a.format(ng=tmp_path) for a in args])
  assert rc == 2 and len(lines) == 1 and says in lines[0], (rc, lines)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed in this environment")
def test_without_torch_says_where_to_run_it(tmp_path):
  (tmp_path / "model.py").write_text("")
  rc, lines = _run(f"--nanogpt={tmp_path}")
  assert rc == 2 and len(lines) == 1 and "torch is not installed here" in lines[0], (rc, lines)


def _mutants_tool():
  spec = importlib.util.spec_from_file_location("mutants_tool", os.path.join(ROOT, "tools", "mutants.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_mutants_tool_plants_one_bug_runs_its_tests_and_restores_the_file(tmp_path):
  """tools/mutants.py on a two-file project: a bug the test sees is caught, one it cannot see survives, an `old`
  that is not in the file is reported as a bad mutant, and the source is restored after each."""
  tool = _mutants_tool()
  src = "def add(a, b):\n  return a + b\n\n\ndef unused():\n  return 1\n"
  (tmp_path / "calc.py").write_text(src)
  (tmp_path / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n  assert add(2, 3) == 5\n")
  base = {"file": "calc.py", "tests": ["test_calc.py"], "what": "w"}
  assert tool.run_one(str(tmp_path), {**base, "id": "a", "old": "a + b", "new": "a - b"}, 120)[0] == "caught"
  assert tool.run_one(str(tmp_path), {**base, "id": "b", "old": "return 1", "new": "return 2"}, 120)[0] == "SURVIVED"
  assert tool.run_one(str(tmp_path), {**base, "id": "c", "old": "a * b", "new": "a"}, 120)[0] == "bad-mutant"
  assert (tmp_path / "calc.py").read_text() == src


def test_mutants_tool_refuses_a_malformed_list_in_one_line(tmp_path):
  (tmp_path / "m.json").write_text('[{"id": "x", "file": "f.py"}]')
  r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "mutants.py"), str(tmp_path / "m.json")],
                     cwd=ROOT, capture_output=True, text=True, timeout=60)
  lines = r.stderr.strip().splitlines()
  assert r.returncode == 2 and len(lines) == 1 and "mutant x lacks" in lines[0], (r.returncode, lines)
