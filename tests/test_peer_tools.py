"""tools/peer_nanogpt.py's command line: bad input gets one line and exit 2 before torch is needed (torch is not a
resnorm dependency, so the timing itself runs only in a separate environment; docs/performance.md)."""
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
