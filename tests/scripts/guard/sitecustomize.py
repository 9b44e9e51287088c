"""Imported at start-up by the tests' processes other than process 0 (this directory is first on their PYTHONPATH):
opening a file under $RESNORM_TEST_LEAD_WRITES_ONLY for writing, outside checkpoints/ (which every process writes)
and the per-process write probe, ends the process with exit 97 and one line naming the file. Only process 0
writes metrics, summaries, TensorBoard files and figures."""
import builtins
import io
import os
import sys

_ROOT = os.environ.get("RESNORM_TEST_LEAD_WRITES_ONLY")

if _ROOT:
  _ROOT = os.path.abspath(_ROOT)
  _open = builtins.open

  def _guarded_open(file, mode="r", *args, **kwargs):
    if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+"):
      path = os.path.abspath(os.fsdecode(file))
      rel = os.path.relpath(path, _ROOT)
      if not rel.startswith("..") and not rel.startswith("checkpoints") and ".write_test." not in rel:
        print(f"GUARD: process {os.environ.get('JAX_PROCESS_ID')} opened {path} for writing", file=sys.stderr,
              flush=True)
        os._exit(97)
    return _open(file, mode, *args, **kwargs)

  builtins.open = io.open = _guarded_open
