"""Where every report's pieces live, and what its sweep file and the engine share: the checkout, the environment
the engine sets for the sweep it starts (the design's size, the records directory), a run's record path, the
report directory (docs/ for a committed design only), a run config from configs/base.py, and the sweep's points
with those that have a record left out. Imports nothing heavy: the sweep files import this module."""
import os

from resnorm.core.errors import check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # checkout
SIZE_ENV = "RESNORM_RESULTS_SIZE"        # the design's size (full, or a report's own: quick, test)
RECORDS_ENV = "RESNORM_RESULTS_RECORDS"  # the run records' directory: points with a record are not run again


def record_path(records_dir: str, corpus: str, name: str) -> str:
  """Where a run's record lives (resnorm/results/records.py): records_dir/<corpus>/<run name>.json."""
  return os.path.join(records_dir, corpus, f"{name}.json")


def is_docs(out: str) -> bool:
  """Whether a report directory is this checkout's docs/, which holds the committed reports."""
  return os.path.abspath(out) == os.path.join(ROOT, "docs")


def out_dir(given: str | None, full: bool, tag: str) -> str:
  """The report's directory: --out, else docs for the committed design and runs/report_TAG for any other. This
  checkout's docs/ holds the committed reports, which a quick, test or accelerator design's may not replace."""
  if given is None:
    return "docs" if full else os.path.join("runs", f"report_{tag}")
  check(full or not is_docs(given), f"--out={given}: docs/ holds the full CPU "
        f"design's report; give the {tag} report a directory of its own (by default runs/report_{tag})")
  return given


def base_config(scale: str, over: dict):
  """configs/base.py at a scale, then `over` (dotted keys)."""
  import importlib.util
  spec = importlib.util.spec_from_file_location("base_config", os.path.join(ROOT, "configs", "base.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  cfg = mod.get_config(scale)
  from resnorm.config import configkeys
  for key, val in over.items():
    configkeys.set_dotted(cfg, key, val)
  return cfg


def add_points(add, runs, records_dir: str | None) -> None:
  """The sweep's points: runs are (corpus, run name, config file, overrides); those whose record exists under
  records_dir are left out (a clone with the records has nothing to rerun)."""
  for corpus, name, config, over in runs:
    if records_dir and os.path.exists(record_path(records_dir, corpus, name)):
      continue
    add(config=config, name=name, **over)
