"""The reports' command: python -m resnorm.results [--report=v4|v5|transfer|all] [--from_records] [--quick]
[--root=R] [--out=docs] [--jobs=K]. Every report is a spec (resnorm/results/registry.py) run by the one engine
(resnorm/results/engine/driver.py): the grid through resnorm.sweep with each finished run's record written as it
finishes, then the page, its figures and its README block from the records alone. --quick and --scale=tpu are
report v4's other designs; $RESNORM_RESULTS_SIZE=test is the tests' size.
"""
from absl import flags

from resnorm.core.errors import check, run_app
from resnorm.results.engine import driver
from resnorm.results.registry import REGISTRY
from resnorm.results.v4 import grid
from resnorm.sweep import slurm, sweep_flags  # noqa: F401 (--slurm.*; --root --jobs --launcher, as resnorm.sweep's)

FLAGS = flags.FLAGS
flags.DEFINE_string("out", None, "Report directory: results.md and figures/ (default: docs for the full CPU design, "
                    "runs/report_<quick|test|tpu> otherwise: docs/ keeps the committed report).")
flags.DEFINE_bool("quick", False, "The same pipeline on a tiny model, 2 seeds (minutes).")
flags.DEFINE_enum("scale", "cpu", list(grid.SCALES), "cpu: the report's design on the package's corpora; tpu: the "
                  "accelerator design of configs/sweeps/results.py (TPU) over the :tpu configs, on --data_paths.")
flags.DEFINE_string("data_paths", None, "--scale=tpu: the corpus shards (data.name=files), e.g. "
                    "'gs://BUCKET/c4/en/c4-train.*.json.gz'.")
flags.DEFINE_string("target", "v4-8", "--scale=tpu: the TPU slice each run gets; the budget's device-hours and "
                    "memory plans are for it, and a design that does not fit it is refused before anything starts.")
flags.DEFINE_enum("compiler", "auto", ["auto", "tpu", "cpu"], "--scale=tpu: the memory plans' compiler (auto: the "
                  "TPU compiler where libtpu is installed, else the CPU estimate).")
flags.DEFINE_bool("memory_plan", True, "--scale=tpu: plan each model's memory on --target before submitting.")
flags.DEFINE_string("records", None, "The report's run records' directory (one JSON per finished run, built from "
                    "the runs as they finish; the report reads them alone; points with a record are not run again). "
                    "Default: the report's own (results/<report>) for its committed design, none otherwise.")
flags.DEFINE_bool("from_records", False, "Rebuild the report from the records alone: no run, no init diagnostics.")
flags.DEFINE_enum("report", "v4", [*REGISTRY, "all"], "v4 (docs/results.md), v5 (docs/results_v5.md: the 2026 "
                  "claims, compute multipliers), transfer (docs/transfer.md: the learning-rate transfer study) or all "
                  "(every report with records in the repository); default all for --from_records without --records, "
                  "else v4.")
flags.DEFINE_bool("page", True, "Build the page after the grid (--nopage: run and record only).")
flags.DEFINE_bool("accept_fingerprints", False, "Report records of code with different fingerprints together "
                  "(they are listed); refused otherwise.")


def main(argv):
  check(len(argv) == 1, f"unexpected arguments: {' '.join(argv[1:])}")
  return driver.main(REGISTRY, FLAGS)


if __name__ == "__main__":
  run_app(main)
