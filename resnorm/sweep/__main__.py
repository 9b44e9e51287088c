"""`python -m resnorm.sweep`: the command-line name of resnorm.sweep.sweep."""
from absl import flags

from resnorm.core.errors import run_app
from resnorm.sweep import slurm, sweep, sweep_flags
from resnorm.sweep.sweep import main

# --help lists the flags this command takes, wherever they are defined (absl shows only the main module's)
for _module in (sweep, sweep_flags, slurm):
  flags.adopt_module_key_flags(_module)
__doc__ = sweep.__doc__  # --help's usage text: the command's own

if __name__ == "__main__":
  run_app(main)
