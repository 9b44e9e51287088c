"""The flags resnorm.sweep and resnorm.results share. absl keeps one flag namespace per process, so both tools
defining --root would refuse the second import (a test process, or a tool calling the other in-process)."""
from absl import flags

ROOT = flags.DEFINE_string("root", None, "Directory for the runs (resnorm.results: default runs/results).")
JOBS = flags.DEFINE_integer("jobs", 1, "Runs at once (local launcher).")
LAUNCHER = flags.DEFINE_enum("launcher", "local", ["local", "slurm", "tpu"], "Who runs the points: local "
                             "subprocesses, a SLURM job array, or every host of a Cloud TPU slice running this same "
                             "command.")
