"""`python -m resnorm.bench`: the command-line name of resnorm.bench.bench."""
from absl import flags

from resnorm.config import configkeys
from resnorm.core.errors import run_app
from resnorm.bench import bench
from resnorm.bench.bench import main

flags.adopt_module_key_flags(bench)  # --help lists its flags (absl shows only the main module's)
__doc__ = bench.__doc__  # --help's usage text: the command's own

if __name__ == "__main__":
  run_app(main, explain=configkeys.flag_error)
